"""`POST /v1/responses` as the official `openai` SDK sees it (docs/design.md §12,
docs/gateway.md "Inbound APIs").

Two routes on the session's chaos pair, both served by an `openai` candidate (native: the
client's body as it came, to the upstream's `/v1/responses`) and an `anthropic` candidate
(translated: Responses → chat → Messages, and the answer back as Responses events):
- `gpt-native`: `oai` on chaos primary first, `anth` on chaos backup second;
- `gpt-translated`: `anth` on chaos backup first, `oai` on chaos primary second;
- `gpt-resume` and `gpt-resume-native`: `oai` first, then `anth` (which continues a
  prefill, through translation) or `oai-b` (an `openai` upstream on chaos backup, which
  replays), with `failover.midStream: resume` (docs/design.md §4.5);
- `gpt-omit-hosted`: `anth` first, `gem` (a `gemini` upstream on chaos primary, which
  has no web search) second, with `hostedTools: omit`; `gpt-no-openai`: the same
  without it.
"""

from __future__ import annotations

import json
import re
import sqlite3

import httpx
import openai
import pytest
from sluice_testsupport.poll import wait_for

from conftest import Gateway, run_admin, start

NATIVE, TRANSLATED = "gpt-native", "gpt-translated"
RESUME, RESUME_NATIVE = "gpt-resume", "gpt-resume-native"
OMIT_HOSTED, NO_OPENAI = "gpt-omit-hosted", "gpt-no-openai"
HELLO = "Say hello."
TOOL = {"type": "function", "name": "lookup", "description": "Looks a word up.", "strict": False,
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
START = 10_000_000_000  # $10.00 in nanodollars
IN, OUT = 1_000, 2_000  # nanodollars per token at the routes' price
SEARCH = 10_000_000  # nanodollars per web search: $10.00 per 1,000


def manifests(primary: str, backup: str) -> str:
    def route(name: str, first: tuple[str, str], second: tuple[str, str], mid_stream: str = "error",
              extra: str = "") -> str:
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {{name: {name}}}
spec:
  model: {name}
  deadline: 20s
  selection: ordered
  candidates:
  - {{upstream: {first[0]}, model: {first[1]}, price: {{input: "1.00", output: "2.00", webSearch: "10.00"}}}}
  - {{upstream: {second[0]}, model: {second[1]}, price: {{input: "1.00", output: "2.00", webSearch: "10.00"}}}}
  failover: {{retryOn: [408, 429, 500, 502, 503, 504, 529], midStream: {mid_stream}}}
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
{extra}"""
    upstreams = f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: oai}}
spec: {{protocol: openai, baseUrl: "{primary}/v1", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: anth}}
spec: {{protocol: anthropic, baseUrl: "{backup}/v1", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: oai-b}}
spec: {{protocol: openai, baseUrl: "{backup}/v1", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: gem}}
spec: {{protocol: gemini, baseUrl: "{primary}/v1beta", timeouts: {{connect: 2s, firstByte: 2s, idle: 2s}}}}
"""
    gpt, claude, gpt_b, gemini = ("oai", "gpt-x-1"), ("anth", "claude-x-1"), ("oai-b", "gpt-x-1"), ("gem", "gemini-x-1")
    return "---\n".join([upstreams, route(NATIVE, gpt, claude), route(TRANSLATED, claude, gpt),
                          route(RESUME, gpt, claude, "resume"), route(RESUME_NATIVE, gpt, gpt_b, "resume"),
                          route(OMIT_HOSTED, claude, gemini, extra="  hostedTools: omit\n"),
                          route(NO_OPENAI, claude, gemini)])


@pytest.fixture
def responses_gateway(chaos, tmp_path):
    """A gateway with `--auth keys` and account `alice` ($10.00) over the two routes."""
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    (mdir / "routes.yaml").write_text(manifests(chaos["primary"].url, chaos["backup"].url))
    ledger = f"sqlite://{tmp_path / 'l.db'}"
    run_admin(ledger, "account", "create", "alice", "--balance", "10.00")
    key = run_admin(ledger, "key", "create", "alice").strip()
    assert re.fullmatch(r"sk-sluice-\S+", key), key
    proc = start("responses-gw", ["serve", "--manifests", str(mdir), "--listen", "127.0.0.1:0",
                                  "--ledger", ledger, "--auth", "keys"], tmp_path)
    try:
        yield Gateway(proc=proc, ledger=ledger, keys={"alice": key})
    finally:
        proc.stop()


def client(gw: Gateway, **kwargs) -> openai.OpenAI:
    """The official client at the gateway, with the sluice key as its bearer token."""
    kwargs.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.keys["alice"], timeout=30.0,
                         http_client=openai.DefaultHttpxClient(trust_env=False), **kwargs)


