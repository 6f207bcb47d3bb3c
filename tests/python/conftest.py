"""Fixtures that run the real `sluice-gateway` binary for the `openai` SDK tests.

Processes:
- two chaos upstreams (`sluice-gateway chaos`), started once per session and
  scripted per test through `POST /_chaos` (reset to `{}` around every test);
- chaos upstreams that check credentials as the providers do
  (`start_credentialed_chaos`, `CHAOS_CREDENTIALS`), started by the suites of the
  native protocols and their official clients (test_protocols, test_official_clients);
- one gateway (`sluice-gateway serve`) per test, with its own manifests dir and
  SQLite ledger, so that health, circuit and cooldown state never leaks from
  one test into the next.

Everything listens on 127.0.0.1 with port 0 and is found through the
`listening on http://ADDR` line on stderr. Every process is killed at
teardown, also when a test fails; on Linux they also die with pytest.

The binary is `$SLUICE_GATEWAY_BIN`, else `<repo>/target/debug/sluice-gateway`.
A missing binary fails every test (it never skips). With `$CI` set, any skip
is turned into a failure (`sluice_testsupport.no_skips_in_ci`). Processes and the chaos
wrapper are the shared ones of `sluice_testsupport` (tests/pysupport).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import openai
import pytest
from sluice_testsupport import procs
from sluice_testsupport.chaos import Chaos, start_chaos
from sluice_testsupport.paths import REPO
from sluice_testsupport.procs import Proc

pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)

DEFAULT_BIN = REPO / "target" / "debug" / "sluice-gateway"
START_TIMEOUT_S = 30.0


def pytest_report_header(config):
    path = Path(os.environ.get("SLUICE_GATEWAY_BIN", DEFAULT_BIN))
    if path.is_file():
        built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
        return f"sluice-gateway: {path} (built {built}); openai {openai.__version__}"
    return f"sluice-gateway: {path} MISSING; openai {openai.__version__}"


# ---------------------------------------------------------------- processes


def pytest_sessionfinish(session, exitstatus):
    # Belt and braces: fixtures stop their processes, this catches the rest.
    procs.stop_all()


def gateway_bin() -> Path:
    path = Path(os.environ.get("SLUICE_GATEWAY_BIN", DEFAULT_BIN))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"sluice-gateway binary not found at {path}: build it first with "
            f"`cargo build -p sluice-gateway` (in {REPO}) or point SLUICE_GATEWAY_BIN at it",
            pytrace=False,
        )
    return path


def _env() -> dict[str, str]:
    return dict(os.environ, NO_COLOR="1", RUST_LOG=os.environ.get("SLUICE_TEST_RUST_LOG", "info"))


def start(name: str, args: list[str], logdir: Path) -> Proc:
    """Starts `sluice-gateway ARGS` and waits for `listening on http://ADDR`."""
    binary = gateway_bin()
    try:
        return procs.start(name, [str(binary), *args], logdir, _env(), timeout=START_TIMEOUT_S)
    except AssertionError as e:
        pytest.fail(str(e), pytrace=False)


def run_admin(ledger: str, *args: str) -> str:
    """`sluice-gateway admin --ledger LEDGER ARGS`; returns stdout."""
    cmd = [str(gateway_bin()), "admin", "--ledger", ledger, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, NO_COLOR="1"))
    if done.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}",
                    pytrace=False)
    return done.stdout


# ---------------------------------------------------------------- chaos upstreams


@pytest.fixture(scope="session")
def chaos(tmp_path_factory) -> dict[str, Chaos]:
    """Two chaos upstreams, `primary` and `backup`, for the whole session."""
    logdir = tmp_path_factory.mktemp("chaos")
    upstreams: dict[str, Chaos] = {}
    try:
        for name in ("primary", "backup"):
            upstreams[name] = start_chaos(name, logdir, gateway_bin(), _env())
        yield upstreams
    finally:
        for c in upstreams.values():
            c.proc.stop()


@pytest.fixture(autouse=True)
def reset_chaos(chaos):
    """Every test starts and ends with healthy upstreams."""
    for c in chaos.values():
        c.reset()
    yield
    for c in chaos.values():
        if c.proc.popen.poll() is None:
            c.reset()


@pytest.fixture
def primary(chaos) -> Chaos:
    return chaos["primary"]


@pytest.fixture
def backup(chaos) -> Chaos:
    return chaos["backup"]


# ---------------------------------------------------------------- credentialed chaos

#: The credentials a chaos upstream started with `CHAOS_CREDENTIALS` checks, as the real
#: providers do: one API key for every API-key protocol, SigV4 by one AWS key pair for
#: Bedrock, and for Vertex AI tokens it issued for the test-only service-account key
#: (it belongs to no Google project).
API_KEY = "sk-chaos-test-key"
AWS_KEY_ID, AWS_SECRET = "AKIDSLUICETEST", "sluice/test/secret+key"
AWS_REGION = "us-east-1"
SA_KEY = REPO / "providers" / "tests" / "fixtures" / "gcp" / "service-account.json"
GCP_PROJECT, GCP_LOCATION = "sluice-test", "us-east5"
CHAOS_CREDENTIALS = ["--api-key", API_KEY, "--aws-access-key-id", AWS_KEY_ID,
                     "--aws-secret-access-key", AWS_SECRET, "--gcp-service-account", str(SA_KEY)]


def sa_key_for(chaos_url: str) -> dict:
    """The test-only service-account key with its `token_uri` at `chaos_url`'s `/token`."""
    key = json.loads(SA_KEY.read_text())
    key["token_uri"] = f"{chaos_url}/token"
    return key


