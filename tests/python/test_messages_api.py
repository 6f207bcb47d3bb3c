"""`POST /v1/messages` and `/v1/messages/count_tokens` as the official `anthropic` SDK sees
them (docs/design.md §12, docs/gateway.md "Inbound APIs").

Routes on the session's chaos pair, served by an `anthropic` candidate (native: the
client's body as it came) and a `gemini` candidate (translated: Messages → chat →
Gemini, and the answer back as Messages events):
- `claude-native`: `anth` on chaos primary first, `gem` on chaos backup second;
- `claude-translated`: `gem` on chaos backup first, `anth` on chaos primary second;
- `claude-resume` and `claude-resume-translated`: `anth` first, then `anth-b` (an
  `anthropic` upstream on chaos backup, which continues a prefill) or `gem`, with
  `failover.midStream: resume` (docs/design.md §4.5);
- `claude-cloud`: `anth` first, then Claude on Vertex AI (`vert`, on chaos backup, with
  a Google token from its token endpoint); `claude-bedrock`: Claude on Bedrock
  (`bdrk`, on chaos backup, SigV4) alone; `claude-gemini`: `gem` alone.
"""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import pytest
from sluice_testsupport.poll import wait_for

from conftest import AWS_KEY_ID, AWS_REGION, AWS_SECRET, GCP_LOCATION, GCP_PROJECT, Gateway, run_admin, sa_key_for, start

