"""The real coding agents through sluice: Claude Code (`claude -p`, the Messages API) and
Codex (`codex exec`, the Responses API), pinned in tests/agents and installed from the
npm registry (docs/gateway.md "Inbound APIs").

Each completes a task with one tool call: the model (chaos primary, an `anthropic`
candidate) answers the first turn with a call to the agent's shell tool, which writes a
file; the next turn carries the tool's result, and there the Anthropic candidate fails
(529 overloaded), so the gateway serves it from Vertex AI (chaos `vertex`, a
`vertex-anthropic` candidate with its own credentials). Every turn is billed at its
candidate's price, and the bill equals what the agent itself reports as used.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from sluice_testsupport import agents
from sluice_testsupport.chaos import Chaos
from sluice_testsupport.poll import wait_for

from conftest import GCP_LOCATION, GCP_PROJECT, Gateway, run_admin, sa_key_for, start, start_credentialed_chaos

CLAUDE_ROUTE, CODEX_ROUTE = "claude-agent", "codex-agent"
IN, OUT = 1_000, 2_000  # nanodollars per token at the routes' price
START = 10_000_000_000  # $10.00
PROOF = "proof.txt"
AGENT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def agent_bin() -> Path:
    return agents.bin_dir()


@pytest.fixture(scope="module")
def vertex(tmp_path_factory) -> Chaos:
    """The Vertex AI side: a chaos upstream that checks the tokens it issues."""
    c = start_credentialed_chaos("agents-vertex", tmp_path_factory.mktemp("agents"))
    try:
        yield c
    finally:
        c.proc.stop()


def manifests(primary: str, vertex: str) -> str:
    def route(name: str) -> str:
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {{name: {name}}}
spec:
  model: {name}
  deadline: 60s
  selection: ordered
  candidates:
  - {{upstream: anthropic, model: claude-sonnet-4-5, price: {{input: "1.00", output: "2.00"}}}}
  - {{upstream: vertex, model: claude-sonnet-4-5@20250929, price: {{input: "1.00", output: "2.00"}}}}
  failover: {{retryOn: [429, 500, 502, 503, 504, 529]}}
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
  defaultMaxTokens: 4096
"""
    upstreams = f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: anthropic}}
spec: {{protocol: anthropic, baseUrl: "{primary}/v1", timeouts: {{connect: 2s, firstByte: 10s, idle: 10s}}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: vertex}}
spec:
  protocol: vertex-anthropic
  baseUrl: "{vertex}/v1"
  gcp: {{project: {GCP_PROJECT}, location: {GCP_LOCATION}, credentials: {{secretRef: {{name: vertex-sa, key: key.json}}}}}}
  timeouts: {{connect: 2s, firstByte: 10s, idle: 10s}}