def settled(gw: Gateway) -> dict:
    return wait_for("alice's reservations to settle",
                    lambda: (a := gw.account("alice"))["reserved_nanodollars"] == a["granted_nanodollars"] and a,
                    5.0, interval=0.05)


def cost(usage) -> int:
    return usage.input_tokens * IN + usage.output_tokens * OUT


def test_a_native_answer_is_openais_own_and_billed_exactly(responses_gateway, primary, backup):
    primary.script(chunks=4)
    before = backup.requests()
    raw = client(responses_gateway).responses.with_raw_response.create(model=NATIVE, input=HELLO)
    response = raw.parse()
    assert raw.headers["x-sluice-upstream"] == "oai"
    assert response.object == "response" and response.status == "completed"
    assert response.model == "gpt-x-1"
    assert response.output_text
    assert response.usage.output_tokens == 4 and response.usage.input_tokens > 0
    assert backup.requests() == before
    assert settled(responses_gateway)["balance_nanodollars"] == START - cost(response.usage)


@pytest.mark.parametrize("route", [NATIVE, TRANSLATED])
def test_a_stream_arrives_event_by_event_and_is_billed(responses_gateway, primary, backup, route):
    (primary if route == NATIVE else backup).script(chunks=5)
    with client(responses_gateway).responses.stream(model=route, input=HELLO, max_output_tokens=64) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    assert kinds.count("response.output_text.delta") == 5
    assert [e.sequence_number for e in events] == sorted(e.sequence_number for e in events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and deltas
    assert final.usage.output_tokens == 5 and final.usage.input_tokens > 0
    assert settled(responses_gateway)["balance_nanodollars"] == START - cost(final.usage)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_failing_native_candidate_fails_over_to_the_translated_one(responses_gateway, primary, backup, status):
    primary.script(status=status)
    backup.script(chunks=3)
    raw = client(responses_gateway).responses.with_raw_response.create(model=NATIVE, input=HELLO)
    response = raw.parse()
    assert raw.headers["x-sluice-upstream"] == "anth"
    assert raw.headers["x-sluice-failover"].split(",")[0] in ("http_5xx", "http_429")
    assert response.model == "claude-x-1"
    assert response.id.startswith("resp_")
    assert response.output[0].type == "message" and response.output_text
    assert response.usage.output_tokens == 3
    assert settled(responses_gateway)["balance_nanodollars"] == START - cost(response.usage)


def test_an_overloaded_translated_candidate_fails_over_to_the_native_one(responses_gateway, primary, backup):
    backup.script(status=529)
    primary.script(chunks=2)
    raw = client(responses_gateway).responses.with_raw_response.create(model=TRANSLATED, input=HELLO)
    assert raw.headers["x-sluice-upstream"] == "oai"
    assert raw.parse().usage.output_tokens == 2


def test_a_stream_fails_over_before_its_first_content(responses_gateway, primary, backup):
    primary.script(error_after_chunks=0)
    backup.script(chunks=4)
    with client(responses_gateway).responses.stream(model=NATIVE, input=HELLO) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.model == "claude-x-1"
    assert text == final.output_text and text
    assert final.usage.output_tokens == 4


def test_a_client_error_is_not_failed_over_and_keeps_the_upstreams_words(responses_gateway, primary, backup):
    primary.script(status=400)
    before = backup.requests()
    with pytest.raises(openai.BadRequestError) as e:
        client(responses_gateway).responses.create(model=NATIVE, input=HELLO)
    assert e.value.body["type"] == "invalid_request_error"
    assert backup.requests() == before
    assert settled(responses_gateway)["balance_nanodollars"] == START


@pytest.mark.parametrize("route", [NATIVE, TRANSLATED])
def test_a_function_call_round_trips_natively_and_translated(responses_gateway, primary, backup, route):
    upstream = primary if route == NATIVE else backup
    upstream.script(tool_call="lookup", chunks=3)
    c = client(responses_gateway)
    turn = [{"role": "user", "content": "look up sluice"}]
    with c.responses.stream(model=route, input=turn, tools=[TOOL], tool_choice="required") as stream:
        final = stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "lookup" and "query" in json.loads(call.arguments)
    assert call.call_id
    # The output goes back as a function_call_output item, and the conversation goes on.
    upstream.script(chunks=2)
    answer = c.responses.create(model=route, tools=[TOOL], input=[
        *turn,
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "a gate"},
    ])
    assert answer.output_text and answer.status == "completed"


