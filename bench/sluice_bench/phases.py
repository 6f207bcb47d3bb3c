"""The phases after the rate matrix: instructions per request (callgrind), streaming,
failover cost, and LiteLLM's own rate ladder and failover."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .clients import failover_series, pct, stream_once
from .load import System, describe, run_at_once, run_oha
from .procs import Service
from .settings import (ANTHROPIC_BODY, BIN, BODY, CACHE_BODY, MESSAGES_BODY, MESSAGES_HEADERS, MESSAGES_PATH, OHA, STREAM_BODY,
                       Mode, free_port, log)
from .systems import OtlpSink, chaos, litellm_conf, nginx_conf, post_json, start_sluice, wait_http

#: The rate of the tracing comparison (the target: tracing on at 1k req/s with sampling
#: 1.0 adds at most 20 % to sluice's added p50).
TRACING_RATE = 1000


def callgrind_phase(work: Path, mock_port: int, manifests: Path, n: int) -> dict:
    """User-space instructions per request under callgrind: deterministic, so it holds
    even when the shared machine is busy. n sequential requests after a warm-up, counted
    for: sluice (billing off) on the OpenAI passthrough (`sluice`) and, in the same
    process, on the route translated to the Anthropic protocol (`sluice-anthropic`), on
    the same route's Messages passthrough at `/v1/messages` (`sluice-messages`), and
    on the caching route, answered from the cache (`sluice-cache-hit`) and sent upstream
    then stored (`sluice-cache-miss`, `cache-control: no-cache`), and streamed
    (`sluice-stream`, against nginx relaying the same stream, `nginx-stream`); a
    second sluice exporting traces of every request to a local OTLP sink
    (`sluice-traced`, its batch exporter's thread included); and nginx. Each count is of
    the whole process, every thread."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return {"error": "valgrind is not installed"}
    out: dict = {"n": n}

    def drive(port: int, count: int, body: str, headers: list[str], path: str) -> None:
        extra = [a for h in headers for a in ("-H", h)]
        subprocess.run([OHA, "-n", str(count), "-c", "1", "--no-tui", "--output-format", "json", "-m", "POST",
                        "-H", "content-type: application/json", *extra, "-d", body,
                        f"http://127.0.0.1:{port}{path}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)

    def count(svc: Service, port: int, dump: Path, body: str, headers: list[str] | None = None,
              path: str = "/v1/chat/completions") -> float | None:
        """Instructions per request of n requests of `body` to `path`, after a warm-up
        (and one request checked to answer 200: oha counts any answer)."""
        drive(port, 300, body, headers or [], path)
        status, _, text = post_json(port, path, json.loads(body), dict(h.split(": ", 1) for h in headers or []),
                                    timeout=60)
        if status != 200:
            raise RuntimeError(f"{svc.name} answered {status} on {path}: {text[:300]!r}")
        subprocess.run(["callgrind_control", "-z", str(svc.pid)], capture_output=True, timeout=60)
        before = set(work.glob(f"{dump.name}.*"))
        drive(port, n, body, headers or [], path)
        subprocess.run(["callgrind_control", "-d", str(svc.pid)], capture_output=True, timeout=60)
        parts = sorted(set(work.glob(f"{dump.name}.*")) - before)
        total = 0
        for line in parts[-1].read_text(errors="replace").splitlines() if parts else []:
            if line.startswith(("totals:", "summary:")):
                total = int(line.split()[1])
        return total / n if total else None

    def sluice_under_valgrind(name: str, extra: list[str]) -> tuple[Service, int, Path]:
        dump = work / f"callgrind-{name}.out"
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}"]
        svc = Service(f"callgrind-{name}", vg + [str(BIN), "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0",
                                                  "--ledger", f"sqlite://{work}/callgrind-{name}.db", "--auth", "none", *extra],
                      work, env={"NO_COLOR": "1"})
        port = int(svc.wait_log(r"listening on http://127\.0\.0\.1:(\d+)", timeout=180).group(1))
        return svc, port, dump

    # sluice: the passthrough, the translated route, the Messages passthrough, the cache
    # and a stream, in one process
    svc, port, dump = sluice_under_valgrind("sluice", [])
    try:
        out["sluice"] = count(svc, port, dump, BODY)
        out["sluice-anthropic"] = count(svc, port, dump, ANTHROPIC_BODY)
        out["sluice-messages"] = count(svc, port, dump, MESSAGES_BODY, [f"{k}: {v}" for k, v in MESSAGES_HEADERS.items()],
                                       path=MESSAGES_PATH)
        out["sluice-cache-hit"] = count(svc, port, dump, CACHE_BODY)
        out["sluice-cache-miss"] = count(svc, port, dump, CACHE_BODY, ["cache-control: no-cache"])
        out["sluice-stream"] = count(svc, port, dump, STREAM_BODY)
    finally:
        svc.stop()
    # sluice with traces on: every request sampled, exported to a local sink
    sink = OtlpSink()
    try:
        svc, port, dump = sluice_under_valgrind("sluice-traced", ["--otlp-endpoint", f"http://127.0.0.1:{sink.port}",
                                                                  "--traces-sampler", "always_on"])
        try:
            out["sluice-traced"] = count(svc, port, dump, BODY)
        finally:
            svc.stop()
    finally:
        sink.stop()
    # nginx
    port = free_port()
    conf = work / "nginx-callgrind.conf"
    conf.write_text(nginx_conf(port, mock_port))
    dump = work / "callgrind-nginx.out"
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}"]
    svc = Service("callgrind-nginx", vg + [shutil.which("nginx") or "/usr/sbin/nginx", "-e", str(work / "nginx-error.log"),
                                           "-p", str(work), "-c", str(conf), "-g", "daemon off; master_process off;"], work)
    try:
        wait_http(port, "/v1/models", timeout=180)
        out["nginx"] = count(svc, port, dump, BODY)
        out["nginx-stream"] = count(svc, port, dump, STREAM_BODY)
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


def tracing_phase(mode: Mode, work: Path, manifests: Path, direct: System, untraced: System) -> dict:
    """sluice with traces exported (OTLP http/protobuf to a local sink, every request
    sampled) against the same sluice without, at TRACING_RATE, each round right after a
    direct run, the three rotated per round. Its own runs: the rate matrix is unchanged."""
    sink = OtlpSink()
    svc, port = start_sluice("sluice-traced", work, manifests, f"sqlite://{work}/traced.db", "none",
                             ["--otlp-endpoint", f"http://127.0.0.1:{sink.port}", "--traces-sampler", "always_on"])
    traced = System("sluice-traced", "sluice, billing off, traces on (sampling 1.0)", port, services=[svc])
    try:
        status, _, body = post_json(port, traced.path, json.loads(BODY))
        if status != 200:
            raise RuntimeError(f"the traced sluice answered {status}: {body[:300]!r}")
        run_oha(traced, TRACING_RATE, mode.warmup, work, retry=False)
        systems = [direct, untraced, traced]
        runs: list[dict] = []
        for rnd in range(mode.rounds):
            for s in systems[rnd % 3:] + systems[:rnd % 3]:
                time.sleep(0.5)
                r = run_oha(s, TRACING_RATE, mode.duration, work)
                r["round"] = rnd
                runs.append(r)
                log("tracing " + describe(r))
        # Spans leave in batches (512 spans, or within 5 s): give the last one time.
        time.sleep(6)
        return {"rate": TRACING_RATE, "runs": runs, "exports": sink.exports, "export_bytes": sink.bytes}
    finally:
        svc.stop()
        sink.stop()



#: The rate of the runs with two systems at once (each at half of it): the rate of the
#: limits and cache targets.
AT_ONCE_RATE = 5000


def at_once_phase(mode: Mode, work: Path, pairs: list[tuple[str, System, System]]) -> dict:
    """Each (name, a, b) loaded at once into its gateway, each at half of AT_ONCE_RATE,
    for two rounds more than the rate matrix's (a round's difference still moves by
    10-20 µs), the pairs rotated per round. Among the pairs are controls, a system
    against itself: how far apart two identical halves land is what this method
    resolves."""
    for s in {s.key: s for _, a, b in pairs for s in (a, b)}.values():
        status, hdrs, body = post_json(s.port, s.path, json.loads(s.body or BODY), s.headers)
        if status != 200:
            raise RuntimeError(f"{s.key} answered {status}: {body[:300]!r}")
        # As in the rate matrix: a limited key's answers say where it stands.
        if s.limited and "x-ratelimit-limit-requests" not in {k.lower() for k in hdrs}:
            raise RuntimeError(f"{s.key} answered without x-ratelimit-* headers: its key's limits are not in force")
        run_oha(s, 1000, mode.warmup, work, retry=False)
    runs: list[dict] = []
    rounds = mode.rounds + 2
    for rnd in range(rounds):
        for name, a, b in pairs[rnd % len(pairs):] + pairs[:rnd % len(pairs)]:
            time.sleep(0.5)
            r = run_at_once(a, b, AT_ONCE_RATE, mode.duration, work, a_faster=rnd % 2 == 1)
            r.update({"pair": name, "round": rnd})
            runs.append(r)
            a50, b50 = r["a"]["lat_ms"]["p50"], r["b"]["lat_ms"]["p50"]
            log(f"at once {name:>14} round {rnd}: p50 {a50:.3f} vs {b50:.3f} ms ({(a50 - b50) * 1000:+.0f} µs), "
                f"{r['a']['achieved_rps']:.0f} + {r['b']['achieved_rps']:.0f} req/s, other {r['foreign_cpu_pct']:.0f}%")
    return {"rate": AT_ONCE_RATE, "rounds": rounds, "runs": runs}