NATIVE, TRANSLATED = "claude-native", "claude-translated"
CLOUD, BEDROCK, GEMINI_ONLY = "claude-cloud", "claude-bedrock", "claude-gemini"
RESUME, RESUME_TRANSLATED = "claude-resume", "claude-resume-translated"
HELLO = [{"role": "user", "content": "Say hello."}]
TOOL = {"name": "lookup", "description": "Looks a word up.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
START = 10_000_000_000  # $10.00 in nanodollars
IN, OUT = 1_000, 2_000  # nanodollars per token at the routes' price
SEARCH = 10_000_000  # nanodollars per web search: $10.00 per 1,000


def manifests(primary: str, backup: str) -> str:
    def route(name: str, first: tuple[str, str], second: tuple[str, str] | None, mid_stream: str = "error") -> str:
        picked = [first] if second is None else [first, second]
        price = '{input: "1.00", output: "2.00", webSearch: "10.00"}'
        candidates = "".join(f'  - {{upstream: {u}, model: "{m}", price: {price}}}\n' for u, m in picked)
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {{name: {name}}}
spec:
  model: {name}
  deadline: 20s
  selection: ordered
  candidates:
{candidates}  failover: {{retryOn: [408, 429, 500, 502, 503, 504], midStream: {mid_stream}}}
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
"""
    upstreams = f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: anth}}
spec: {{protocol: anthropic, baseUrl: "{primary}/v1", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: gem}}
spec: {{protocol: gemini, baseUrl: "{backup}/v1beta", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: anth-b}}
spec: {{protocol: anthropic, baseUrl: "{backup}/v1", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
"""
    upstreams += f"""\
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: vert}}
spec:
  protocol: vertex-anthropic
  baseUrl: "{backup}/v1"
  gcp: {{project: {GCP_PROJECT}, location: {GCP_LOCATION}, credentials: {{secretRef: {{name: vertex-sa, key: key.json}}}}}}
  timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: bdrk}}
spec:
  protocol: bedrock
  baseUrl: "{backup}"
  aws: {{region: {AWS_REGION}, credentials: {{secretRef: {{name: aws-keys}}}}}}
  timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}
"""
    claude, gemini, claude_b = ("anth", "claude-x-1"), ("gem", "gemini-x-1"), ("anth-b", "claude-x-1")
    vertex, bedrock = ("vert", "claude-x@1"), ("bdrk", "us.anthropic.claude-x-v1:0")
    return "---\n".join([upstreams, route(NATIVE, claude, gemini), route(TRANSLATED, gemini, claude),
                          route(RESUME, claude, claude_b, "resume"),
                          route(RESUME_TRANSLATED, claude, gemini, "resume"),
                          route(CLOUD, claude, vertex), route(BEDROCK, bedrock, None),
                          route(GEMINI_ONLY, gemini, None)])


@pytest.fixture
def messages_gateway(chaos, tmp_path):
    """A gateway with `--auth keys` and account `alice` ($10.00) over the routes."""
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    (mdir / "routes.yaml").write_text(manifests(chaos["primary"].url, chaos["backup"].url))
    secrets = tmp_path / "secrets"
    files = {"vertex-sa/key.json": json.dumps(sa_key_for(chaos["backup"].url)),
             "aws-keys/AWS_ACCESS_KEY_ID": AWS_KEY_ID, "aws-keys/AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    for name, text in files.items():
        (secrets / name).parent.mkdir(parents=True, exist_ok=True)
        (secrets / name).write_text(text)
    ledger = f"sqlite://{tmp_path / 'l.db'}"
    run_admin(ledger, "account", "create", "alice", "--balance", "10.00")
    key = run_admin(ledger, "key", "create", "alice").strip()
    assert re.fullmatch(r"sk-sluice-\S+", key), key
    proc = start("messages-gw", ["serve", "--manifests", str(mdir), "--secrets-dir", str(secrets),
                                 "--listen", "127.0.0.1:0", "--ledger", ledger, "--auth", "keys"], tmp_path)
    try:
        yield Gateway(proc=proc, ledger=ledger, keys={"alice": key})
    finally:
        proc.stop()


def client(gw: Gateway, **kwargs) -> anthropic.Anthropic:
    """The official client at the gateway, with the sluice key (alice's unless given) as `x-api-key`."""
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("api_key", gw.keys["alice"])
    return anthropic.Anthropic(base_url=gw.url, timeout=30.0,
                               http_client=anthropic.DefaultHttpxClient(trust_env=False), **kwargs)


def settled(gw: Gateway) -> dict:
    return wait_for("alice's reservations to settle",
                    lambda: (a := gw.account("alice"))["reserved_nanodollars"] == a["granted_nanodollars"] and a,
                    5.0, interval=0.05)


def test_a_native_answer_is_anthropics_own_and_billed_exactly(messages_gateway, primary, backup):
    primary.script(chunks=4)
    before = backup.requests()
    raw = client(messages_gateway).messages.with_raw_response.create(
        model=NATIVE, max_tokens=64, messages=HELLO)
    message = raw.parse()
    assert raw.headers["x-sluice-upstream"] == "anth"
    assert message.model == "claude-x-1"
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert message.usage.output_tokens == 4
    assert backup.requests() == before
    cost = message.usage.input_tokens * IN + message.usage.output_tokens * OUT
    assert settled(messages_gateway)["balance_nanodollars"] == START - cost


def test_a_native_stream_arrives_event_by_event_and_is_billed(messages_gateway, primary):
    primary.script(chunks=5)
    with client(messages_gateway).messages.stream(model=NATIVE, max_tokens=64, messages=HELLO) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_message()
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    assert names.count("text") == 5
    assert final.usage.output_tokens == 5 and final.usage.input_tokens > 0
    cost = final.usage.input_tokens * IN + final.usage.output_tokens * OUT
    assert settled(messages_gateway)["balance_nanodollars"] == START - cost


def test_web_searches_are_billed_per_search_and_reserved_up_to_max_uses(messages_gateway, primary):
    """Claude Code's web search tool runs at Anthropic, which bills each search apart from
    the tokens: the bill counts the searches the answer's usage reports, and the
    reservation holds the fee of `max_uses` of them."""
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}
    message = client(messages_gateway).messages.create(model=NATIVE, max_tokens=64, messages=HELLO, tools=[search])
    assert message.usage.server_tool_use.web_search_requests == 1
    balance = START - (message.usage.input_tokens * IN + message.usage.output_tokens * OUT) - SEARCH
    assert settled(messages_gateway)["balance_nanodollars"] == balance
    with client(messages_gateway).messages.stream(model=NATIVE, max_tokens=64, messages=HELLO,
                                                  tools=[search]) as stream:
        final = stream.get_final_message()
    assert final.usage.server_tool_use.web_search_requests == 1
    balance -= final.usage.input_tokens * IN + final.usage.output_tokens * OUT + SEARCH
    assert settled(messages_gateway)["balance_nanodollars"] == balance

    # $0.05 covers the tokens but not 8 searches at a cent each.
    run_admin(messages_gateway.ledger, "account", "create", "bob", "--balance", "0.05")
    bob = client(messages_gateway, api_key=run_admin(messages_gateway.ledger, "key", "create", "bob").strip())
    before = primary.requests()
    with pytest.raises(anthropic.APIStatusError) as e:
        bob.messages.create(model=NATIVE, max_tokens=64, messages=HELLO, tools=[search])
    assert "8 web searches" in e.value.message, e.value.message
    assert primary.requests() == before
    assert bob.messages.create(model=NATIVE, max_tokens=64, messages=HELLO).usage.output_tokens > 0


@pytest.mark.parametrize("status", [529, 429, 503])
def test_an_overloaded_native_candidate_fails_over_to_the_translated_one(messages_gateway, primary, backup, status):
    primary.script(status=status)
    backup.script(chunks=3)
    raw = client(messages_gateway).messages.with_raw_response.create(
        model=NATIVE, max_tokens=64, messages=HELLO)
    message = raw.parse()
    assert raw.headers["x-sluice-upstream"] == "gem"
    assert raw.headers["x-sluice-failover"].split(",")[0] in ("http_5xx", "http_429")
    assert message.model == "gemini-x-1"
    assert message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens == 3
    cost = message.usage.input_tokens * IN + message.usage.output_tokens * OUT
    assert settled(messages_gateway)["balance_nanodollars"] == START - cost


def test_a_stream_fails_over_before_its_first_content(messages_gateway, primary, backup):
    primary.script(error_after_chunks=0)
    backup.script(chunks=4)
    with client(messages_gateway).messages.stream(model=NATIVE, max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.model == "gemini-x-1"
    assert text == final.content[0].text and text
    assert final.usage.output_tokens == 4


def test_a_client_error_is_not_failed_over_and_keeps_the_upstreams_words(messages_gateway, primary, backup):
    primary.script(status=400)
    before = backup.requests()
    with pytest.raises(anthropic.BadRequestError) as e:
        client(messages_gateway).messages.create(model=NATIVE, max_tokens=64, messages=HELLO)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert backup.requests() == before
    assert settled(messages_gateway)["balance_nanodollars"] == START


@pytest.mark.parametrize("route", [NATIVE, TRANSLATED])
def test_tool_use_round_trips_natively_and_translated(messages_gateway, primary, backup, route):
    (primary if route == NATIVE else backup).script(tool_call="lookup", chunks=3)
    c = client(messages_gateway)
    with c.messages.stream(model=route, max_tokens=64, messages=[{"role": "user", "content": "look up sluice"}],
                           tools=[TOOL], tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.name == "lookup" and isinstance(use.input, dict) and "query" in use.input
    assert final.stop_reason == "tool_use"
    # The tool's result goes back as a user turn, and the conversation goes on.
    (primary if route == NATIVE else backup).script(chunks=2)
    answer = c.messages.create(model=route, max_tokens=64, tools=[TOOL], messages=[
        {"role": "user", "content": "look up sluice"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "a gate"}]},
    ])
    assert answer.content[0].type == "text" and answer.stop_reason == "end_turn"


def test_thinking_from_earlier_turns_reaches_a_native_candidate_and_is_left_out_elsewhere(
        messages_gateway, primary, backup):
    history = [
        {"role": "user", "content": "think"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "EqQBCkYIBxgCKkD/+="},
            {"type": "text", "text": "done"}]},
        {"role": "user", "content": "again"},
    ]
    c = client(messages_gateway)
    native = c.messages.with_raw_response.create(model=NATIVE, max_tokens=64, messages=history,
                                                 thinking={"type": "enabled", "budget_tokens": 1024})
    assert native.headers["x-sluice-upstream"] == "anth"
    translated = c.messages.with_raw_response.create(model=TRANSLATED, max_tokens=64, messages=history,
                                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert translated.headers["x-sluice-upstream"] == "gem"
    assert translated.headers["x-sluice-dropped"] == "thinking"


def test_what_a_translated_candidate_cannot_take_passes_it_over_and_is_refused_by_name_when_none_can(
        messages_gateway, primary, backup):
    c = client(messages_gateway)
    before = backup.requests()
    # Gemini has no top_k: it is passed over (sent nothing), and Anthropic serves.
    raw = c.messages.with_raw_response.create(model=TRANSLATED, max_tokens=64, messages=HELLO,
                                              extra_body={"top_k": 5})
    assert raw.headers["x-sluice-upstream"] == "anth"
    assert "x-sluice-failover" not in raw.headers
    assert backup.requests() == before
    # When Anthropic fails too, the answer is its failure's, naming both.
    primary.script(status=503)
    with pytest.raises(anthropic.InternalServerError) as e:
        c.messages.create(model=TRANSLATED, max_tokens=64, messages=HELLO, extra_body={"top_k": 5})
    assert "gem: cannot take the request" in e.value.body["error"]["message"]
    assert "top_k" in e.value.body["error"]["message"]
    # No candidate can take it: 400 naming the member, nothing sent.
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=GEMINI_ONLY, max_tokens=64, messages=HELLO, extra_body={"top_k": 5})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "top_k" in e.value.body["error"]["message"]
    assert backup.requests() == before


