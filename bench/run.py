#!/usr/bin/env python3
"""sluice's benchmark suite: one run, every system side by side, BENCHMARKS.md out.

Started by `bench/run` (which installs the tools and builds the release binary);
see bench/README.md for what is measured and how. Everything listens on 127.0.0.1
with ephemeral ports, every load step is bounded in time, and every process this
script starts is stopped at the end (its own process group, by id).
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# SLUICE_BENCH_BIN benches another build (e.g. a branch built elsewhere).
BIN = Path(os.environ.get("SLUICE_BENCH_BIN", ROOT / "target" / "release" / "sluice-gateway"))
OHA = shutil.which("oha") or str(Path.home() / ".cargo" / "bin" / "oha")
PG_ADMIN_URL = os.environ.get("SLUICE_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test")
PG_DB = "sluice_bench"

# The same small, non-streaming chat completion for every system.
MODEL = "bench-model"
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 16,
    },
    separators=(",", ":"),
)
P99_BOUND_MS = 5.0
PERCENTILES = ["p50", "p90", "p99", "p99.9"]
# Cores: the load generator (and this script) on one, the systems under test and the
# mock upstream share the other.
LOAD_CPU = "0"
SUT_CPU = "1"


@dataclass
class Mode:
    name: str
    rates: list[int]
    rounds: int
    duration: int
    ceiling_rates: list[int]
    ceiling_duration: int
    litellm_rates: list[int]
    litellm_duration: int
    warmup: int
    streams: int
    failovers: int
    retry_budget: float
    callgrind_requests: int


FULL = Mode(
    name="full",
    rates=[1000, 2000, 5000],
    rounds=3,
    duration=8,
    ceiling_rates=[7500, 10000, 15000, 20000],
    ceiling_duration=5,
    litellm_rates=[10, 25, 50, 100, 200, 500, 1000],
    litellm_duration=8,
    warmup=2,
    streams=60,
    failovers=40,
    retry_budget=150,
    callgrind_requests=2000,
)
QUICK = Mode(
    name="quick",
    rates=[1000, 5000],
    rounds=1,
    duration=4,
    ceiling_rates=[10000],
    ceiling_duration=3,
    litellm_rates=[25, 100, 500],
    litellm_duration=4,
    warmup=1,
    streams=16,
    failovers=12,
    retry_budget=30,
    callgrind_requests=500,
)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- processes


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK
        except OSError:
            pass
    return total


def rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def postgres_pids() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == "postgres":
                        out.append(int(d))
            except OSError:
                pass
    return out


class Service:
    """A process we started, in its own process group, logging to a file."""

    running: list["Service"] = []

    def __init__(self, name: str, cmd: list[str], workdir: Path, cpus: str | None = SUT_CPU, env: dict | None = None):
        self.name = name
        self.log_path = workdir / f"{name}.log"
        full = (["taskset", "-c", cpus] if cpus else []) + cmd
        self.cmd = full
        self.logf = open(self.log_path, "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(full, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=e, cwd=workdir)
        self.pid = self.proc.pid
        Service.running.append(self)

    def pids(self) -> list[int]:
        return tree(self.pid)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, pattern: str, timeout: float = 60) -> re.Match:
        end = time.time() + timeout
        rx = re.compile(pattern)
        while time.time() < end:
            m = rx.search(self.log_text())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not log /{pattern}/ (exit {self.proc.poll()}):\n{self.log_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(8)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        self.logf.close()
        if self in Service.running:
            Service.running.remove(self)

    @classmethod
    def stop_all(cls) -> None:
        for s in list(reversed(cls.running)):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - best effort at shutdown
                log(f"stopping {s.name}: {e}")


def wait_http(port: int, path: str, timeout: float = 90, method: str = "GET") -> None:
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request(method, path)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status < 500:
                return
            last = r.status
        except OSError as e:
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"127.0.0.1:{port}{path} not ready: {last}")


def post_json(port: int, path: str, obj, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, json.dumps(obj), h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def chaos(port: int, script: dict) -> None:
    status, _, body = post_json(port, "/_chaos", script)
    if status >= 300:
        raise RuntimeError(f"chaos script refused: {status} {body[:200]!r}")


def start_mock(name: str, workdir: Path) -> tuple[Service, int]:
    s = Service(name, [str(BIN), "chaos", "--listen", "127.0.0.1:0"], workdir, env={"RUST_LOG": "warn"})
    m = s.wait_log(r"listening on http://127\.0\.0\.1:(\d+)")
    return s, int(m.group(1))


def start_sluice(name: str, workdir: Path, manifests: Path, ledger: str, auth: str, extra: list[str] | None = None) -> tuple[Service, int]:
    cmd = [str(BIN), "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0", "--ledger", ledger, "--auth", auth]
    s = Service(name, cmd + (extra or []), workdir, env={"NO_COLOR": "1"})
    m = s.wait_log(r"listening on http://127\.0\.0\.1:(\d+)")
    port = int(m.group(1))
    wait_http(port, "/readyz")
    return s, port


def admin(ledger: str, *args: str) -> str:
    out = subprocess.run([str(BIN), "admin", "--ledger", ledger, *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"admin {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


def billing_key(ledger: str) -> str:
    admin(ledger, "account", "create", "bench", "--balance", "1000000")
    return admin(ledger, "key", "create", "bench").splitlines()[-1].strip()


# ---------------------------------------------------------------- load


@dataclass
class System:
    key: str
    label: str
    port: int
    path: str = "/v1/chat/completions"
    headers: dict = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    ledger_cpu: bool = False

    def pids(self) -> list[int]:
        out = []
        for s in self.services:
            out.extend(s.pids())
        return out


def total_busy_seconds() -> float:
    """Busy CPU time of the whole machine (all cores), steal included."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLK


