"""Streams that go wrong (docs/design.md §4.3, §4.4), as the real `openai` SDK sees them."""

import asyncio
import time

import openai
import pytest

from conftest import BACKUP_CHAT, CHAT_MODEL, PRIMARY_CHAT

MESSAGES = [{"role": "user", "content": "Tell me a story."}]


def _content(chunks):
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def test_reset_mid_stream_raises_api_error_after_the_words_received(gateway, primary, backup):
    primary.script(chunks=8, reset_after_chunks=3)
    b_before = backup.requests()
    client = gateway.client(max_retries=0)

    stream = client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True)
    received = []
    with pytest.raises(openai.APIError) as err:
        for chunk in stream:
            received.append(chunk)

    e = err.value
    assert not isinstance(e, openai.APIStatusError)  # the status was 200; the stream broke
    assert e.code == "upstream_stream_broken"
    assert e.type == "api_error"
    assert _content(received) == ["The ", "upstream ", "said "]
    # Bytes had reached the client: no failover is possible any more.
    assert backup.requests() == b_before


def test_stalled_stream_ends_with_error_after_idle_timeout(gateway, primary):
    primary.script(chunks=8, hang_after_chunks=2)
    client = gateway.client(max_retries=0)

    started = time.monotonic()
    received = []
    with pytest.raises(openai.APIError) as err:
        for chunk in client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True):
            received.append(chunk)
    elapsed = time.monotonic() - started

    assert err.value.code == "upstream_stream_broken"
    assert _content(received) == ["The ", "upstream "]
    assert 1.5 <= elapsed < 10, f"idle timeout is 2s, the stream ended after {elapsed:.1f}s"


def test_malformed_event_is_dropped_and_the_stream_goes_on(gateway, primary):
    primary.script(chunks=5, malformed_chunk=2)
    client = gateway.client(max_retries=0)

    chunks = list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))

    # Event 2 ("upstream ") was `data: {not json`: dropped, not forwarded to break the SDK.
    assert _content(chunks) == ["The ", "said ", "hello ", "and "]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_without_done_is_still_complete(gateway, primary):
    primary.script(chunks=4, no_done=True)
    client = gateway.client(max_retries=0)

    chunks = list(
        client.chat.completions.create(
            model=CHAT_MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )

    assert _content(chunks) == ["The ", "upstream ", "said ", "hello "]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_silent_primary_fails_over_on_first_byte_timeout(gateway, primary):
    # The primary answers 200 at once, then says nothing for 5s; its firstByte is 1s.
    primary.script(first_byte_ms=5000)
    client = gateway.client(max_retries=0)

    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=MESSAGES, stream=True)
    chunks = list(raw.parse())
    elapsed = time.monotonic() - started

    assert raw.headers["x-sluice-upstream"] == "backup"
    assert raw.headers["x-sluice-failover"] == "first_byte_timeout"
    assert all(c.model == BACKUP_CHAT for c in chunks)
    assert _content(chunks)
    assert 0.9 <= elapsed < 4, f"watchdog is 1s, failover took {elapsed:.1f}s"


def test_concurrent_async_streams(gateway, primary, backup):
    primary.script(chunks=5, chunk_ms=50)
    backup.script(chunks=5, chunk_ms=50)

    async def one(client, i):
        stream = await client.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": f"request {i}"}], stream=True
        )
        return [c async for c in stream]

    async def main():
        client = openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1",
            api_key="sk-unused",
            max_retries=0,
            timeout=30.0,
            http_client=openai.DefaultAsyncHttpxClient(trust_env=False),
        )
        async with client:
            return await asyncio.gather(*(one(client, i) for i in range(12)))

    started = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - started

    assert len(results) == 12
    for chunks in results:
        assert _content(chunks) == ["The ", "upstream ", "said ", "hello ", "and "]
        assert chunks[0].model == PRIMARY_CHAT
    # 12 streams of ~200ms each, served side by side rather than one after another.
    assert elapsed < 12 * 0.2, f"12 concurrent streams took {elapsed:.1f}s"


def test_body_over_the_limit_is_413(start_gateway, primary):
    gw = start_gateway("none", extra_args=["--max-body-bytes", "2048"])
    before = primary.requests()
    client = gw.client(max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": "x" * 4096}])
    e = err.value
    assert e.status_code == 413
    assert e.code == "request_too_large"
    assert primary.requests() == before


def test_a_cut_stream_is_resumed_on_the_backup_as_one_complete_stream(start_gateway, primary, backup):
    # docs/design.md §4.5: Anthropic upstreams can continue a trailing assistant message.
    gw = start_gateway(protocol="anthropic", mid_stream="resume")
    client = gw.client(max_retries=0)
    primary.script(chunks=8)
    whole = "".join(_content(list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))))
    assert whole.startswith("The upstream said ")

    primary.script(chunks=8, reset_after_chunks=3)
    backup.script(chunks=8)
    b_before = backup.requests()
    chunks = list(client.chat.completions.create(
        model=CHAT_MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}))

    # No error: the SDK read one stream, with the exact text an unbroken one has.
    assert "".join(_content(chunks)) == whole
    assert {c.id for c in chunks} == {chunks[0].id}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8, chunks[-1]
    assert backup.requests() == b_before + 1


def _unbroken_text(client):
    return "".join(_content(list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))))


def test_a_backup_refusing_the_prefill_is_replayed_and_verified(start_gateway, primary, backup):
    # §4.5: a backup that answers the prefill with a 400 is not the error the client
    # sees; the request is replayed there, what the client has is held back, the rest relayed.
    gw = start_gateway(protocol="anthropic", mid_stream="resume")
    client = gw.client(max_retries=0)
    primary.script(chunks=8)
    whole = _unbroken_text(client)
    primary.script(chunks=8, reset_after_chunks=3)
    backup.script(chunks=8, refuse_prefill=True)
    b_before = backup.requests()
    chunks = list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))
    assert "".join(_content(chunks)) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert backup.requests() == b_before + 2, "the refused prefill, then the replay"


def test_a_replay_that_diverges_ends_with_the_error_event_naming_the_break(start_gateway, primary, backup):
    gw = start_gateway(protocol="anthropic", mid_stream="resume")
    client = gw.client(max_retries=0)
    primary.script(chunks=8, reset_after_chunks=3)
    # The backup refuses the prefill, and its replay stops short of what the client has.
    backup.script(chunks=2, refuse_prefill=True)
    received = []
    with pytest.raises(openai.APIError) as err:
        for chunk in client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True):
            received.append(chunk)
    e = err.value
    assert e.code == "upstream_stream_broken"
    assert "refus" not in str(e.message).lower(), "the error names the original break, not the prefill refusal"
    assert _content(received) == ["The ", "upstream ", "said "], "nothing of the replay reached the client"


def test_a_cut_inside_a_tool_calls_arguments_is_not_resumed(start_gateway, primary, backup):
    gw = start_gateway(protocol="anthropic", mid_stream="resume")
    client = gw.client(max_retries=0)
    primary.script(chunks=8, tool_call="lookup", reset_after_chunks=3)
    b_before = backup.requests()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with pytest.raises(openai.APIError) as err:
        for _ in client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True, tools=tools):
            pass
    assert err.value.code == "upstream_stream_broken"
    assert backup.requests() == b_before, "never resumed inside a tool call's arguments"