def test_claude_on_bedrock_is_passed_over_for_a_web_search(messages_gateway, backup):
    """Bedrock has none of Anthropic's server tools and refuses a request declaring
    one (Claude Code's search sub-agent sends `web_search_…`): nothing is sent there."""
    before = backup.requests()
    search = {"type": "web_search_20260209", "name": "web_search", "max_uses": 3}
    with pytest.raises(anthropic.BadRequestError) as e:
        client(messages_gateway).messages.create(model=BEDROCK, max_tokens=64, messages=HELLO, tools=[search])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "tools[0]" in e.value.body["error"]["message"] and "no server tools" in e.value.body["error"]["message"]
    assert backup.requests() == before
    assert client(messages_gateway).messages.create(model=BEDROCK, max_tokens=64, messages=HELLO).content


def test_count_tokens_is_counted_by_the_anthropic_candidate(messages_gateway, primary):
    c = client(messages_gateway)
    counted = c.messages.count_tokens(model=NATIVE, messages=HELLO)
    billed = c.messages.create(model=NATIVE, max_tokens=8, messages=HELLO)
    assert counted.input_tokens == billed.usage.input_tokens > 0
    primary.script(status=503)
    with pytest.raises(anthropic.InternalServerError):
        c.messages.count_tokens(model=NATIVE, messages=HELLO)