def start_credentialed_chaos(name: str, logdir: Path) -> Chaos:
    """A chaos upstream that checks `CHAOS_CREDENTIALS` on every protocol."""
    return start_chaos(name, logdir, gateway_bin(), _env(), CHAOS_CREDENTIALS)


# ---------------------------------------------------------------- manifests

CHAT_MODEL = "test-chat"
# The chat route that caches deterministic completions (docs/design.md §13).
CACHED_MODEL = "test-cached-chat"
EMBED_MODEL = "test-embed"
INSTRUCT_MODEL = "test-instruct"

# Ids at the upstreams, so that the answer's `model` tells who served.
PRIMARY_CHAT, BACKUP_CHAT = "chat-primary-v1", "chat-backup-v1"
PRIMARY_EMBED, BACKUP_EMBED = "embed-primary-v1", "embed-backup-v1"
PRIMARY_INSTRUCT, BACKUP_INSTRUCT = "instruct-primary-v1", "instruct-backup-v1"

# USD per answer served from the cache on the cached route.
CACHE_PRICE_NANOS = 1_000_000
CACHE_PRICE = "0.001"

# USD per 1M tokens; small enough that $10 covers everything, big enough that
# a $0.01 wallet cannot reserve max_tokens=100000 ($0.20 of output).
PRICE = '{input: "1.00", output: "2.00"}'


