"""Fixtures that run the real `sluice-gateway` binary for the `openai` SDK tests.

Processes:
- two chaos upstreams (`sluice-gateway chaos`), started once per session and
  scripted per test through `POST /_chaos` (reset to `{}` around every test);
- one gateway (`sluice-gateway serve`) per test, with its own manifests dir and
  SQLite ledger, so that health, circuit and cooldown state never leaks from
  one test into the next.

Everything listens on 127.0.0.1 with port 0 and is found through the
`listening on http://ADDR` line on stderr. Every process is killed at
teardown, also when a test fails; on Linux they also die with pytest.

The binary is `$SLUICE_GATEWAY_BIN`, else `<repo>/target/debug/sluice-gateway`.
A missing binary fails every test (it never skips). With `$CI` set, any skip
is turned into a failure.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "target" / "debug" / "sluice-gateway"
LISTENING = re.compile(r"listening on http://(\S+)")
START_TIMEOUT_S = 30.0

# Traffic goes to 127.0.0.1 only: never through a proxy from the environment.
for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(x for x in (os.environ.get(_var, ""), "127.0.0.1,localhost") if x)

# Control-plane HTTP (POST /_chaos, GET /_chaos) without any proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------- CI: no skips


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while CI is set (skips are failures in CI): {report.longrepr}"


def pytest_report_header(config):
    path = Path(os.environ.get("SLUICE_GATEWAY_BIN", DEFAULT_BIN))
    if path.is_file():
        built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
        return f"sluice-gateway: {path} (built {built}); openai {openai.__version__}"
    return f"sluice-gateway: {path} MISSING; openai {openai.__version__}"


# ---------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """Linux: SIGKILL the child when pytest dies, even if teardown never runs."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:  # pragma: no cover - not Linux
        pass


@dataclass
class Proc:
    """A started `sluice-gateway` process whose stderr goes to a log file."""

    name: str
    popen: subprocess.Popen
    log: Path
    addr: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)


_ALL_PROCS: list[Proc] = []


def _kill_all_left() -> None:
    for p in _ALL_PROCS:
        try:
            p.stop()
        except Exception:
            pass


def pytest_sessionfinish(session, exitstatus):
    # Belt and braces: fixtures stop their processes, this catches the rest.
    _kill_all_left()


def gateway_bin() -> Path:
    path = Path(os.environ.get("SLUICE_GATEWAY_BIN", DEFAULT_BIN))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"sluice-gateway binary not found at {path}: build it first with "
            f"`cargo build -p sluice-gateway` (in {REPO}) or point SLUICE_GATEWAY_BIN at it",
            pytrace=False,
        )
    return path


def start(name: str, args: list[str], logdir: Path) -> Proc:
    """Starts `sluice-gateway ARGS` and waits for `listening on http://ADDR`."""
    binary = gateway_bin()
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{name}.log"
    env = dict(os.environ, NO_COLOR="1", RUST_LOG=os.environ.get("SLUICE_TEST_RUST_LOG", "info"))
    with open(log, "wb") as fh:
        popen = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(logdir),
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    proc = Proc(name=name, popen=popen, log=log)
    _ALL_PROCS.append(proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = LISTENING.search(proc.log_text())
        if m:
            proc.addr = m.group(1)
            assert proc.addr.startswith("127.0.0.1:"), f"{name} bound {proc.addr}, not 127.0.0.1"
            return proc
        if popen.poll() is not None:
            break
        time.sleep(0.02)
    proc.stop()
    pytest.fail(
        f"{name} (`{binary} {' '.join(args)}`) did not log 'listening on http://ADDR' "
        f"(exit code {popen.poll()}); its output:\n{proc.log_text()}",
        pytrace=False,
    )


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


def http_json(method: str, url: str, body: Optional[dict] = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with _OPENER.open(req, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {url} -> {e.code}: {e.read().decode(errors='replace')}") from e


@dataclass
class Chaos:
    """One chaos upstream (docs/design.md §6), scripted through `/_chaos`."""

    name: str
    proc: Proc

    @property
    def url(self) -> str:
        return self.proc.url

    def script(self, **fields: Any) -> dict:
        """Replaces the default script for every request (`POST /_chaos`)."""
        view = http_json("POST", f"{self.url}/_chaos", fields)
        assert view["script"] == fields, view
        return view

    def reset(self) -> None:
        self.script()

    def counters(self) -> dict:
        return http_json("GET", f"{self.url}/_chaos")["counters"]

    def requests(self) -> int:
        return self.counters()["requests"]

    def status_count(self, status: int) -> int:
        return int(self.counters()["by_status"].get(str(status), 0))


@pytest.fixture(scope="session")
def chaos(tmp_path_factory) -> dict[str, Chaos]:
    """Two chaos upstreams, `primary` and `backup`, for the whole session."""
    logdir = tmp_path_factory.mktemp("chaos")
    upstreams: dict[str, Chaos] = {}
    try:
        for name in ("primary", "backup"):
            proc = start(f"chaos-{name}", ["chaos", "--listen", "127.0.0.1:0"], logdir)
            upstreams[name] = Chaos(name, proc)
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


# ---------------------------------------------------------------- manifests

CHAT_MODEL = "test-chat"
EMBED_MODEL = "test-embed"
INSTRUCT_MODEL = "test-instruct"

# Ids at the upstreams, so that the answer's `model` tells who served.
PRIMARY_CHAT, BACKUP_CHAT = "chat-primary-v1", "chat-backup-v1"
PRIMARY_EMBED, BACKUP_EMBED = "embed-primary-v1", "embed-backup-v1"
PRIMARY_INSTRUCT, BACKUP_INSTRUCT = "instruct-primary-v1", "instruct-backup-v1"

# USD per 1M tokens; small enough that $10 covers everything, big enough that
# a $0.01 wallet cannot reserve max_tokens=100000 ($0.20 of output).
PRICE = '{input: "1.00", output: "2.00"}'


def manifests(primary_url: str, backup_url: str) -> str:
    def route(name: str, model: str, p_id: str, b_id: str) -> str:
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
  backoff: {{maxAttempts: 2, base: 10ms, maxTotal: 100ms}}
  defaultMaxTokens: 256
"""

    def upstream(name: str, url: str) -> str:
        return f"""\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {{name: {name}}}
spec:
  protocol: openai
  baseUrl: {url}/v1
  timeouts: {{connect: 2s, firstByte: 1s, idle: 2s}}
"""

    docs = [
        upstream("primary", primary_url),
        upstream("backup", backup_url),
        route("chat", CHAT_MODEL, PRIMARY_CHAT, BACKUP_CHAT),
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
    """Factory: `start_gateway(auth="none"|"keys", accounts={name: "USD"}, extra_args=[...])`."""
    started: list[Gateway] = []

    def _start(auth: str = "none", accounts: Optional[dict[str, str]] = None,
               extra_args: Optional[list[str]] = None) -> Gateway:
        n = len(started)
        root = tmp_path / f"gw{n}"
        mdir = root / "manifests"
        mdir.mkdir(parents=True)
        (mdir / "sluice.yaml").write_text(manifests(chaos["primary"].url, chaos["backup"].url))
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
        for p in list(_ALL_PROCS):
            if p.name.startswith("gateway") and p.popen.poll() is None:
                tail = "\n".join(p.log_text().splitlines()[-40:])
                item.add_report_section("call", f"{p.name} log", tail)
