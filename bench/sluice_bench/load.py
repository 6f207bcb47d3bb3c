"""Load generation: open-loop oha runs against one system, with the CPU, RSS and
"other work" accounting that decides whether a disturbed run is repeated."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .procs import CLK, Service, cpu_seconds, postgres_pids, rss_mb
from .settings import BODY, LOAD_CPU, OHA, P99_BOUND_MS, PERCENTILES, log
from .systems import lease_takes


@dataclass
class System:
    key: str
    label: str
    port: int
    path: str = "/v1/chat/completions"
    headers: dict = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    # The request body; None sends the common BODY.
    body: str | None = None
    ledger_cpu: bool = False
    # More ports serving the same thing (another gateway process): the load is split
    # evenly, one oha process per port at its share of the rate (oha targets one URL).
    more_ports: list[int] = field(default_factory=list)
    # The key carries limits (docs/design.md §5b): each run counts the gateway's lease
    # takes (ledger transactions) per 1,000 requests.
    limited: bool = False
    # The `x-sluice-cache` its answers must carry (`hit`, `miss`), checked before timing
    # (docs/design.md §13); None: not a cache run.
    cache: str | None = None
    # The `type` its JSON answer must have (`message` for a Messages passthrough), checked
    # before timing; None: not checked.
    answer_type: str | None = None

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
# A limit meter unused for 2 s stops renewing its lease (docs/design.md §5b), checked
# every 250 ms: a limited run's takes are read this long after it ends, so that a
# renewal its last requests caused is counted with it.
LEASE_IDLE_S = 2.5


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


def oha_cmd(system: System, port: int, rate: float, duration: int, conns: int) -> list[str]:
    cmd = ["taskset", "-c", LOAD_CPU, OHA, "-z", f"{duration}s", "-q", f"{rate:g}", "--latency-correction",
           "--no-tui", "--output-format", "json", "--worker-threads", "1", "-c", str(conns), "-t", "10s",
           "-m", "POST", "-H", "content-type: application/json", "-d", system.body or BODY]
    for k, v in system.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(f"http://127.0.0.1:{port}{system.path}")
    return cmd


def merge_oha(raws: list[dict]) -> dict:
    """One oha result out of several run side by side: counts added up, each percentile
    the largest of the parts (an upper bound of the pooled percentile), the mean weighted
    by requests."""
    if len(raws) == 1:
        return raws[0]
    out: dict = {"statusCodeDistribution": {}, "errorDistribution": {}, "latencyPercentiles": {}, "summary": {}}
    for raw in raws:
        for part in ("statusCodeDistribution", "errorDistribution"):
            for k, v in (raw.get(part) or {}).items():
                out[part][str(k)] = out[part].get(str(k), 0) + int(v)
    for p in PERCENTILES:
        vals = [(raw.get("latencyPercentiles") or {}).get(p) for raw in raws]
        out["latencyPercentiles"][p] = max(vals) if all(v is not None for v in vals) else None
    n = [sum((raw.get("statusCodeDistribution") or {}).values()) for raw in raws]
    avg = [(raw.get("summary") or {}).get("average") or 0 for raw in raws]
    out["summary"]["average"] = sum(a * k for a, k in zip(avg, n)) / sum(n) if sum(n) else 0
    return out


def run_together(cmds: list[list[str]], out_paths: list[Path]) -> tuple[list[subprocess.Popen], float]:
    """Starts the oha commands together, each writing to its path, and waits for all:
    the processes (ended) and the CPU time they used; all are killed if one wait fails."""
    outs = [open(path, "wb") for path in out_paths]
    procs: list[subprocess.Popen] = []
    oha_cpu = 0.0
    try:
        for cmd, out in zip(cmds, outs):
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
        for p in procs:
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            oha_cpu += usage.ru_utime + usage.ru_stime
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finally:
        for out in outs:
            out.close()
    return procs, oha_cpu


def check_exits(procs: list[subprocess.Popen]) -> None:
    """Raises with its last error lines if an oha process failed."""
    for p in procs:
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        if p.returncode != 0:
            raise RuntimeError(f"oha failed ({p.returncode}): {err[-2000:]}")


def run_oha_once(system: System, rate: int, duration: int, workdir: Path, conns: int = 64) -> dict:
    ports = [system.port] + system.more_ports
    cmds = [oha_cmd(system, port, rate / len(ports), duration, max(1, conns // len(ports))) for port in ports]
    pids = system.pids()
    pg = postgres_pids() if system.ledger_cpu else []
    peak = [rss_mb(pids)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            peak.append(rss_mb(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    load1 = os.getloadavg()[0]
    takes0 = lease_takes(system.port) if system.limited else None
    cpu0, pg0, t0 = cpu_seconds(pids), cpu_seconds(pg), time.time()
    busy0, ours0 = total_busy_seconds(), ours_seconds()
    sampler.start()
    out_paths = [workdir / f"oha-{i}.json" if i else workdir / "oha.json" for i in range(len(cmds))]
    procs, oha_cpu = run_together(cmds, out_paths)
    wall = time.time() - t0
    cpu1, pg1 = cpu_seconds(pids), cpu_seconds(pg)
    busy1, ours1 = total_busy_seconds(), ours_seconds()
    # Postgres serves the Postgres billing run: it is part of that system, not foreign.
    foreign = (busy1 - busy0) - (ours1 - ours0) - oha_cpu - (pg1 - pg0)
    stop.set()
    sampler.join()
    takes = None
    if takes0 is not None:
        time.sleep(LEASE_IDLE_S)
        takes = lease_takes(system.port) - takes0
    check_exits(procs)
    raw = merge_oha([json.loads(path.read_text()) for path in out_paths])
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
    if takes is not None:
        res["lease_takes"] = takes
        res["lease_takes_per_1k"] = 1000 * takes / sent if sent else None
    res["sustained"] = sustained(res)
    return res


#: The two halves of a run at once send at rates this much apart (a share of their
#: rate): two open-loop schedules at the same rate keep one phase for a whole run, so
#: one half's requests would always arrive just behind the other's; apart by 0.8 % at
#: 2.5k req/s, they slide past each other 20 times a second.
AT_ONCE_SKEW = 0.004


def run_at_once(a: System, b: System, rate: int, duration: int, workdir: Path, conns: int = 64,
                a_faster: bool = False) -> dict:
    """`a` and `b` loaded at the same time, each at about half of `rate` (see
    AT_ONCE_SKEW; `a_faster` says which half is the faster) on half of the connections,
    into the same gateway: both see the same queue, the same other work and the same
    moment, so the difference of their p50s is what `a`'s requests cost over `b`'s,
    where runs one after another differ by tens of µs between rounds. Returns each
    one's percentiles (ms), answers and achieved rate, and the other work's CPU during
    the run (a Postgres ledger's CPU is the systems', not other work)."""
    check_alive()
    parts = {"a": a, "b": b}
    skew = {"a": AT_ONCE_SKEW if a_faster else -AT_ONCE_SKEW, "b": -AT_ONCE_SKEW if a_faster else AT_ONCE_SKEW}
    cmds = [oha_cmd(s, s.port, rate / 2 * (1 + skew[k]), duration, max(1, conns // 2)) for k, s in parts.items()]
    paths = {k: workdir / f"oha-pair-{k}.json" for k in parts}
    pg = postgres_pids() if a.ledger_cpu or b.ledger_cpu else []
    pg0 = cpu_seconds(pg)
    busy0, ours0, t0 = total_busy_seconds(), ours_seconds(), time.time()
    procs, oha_cpu = run_together(cmds, list(paths.values()))
    wall = time.time() - t0
    foreign = (total_busy_seconds() - busy0) - (ours_seconds() - ours0) - oha_cpu - (cpu_seconds(pg) - pg0)
    check_exits(procs)
    out: dict = {"rate": rate, "duration": duration, "foreign_cpu_pct": max(0.0, 100 * foreign / wall)}
    for k in parts:
        raw = json.loads(paths[k].read_text())
        codes = {str(c): int(v) for c, v in (raw.get("statusCodeDistribution") or {}).items()}
        pct = raw.get("latencyPercentiles") or {}
        ok = sum(v for c, v in codes.items() if c.startswith("2"))
        sent = sum(codes.values()) + sum(int(v) for e, v in (raw.get("errorDistribution") or {}).items()
                                         if "deadline" not in e)
        out[k] = {"system": parts[k].key, "ok": ok, "sent": sent, "achieved_rps": sum(codes.values()) / duration,
                  "offered_rps": rate / 2 * (1 + skew[k]),
                  "lat_ms": {q: (pct.get(q) * 1000 if pct.get(q) is not None else None) for q in PERCENTILES}}
    check_alive()
    return out


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
    takes = f" lease takes {r['lease_takes']} ({fmt(r['lease_takes_per_1k'])}/1k req)" if "lease_takes" in r else ""
    return (f"{r['system']:>14} @{r['rate']:>6}/s p50 {fmt(l['p50'])} p99 {fmt(l['p99'])} p99.9 {fmt(l['p99.9'])} ms "
            f"ok {r['success']*100:.2f}% rps {r['achieved_rps']:.0f} cpu {r['cpu_pct']:.0f}% rss {r['rss_mb']:.0f}MB "
            f"oha-cpu {r['oha_cpu_pct']:.0f}% other {r['foreign_cpu_pct']:.0f}%{takes}{' SUSTAINED' if r['sustained'] else ''}")
