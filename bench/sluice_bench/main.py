"""sluice's benchmark suite: one run, every system side by side, BENCHMARKS.md out.

Started by `bench/run` (which installs the tools and builds the release binary) through
`bench/run.py`; see bench/README.md for what is measured and how. Everything listens
on 127.0.0.1 with ephemeral ports, every load step is bounded in time, and every
process this script starts is stopped at the end (its own process group, by id).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import time
from pathlib import Path

from . import report
from .host import machine, scan_logs, versions
from .load import FOREIGN_LIMIT_PCT, RETRY_BUDGET, System, describe, run_oha
from .phases import at_once_phase, callgrind_phase, failover_phase, litellm_phase, streaming_phase, tracing_phase
from .procs import Service
from .settings import (ANTHROPIC_BODY, ANTHROPIC_DIRECT_BODY, BODY, CACHE_BODY, CACHE_TWIN_BODY, FULL, LOAD_CPU,
                       MESSAGES_BODY, MESSAGES_HEADERS, MESSAGES_PATH, QUICK, ROOT, SCALING_CONNS, UNPRICED_BODY, free_port,
                       log)
from .stats import answered_in_full
from .targets import AT_ONCE_PAIRS, UNPRICED_TWINS
from .systems import (
    LIMIT_FLAGS,
    billing_key,
    chaos,
    create_pg_db,
    drop_pg_db,
    failover_manifests,
    limited_key,
    nginx_conf,
    post_json,
    sluice_manifests,
    start_mock,
    start_sluice,
    wait_http,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="short durations, fewer rates (for iteration)")
    ap.add_argument("--out", type=Path, help="where BENCHMARKS.md goes (default: repo root; quick: target/bench/quick)")
    ap.add_argument("--no-litellm", action="store_true", help="skip LiteLLM")
    ap.add_argument("--no-postgres", action="store_true", help="skip the Postgres billing run")
    ap.add_argument("--no-callgrind", action="store_true", help="skip counting instructions per request under valgrind")
    ap.add_argument("--no-tracing", action="store_true", help="skip the traces-on comparison")
    ap.add_argument("--render", type=Path, help="only render BENCHMARKS.md from a results.json")
    args = ap.parse_args()

    if args.render:
        results = json.loads(args.render.read_text())
        # `workdir` is relative to the repo (older results hold an absolute path, which
        # the join keeps).
        workdir = ROOT / results["workdir"] if "workdir" in results else None
        if "log_findings" not in results and workdir is not None and workdir.is_dir():
            results["log_findings"] = scan_logs(workdir)
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
                     "load_start": os.getloadavg(), "workdir": str(work.relative_to(ROOT))}
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
        results["limit_flags"] = LIMIT_FLAGS
        systems = [System("direct", "direct (mock)", mock_port, services=[mock]),
                   System("direct-anthropic", "direct (mock), Anthropic protocol", mock_port, path=MESSAGES_PATH,
                          headers=dict(MESSAGES_HEADERS), services=[mock], body=ANTHROPIC_DIRECT_BODY,
                          answer_type="message")]
        s_off, p_off = start_sluice("sluice-off", work, man, f"sqlite://{work}/off.db", "none")
        systems.append(System("sluice", "sluice, billing off", p_off, services=[s_off]))
        # The same gateway on the route that caches deterministic completions, side by
        # side with the uncached row: every request the same, so each is a hit after the
        # first; and with `cache-control: no-cache`, which skips the lookup, goes upstream
        # and stores the fresh answer (a miss's key and store, without its read).
        systems.append(System("sluice-cache-hit", "sluice, billing off, cache hit", p_off, services=[s_off],
                              body=CACHE_BODY, cache="hit"))
        systems.append(System("sluice-cache-miss", "sluice, billing off, cache miss (no-cache: upstream, then stored)",
                              p_off, headers={"cache-control": "no-cache"}, services=[s_off], body=CACHE_BODY,
                              cache="miss"))
        systems.append(System("sluice-anthropic", "sluice, billing off, Anthropic protocol (translated)", p_off, services=[s_off],
                              body=ANTHROPIC_BODY))
        # The same gateway and route spoken to in the Messages protocol: the client's body
        # passed through to the `anthropic` candidate, side by side with the Chat
        # Completions passthrough (`sluice`), against the mock's own `/v1/messages`.
        systems.append(System("sluice-messages", "sluice, billing off, /v1/messages passthrough (anthropic candidate)", p_off,
                              path=MESSAGES_PATH, headers=dict(MESSAGES_HEADERS), services=[s_off], body=MESSAGES_BODY,
                              answer_type="message"))
        led = f"sqlite://{work}/billing.db"
        key, key_lim = billing_key(led), limited_key(led)
        s_sq, p_sq = start_sluice("sluice-sqlite", work, man, led, "keys")
        systems.append(System("sluice-sqlite", "sluice, billing on SQLite", p_sq, headers={"authorization": f"Bearer {key}"},
                              services=[s_sq]))
        # The same gateway and account through a second key whose limits do not bind at
        # the bench's rates: side by side with its unlimited twin, what limits cost.
        systems.append(System("sluice-sqlite-limited", "sluice, billing on SQLite, key with limits", p_sq,
                              headers={"authorization": f"Bearer {key_lim}"}, services=[s_sq], limited=True))
        if not args.no_postgres:
            try:
                pg_url = create_pg_db()
                pg_created = True
                key_pg, key_pg_lim = billing_key(pg_url), limited_key(pg_url)
                s_pg, p_pg = start_sluice("sluice-pg", work, man, pg_url, "keys")
                systems.append(System("sluice-pg", "sluice, billing on Postgres", p_pg,
                                      headers={"authorization": f"Bearer {key_pg}"}, services=[s_pg], ledger_cpu=True))
                systems.append(System("sluice-pg-limited", "sluice, billing on Postgres, key with limits", p_pg,
                                      headers={"authorization": f"Bearer {key_pg_lim}"}, services=[s_pg], ledger_cpu=True,
                                      limited=True))
                # Two more gateway processes on the same database, account and key, each
                # holding its own grant; the second on the load generator's core (the
                # only other core on a 2-core box: see bench/README.md).
                s_a, p_a = start_sluice("sluice-pg-a", work, man, pg_url, "keys")
                s_b, p_b = start_sluice("sluice-pg-b", work, man, pg_url, "keys", cpus=LOAD_CPU)
                systems.append(System("sluice-pg-2gw", "sluice, billing on Postgres, two gateways on one account", p_a,
                                      headers={"authorization": f"Bearer {key_pg}"}, services=[s_a, s_b], ledger_cpu=True,
                                      more_ports=[p_b]))
            except Exception as e:  # noqa: BLE001 - the rest of the run is still worth having
                log(f"Postgres billing skipped: {e}")
                results["postgres_skipped"] = str(e)
        nginx_port = free_port()
        (work / "nginx-tmp").mkdir(exist_ok=True)
        conf = work / "nginx.conf"
        conf.write_text(nginx_conf(nginx_port, mock_port))
        results["configs"]["nginx.conf"] = conf.read_text()
        ngx = Service("nginx", [shutil.which("nginx") or "/usr/sbin/nginx", "-e", str(work / "nginx-error.log"), "-p", str(work),
                                "-c", str(conf), "-g", "daemon off;"], work)
        wait_http(nginx_port, "/v1/models")
        systems.append(System("nginx", "nginx (proxy_pass)", nginx_port, services=[ngx]))
        results["systems"] = {s.key: s.label for s in systems}

        # sanity: every system answers the body with 200 before any timing
        for s in systems:
            if s.cache == "hit":
                # Prime the entry: the first of these requests goes upstream and is stored.
                status, _, body = post_json(s.port, s.path, json.loads(s.body or BODY), s.headers)
                if status != 200:
                    raise RuntimeError(f"{s.key} answered {status} to the priming request: {body[:300]!r}")
            status, hdrs, body = post_json(s.port, s.path, json.loads(s.body or BODY), s.headers)
            if status != 200:
                raise RuntimeError(f"{s.key} answered {status}: {body[:300]!r}")
            # A cache run must be what it says: hits answered from the cache, misses sent
            # upstream; otherwise the side by side measures something else.
            got = {k.lower(): v for k, v in hdrs.items()}.get("x-sluice-cache")
            if s.cache is not None and got != s.cache:
                raise RuntimeError(f"{s.key} answered with x-sluice-cache: {got or '(none)'}, expected {s.cache}")
            # A limited key's answers say where it stands: without the header, the
            # limits are not in force and the run would measure an unlimited key.
            if s.limited and "x-ratelimit-limit-requests" not in {k.lower() for k in hdrs}:
                raise RuntimeError(f"{s.key} answered without x-ratelimit-* headers: its key's limits are not in force")
            # A passthrough must answer in its own protocol (a Messages `message`, not a
            # `chat.completion`): otherwise the row measures a translation.
            if s.answer_type is not None and json.loads(body).get("type") != s.answer_type:
                raise RuntimeError(f"{s.key} answered {body[:300]!r}, expected an object of type {s.answer_type!r}")

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

        # ---- scaling: one gateway vs two on one Postgres account, rate by rate with
        # enough connections that the load generator is not the limit, until neither
        # answers a rate in full (the target compares the highest rate each answered in
        # full, and what each answered at most)
        pair = [s for s in systems if s.key in ("sluice-pg", "sluice-pg-2gw")]
        scaling_runs: list[dict] = []
        results["scaling_runs"] = scaling_runs
        results["scaling_conns"] = SCALING_CONNS
        for rate in mode.scaling_rates if len(pair) == 2 else []:
            full = []
            for s in pair:
                time.sleep(0.5)
                r = run_oha(s, rate, mode.ceiling_duration, work, conns=SCALING_CONNS)
                scaling_runs.append(r)
                log("scaling " + describe(r))
                full.append(answered_in_full(r))
            if not any(full):
                break

        # ---- streaming: TTFB and inter-chunk gaps, direct vs through sluice
        results["streaming"] = streaming_phase(mock_port, p_off, mode.streams)
        if not args.no_callgrind:
            results["callgrind"] = callgrind_phase(work, mock_port, man, mode.callgrind_requests)

        # ---- tracing: the same sluice exporting a span tree per request, vs without
        if not args.no_tracing:
            results["tracing"] = tracing_phase(mode, work, man, systems[0], next(s for s in systems if s.key == "sluice"))

        # ---- what a limited key and a cache miss cost, each loaded at once with its
        # twin into the same gateway, and each gateway against itself (the controls)
        # The cache miss's twin: the same request and headers to the same route without
        # `cache` (only here: the rate matrix's baseline is the `sluice` row).
        twin = System("sluice-cache-twin", "sluice, billing off, the cached route without cache", p_off,
                      headers={"cache-control": "no-cache"}, services=[s_off], body=CACHE_TWIN_BODY)
        # The limited key and its unlimited twin on the route without prices (only
        # here: see UNPRICED_BODY), each billing gateway's two keys.
        unpriced = [System(f"{s.key}-unpriced", f"{s.label}, route without prices", s.port, headers=s.headers,
                           services=s.services, body=UNPRICED_BODY, limited=s.limited, ledger_cpu=s.ledger_cpu)
                    for s in systems if s.key in UNPRICED_TWINS]
        by_key = {s.key: s for s in systems + [twin] + unpriced}
        at_once = [(name, by_key[a], by_key[b]) for name, a, b in AT_ONCE_PAIRS if a in by_key and b in by_key]
        results["at_once"] = at_once_phase(mode, work, at_once)

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
    json_path = report.results_dir(out_dir) / "results.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1))
    md = report.render(results, out_dir)
    log(f"done in {results['elapsed_s']:.0f}s: {md} (raw: {json_path}, logs: {work})")
    return 0
