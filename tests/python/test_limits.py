"""Limits of keys and accounts (docs/design.md §5b) as the official `openai` SDK meets
them: its retry logic reads sluice's `retry-after-ms` and succeeds once there is room,
stops at once on `x-should-retry: false` (a spend cap), and reads the
`x-ratelimit-*` headers of every answer."""

import threading
import time

import openai
import pytest

from conftest import CHAT_MODEL


def _ask(client):
    return client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": "hi"}])


def test_sdk_backs_off_on_a_concurrency_refusal_and_succeeds(keys_gateway, primary):
    key = keys_gateway.keys["alice"]
    out = keys_gateway.admin("key", "update", key, "--concurrency", "1")
    assert "concurrency 1" in out, out
    # Each answer streams for about 1.2 s: one request holds the only slot that long.
    primary.script(chunks=8, chunk_ms=150)
    streaming = threading.Event()
    done = []

    def hold_the_slot():
        stream = keys_gateway.client(api_key=key, max_retries=0).chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": "slow"}], stream=True)
        for i, _ in enumerate(stream):
            if i == 0:
                streaming.set()
        done.append(True)

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    assert streaming.wait(10), "the first request never started streaming"

    # Without retries the SDK raises the 429 as it is.
    with pytest.raises(openai.RateLimitError) as refused:
        _ask(keys_gateway.client(api_key=key, max_retries=0))
    err = refused.value
    assert err.code == "rate_limit_exceeded"
    assert "requests in flight at once" in err.message
    assert int(err.response.headers["retry-after-ms"]) > 0

    # With retries it waits as told and gets through once the first answer is done.
    t0 = time.monotonic()
    answer = _ask(keys_gateway.client(api_key=key, max_retries=5))
    waited = time.monotonic() - t0
    holder.join(10)
    assert done, "the slot holder did not finish"
    assert answer.choices[0].message.content
    assert waited >= 0.5, f"the SDK did not back off ({waited:.2f}s)"


def test_sdk_does_not_retry_a_spend_cap(keys_gateway):
    key = keys_gateway.keys["alice"]
    keys_gateway.admin("key", "update", key, "--daily-spend", "0.000001")
    client = keys_gateway.client(api_key=key, max_retries=3)
    t0 = time.monotonic()
    with pytest.raises(openai.RateLimitError) as refused:
        _ask(client)
    assert time.monotonic() - t0 < 2, "the SDK retried a spend cap"
    err = refused.value
    assert err.code == "insufficient_quota"
    assert err.response.headers["x-should-retry"] == "false"
    assert "Spend limit reached for API key" in err.message


def test_every_answer_carries_the_standing(keys_gateway):
    key = keys_gateway.keys["alice"]
    keys_gateway.admin("key", "update", key, "--rpm", "100", "--tpm", "1000000")
    client = keys_gateway.client(api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": "hi"}])
    h = raw.headers
    assert h["x-ratelimit-limit-requests"] == "100"
    assert h["x-ratelimit-remaining-requests"] == "99"
    assert h["x-ratelimit-limit-tokens"] == "1000000"
    assert int(h["x-ratelimit-remaining-tokens"]) < 1000000
    assert h["x-ratelimit-reset-requests"].endswith("s")
    assert raw.parse().choices[0].message.content