def test_count_tokens_is_counted_on_vertex_and_bedrock_too(messages_gateway, primary, backup):
    c = client(messages_gateway)
    ask = {"messages": HELLO, "system": "Be brief.", "tools": [TOOL]}
    counted = c.messages.with_raw_response.count_tokens(model=CLOUD, **ask)
    assert counted.headers["x-sluice-upstream"] == "anth"
    tokens = counted.parse().input_tokens
    assert tokens > 0

    # A client error is not failed over (Vertex, healthy, would have counted): Anthropic's
    # own 400 reaches the client as it came.
    primary.script(status=400)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.count_tokens(model=CLOUD, **ask)
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert e.value.body["request_id"] == "req_chaos"

    # Anthropic overloaded: Claude on Vertex counts, with the same count.
    primary.script(status=529)
    on_vertex = c.messages.with_raw_response.count_tokens(model=CLOUD, **ask)
    assert on_vertex.headers["x-sluice-upstream"] == "vert"
    assert on_vertex.headers["x-sluice-failover"] == "http_5xx"
    assert on_vertex.parse().input_tokens == tokens

    # Claude on Bedrock: its count in Anthropic's shape, and so are its errors.
    on_bedrock = c.messages.with_raw_response.count_tokens(model=BEDROCK, **ask)
    assert on_bedrock.headers["x-sluice-upstream"] == "bdrk"
    assert on_bedrock.parse().input_tokens == tokens
    backup.script(status=400, error_code="ValidationException")
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.count_tokens(model=BEDROCK, **ask)
    assert (e.value.body["type"], e.value.body["error"]["type"]) == ("error", "invalid_request_error")