def test_a_codex_turn_passes_natively_and_is_translated_with_its_hints_named(responses_gateway, primary, backup):
    """What Codex sends: developer instructions, a replayed reasoning item with its
    encrypted content, store: false, include, prompt_cache_key, client metadata."""
    body = dict(
        input=[
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
        ],
        store=False, include=["reasoning.encrypted_content"], reasoning={"summary": "auto"},
        prompt_cache_key="session-1", tool_choice="auto", parallel_tool_calls=True,
        extra_body={"client_metadata": {"originator": "codex_exec"}},
    )
    c = client(responses_gateway)
    native = c.responses.with_raw_response.create(model=NATIVE, **body)
    assert native.headers["x-sluice-upstream"] == "oai"
    assert "x-sluice-dropped" not in native.headers
    translated = c.responses.with_raw_response.create(model=TRANSLATED, **body)
    assert translated.headers["x-sluice-upstream"] == "anth"
    dropped = set(translated.headers["x-sluice-dropped"].split(","))
    assert dropped == {"reasoning", "include", "prompt_cache_key", "client_metadata"}
    assert translated.parse().output_text


@pytest.mark.parametrize("extra,named", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"store": True}, "store"),
])
def test_what_needs_a_response_store_is_refused_by_name(responses_gateway, primary, extra, named):
    before = primary.requests()
    with pytest.raises(openai.BadRequestError) as e:
        client(responses_gateway).responses.create(model=NATIVE, input=HELLO, **extra)
    assert named in e.value.body["message"]
    assert e.value.body["type"] == "invalid_request_error"
    assert (e.value.body["code"], e.value.body["param"]) == ("unsupported_parameter", named)
    assert primary.requests() == before


def test_a_hosted_tool_a_translated_candidate_lacks_passes_it_over_and_is_refused_by_name_when_none_has_it(
        responses_gateway, backup, primary):
    c = client(responses_gateway)
    files = [TOOL, {"type": "file_search", "vector_store_ids": ["vs_1"]}]
    before = backup.requests()
    # Claude has no file search: passed over (sent nothing); OpenAI takes it natively.
    raw = c.responses.with_raw_response.create(model=TRANSLATED, input=HELLO, tools=files)
    assert raw.headers["x-sluice-upstream"] == "oai"
    assert backup.requests() == before
    # No candidate has it: 400 naming the tool, nothing sent.
    before = backup.requests(), primary.requests()
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=NO_OPENAI, input=HELLO, tools=files)
    assert "tools[1]" in e.value.body["message"] and "file_search" in e.value.body["message"]
    assert (backup.requests(), primary.requests()) == before


