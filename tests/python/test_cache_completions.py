"""The completion cache (docs/design.md §13) as the official SDKs meet it: on the route
that caches deterministic completions (`cache: {completions: deterministic, price}`),
a repeated request is answered without the upstream, whole or as a replayed stream
each SDK parses like the first; a hit is billed at the route's cache price on its own
"cache" line; one account never reads another's answer."""

import sqlite3

import anthropic
from sluice_testsupport.poll import wait_for

from conftest import CACHE_PRICE_NANOS, CACHED_MODEL, CHAT_MODEL

HELLO = [{"role": "user", "content": "say something cached"}]


def _balance(gw, name):
    return wait_for(f"{name}'s settlement", lambda: (a := gw.account(name))
                    and a["reserved_nanodollars"] == a["granted_nanodollars"] and a["balance_nanodollars"], 5.0,
                    interval=0.05)


def _again(call):
    """`call()` until it is a hit: a stream is stored just after its last byte was sent."""
    return wait_for("a cache hit", lambda: (r := call()) and r.headers.get("x-sluice-cache") == "hit" and r, 5.0,
                    interval=0.05)


def _cache_lines(gw):
    path = gw.ledger.removeprefix("sqlite://")
    with sqlite3.connect(path) as db:
        return db.execute("SELECT amount_nanos, input_tokens, output_tokens FROM journal "
                          "WHERE kind = 'settle' AND upstream = 'cache'").fetchall()


def test_a_repeated_chat_completion_is_a_hit_billed_at_the_cache_price(keys_gateway, primary):
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    ask = dict(model=CACHED_MODEL, messages=HELLO, temperature=0, max_tokens=32)
    sent = primary.requests()
    raw = client.chat.completions.with_raw_response.create(**ask)
    first = raw.parse()
    assert raw.headers["x-sluice-cache"] == "miss"
    balance = _balance(keys_gateway, "alice")

    raw = client.chat.completions.with_raw_response.create(**ask)
    hit = raw.parse()
    assert raw.headers["x-sluice-cache"] == "hit"
    assert int(raw.headers["age"]) >= 0
    assert primary.requests() == sent + 1, "the hit went upstream"
    assert hit.model_dump() == first.model_dump()
    assert _balance(keys_gateway, "alice") == balance - CACHE_PRICE_NANOS
    assert _cache_lines(keys_gateway) == [(CACHE_PRICE_NANOS, 0, 0)]

    # A sampled request on the same route is not cached, nor anything on a route
    # without `cache`.
    for sampled in [dict(ask, temperature=0.8), dict(ask, model=CHAT_MODEL)]:
        raw = client.chat.completions.with_raw_response.create(**sampled)
        assert "x-sluice-cache" not in raw.headers


def test_a_streamed_chat_completion_is_replayed_as_a_stream(keys_gateway, primary):
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    ask = dict(model=CACHED_MODEL, messages=HELLO, seed=7, max_tokens=32, stream=True,
               stream_options={"include_usage": True})

    def text(stream):
        chunks = list(stream)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks

    with client.chat.completions.with_streaming_response.create(**ask) as r:
        assert r.headers["x-sluice-cache"] == "miss"
        first, first_chunks = text(r.parse())
    sent = primary.requests()
    r = _again(lambda: client.chat.completions.with_raw_response.create(**ask))
    assert r.headers["content-type"].startswith("text/event-stream")
    replayed, chunks = text(r.parse())
    assert replayed == first and first
    assert chunks[-1].usage is not None, "the usage chunk asked for is replayed"
    assert [c.model_dump() for c in chunks] == [c.model_dump() for c in first_chunks]
    assert primary.requests() == sent


def test_messages_and_responses_streams_are_replayed_to_their_sdks(keys_gateway, primary):
    key = keys_gateway.keys["alice"]
    claude = anthropic.Anthropic(base_url=keys_gateway.url, api_key=key, max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(trust_env=False))
    ask = dict(model=CACHED_MODEL, max_tokens=32, messages=HELLO, extra_body={"temperature": 0})
    with claude.messages.stream(**ask) as s:
        first = s.get_final_message()
    sent = primary.requests()
    _again(lambda: claude.messages.with_raw_response.create(stream=True, **ask))
    with claude.messages.stream(**ask) as s:
        replayed = s.get_final_message()
    assert replayed.model_dump() == first.model_dump()
    assert primary.requests() == sent

    openai_client = keys_gateway.client(api_key=key, max_retries=0)
    ask = dict(model=CACHED_MODEL, input="say something cached", temperature=0, stream=True)
    first = [e.type for e in openai_client.responses.create(**ask)]
    assert first[-1] == "response.completed"
    sent = primary.requests()
    _again(lambda: openai_client.responses.with_raw_response.create(**ask))
    replay = list(openai_client.responses.create(**ask))
    assert [e.type for e in replay] == first
    assert replay[-1].response.output_text
    assert primary.requests() == sent


def test_one_account_never_reads_anothers_answer(keys_gateway, primary):
    ask = dict(model=CACHED_MODEL, messages=HELLO, temperature=0, max_tokens=8)
    alice = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    poor = keys_gateway.client(api_key=keys_gateway.keys["poor"], max_retries=0)
    alice.chat.completions.create(**ask)
    assert alice.chat.completions.with_raw_response.create(**ask).headers["x-sluice-cache"] == "hit"
    sent = primary.requests()
    raw = poor.chat.completions.with_raw_response.create(**ask)
    assert raw.headers["x-sluice-cache"] == "miss", "one account read another's answer"
    assert primary.requests() == sent + 1