def test_errors_come_in_anthropics_shape(messages_gateway, primary, backup):
    url = f"{messages_gateway.url}/v1/messages"
    key = {"x-api-key": messages_gateway.keys["alice"], "anthropic-version": "2023-06-01"}
    body = {"model": NATIVE, "max_tokens": 8, "messages": HELLO}
    with httpx.Client(trust_env=False, timeout=30.0) as h:
        r = h.post(url, json=body)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text

        r = h.post(url, json={**body, "model": "nope"}, headers=key)
        assert r.status_code == 404, r.text
        assert r.json() == {"type": "error", "error": {"type": "not_found_error", "message": r.json()["error"]["message"]}}

        r = h.post(url, json={k: v for k, v in body.items() if k != "max_tokens"}, headers=key)
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"], r.text

        # Every candidate throttling: Anthropic's 529, with a retry-after a client honours.
        primary.script(status=429, retry_after=2)
        backup.script(status=429, retry_after=2)
        r = h.post(url, json=body, headers=key)
        assert r.status_code == 529, r.text
        assert r.json()["error"]["type"] == "overloaded_error"
        assert 1 <= int(r.headers["retry-after"]) <= 60


def test_a_stream_cut_after_content_ends_in_an_error_event(messages_gateway, primary):
    primary.script(chunks=6, reset_after_chunks=2)
    with pytest.raises(anthropic.APIError):
        with client(messages_gateway).messages.stream(model=NATIVE, max_tokens=64, messages=HELLO) as stream:
            for _ in stream:
                pass


@pytest.mark.parametrize("route,output", [(RESUME, 3 + 5), (RESUME_TRANSLATED, 3 + 8)])
def test_a_cut_stream_is_finished_on_the_backup_as_one_message_and_billed_exactly(
        messages_gateway, primary, backup, route, output):
    # docs/design.md §4.5: `anth-b` continues the delivered text as a prefill (5 more
    # words); `gem` is sent the request again (8 words), and its replay is held back
    # while it matches. The 3 words of the broken attempt are billed too.
    primary.script(chunks=8)
    with client(messages_gateway).messages.stream(model=route, max_tokens=64, messages=HELLO) as stream:
        whole = "".join(stream.text_stream)
    settled(messages_gateway)
    balance = messages_gateway.account("alice")["balance_nanodollars"]

    primary.script(chunks=8, reset_after_chunks=3)
    backup.script(chunks=8)
    before = backup.requests()
    with client(messages_gateway).messages.stream(model=route, max_tokens=64, messages=HELLO) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_message()
    # No error: the SDK read one message, with the exact text of an unbroken one.
    assert names.count("message_start") == 1 and names[-1] == "message_stop", names
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == whole
    assert final.id.startswith("msg_chaos_") and final.model == "claude-x-1", "the first attempt's message"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == output, final.usage
    assert backup.requests() == before + 1
    # Each attempt is billed at its candidate's price; the message reports their sum.
    cost = final.usage.input_tokens * IN + final.usage.output_tokens * OUT
    assert settled(messages_gateway)["balance_nanodollars"] == balance - cost