def test_web_search_on_a_claude_candidate_is_anthropics_search_with_its_sources_cited(responses_gateway, backup):
    """Codex's hosted `web_search` on a translated Anthropic candidate becomes Anthropic's
    web search tool; the answer's sources come back as `url_citation` annotations
    (the chaos upstream searches, and cites its one page, only when the tool reaches it)."""
    backup.script(chunks=3)
    c = client(responses_gateway)
    search = {"type": "web_search", "user_location": {"type": "approximate", "country": "FR", "city": "Lyon"}}
    previous = [{"role": "user", "content": "What is new?"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed",
                 "action": {"type": "search", "query": "news"}},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Lots."}]},
                {"role": "user", "content": HELLO}]
    searches = backup.counters()["web_searches"]
    raw = c.responses.with_raw_response.create(model=TRANSLATED, input=previous, tools=[TOOL, search])
    assert raw.headers["x-sluice-upstream"] == "anth"
    assert backup.counters()["web_searches"] == searches + 1
    # The earlier turn's search record cannot be replayed to Anthropic: left out, named.
    assert raw.headers["x-sluice-dropped"] == "input.web_search_call"
    response = raw.parse()
    (message,) = [item for item in response.output if item.type == "message"]
    (part,) = message.content
    (cite,) = part.annotations
    assert cite.type == "url_citation" and cite.url == "https://example.org/chaos/search-result"
    assert (cite.start_index, cite.end_index) == (0, len(part.text)), cite
    # The search is billed at the candidate's `webSearch` price beside the tokens.
    balance = START - cost(response.usage) - SEARCH
    assert settled(responses_gateway)["balance_nanodollars"] == balance

    events = list(c.responses.create(model=TRANSLATED, input=HELLO, tools=[search], stream=True))
    (added,) = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert added.annotation["url"] == "https://example.org/chaos/search-result"
    assert events[-1].type == "response.completed"
    (message,) = [item for item in events[-1].response.output if item.type == "message"]
    assert [a.url for a in message.content[0].annotations] == ["https://example.org/chaos/search-result"]
    balance -= cost(events[-1].response.usage) + SEARCH
    assert settled(responses_gateway)["balance_nanodollars"] == balance

    # Chat Completions' own `web_search_options` takes the same path.
    chat = c.chat.completions.create(model=TRANSLATED, messages=[{"role": "user", "content": HELLO}],
                                     web_search_options={"search_context_size": "low"})
    (cite,) = chat.choices[0].message.annotations
    assert cite.url_citation.url == "https://example.org/chaos/search-result"
    assert (cite.url_citation.start_index, cite.url_citation.end_index) == (0, len(chat.choices[0].message.content))


@pytest.mark.parametrize("stream", [False, True])
def test_chat_web_search_options_on_an_openai_candidate_is_billed_one_search(responses_gateway, primary, backup,
                                                                              stream):
    """OpenAI's search models search once per chat request with `web_search_options` and
    say so nowhere in their usage: the answer of an `openai` candidate is billed one
    search beside its tokens, whole or streamed; without the option, none."""
    primary.script(chunks=3)
    c = client(responses_gateway)
    messages = [{"role": "user", "content": HELLO}]

    def ask(**extra):
        if not stream:
            raw = c.chat.completions.with_raw_response.create(model=NATIVE, messages=messages, **extra)
            assert raw.headers["x-sluice-upstream"] == "oai"
            return raw.parse().usage
        chunks = list(c.chat.completions.create(model=NATIVE, messages=messages, stream=True,
                                                stream_options={"include_usage": True}, **extra))
        return chunks[-1].usage

    balance = settled(responses_gateway)["balance_nanodollars"]
    usage = ask(web_search_options={"search_context_size": "low"})
    assert usage.completion_tokens == 3 and usage.prompt_tokens > 0
    balance -= usage.prompt_tokens * IN + usage.completion_tokens * OUT + SEARCH
    assert settled(responses_gateway)["balance_nanodollars"] == balance
    # The journal's settlement row says why: the tokens and the one search.
    assert last_settlement(responses_gateway) == (usage.prompt_tokens, usage.completion_tokens, 1, "default/oai")
    usage = ask()
    balance -= usage.prompt_tokens * IN + usage.completion_tokens * OUT
    assert settled(responses_gateway)["balance_nanodollars"] == balance
    assert last_settlement(responses_gateway) == (usage.prompt_tokens, usage.completion_tokens, 0, "default/oai")


def last_settlement(gw: Gateway) -> tuple:
    """The journal's last settlement row: input tokens, output tokens, web searches, upstream."""
    with sqlite3.connect(gw.ledger.removeprefix("sqlite://")) as db:
        return db.execute("SELECT input_tokens, output_tokens, web_searches, upstream FROM journal "
                          "WHERE kind = 'settle' ORDER BY id DESC LIMIT 1").fetchone()


