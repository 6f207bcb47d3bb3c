"""Every provider protocol through the gateway, as the `openai` SDK sees it (docs/design.md
§9): the client speaks OpenAI, the gateway speaks each candidate's native protocol to chaos
upstreams that check credentials as the providers do (`CHAOS_CREDENTIALS`: API keys in
each protocol's header, SigV4 for Bedrock, Google tokens from the upstream's own token
endpoint for Vertex AI).

Each protocol has one route, `PROTOCOL-model`, whose primary candidate is on chaos `a`
and whose backup is on chaos `b`, both speaking that protocol."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from sluice_testsupport.chaos import Chaos
from sluice_testsupport.net import http

from conftest import (API_KEY, AWS_KEY_ID, AWS_REGION, AWS_SECRET, GCP_LOCATION, GCP_PROJECT, Gateway,
                      sa_key_for, start, start_credentialed_chaos)

#: protocol -> the model id its candidates ask for.
PROTOCOLS = {
    "openai": "gpt-4o-2024-08-06",
    "azure-openai": "gpt-4o-prod",
    "anthropic": "claude-opus-4-20250514",
    "vertex-anthropic": "claude-opus-4@20250514",
    "vertex-gemini": "gemini-2.5-pro",
    "gemini": "gemini-2.5-pro",
    "bedrock": "anthropic.claude-3-5-sonnet-20240620-v1:0",
}
#: The OpenAI-protocol chaos (OpenAI and Azure) does not fake tool calls, so the tool
#: cells of those two protocols are left out here: what they would show is the gateway
#: passing OpenAI's own `tool_calls` through, which is no translation.
TOOL_PROTOCOLS = [p for p in PROTOCOLS if p not in ("openai", "azure-openai")]
MESSAGES = [{"role": "user", "content": "Say hello."}]
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Looks a word up.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]


def model(protocol: str) -> str:
    return f"{protocol}-model"


@pytest.fixture(scope="module")
def chaos_pair(tmp_path_factory) -> dict[str, Chaos]:
    """`a` (every primary) and `b` (every backup), both checking `CHAOS_CREDENTIALS`."""
    logdir = tmp_path_factory.mktemp("protocols")
    started: dict[str, Chaos] = {}
    try:
        for side in ("a", "b"):
            started[side] = start_credentialed_chaos(f"protocols-{side}", logdir)
        yield started
    finally:
        for c in started.values():
            c.proc.stop()


def upstream_doc(protocol: str, side: str, url: str) -> str:
    """The Upstream `PROTOCOL-SIDE` at chaos `url`, with the base URL and credentials its
    protocol needs."""
    base = {"gemini": f"{url}/v1beta", "azure-openai": f"{url}/openai", "bedrock": url}.get(protocol, f"{url}/v1")
    extra = {
        "azure-openai": 'azure: {apiVersion: "2024-10-21"}\n  auth: {secretRef: {name: api-key, key: apiKey}}',
        "vertex-anthropic": f"gcp: {{project: {GCP_PROJECT}, location: {GCP_LOCATION}, "
                            f"credentials: {{secretRef: {{name: vertex-sa-{side}, key: key.json}}}}}}",
        "bedrock": f"aws: {{region: {AWS_REGION}, credentials: {{secretRef: {{name: aws-keys}}}}}}",
    }
    extra["vertex-gemini"] = extra["vertex-anthropic"]
    spec_extra = extra.get(protocol, "auth: {secretRef: {name: api-key, key: apiKey}}")
    return f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: {protocol}-{side}}}
spec:
  protocol: {protocol}
  baseUrl: {base}
  {spec_extra}
  timeouts: {{connect: 2s, firstByte: 2s, idle: 5s}}
"""


def route_doc(protocol: str) -> str:
    m = PROTOCOLS[protocol]
    return f"""\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {{name: {protocol}}}
spec:
  model: {model(protocol)}
  deadline: 20s
  selection: ordered
  candidates:
  - {{upstream: {protocol}-a, model: "{m}", weight: 100}}
  - {{upstream: {protocol}-b, model: "{m}", weight: 50}}
  failover:
    retryOn: [408, 429, 500, 502, 503, 504]
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
  defaultMaxTokens: 256
"""


def write_secrets(root: Path, chaos_pair: dict[str, Chaos]) -> Path:
    """`--secrets-dir` layout: DIR/SECRET/KEY files."""
    files = {
        "api-key/apiKey": API_KEY,
        "aws-keys/AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "aws-keys/AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    }
    for side, c in chaos_pair.items():
        # Each Vertex upstream gets its tokens from its own chaos's token endpoint.
        files[f"vertex-sa-{side}/key.json"] = json.dumps(sa_key_for(c.url))
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def protocols_gateway(chaos_pair, tmp_path) -> Gateway:
    """A gateway with one route per protocol, healthy chaos and fresh health state."""
    for c in chaos_pair.values():
        c.reset()
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    docs = [upstream_doc(p, side, c.url) for p in PROTOCOLS for side, c in chaos_pair.items()]
    docs += [route_doc(p) for p in PROTOCOLS]
    (mdir / "sluice.yaml").write_text("---\n".join(docs))
    secrets = write_secrets(tmp_path / "secrets", chaos_pair)
    ledger = f"sqlite://{tmp_path / 'l.db'}"
    proc = start("gateway-protocols", ["serve", "--manifests", str(mdir), "--secrets-dir", str(secrets),
                                       "--listen", "127.0.0.1:0", "--ledger", ledger, "--auth", "none"], tmp_path)
    try:
        yield Gateway(proc=proc, ledger=ledger)
    finally:
        proc.stop()
        for c in chaos_pair.values():
            c.reset()


