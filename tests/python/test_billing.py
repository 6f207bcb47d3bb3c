"""`--auth keys`: what the SDK's calls cost the account (docs/design.md §5)."""

import openai
import pytest
from sluice_testsupport.poll import wait_for

from conftest import CHAT_MODEL, EMBED_MODEL

START = 10_000_000_000  # $10.00 in nanodollars
# Route prices: $1.00 / $2.00 per 1M input / output tokens = 1000 / 2000 nanodollars per token.
IN, OUT = 1_000, 2_000


def _unsettled(account):
    """What the account has reserved beyond the gateway's balance grant (docs/design.md
    §5a): a request not settled yet. The grant itself stays until it is idle."""
    return account["reserved_nanodollars"] - account["granted_nanodollars"]


def _settled(gw, name, timeout=5.0):
    """The account once nothing but balance grants is reserved (a settlement commits
    before the answer's last byte, so this holds at once)."""
    return wait_for(f"{name}'s reservations to settle",
                    lambda: _unsettled(a := gw.account(name)) == 0 and a, timeout, interval=0.05)


def test_stream_is_billed_from_upstream_usage(keys_gateway, primary):
    primary.script(chunks=6)
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)

    # The client does not ask for usage; the gateway does, for billing, and strips it.
    chunks = list(client.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": "bill me"}], stream=True,
        stream_options={"include_usage": False},
    ))
    assert all(c.usage is None for c in chunks)

    # What the same request reports when usage is asked for.
    chunks = list(client.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": "bill me"}], stream=True,
        stream_options={"include_usage": True},
    ))
    usage = chunks[-1].usage
    assert usage.completion_tokens == 6
    account = _settled(keys_gateway, "alice")
    one = usage.prompt_tokens * IN + usage.completion_tokens * OUT
    assert account["balance_nanodollars"] == START - 2 * one


def test_embeddings_are_billed_for_input(keys_gateway):
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    result = client.embeddings.create(model=EMBED_MODEL, input=["alpha", "beta"])
    account = _settled(keys_gateway, "alice")
    assert account["balance_nanodollars"] == START - result.usage.prompt_tokens * IN


def test_failed_request_costs_nothing(keys_gateway, primary, backup):
    primary.script(status=503)
    backup.script(status=503)
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": "x"}])
    account = _settled(keys_gateway, "alice")
    assert (account["balance_nanodollars"], _unsettled(account)) == (START, 0)


def test_insufficient_balance_for_a_stream_is_402(keys_gateway, primary):
    before = primary.requests()
    client = keys_gateway.client(api_key=keys_gateway.keys["poor"], max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": "x"}], stream=True, max_tokens=100_000
        )
    assert err.value.status_code == 402
    assert err.value.code == "insufficient_quota"
    assert primary.requests() == before