def test_a_route_that_omits_hosted_tools_leaves_them_out_only_where_there_is_no_equivalent(
        responses_gateway, primary, backup):
    """Codex's web search on a route of Claude, then Gemini, with `hostedTools: omit`: Claude
    searches; when it fails, Gemini (no search) is sent the turn without it, and says so."""
    body = dict(input=[{"role": "user", "content": HELLO},
                       {"type": "web_search_call", "id": "ws_1", "status": "completed",
                        "action": {"type": "search", "query": "hello"}},
                       {"role": "assistant", "content": [{"type": "output_text", "text": "Found it."}]},
                       {"role": "user", "content": "Again."}],
                tools=[TOOL, {"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}],
                tool_choice="auto", store=False)
    c = client(responses_gateway)
    searches = backup.counters()["web_searches"]
    claude = c.responses.with_raw_response.create(model=OMIT_HOSTED, **body)
    assert claude.headers["x-sluice-upstream"] == "anth"
    assert set(claude.headers["x-sluice-dropped"].split(",")) == {"tools.file_search", "input.web_search_call"}
    assert backup.counters()["web_searches"] == searches + 1

    backup.script(status=503)
    primary.script(chunks=2)
    raw = c.responses.with_raw_response.create(model=OMIT_HOSTED, **body)
    assert raw.headers["x-sluice-upstream"] == "gem"
    assert set(raw.headers["x-sluice-dropped"].split(",")) == {
        "tools.web_search", "tools.file_search", "input.web_search_call"}
    assert raw.parse().output_text
    with c.responses.with_streaming_response.create(model=OMIT_HOSTED, stream=True, **body) as streamed:
        assert streamed.headers["x-sluice-upstream"] == "gem"
        assert "tools.web_search" in streamed.headers["x-sluice-dropped"]
        kinds = [json.loads(line[len("data: "):])["type"] for line in streamed.iter_lines() if line.startswith("data: ")]
    assert kinds[-1] == "response.completed", kinds
    # What cannot be served without the hosted tool is still refused, by name.
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=OMIT_HOSTED, input=HELLO, tools=[{"type": "file_search"}], tool_choice="required")
    assert "tool_choice" in e.value.body["message"]


def test_errors_come_in_openais_shape(responses_gateway, primary, backup):
    url = f"{responses_gateway.url}/v1/responses"
    key = {"authorization": f"Bearer {responses_gateway.keys['alice']}"}
    body = {"model": NATIVE, "input": HELLO}
    with httpx.Client(trust_env=False, timeout=30.0) as h:
        r = h.post(url, json=body)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text

        r = h.post(url, json={**body, "model": "nope"}, headers=key)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text

        r = h.post(url, json={"model": NATIVE}, headers=key)
        assert r.status_code == 400 and "input" in r.json()["error"]["message"], r.text

        primary.script(status=429, retry_after=2)
        backup.script(status=429, retry_after=2)
        r = h.post(url, json=body, headers=key)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["type"] == "rate_limit_error", r.text
        assert int(r.headers["retry-after"]) >= 1


def test_a_stream_cut_after_content_ends_in_response_failed(responses_gateway, primary):
    primary.script(chunks=6, reset_after_chunks=2)
    with client(responses_gateway).responses.stream(model=NATIVE, input=HELLO) as stream:
        events = list(stream)
        assert events[-1].type == "response.failed", [e.type for e in events]
        assert events[-1].response.error.code == "upstream_stream_broken"
        with pytest.raises(RuntimeError):
            stream.get_final_response()


@pytest.mark.parametrize("route,output", [(RESUME, 3 + 5), (RESUME_NATIVE, 3 + 8)])
def test_a_cut_stream_is_finished_on_the_backup_as_one_response_and_billed_exactly(
        responses_gateway, primary, backup, route, output):
    # docs/design.md §4.5: `anth` continues the delivered text as a prefill (5 more
    # words); `oai-b` is sent the request again (8 words), and its replay is held back
    # while it matches. The 3 words of the broken attempt are billed too.
    primary.script(chunks=8)
    with client(responses_gateway).responses.stream(model=route, input=HELLO, max_output_tokens=64) as stream:
        whole = stream.get_final_response().output_text
    balance = settled(responses_gateway)["balance_nanodollars"]

    primary.script(chunks=8, reset_after_chunks=3)
    backup.script(chunks=8)
    before = backup.requests()
    with client(responses_gateway).responses.stream(model=route, input=HELLO, max_output_tokens=64) as stream:
        events = list(stream)
        final = stream.get_final_response()
    # No failure: the SDK read one response, with the exact text of an unbroken one.
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed", kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole and final.output_text == whole
    assert final.id == events[0].response.id and final.id.startswith("resp_chaos_"), "the first attempt's response"
    assert [item.type for item in final.output] == ["message"]
    assert final.usage.output_tokens == output, final.usage
    assert backup.requests() == before + 1
    # Each attempt is billed at its candidate's price; the response reports their sum.
    assert settled(responses_gateway)["balance_nanodollars"] == balance - cost(final.usage)
