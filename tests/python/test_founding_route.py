"""The founding route of examples/quickstart through the official SDK: `claude-opus-4`
is Anthropic (the gateway speaks the Messages API to it, with its `x-api-key`) and,
behind it, Claude on Vertex AI (`:rawPredict` with a Google token the gateway gets for
the quickstart's test-only service-account key). Both are chaos upstreams that check
those credentials as the providers do; the client only ever speaks OpenAI."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from sluice_testsupport.chaos import Chaos, start_chaos
from sluice_testsupport.paths import REPO
from sluice_testsupport.poll import wait_for

from conftest import Gateway, _env, gateway_bin, start

QUICKSTART = REPO / "examples" / "quickstart"
#: The placeholders the quickstart's Anthropic and Vertex Upstreams point at.
ANTHROPIC_PLACEHOLDER = "http://127.0.0.1:9101"
VERTEX_PLACEHOLDER = "http://127.0.0.1:9102"
MODEL = "claude-opus-4"
MESSAGES = [{"role": "user", "content": "Say hello in eight words."}]


@pytest.fixture(scope="module")
def founding(tmp_path_factory) -> dict[str, Chaos]:
    """`anthropic` checks the quickstart's API key; `vertex` issues tokens for, and
    checks tokens of, the quickstart's service account."""
    logdir = tmp_path_factory.mktemp("founding")
    key = (QUICKSTART / "secrets" / "anthropic-key" / "apiKey").read_text()
    sa = QUICKSTART / "secrets" / "vertex-sa" / "key.json"
    upstreams: dict[str, Chaos] = {}
    try:
        upstreams["anthropic"] = start_chaos("founding-anthropic", logdir, gateway_bin(), _env(), ["--api-key", key])
        upstreams["vertex"] = start_chaos("founding-vertex", logdir, gateway_bin(), _env(),
                                          ["--gcp-service-account", str(sa)])
        yield upstreams
    finally:
        for c in upstreams.values():
            c.proc.stop()


@dataclass
class FoundingGateway(Gateway):
    secrets: Path = Path()


@pytest.fixture
def founding_gateway(founding, tmp_path) -> FoundingGateway:
    """A gateway on the quickstart's manifests and secrets, Anthropic and Vertex pointed
    at `founding` (the key's token_uri too), healthy upstreams, fresh health state."""
    for c in founding.values():
        c.reset()

    def substitute(text: str) -> str:
        return text.replace(ANTHROPIC_PLACEHOLDER, founding["anthropic"].url).replace(
            VERTEX_PLACEHOLDER, founding["vertex"].url)

    def no_synthetic(text: str) -> str:
        # The quickstart's synthetic checks reach each candidate at a random point of
        # their interval; these tests count the requests each upstream gets, so the
        # checks are left out (tests/tests/scenarios/synthetic.rs covers them).
        kept = [line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("synthetic:")]
        assert len(kept) < len(text.splitlines()), "the quickstart's routes no longer set synthetic"
        return "".join(kept)

    mdir = tmp_path / "manifests"
    mdir.mkdir()
    for name in ("upstreams.yaml", "routes.yaml", "budgets.yaml"):
        text = substitute((QUICKSTART / name).read_text())
        (mdir / name).write_text(no_synthetic(text) if name == "routes.yaml" else text)
    secrets = tmp_path / "secrets"
    shutil.copytree(QUICKSTART / "secrets", secrets)
    key = secrets / "vertex-sa" / "key.json"
    key.write_text(substitute(key.read_text()))
    assert json.loads(key.read_text())["token_uri"] == founding["vertex"].url + "/token"
    proc = start("gateway-founding", ["serve", "--manifests", str(mdir), "--secrets-dir", str(secrets),
                                      "--listen", "127.0.0.1:0", "--ledger", f"sqlite://{tmp_path / 'l.db'}",
                                      "--auth", "none"], tmp_path)
    try:
        yield FoundingGateway(proc=proc, ledger=f"sqlite://{tmp_path / 'l.db'}", secrets=secrets)
    finally:
        proc.stop()
        for c in founding.values():
            c.reset()


def streamed(stream) -> tuple[str, list]:
    """Every chunk of a stream (which must end without an error) and its text."""
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_the_primary_answers_in_the_openai_shape_plain_and_streamed(founding_gateway, founding):
    client = founding_gateway.client(max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=64)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "anthropic"
    assert "x-sluice-failover" not in raw.headers
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.model == "claude-opus-4-20250514"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0

    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64, stream=True,
                                            stream_options={"include_usage": True})
    text, chunks = streamed(stream)
    assert text == completion.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert {c.model for c in chunks} == {"claude-opus-4-20250514"}
    assert founding["vertex"].requests() == 0


def test_an_overloaded_primary_is_answered_by_vertex(founding_gateway, founding):
    anthropic, vertex = founding["anthropic"], founding["vertex"]
    anthropic.script(status=529)  # Anthropic's overloaded_error
    overloaded = anthropic.status_count(529)
    client = founding_gateway.client(max_retries=0)

    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=64)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "vertex-us-east5"
    assert raw.headers["x-sluice-failover"] == "http_5xx"
    completion = raw.parse()
    assert completion.model == "claude-opus-4@20250514"
    assert completion.choices[0].message.content
    assert anthropic.status_count(529) == overloaded + 1
    assert vertex.status_count(200) >= 1

    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=64,
                                                           stream=True)
    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "vertex-us-east5"
    text, chunks = streamed(raw.parse())
    assert text
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "stop", chunks[-1]
    assert {c.model for c in chunks} == {"claude-opus-4@20250514"}


def test_a_wrong_key_is_refused_by_anthropic_not_failed_over(founding_gateway, founding):
    # The mounted key changes under the running gateway: Anthropic refuses it, and the
    # refusal (a credentials problem, which another provider would not fix) reaches
    # the client as it was.
    (founding_gateway.secrets / "anthropic-key" / "apiKey").write_text("sk-wrong")
    before = founding["vertex"].requests()
    client = founding_gateway.client(max_retries=0)

    def refused():
        try:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)
        except openai.AuthenticationError as e:
            return e
        return None
    err = wait_for("the gateway to send the new key", refused, timeout=15, interval=0.3)
    assert err.status_code == 401
    assert founding["vertex"].requests() == before