def ours_seconds() -> float:
    """CPU time of this script and of every process it started."""
    t = os.times()
    pids = [p for s in Service.running for p in s.pids()]
    return t.user + t.system + cpu_seconds(pids)


# A run during which other work on the machine used more than this much CPU (in % of
# one core) is repeated, up to MAX_RETRIES times; the least disturbed try is kept.
FOREIGN_LIMIT_PCT = 25.0
MAX_RETRIES = 2
# Repeats stop when they have cost this many seconds in the whole run (set per mode).
RETRY_BUDGET = {"left": 150.0}


def check_alive() -> None:
    """Every process this run started must still be up: a run against a dead mock or
    gateway would be recorded as that system's failure."""
    for s in Service.running:
        code = s.proc.poll()
        if code is not None:
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            raise RuntimeError(f"{s.name} (pid {s.pid}) is gone, {how}; something outside the benchmark may have "
                               f"killed it. Last log lines:\n{s.log_text()[-1500:]}")


def run_oha(system: System, rate: int, duration: int, workdir: Path, conns: int = 64, retry: bool = True) -> dict:
    check_alive()
    best = None
    tries = 1 + (MAX_RETRIES if retry else 0)
    for attempt in range(tries):
        r = run_oha_once(system, rate, duration, workdir, conns)
        r["tries"] = attempt + 1
        if best is None or r["foreign_cpu_pct"] < best["foreign_cpu_pct"]:
            best = r
        if r["foreign_cpu_pct"] <= FOREIGN_LIMIT_PCT or attempt + 1 == tries or RETRY_BUDGET["left"] < duration:
            break
        RETRY_BUDGET["left"] -= duration
        log(f"  {system.key} @{rate}/s: other work used {r['foreign_cpu_pct']:.0f}% of a core meanwhile; repeating")
    best["tries"] = attempt + 1
    check_alive()
    return best