def manifests(primary_url: str, backup_url: str, protocol: str = "openai",
              mid_stream: str = "error") -> str:
    """The upstreams speak `protocol`; the routes break streams as `mid_stream` says."""

    def route(name: str, model: str, p_id: str, b_id: str, extra: str = "") -> str:
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {{name: {name}}}
spec:
  model: {model}
  deadline: 20s
  selection: ordered
  candidates:
  - {{upstream: primary, model: {p_id}, weight: 100, price: {PRICE}}}
  - {{upstream: backup, model: {b_id}, weight: 50, price: {PRICE}}}
  failover:
    retryOn: [408, 429, 500, 502, 503, 504]
    midStream: {mid_stream}
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
  defaultMaxTokens: 256
{extra}"""

    def upstream(name: str, url: str) -> str:
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: {name}}}
spec:
  protocol: {protocol}
  baseUrl: {url}/v1
  timeouts: {{connect: 2s, firstByte: 1s, idle: 2s}}
"""

    docs = [
        upstream("primary", primary_url),
        upstream("backup", backup_url),
        route("chat", CHAT_MODEL, PRIMARY_CHAT, BACKUP_CHAT),
        route("cached", CACHED_MODEL, PRIMARY_CHAT, BACKUP_CHAT,
              f'  cache: {{completions: deterministic, price: "{CACHE_PRICE}"}}\n'),
        route("embed", EMBED_MODEL, PRIMARY_EMBED, BACKUP_EMBED),
        route("instruct", INSTRUCT_MODEL, PRIMARY_INSTRUCT, BACKUP_INSTRUCT),
    ]
    return "---\n".join(docs)


# ---------------------------------------------------------------- gateway


@dataclass
class Gateway:
    proc: Proc
    ledger: str
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.proc.url

    def client(self, api_key: str = "sk-unused", **kwargs: Any) -> openai.OpenAI:
        """The real SDK pointed at this gateway (no proxies, 30 s timeout)."""
        kwargs.setdefault("timeout", 30.0)
        return openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key=api_key,
            http_client=openai.DefaultHttpxClient(trust_env=False),
            **kwargs,
        )

    def admin(self, *args: str) -> str:
        return run_admin(self.ledger, *args)

    def account(self, name: str) -> dict:
        return json.loads(self.admin("account", "show", name, "--json"))


@pytest.fixture
def start_gateway(chaos, tmp_path):
    """Factory: `start_gateway(auth="none"|"keys", accounts={name: "USD"}, extra_args=[...],
    protocol="openai", mid_stream="error")`."""
    started: list[Gateway] = []

    def _start(auth: str = "none", accounts: Optional[dict[str, str]] = None,
               extra_args: Optional[list[str]] = None, protocol: str = "openai",
               mid_stream: str = "error") -> Gateway:
        n = len(started)
        root = tmp_path / f"gw{n}"
        mdir = root / "manifests"
        mdir.mkdir(parents=True)
        (mdir / "sluice.yaml").write_text(
            manifests(chaos["primary"].url, chaos["backup"].url, protocol, mid_stream))
        ledger = f"sqlite://{root / 'l.db'}"
        keys: dict[str, str] = {}
        for name, usd in (accounts or {}).items():
            run_admin(ledger, "account", "create", name, "--balance", usd)
            key = run_admin(ledger, "key", "create", name).strip()
            assert re.fullmatch(r"sk-sluice-\S+", key), f"unexpected key output {key!r}"
            keys[name] = key
        proc = start(
            f"gateway{n}",
            ["serve", "--manifests", str(mdir), "--listen", "127.0.0.1:0",
             "--ledger", ledger, "--auth", auth, *(extra_args or [])],
            root,
        )
        gw = Gateway(proc=proc, ledger=ledger, keys=keys)
        started.append(gw)
        return gw

    try:
        yield _start
    finally:
        for gw in started:
            gw.proc.stop()


@pytest.fixture
def gateway(start_gateway) -> Gateway:
    """A gateway with `--auth none`."""
    return start_gateway("none")


@pytest.fixture
def keys_gateway(start_gateway) -> Gateway:
    """A gateway with `--auth keys`: account `alice` ($10.00) and `poor` ($0.01)."""
    return start_gateway("keys", accounts={"alice": "10.00", "poor": "0.01"})


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_call(item):
    outcome = yield
    # On failure, show what the gateways said: the first place to look.
    if outcome.excinfo is not None:
        for p in list(procs.ALL_PROCS):
            if p.name.startswith("gateway") and p.popen.poll() is None:
                tail = "\n".join(p.log_text().splitlines()[-40:])
                item.add_report_section("call", f"{p.name} log", tail)