"""
    return "---\n".join([upstreams, route(CLAUDE_ROUTE), route(CODEX_ROUTE)])


@pytest.fixture
def agent_gateway(chaos, vertex, tmp_path):
    """A gateway with `--auth keys`, account `alice` ($10.00) and the two agent routes."""
    vertex.reset()
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    (mdir / "routes.yaml").write_text(manifests(chaos["primary"].url, vertex.url))
    secret = tmp_path / "secrets" / "vertex-sa" / "key.json"
    secret.parent.mkdir(parents=True)
    secret.write_text(json.dumps(sa_key_for(vertex.url)))
    ledger = f"sqlite://{tmp_path / 'l.db'}"
    run_admin(ledger, "account", "create", "alice", "--balance", "10.00")
    key = run_admin(ledger, "key", "create", "alice").strip()
    assert re.fullmatch(r"sk-sluice-\S+", key), key
    proc = start("agents-gw", ["serve", "--manifests", str(mdir), "--secrets-dir", str(tmp_path / "secrets"),
                               "--listen", "127.0.0.1:0", "--ledger", ledger, "--auth", "keys"], tmp_path)
    try:
        yield Gateway(proc=proc, ledger=ledger, keys={"alice": key})
    finally:
        proc.stop()
        vertex.reset()


def settled(gw: Gateway) -> dict:
    return wait_for("alice's reservations to settle",
                    lambda: (a := gw.account("alice"))["reserved_nanodollars"] == a["granted_nanodollars"] and a,
                    5.0, interval=0.05)


def script_the_model(primary: Chaos, vertex: Chaos, tool: str, arguments: dict) -> None:
    """Turn 1: Anthropic calls `tool`; a turn that carries the tool's result: Anthropic is
    overloaded and Vertex AI answers in text."""
    primary.script(tool_call=tool, tool_arguments=json.dumps(arguments), chunks=4,
                   fail_on_tool_result=True, status=529)
    vertex.script(chunks=3)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=AGENT_TIMEOUT_S)
    assert r.returncode == 0, f"{argv[0]} exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}"
    return r


def test_claude_code_completes_a_tool_task_when_anthropic_fails_mid_conversation(
        agent_bin, agent_gateway, primary, vertex, tmp_path):
    script_the_model(primary, vertex, "Bash", {"command": f"echo sluice > {PROOF}", "description": "Write the proof"})
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = dict(os.environ, HOME=str(home), ANTHROPIC_BASE_URL=agent_gateway.url,
               ANTHROPIC_API_KEY=agent_gateway.keys["alice"], CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               DISABLE_AUTOUPDATER="1", ANTHROPIC_DEFAULT_HAIKU_MODEL=CLAUDE_ROUTE,
               ANTHROPIC_SMALL_FAST_MODEL=CLAUDE_ROUTE)
    primary_529s, vertex_before = primary.status_count(529), vertex.requests()
    r = run([str(agent_bin / "claude"), "-p", f"Write the word sluice to {PROOF}.", "--model", CLAUDE_ROUTE,
             "--output-format", "json", "--allowedTools", "Bash"], work, env)
    result = json.loads(r.stdout)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["num_turns"] == 2, result
    assert (work / PROOF).read_text().strip() == "sluice", "the tool call ran"
    assert primary.status_count(529) > primary_529s, "Anthropic failed the second turn"
    assert vertex.requests() > vertex_before, "Vertex AI served it"
    u = result["usage"]
    billed = ((u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]) * IN
              + u["output_tokens"] * OUT)
    assert settled(agent_gateway)["balance_nanodollars"] == START - billed, u


def test_codex_completes_a_tool_task_when_anthropic_fails_mid_conversation(
        agent_bin, agent_gateway, primary, vertex, tmp_path):
    script_the_model(primary, vertex, "exec_command", {"cmd": f"echo sluice > {PROOF}"})
    work, home = tmp_path / "work", tmp_path / "codex-home"
    work.mkdir()
    home.mkdir()
    # Codex's hosted web search, live (its default reads cached pages only, which no
    # search but OpenAI's offers): on these Claude candidates it is Anthropic's web
    # search (docs/gateway.md "Hosted tools").
    (home / "config.toml").write_text(f"""\
model = "{CODEX_ROUTE}"
model_provider = "sluice"
check_for_update_on_startup = false
web_search = "live"
[model_providers.sluice]
name = "sluice"
base_url = "{agent_gateway.url}/v1"
env_key = "SLUICE_API_KEY"
wire_api = "responses"
[analytics]
enabled = false
""")
    env = dict(os.environ, CODEX_HOME=str(home), SLUICE_API_KEY=agent_gateway.keys["alice"])
    primary_529s, vertex_before = primary.status_count(529), vertex.requests()
    searches = vertex.counters()["web_searches"]
    r = run([str(agent_bin / "codex"), "exec", "--skip-git-repo-check", "--json", "--sandbox", "workspace-write",
             f"Write the word sluice to {PROOF}."], work, env)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, kinds
    commands = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert len(commands) == 1 and commands[0]["exit_code"] == 0, commands
    assert (work / PROOF).read_text().strip() == "sluice", "the tool call ran"
    assert primary.status_count(529) > primary_529s, "Anthropic failed the second turn"
    assert vertex.requests() > vertex_before, "Vertex AI served it"
    assert vertex.counters()["web_searches"] > searches, "Codex's web search reached Vertex AI as Anthropic's"
    (usage,) = [e["usage"] for e in events if e["type"] == "turn.completed"]
    billed = usage["input_tokens"] * IN + usage["output_tokens"] * OUT
    assert settled(agent_gateway)["balance_nanodollars"] == START - billed, usage