def run_oha_once(system: System, rate: int, duration: int, workdir: Path, conns: int = 64) -> dict:
    url = f"http://127.0.0.1:{system.port}{system.path}"
    cmd = ["taskset", "-c", LOAD_CPU, OHA, "-z", f"{duration}s", "-q", str(rate), "--latency-correction",
           "--no-tui", "--output-format", "json", "--worker-threads", "1", "-c", str(conns), "-t", "10s",
           "-m", "POST", "-H", "content-type: application/json", "-d", BODY]
    for k, v in system.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(url)
    out_path = workdir / "oha.json"
    pids = system.pids()
    pg = postgres_pids() if system.ledger_cpu else []
    peak = [rss_mb(pids)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            peak.append(rss_mb(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    load1 = os.getloadavg()[0]
    cpu0, pg0, t0 = cpu_seconds(pids), cpu_seconds(pg), time.time()
    busy0, ours0 = total_busy_seconds(), ours_seconds()
    sampler.start()
    with open(out_path, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            _, status, usage = os.wait4(p.pid, 0)
        except BaseException:
            p.kill()
            raise
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    cpu1, pg1 = cpu_seconds(pids), cpu_seconds(pg)
    busy1, ours1 = total_busy_seconds(), ours_seconds()
    oha_cpu = usage.ru_utime + usage.ru_stime
    # Postgres serves the Postgres billing run: it is part of that system, not foreign.
    foreign = (busy1 - busy0) - (ours1 - ours0) - oha_cpu - (pg1 - pg0)
    stop.set()
    sampler.join()
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise RuntimeError(f"oha failed ({p.returncode}): {err[-2000:]}")
    raw = json.loads(out_path.read_text())
    codes = {str(k): int(v) for k, v in (raw.get("statusCodeDistribution") or {}).items()}
    errors = {str(k): int(v) for k, v in (raw.get("errorDistribution") or {}).items()}
    aborted = sum(v for k, v in errors.items() if "deadline" in k)
    other_errors = sum(v for k, v in errors.items() if "deadline" not in k)
    ok = sum(v for k, v in codes.items() if k.startswith("2"))
    answered = sum(codes.values())
    non2xx = answered - ok
    sent = answered + other_errors
    pct = raw.get("latencyPercentiles") or {}
    res = {
        "system": system.key,
        "rate": rate,
        "duration": duration,
        "ok": ok,
        "non2xx": non2xx,
        "errors": other_errors,
        "aborted_at_deadline": aborted,
        "success": ok / sent if sent else 0.0,
        "achieved_rps": answered / duration,
        "lat_ms": {p: (pct.get(p) * 1000 if pct.get(p) is not None else None) for p in PERCENTILES},
        "mean_ms": (raw.get("summary", {}).get("average") or 0) * 1000,
        "cpu_pct": 100 * (cpu1 - cpu0) / wall,
        "rss_mb": max(peak),
        "ledger_cpu_pct": 100 * (pg1 - pg0) / wall if system.ledger_cpu else None,
        "oha_cpu_pct": 100 * oha_cpu / wall,
        "foreign_cpu_pct": max(0.0, 100 * foreign / wall),
        "load1": load1,
        "codes": codes,
        "error_kinds": errors,
    }
    res["sustained"] = sustained(res)
    return res


def sustained(r: dict) -> bool:
    p99 = r["lat_ms"].get("p99")
    # A handful of requests cut by oha's deadline at the end of a run are an artefact;
    # a pile of them means the system fell behind.
    backlog = r["aborted_at_deadline"] > max(20, 0.01 * r["rate"] * r["duration"])
    return (p99 is not None and p99 < P99_BOUND_MS and r["non2xx"] == 0 and r["errors"] == 0 and not backlog
            and r["achieved_rps"] >= 0.95 * r["rate"])


def describe(r: dict) -> str:
    l = r["lat_ms"]
    fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
    return (f"{r['system']:>14} @{r['rate']:>6}/s p50 {fmt(l['p50'])} p99 {fmt(l['p99'])} p99.9 {fmt(l['p99.9'])} ms "
            f"ok {r['success']*100:.2f}% rps {r['achieved_rps']:.0f} cpu {r['cpu_pct']:.0f}% rss {r['rss_mb']:.0f}MB "
            f"oha-cpu {r['oha_cpu_pct']:.0f}% other {r['foreign_cpu_pct']:.0f}%{' SUSTAINED' if r['sustained'] else ''}")


# ---------------------------------------------------------------- streaming and failover clients


def stream_once(port: int, path: str, body: dict, headers: dict | None = None, timeout: float = 30) -> dict:
    """One SSE request; times the first content event and the gaps between them."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json", "accept": "text/event-stream"}
    h.update(headers or {})
    data = json.dumps(body)
    t0 = time.perf_counter()
    c.request("POST", path, data, h)
    r = c.getresponse()
    times, done, error = [], False, None
    if r.status != 200:
        r.read()
        c.close()
        return {"status": r.status, "ttfb_ms": None, "gaps_ms": [], "events": 0, "done": False, "headers": dict(r.getheaders())}
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        now = time.perf_counter()
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        if "error" in ev:
            error = ev["error"]
            continue
        choices = ev.get("choices") or []
        content = choices and ((choices[0].get("delta") or {}).get("content") or choices[0].get("text"))
        if content:
            times.append(now)
    c.close()
    gaps = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    return {"status": 200, "ttfb_ms": (times[0] - t0) * 1000 if times else None, "gaps_ms": gaps, "events": len(times),
            "done": done, "error": error, "headers": dict(r.getheaders())}


class Client:
    """Sequential keep-alive requests, timed from send to the last byte."""

    def __init__(self, port: int, headers: dict | None = None):
        self.port = port
        self.headers = {"content-type": "application/json", **(headers or {})}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, path: str, body: str) -> tuple[int, float, dict]:
        for attempt in range(2):
            try:
                t0 = time.perf_counter()
                self.conn.request("POST", path, body, self.headers)
                r = self.conn.getresponse()
                r.read()
                return r.status, (time.perf_counter() - t0) * 1000, dict(r.getheaders())
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def failover_series(port: int, model: str, n: int, stream: bool, pace_s: float = 0.05) -> dict:
    """n sequential requests at about 1/pace_s per second; latency (or TTFB for streams)."""
    lat, statuses, failed_over, known = [], [], 0, False
    client = Client(port)
    body = json.loads(BODY)
    body["model"] = model
    if stream:
        body["stream"] = True
        body["max_tokens"] = 8
    raw = json.dumps(body)
    if model == "fo-base":
        # warm the gateway's connection pool to the backup, untimed
        for _ in range(3):
            stream_once(port, "/v1/chat/completions", body) if stream else client.post("/v1/chat/completions", raw)
    for _ in range(n):
        t = time.perf_counter()
        if stream:
            r = stream_once(port, "/v1/chat/completions", body)
            statuses.append(r["status"])
            ok = r["status"] == 200 and r["done"] and r["ttfb_ms"] is not None
            if ok:
                lat.append(r["ttfb_ms"])
            hdr = {k.lower(): v for k, v in r["headers"].items()}
        else:
            status, ms, hdr = client.post("/v1/chat/completions", raw)
            hdr = {k.lower(): v for k, v in hdr.items()}
            statuses.append(status)
            if status == 200:
                lat.append(ms)
        if "x-sluice-attempts" in hdr or "x-litellm-attempted-fallbacks" in hdr:
            known = True
        if hdr.get("x-sluice-attempts", "1") not in ("1", "") or hdr.get("x-litellm-attempted-fallbacks", "0") not in ("0", ""):
            failed_over += 1
        rest = pace_s - (time.perf_counter() - t)
        if rest > 0:
            time.sleep(rest)
    client.close()
    return {
        "n": n,
        "ok": sum(1 for s in statuses if s == 200),
        "failed_over": failed_over if known else None,
        "p50": pct(lat, 50),
        "p90": pct(lat, 90),
        "mean": statistics.fmean(lat) if lat else None,
        "statuses": sorted(set(statuses)),
    }


# ---------------------------------------------------------------- configs


def sluice_manifests(mock_port: int) -> str:
    return f"""# The benchmark route: one zero-delay chaos upstream, priced so billing runs reserve
# and settle on every request.
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata:
  name: mock
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:{mock_port}/v1
  timeouts:
    connect: 2s
    firstByte: 5s
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench
spec:
  model: {MODEL}
  deadline: 30s
  candidates:
  - upstream: mock
    model: {MODEL}
    price: {{input: "1.00", output: "2.00"}}
"""


def failover_manifests(backup: int, down: int, err503: int, hang: int) -> str:
    ups = {"fo-backup": backup, "fo-down": down, "fo-503": err503, "fo-hang": hang}
    docs = []
    for name, port in ups.items():
        docs.append(f"""apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata:
  name: {name}
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:{port}/v1
  timeouts:
    connect: 2s
    firstByte: 50ms
""")
    routes = {"fo-base": ["fo-backup"], "fo-refuse": ["fo-down", "fo-backup"], "fo-503": ["fo-503", "fo-backup"],
              "fo-hang": ["fo-hang", "fo-backup"]}
    for model, cands in routes.items():
        lines = "\n".join(f"  - upstream: {c}\n    model: {MODEL}" for c in cands)
        docs.append(f"""apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: {model}
spec:
  model: {model}
  deadline: 10s
  candidates:
{lines}
""")
    return "# Failover routes: a failing primary, then a healthy zero-delay backup.\n" + "---\n".join(docs)


def nginx_conf(workdir: Path, listen: int, mock_port: int) -> str:
    return f"""# A plain reverse proxy: proxy_pass to the mock, upstream keep-alive (as any
# production nginx in front of an HTTP API), no caching, no access log.
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/nginx-tmp/body;
    proxy_temp_path {workdir}/nginx-tmp/proxy;
    fastcgi_temp_path {workdir}/nginx-tmp/fastcgi;
    uwsgi_temp_path {workdir}/nginx-tmp/uwsgi;
    scgi_temp_path {workdir}/nginx-tmp/scgi;
    upstream mock {{
        server 127.0.0.1:{mock_port};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def litellm_conf(mock: int, backup: int, down: int, err503: int, hang: int) -> str:
    def dep(name: str, port: int, extra: str = "") -> str:
        return f"""  - model_name: {name}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{port}/v1
      api_key: sk-bench{extra}
"""
    return ("# LiteLLM proxy: the benchmark model on the mock, and failover groups whose\n"
            "# primary fails and falls back to a healthy zero-delay backup.\n"
            "model_list:\n"
            + dep(MODEL, mock)
            + dep("fo-base", backup)
            + dep("fo-refuse", down)
            + dep("fo-503", err503)
            + dep("fo-hang", hang, "\n      stream_timeout: 0.05\n      timeout: 0.05")
            + """litellm_settings:
  num_retries: 0
  request_timeout: 30
  telemetry: false
router_settings:
  num_retries: 0
  # Every request tries the primary first, as sluice's forced-failover run does.
  disable_cooldowns: true
  fallbacks:
    - {"fo-refuse": ["fo-base"]}
    - {"fo-503": ["fo-base"]}
    - {"fo-hang": ["fo-base"]}
""")


# ---------------------------------------------------------------- phases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="short durations, fewer rates (for iteration)")
    ap.add_argument("--out", type=Path, help="where BENCHMARKS.md goes (default: repo root; quick: target/bench/quick)")
    ap.add_argument("--no-litellm", action="store_true", help="skip LiteLLM")
    ap.add_argument("--no-postgres", action="store_true", help="skip the Postgres billing run")
    ap.add_argument("--no-callgrind", action="store_true", help="skip counting instructions per request under valgrind")
    ap.add_argument("--render", type=Path, help="only render BENCHMARKS.md from a results.json")
    args = ap.parse_args()

    if args.render:
        import report  # noqa: PLC0415
        results = json.loads(args.render.read_text())
        if "log_findings" not in results and Path(results.get("workdir", "/nonexistent")).is_dir():
            results["log_findings"] = scan_logs(Path(results["workdir"]))
            args.render.write_text(json.dumps(results, indent=1))
        default = ROOT if args.render.resolve().parent == (ROOT / "bench" / "results").resolve() else args.render.parent
        out = args.out or default
        report.render(results, out)
        return 0

    mode = QUICK if args.quick else FULL
    RETRY_BUDGET["left"] = mode.retry_budget
    out_dir = args.out or (ROOT / "target" / "bench" / "quick" if args.quick else ROOT)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = ROOT / "target" / "bench" / f"run-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    # This script and the load generator share one core; the systems the other.
    os.sched_setaffinity(0, {int(LOAD_CPU)})

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    started = time.time()
    results: dict = {"mode": mode.__dict__, "foreign_limit_pct": FOREIGN_LIMIT_PCT, "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "load_start": os.getloadavg(), "workdir": str(work)}
    pg_created = False
    try:
        results["machine"] = machine()
        results["versions"] = versions()
        # ---- upstream mocks
        mock, mock_port = start_mock("mock", work)
        backup, backup_port = start_mock("mock-backup", work)
        m503, m503_port = start_mock("mock-503", work)
        mhang, mhang_port = start_mock("mock-hang", work)
        chaos(m503_port, {"status": 503})
        chaos(mhang_port, {"hang": True})
        down_port = free_port()  # nothing listens: connection refused

        # ---- systems
        man = work / "sluice.yaml"
        man.write_text(sluice_manifests(mock_port))
        results["configs"] = {"sluice.yaml": man.read_text()}
        systems = [System("direct", "direct (mock)", mock_port, services=[mock])]
        s_off, p_off = start_sluice("sluice-off", work, man, f"sqlite://{work}/off.db", "none")
        systems.append(System("sluice", "sluice, billing off", p_off, services=[s_off]))
        led = f"sqlite://{work}/billing.db"
        key = billing_key(led)
        s_sq, p_sq = start_sluice("sluice-sqlite", work, man, led, "keys")
        systems.append(System("sluice-sqlite", "sluice, billing on SQLite", p_sq, headers={"authorization": f"Bearer {key}"},
                              services=[s_sq]))
        if not args.no_postgres:
            try:
                pg_url = create_pg_db()
                pg_created = True
                key_pg = billing_key(pg_url)
                s_pg, p_pg = start_sluice("sluice-pg", work, man, pg_url, "keys")
                systems.append(System("sluice-pg", "sluice, billing on Postgres", p_pg,
                                      headers={"authorization": f"Bearer {key_pg}"}, services=[s_pg], ledger_cpu=True))
            except Exception as e:  # noqa: BLE001 - the rest of the run is still worth having
                log(f"Postgres billing skipped: {e}")
                results["postgres_skipped"] = str(e)
        nginx_port = free_port()
        (work / "nginx-tmp").mkdir(exist_ok=True)
        conf = work / "nginx.conf"
        conf.write_text(nginx_conf(work, nginx_port, mock_port))
        results["configs"]["nginx.conf"] = conf.read_text()
        ngx = Service("nginx", [shutil.which("nginx") or "/usr/sbin/nginx", "-e", str(work / "nginx-error.log"), "-p", str(work),
                                "-c", str(conf), "-g", "daemon off;"], work)
        wait_http(nginx_port, "/v1/models")
        systems.append(System("nginx", "nginx (proxy_pass)", nginx_port, services=[ngx]))
        results["systems"] = {s.key: s.label for s in systems}

        # sanity: every system answers the body with 200 before any timing
        for s in systems:
            status, _, body = post_json(s.port, s.path, json.loads(BODY), s.headers)
            if status != 200:
                raise RuntimeError(f"{s.key} answered {status}: {body[:300]!r}")

        # ---- warm-up, then the rate matrix, systems alternated and rotated per round
        log(f"mode {mode.name}: {len(systems)} systems, rates {mode.rates}, {mode.rounds} round(s) of {mode.duration}s")
        for s in systems:
            run_oha(s, 1000, mode.warmup, work, retry=False)
        runs: list[dict] = []
        results["runs"] = runs
        for rate in mode.rates:
            for rnd in range(mode.rounds):
                order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
                for s in order:
                    time.sleep(0.5)  # let the previous system's tail drain
                    r = run_oha(s, rate, mode.duration, work)
                    r["round"] = rnd
                    runs.append(r)
                    log(describe(r))

        # ---- ceiling: keep raising the rate for systems that sustained every rate so far
        ceiling_runs: list[dict] = []
        results["ceiling_runs"] = ceiling_runs
        import report  # noqa: PLC0415 - same folder

        alive = [s for s in systems
                 if all(report.combine(report.by(runs, s.key, rate))["sustained"] for rate in mode.rates)]
        for rate in mode.ceiling_rates:
            if not alive:
                break
            for s in list(alive):
                r = run_oha(s, rate, mode.ceiling_duration, work)
                ceiling_runs.append(r)
                log("ceiling " + describe(r))
                if not r["sustained"]:
                    alive.remove(s)

        # ---- streaming: TTFB and inter-chunk gaps, direct vs through sluice
        results["streaming"] = streaming_phase(mock_port, p_off, mode.streams)
        if not args.no_callgrind:
            results["callgrind"] = callgrind_phase(work, mock_port, man, mode.callgrind_requests)

        # ---- failover cost for sluice (forced: every request tries the failing primary;
        # learned: default health window, the primary is demoted after its first failure)
        fman = work / "failover.yaml"
        fman.write_text(failover_manifests(backup_port, down_port, m503_port, mhang_port))
        results["configs"]["failover.yaml"] = fman.read_text()
        fo: dict = {}
        s_forced, p_forced = start_sluice("sluice-failover-forced", work, fman, f"sqlite://{work}/fo1.db", "none",
                                          ["--health-window", "1ms"])
        fo["sluice (every request fails over)"] = failover_phase(p_forced, mode.failovers)
        s_forced.stop()
        s_learn, p_learn = start_sluice("sluice-failover-learned", work, fman, f"sqlite://{work}/fo2.db", "none")
        fo["sluice (default health window)"] = failover_phase(p_learn, mode.failovers)
        s_learn.stop()
        results["failover"] = fo

        # ---- LiteLLM: its own rate ladder (with direct at the same rates), then failover
        if not args.no_litellm:
            try:
                litellm_phase(results, mode, work, systems[0], mock_port, backup_port, down_port, m503_port, mhang_port)
            except Exception as e:  # noqa: BLE001
                log(f"LiteLLM phase failed: {e}")
                results["litellm_error"] = str(e)
    except KeyboardInterrupt:
        log("interrupted; stopping everything")
        Service.stop_all()
        return 130
    except Exception:
        (work / "partial-results.json").write_text(json.dumps(results, indent=1, default=str))
        log(f"failed; partial results in {work / 'partial-results.json'}, logs in {work}")
        raise
    finally:
        Service.stop_all()
        if pg_created:
            drop_pg_db()
    results["log_findings"] = scan_logs(work)
    results["load_end"] = os.getloadavg()
    results["elapsed_s"] = time.time() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    import report  # noqa: PLC0415

    json_path = report.results_dir(out_dir) / "results.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1))
    md = report.render(results, out_dir)
    log(f"done in {results['elapsed_s']:.0f}s: {md} (raw: {json_path}, logs: {work})")
    return 0


def callgrind_phase(work: Path, mock_port: int, manifests: Path, n: int) -> dict:
    """User-space instructions per request under callgrind: deterministic, so it holds
    even when the shared machine is busy. n sequential requests after a warm-up."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return {"error": "valgrind is not installed"}
    out: dict = {"n": n}

    def drive(port: int, count: int) -> None:
        subprocess.run([OHA, "-n", str(count), "-c", "1", "--no-tui", "--output-format", "json", "-m", "POST",
                        "-H", "content-type: application/json", "-d", BODY, f"http://127.0.0.1:{port}/v1/chat/completions"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)

    for name in ("sluice", "nginx"):
        dump = work / f"callgrind-{name}.out"
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}"]
        if name == "nginx":
            port = free_port()
            conf = work / "nginx-callgrind.conf"
            conf.write_text(nginx_conf(work, port, mock_port))
            svc = Service("callgrind-nginx", vg + [shutil.which("nginx") or "/usr/sbin/nginx", "-e", str(work / "nginx-error.log"),
                                                   "-p", str(work), "-c", str(conf), "-g", "daemon off; master_process off;"], work)
            wait_http(port, "/v1/models", timeout=180)
        else:
            svc = Service("callgrind-sluice", vg + [str(BIN), "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0",
                                                    "--ledger", f"sqlite://{work}/callgrind.db", "--auth", "none"], work,
                          env={"NO_COLOR": "1"})
            port = int(svc.wait_log(r"listening on http://127\.0\.0\.1:(\d+)", timeout=180).group(1))
        try:
            drive(port, 300)
            subprocess.run(["callgrind_control", "-z", str(svc.pid)], capture_output=True, timeout=60)
            drive(port, n)
            subprocess.run(["callgrind_control", "-d", str(svc.pid)], capture_output=True, timeout=60)
            parts = sorted(work.glob(f"callgrind-{name}.out.*"))
            total = 0
            for line in parts[-1].read_text(errors="replace").splitlines() if parts else []:
                if line.startswith(("totals:", "summary:")):
                    total = int(line.split()[1])
            out[name] = total / n if total else None
        finally:
            svc.stop()
    log(f"callgrind: {out}")
    return out


def streaming_phase(mock_port: int, sluice_port: int, n: int) -> dict:
    body = json.loads(BODY)
    body.update({"stream": True, "max_tokens": 64})
    out: dict = {"n": n, "zero_delay": {}}
    # 1. an instant stream: what the gateway itself adds before the first event
    chaos(mock_port, {"chunks": 5})
    try:
        for _ in range(2):
            for key, port in (("direct", mock_port), ("sluice", sluice_port)):
                rs = [stream_once(port, "/v1/chat/completions", body) for _ in range(max(1, n // 2))]
                out["zero_delay"].setdefault(key, []).extend(r["ttfb_ms"] for r in rs if r["ttfb_ms"] is not None)
        out["zero_delay"] = {k: {"n": len(v), "ttfb_p50": pct(v, 50), "ttfb_p99": pct(v, 99)} for k, v in out["zero_delay"].items()}
    finally:
        chaos(mock_port, {})
    # 2. a paced stream: is the cadence kept?
    script = {"first_byte_ms": 20, "chunks": 20, "chunk_ms": 10}
    out["script"] = script
    chaos(mock_port, script)
    try:
        per = {"direct": [], "sluice": []}
        with ThreadPoolExecutor(4) as pool:
            # alternate small batches so both see the same machine state
            for _ in range(max(1, n // 4)):
                for key, port in (("direct", mock_port), ("sluice", sluice_port)):
                    per[key] += list(pool.map(lambda _i, p=port: stream_once(p, "/v1/chat/completions", body), range(4)))
        for key, rs in per.items():
            good = [r for r in rs if r["status"] == 200 and r["done"] and r["events"] == script["chunks"]]
            ttfb = [r["ttfb_ms"] for r in good]
            gaps = [g for r in good for g in r["gaps_ms"]]
            dev = [abs(g - script["chunk_ms"]) for g in gaps]
            out[key] = {
                "streams": len(rs),
                "complete": len(good),
                "ttfb_p50": pct(ttfb, 50), "ttfb_p99": pct(ttfb, 99),
                "gap_mean": statistics.fmean(gaps) if gaps else None,
                "gap_p50": pct(gaps, 50), "gap_p99": pct(gaps, 99),
                "gap_min": min(gaps) if gaps else None, "gap_max": max(gaps) if gaps else None,
                "gap_dev_p50": pct(dev, 50), "gap_dev_p99": pct(dev, 99),
            }
        log(f"streaming: {out}")
    finally:
        chaos(mock_port, {})
    return out


FAILOVER_CASES = [
    ("baseline (healthy primary)", "fo-base", False),
    ("primary refuses connections", "fo-refuse", False),
    ("primary answers 503", "fo-503", False),
    ("baseline, streaming TTFB", "fo-base", True),
    ("primary hangs (watchdog, streaming TTFB)", "fo-hang", True),
]


def failover_phase(port: int, n: int) -> dict:
    out = {}
    for label, model, stream in FAILOVER_CASES:
        out[label] = failover_series(port, model, n, stream)
        out[label]["model"] = model
        out[label]["stream"] = stream
        log(f"failover {port} {label}: {out[label]}")
    return out


def litellm_phase(results: dict, mode: Mode, work: Path, direct: System, mock: int, backup: int, down: int, e503: int,
                  hang: int) -> None:
    conf = work / "litellm.yaml"
    conf.write_text(litellm_conf(mock, backup, down, e503, hang))
    results["configs"]["litellm.yaml"] = conf.read_text()
    port = free_port()
    exe = Path(sys.executable).parent / "litellm"
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "DISABLE_ADMIN_UI": "True",
           "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "NO_DOCS": "True", "TOKENIZERS_PARALLELISM": "false"}
    svc = Service("litellm", [str(exe), "--config", str(conf), "--host", "127.0.0.1", "--port", str(port),
                              "--num_workers", "1"], work, env=env)
    wait_http(port, "/health/liveliness", timeout=180)
    system = System("litellm", "LiteLLM proxy", port, services=[svc])
    status, _, body = post_json(port, "/v1/chat/completions", json.loads(BODY))
    if status != 200:
        raise RuntimeError(f"LiteLLM answered {status}: {body[:300]!r}")
    run_oha(system, 10, mode.warmup + 2, work, retry=False)
    ladder = []
    for rate in mode.litellm_rates:
        d = run_oha(direct, rate, mode.litellm_duration, work)
        r = run_oha(system, rate, mode.litellm_duration, work)
        ladder += [d, r]
        log("litellm " + describe(d))
        log("litellm " + describe(r))
        if not r["sustained"] and (r["success"] < 0.99 or r["lat_ms"]["p99"] is None or r["lat_ms"]["p99"] > 1000):
            break  # overloaded: higher rates only pile up more of the same
    results["litellm_runs"] = ladder
    # let a backlog drain before timing failovers
    end = time.time() + 60
    while time.time() < end:
        t = time.time()
        st, _, _ = post_json(port, "/v1/chat/completions", json.loads(BODY), timeout=60)
        if st == 200 and time.time() - t < 0.5:
            break
    results.setdefault("failover", {})["LiteLLM (cooldowns off: every request fails over)"] = failover_phase(port, mode.failovers)
    svc.stop()


# ---------------------------------------------------------------- gateway logs


LOG_LINE = re.compile(r"\b(WARN|ERROR)\s+(\S+?):\s+(.*?)(?=\s+[a-z_]+=|$)")


def scan_logs(work: Path) -> dict:
    """Warnings and errors the gateways logged during the run, counted by message, so
    that a gateway failing in the background (a wedged ledger, say) shows in the report."""
    out: dict = {}
    for path in sorted(work.glob("sluice-*.log")):
        counts: dict = {}
        first: dict = {}
        for line in path.read_text(errors="replace").splitlines():
            m = LOG_LINE.search(line)
            if not m:
                continue
            level, target, message = m.group(1), m.group(2), m.group(3).strip()
            err = re.search(r"error=(.*)$", line)
            if err:
                message = f"{message}: {err.group(1)[:160]}"
            key = f"{level} {target}: {message}"
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, line[:27])
        if counts:
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
            out[path.stem] = [{"message": k, "count": v, "first": first[k]} for k, v in top]
    return out


# ---------------------------------------------------------------- postgres, machine, versions


def psql(sql: str) -> str:
    out = subprocess.run(["psql", PG_ADMIN_URL, "-v", "ON_ERROR_STOP=1", "-Atc", sql], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return out.stdout.strip()


def create_pg_db() -> str:
    psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {PG_DB}")
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    # The ledger negotiates TLS when the server offers it (sslmode=prefer); on loopback
    # that measures the cipher, not the ledger, so it is turned off here.
    return f"{base}/{PG_DB}?sslmode=disable"


def drop_pg_db() -> None:
    try:
        psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    except Exception as e:  # noqa: BLE001
        log(f"could not drop {PG_DB}: {e}")


def cmd_out(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (p.stdout or p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"


def machine() -> dict:
    model = ""
    for line in cmd_out(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {"cpu": model, "cores": os.cpu_count(), "memory": mem, "kernel": platform.release(),
            "os": cmd_out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"])}


def versions() -> dict:
    rev = cmd_out(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = cmd_out(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    try:
        from importlib.metadata import version  # noqa: PLC0415
        litellm = version("litellm")
    except Exception:  # noqa: BLE001
        litellm = "not installed"
    pg = ""
    try:
        pg = psql("SHOW server_version")
    except Exception as e:  # noqa: BLE001
        pg = f"unavailable ({e})"
    return {
        "sluice": f"{cmd_out([str(BIN), '--version'])} @ {rev}{' (uncommitted changes)' if dirty else ''}",
        "rustc": cmd_out(["rustc", "--version"]),
        "oha": cmd_out([OHA, "--version"]),
        "nginx": cmd_out(["nginx", "-v"]),
        "litellm": litellm,
        "python": platform.python_version(),
        "postgres": pg,
    }


if __name__ == "__main__":
    sys.exit(main())
