"""Streaming (SSE) through the real `openai` SDK: cadence, usage chunk."""

import statistics
import time

from conftest import BACKUP_CHAT, CHAT_MODEL, INSTRUCT_MODEL, PRIMARY_CHAT, PRIMARY_INSTRUCT

MESSAGES = [{"role": "user", "content": "Stream ten words."}]
CHUNKS = 10
CHUNK_MS = 100


def _timed(stream):
    """(arrival time, chunk) for every chunk, as the SDK yields them."""
    out = []
    for chunk in stream:
        out.append((time.monotonic(), chunk))
    return out


def test_chunks_arrive_at_the_upstream_cadence(gateway, primary):
    client = gateway.client()
    # Warm-up: the SDK's first call pays ~0.4 s of lazy imports and model set-up.
    list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))
    primary.script(chunks=CHUNKS, chunk_ms=CHUNK_MS)

    sent = time.monotonic()
    stream = client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True)
    timed = _timed(stream)

    content = [(t, c) for t, c in timed if c.choices and c.choices[0].delta.content]
    assert len(content) == CHUNKS, [c.model_dump() for _, c in timed]
    times = [t for t, _ in content]
    gaps_ms = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    median = statistics.median(gaps_ms)
    assert abs(median - CHUNK_MS) <= 40, f"median gap {median:.0f} ms, gaps {gaps_ms}"
    # Nothing is held back: the first word is there long before the last one.
    first_ms = (times[0] - sent) * 1000
    span_ms = (times[-1] - times[0]) * 1000
    assert first_ms < 500, f"first content chunk after {first_ms:.0f} ms"
    assert span_ms >= 0.7 * (CHUNKS - 1) * CHUNK_MS, f"first..last only {span_ms:.0f} ms apart: buffered?"
    assert all(g >= 40 for g in gaps_ms), f"chunks arrived in a burst: gaps {gaps_ms}"

    text = "".join(c.choices[0].delta.content for _, c in content)
    assert text.startswith("The upstream said hello ")
    assert all(c.model == PRIMARY_CHAT for _, c in timed)
    assert timed[-1][1].choices[0].finish_reason == "stop"


def test_stream_without_include_usage_has_no_usage_chunk(gateway):
    client = gateway.client()
    chunks = list(client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES, stream=True))

    assert chunks, "empty stream"
    # The gateway asks the upstream for usage (billing) and strips it again.
    assert all(c.usage is None for c in chunks), [c.model_dump() for c in chunks]
    assert all(c.choices for c in chunks), "a chunk without choices (usage chunk?) leaked"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "The upstream said hello and "


def test_stream_with_include_usage_ends_with_usage_chunk(gateway, primary):
    primary.script(chunks=7)
    client = gateway.client()
    chunks = list(
        client.chat.completions.create(
            model=CHAT_MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )

    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 7
    assert last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + 7
    # Only the final chunk carries usage.
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_stream_raw_headers_and_failover_before_first_byte(gateway, primary, backup):
    primary.script(status=503)
    client = gateway.client()

    raw = client.chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=MESSAGES, stream=True)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-sluice-upstream"] == "backup"
    assert raw.headers["x-sluice-attempts"] == "2"
    assert raw.headers["x-sluice-failover"] == "http_5xx"
    chunks = list(raw.parse())
    assert all(c.model == BACKUP_CHAT for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_legacy_completions_stream(gateway):
    client = gateway.client()
    chunks = list(client.completions.create(model=INSTRUCT_MODEL, prompt="Once upon a time", stream=True))

    assert chunks
    assert all(c.model == PRIMARY_INSTRUCT for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].text for c in chunks) == "The upstream said hello and "
    assert chunks[-1].choices[0].finish_reason == "stop"
