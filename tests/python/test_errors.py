"""Gateway errors (docs/design.md §3 table) as exceptions of the real `openai` SDK."""

import openai
import pytest

from conftest import CHAT_MODEL

MESSAGES = [{"role": "user", "content": "Hello?"}]


def test_unknown_model_is_not_found(gateway):
    client = gateway.client(max_retries=0)
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    e = err.value
    assert e.status_code == 404
    assert e.code == "model_not_found"
    assert e.type == "invalid_request_error"
    assert "no-such-model" in e.body["message"]


def test_every_candidate_failing_is_503_listing_candidates(gateway, primary, backup):
    primary.script(status=503)
    backup.script(status=503)
    before = primary.requests() + backup.requests()
    # The SDK retries 5xx by default; max_retries=0 shows the gateway's own answer.
    client = gateway.client(max_retries=0)

    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)
    e = err.value
    assert isinstance(e, openai.APIStatusError)
    assert e.status_code == 503
    assert e.code == "upstreams_unavailable"
    assert e.type == "api_error"
    message = e.body["message"]
    assert CHAT_MODEL in message
    for name in ("primary", "backup"):
        assert name in message, message
    assert "503" in message
    assert "x-sluice-upstream" not in e.response.headers
    attempts = int(e.response.headers["x-sluice-attempts"])
    assert attempts == 4  # maxAttempts 2 walks x 2 candidates
    assert set(e.response.headers["x-sluice-failover"].split(",")) == {"http_5xx"}
    # Exactly one gateway request (no SDK retry): upstream calls == attempts.
    assert primary.requests() + backup.requests() - before == attempts


def test_sdk_default_retries_hit_the_gateway_again(gateway, primary, backup):
    primary.script(status=503)
    backup.script(status=503)
    before = primary.requests()
    client = gateway.client(max_retries=1)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)
    # 2 SDK requests x 2 walks each reach the primary.
    assert primary.requests() - before == 4


def test_throttled_everywhere_is_rate_limit_error(gateway, primary, backup):
    primary.script(status=429)
    backup.script(status=429)
    client = gateway.client(max_retries=0)

    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)
    e = err.value
    assert e.status_code == 429
    assert e.code == "rate_limited"
    assert e.type == "rate_limit_error"
    assert "primary" in e.body["message"] and "backup" in e.body["message"]
    assert int(e.response.headers["retry-after"]) >= 1
    assert set(e.response.headers["x-sluice-failover"].split(",")) == {"http_429"}


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"messages": []}, "'messages' must not be empty"),
        ({"messages": MESSAGES, "max_tokens": -1}, "'max_tokens' must be a positive integer"),
        ({"messages": MESSAGES, "extra_body": {"stream_options": "yes"}}, "'stream_options' must be an object"),
    ],
    ids=["empty-messages", "negative-max-tokens", "bad-stream-options"],
)
def test_invalid_field_is_bad_request(gateway, primary, kwargs, fragment):
    before = primary.requests()
    client = gateway.client(max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=CHAT_MODEL, **kwargs)
    e = err.value
    assert e.status_code == 400
    assert e.code == "invalid_request"
    assert e.type == "invalid_request_error"
    assert fragment in e.body["message"]
    assert primary.requests() == before  # refused before any upstream call


def test_wrong_api_key_is_authentication_error(keys_gateway, primary):
    before = primary.requests()
    client = keys_gateway.client(api_key="sk-sluice-not-a-real-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)
    e = err.value
    assert e.status_code == 401
    assert e.code == "invalid_api_key"
    assert e.type == "authentication_error"
    assert primary.requests() == before


def test_valid_key_is_served_and_billed(keys_gateway):
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=MESSAGES)
    assert raw.headers["x-sluice-upstream"] == "primary"
    usage = raw.parse().usage
    account = keys_gateway.account("alice")
    # Settled at the served candidate's price ($1/M input, $2/M output) before the answer
    # was sent; nothing is reserved but the gateway's balance grant (docs/design.md §5a).
    cost = usage.prompt_tokens * 1_000 + usage.completion_tokens * 2_000
    assert account["reserved_nanodollars"] == account["granted_nanodollars"]
    assert account["balance_nanodollars"] == 10_000_000_000 - cost


def test_insufficient_balance_is_402(keys_gateway, primary):
    client = keys_gateway.client(api_key=keys_gateway.keys["poor"], max_retries=0)
    before = primary.requests()
    # $0.01 cannot cover 100000 output tokens at $2/M ($0.20).
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, max_tokens=100_000)
    e = err.value
    assert type(e) is openai.APIStatusError  # the SDK has no subclass for 402
    assert e.status_code == 402
    assert e.code == "insufficient_quota"
    assert e.type == "insufficient_quota"
    assert "poor" in e.body["message"]
    assert primary.requests() == before
    account = keys_gateway.account("poor")
    assert account["balance_nanodollars"] == 10_000_000
    assert account["reserved_nanodollars"] == 0
    # A request it can afford still goes through.
    ok = client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, max_tokens=10)
    assert ok.choices[0].message.content