def by_protocol(c: Chaos, protocol: str) -> int:
    return int(c.counters().get("by_protocol", {}).get(protocol, 0))


def streamed(stream) -> tuple[str, list]:
    """Every chunk of a stream (which must end without an error) and its text."""
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


# ---------------------------------------------------------------- every protocol


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_text_plain_and_streamed(protocols_gateway, chaos_pair, protocol):
    a, b = chaos_pair["a"], chaos_pair["b"]
    served, b_before = by_protocol(a, protocol), b.requests()
    client = protocols_gateway.client(max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=model(protocol), messages=MESSAGES, max_tokens=64)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == f"{protocol}-a"
    assert "x-sluice-failover" not in raw.headers
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    text = completion.choices[0].message.content
    assert text
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0

    # `stream_options` is OpenAI's: the gateway honours it and never sends it to others.
    stream = client.chat.completions.create(model=model(protocol), messages=MESSAGES, max_tokens=64, stream=True,
                                            stream_options={"include_usage": True})
    streamed_text, chunks = streamed(stream)
    assert streamed_text == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert by_protocol(a, protocol) == served + 2
    assert b.requests() == b_before


@pytest.mark.parametrize("protocol", TOOL_PROTOCOLS)
def test_tool_call_plain_and_streamed(protocols_gateway, chaos_pair, protocol):
    chaos_pair["a"].script(tool_call="lookup")
    client = protocols_gateway.client(max_retries=0)
    completion = client.chat.completions.create(model=model(protocol), messages=MESSAGES, tools=TOOLS)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert call.function.name == "lookup"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict) and "query" in arguments

    chunks = list(client.chat.completions.create(model=model(protocol), messages=MESSAGES, tools=TOOLS,
                                                 stream=True))
    deltas = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert deltas, chunks
    assert {d.index for d in deltas} == {0}
    assert deltas[0].id and deltas[0].function.name == "lookup"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("protocol,fault,reason", [
    ("anthropic", {"status": 529}, "http_5xx"),  # overloaded_error
    ("bedrock", {"status": 400, "error_code": "ThrottlingException"}, "http_429"),
])
def test_a_transient_provider_error_fails_over(protocols_gateway, chaos_pair, protocol, fault, reason):
    a, b = chaos_pair["a"], chaos_pair["b"]
    a.script(**fault)
    failed, backup_served = a.status_count(fault["status"]), by_protocol(b, protocol)
    client = protocols_gateway.client(max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=model(protocol), messages=MESSAGES)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == f"{protocol}-b"
    assert raw.headers["x-sluice-failover"] == reason
    assert raw.parse().choices[0].message.content
    assert a.status_count(fault["status"]) == failed + 1
    assert by_protocol(b, protocol) == backup_served + 1


def test_an_anthropic_error_event_before_content_fails_over(protocols_gateway, chaos_pair):
    a, b = chaos_pair["a"], chaos_pair["b"]
    a.script(error_after_chunks=0)  # 200, then `event: error` (overloaded_error)
    tried, backup_served = by_protocol(a, "anthropic"), by_protocol(b, "anthropic")
    client = protocols_gateway.client(max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=model("anthropic"), messages=MESSAGES,
                                                           stream=True)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "anthropic-b"
    text, chunks = streamed(raw.parse())
    assert text
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "stop", chunks[-1]
    assert by_protocol(a, "anthropic") == tried + 1
    assert by_protocol(b, "anthropic") == backup_served + 1


def test_an_anthropic_400_reaches_the_client_in_openai_shape_and_the_backup_is_never_called(
        protocols_gateway, chaos_pair):
    a, b = chaos_pair["a"], chaos_pair["b"]
    a.script(status=400, error_code="invalid_request_error")
    # What Anthropic itself says, asked directly.
    status, body = http("POST", f"{a.url}/v1/messages",
                        {"model": PROTOCOLS["anthropic"], "max_tokens": 8, "messages": MESSAGES},
                        {"x-api-key": API_KEY, "anthropic-version": "2023-06-01",
                         "content-type": "application/json"})
    native = json.loads(body)
    assert (status, native["error"]["type"]) == (400, "invalid_request_error"), native
    before = b.counters()

    client = protocols_gateway.client(max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model("anthropic"), messages=MESSAGES)
    assert err.value.status_code == 400
    assert isinstance(err.value.body, dict) and err.value.body.get("message"), err.value.body
    assert native["error"]["message"] in err.value.body["message"]
    assert err.value.response.json()["error"]["type"] == "invalid_request_error"
    assert b.counters()["requests"] == before["requests"]


def test_an_expired_vertex_token_is_refreshed_without_a_failover(protocols_gateway, chaos_pair):
    a, b = chaos_pair["a"], chaos_pair["b"]
    b_before = b.requests()
    client = protocols_gateway.client(max_retries=0)
    first = client.chat.completions.with_raw_response.create(model=model("vertex-anthropic"), messages=MESSAGES)
    assert first.headers["x-sluice-upstream"] == "vertex-anthropic-a"
    issued, served = a.counters()["tokens_issued"], by_protocol(a, "vertex-anthropic")

    a.expire_tokens()  # Vertex now answers its expired-token 401 to the gateway's token
    raw = client.chat.completions.with_raw_response.create(model=model("vertex-anthropic"), messages=MESSAGES)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "vertex-anthropic-a"
    assert "x-sluice-failover" not in raw.headers
    assert raw.parse().choices[0].message.content
    assert a.counters()["tokens_issued"] == issued + 1
    assert by_protocol(a, "vertex-anthropic") == served + 2, "the refused call and the retry"
    assert b.requests() == b_before
