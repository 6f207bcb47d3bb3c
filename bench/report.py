"""Turns bench/run.py's results into BENCHMARKS.md and the latency-vs-rate plot."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERCENTILES = ["p50", "p90", "p99", "p99.9"]
P99_BOUND_MS = 5.0
TARGET_RATES = (1000, 5000)


def results_dir(out_dir: Path) -> Path:
    """The PNG and raw JSON sit under bench/results when BENCHMARKS.md is the repo's."""
    return ROOT / "bench" / "results" if out_dir.resolve() == ROOT else out_dir


def f(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}"


def us(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:+.0f}"


def by(runs: list[dict], system: str, rate: int) -> list[dict]:
    return [r for r in runs if r["system"] == system and r["rate"] == rate]


def combine(rounds: list[dict]) -> dict | None:
    if not rounds:
        return None
    out = dict(rounds[0])
    out["lat_ms"] = {p: statistics.median([r["lat_ms"][p] for r in rounds]) if all(r["lat_ms"][p] is not None for r in rounds)
                     else None for p in PERCENTILES}
    for k in ("success", "achieved_rps", "cpu_pct", "oha_cpu_pct", "load1", "foreign_cpu_pct"):
        out[k] = statistics.median([r.get(k, 0) for r in rounds])
    out["rss_mb"] = max(r["rss_mb"] for r in rounds)
    if rounds[0].get("ledger_cpu_pct") is not None:
        out["ledger_cpu_pct"] = statistics.median([r["ledger_cpu_pct"] for r in rounds])
    for k in ("ok", "non2xx", "errors", "aborted_at_deadline"):
        out[k] = sum(r[k] for r in rounds)
    # Sustained: the median round keeps p99 under the bound and keeps up, and no round
    # had an error (one noisy round on a shared machine does not fail a rate).
    p99 = out["lat_ms"]["p99"]
    out["sustained"] = (p99 is not None and p99 < P99_BOUND_MS and out["non2xx"] == 0 and out["errors"] == 0
                        and out["achieved_rps"] >= 0.95 * out["rate"]
                        and sum(1 for r in rounds if r["sustained"]) * 2 > len(rounds) - 1)
    out["rounds"] = len(rounds)
    return out


def added_by_round(runs: list[dict], system: str, rate: int) -> dict:
    """via − direct per percentile (µs), per round (same round, same machine state), then the median."""
    per: dict[str, list[float]] = {p: [] for p in PERCENTILES}
    for r in by(runs, system, rate):
        d = [x for x in by(runs, "direct", rate) if x.get("round") == r.get("round")]
        if not d:
            continue
        for p in PERCENTILES:
            if r["lat_ms"][p] is not None and d[0]["lat_ms"][p] is not None:
                per[p].append((r["lat_ms"][p] - d[0]["lat_ms"][p]) * 1000)
    return {p: statistics.median(v) if v else None for p, v in per.items()}


def ratio(a, b) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def ceiling(results: dict, system: str) -> tuple[int | None, str]:
    """Highest rate sustained (p99 < 5 ms, no errors), walking up until the first miss."""
    runs = results.get("runs", []) + results.get("ceiling_runs", [])
    rates = sorted({r["rate"] for r in runs if r["system"] == system})
    best, note = None, ""
    for rate in rates:
        c = combine(by(runs, system, rate))
        if c and c["sustained"]:
            best = rate
        else:
            d = combine(by(runs, "direct", rate))
            if d and not d["sustained"] and system != "direct":
                note = (f"direct also missed {rate}/s (oha used {d['oha_cpu_pct']:.0f} % of its core, other work "
                        f"{d.get('foreign_cpu_pct', 0):.0f} % of a core): the limit is the machine, not the system")
            break
    else:
        if rates:
            note = "highest rate tried"
    return best, note


def capacity(runs: list[dict], system: str) -> int | None:
    """Highest rate answered in full (all 2xx, ≥ 95 % of the offered rate), whatever the latency."""
    best = None
    for rate in sorted({r["rate"] for r in runs if r["system"] == system}):
        c = combine(by(runs, system, rate))
        if c and c["non2xx"] == 0 and c["errors"] == 0 and c["achieved_rps"] >= 0.95 * rate:
            best = rate
        else:
            break
    return best


def litellm_ceiling(results: dict) -> int | None:
    best = None
    for r in results.get("litellm_runs", []):
        if r["system"] != "litellm":
            continue
        if r["sustained"]:
            best = r["rate"]
        else:
            break
    return best


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    runs = results.get("runs", []) + results.get("ceiling_runs", [])
    lruns = results.get("litellm_runs", [])
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), sharey=True)
    systems = list(results.get("systems", {}).items()) + [("litellm", "LiteLLM proxy")]
    for ax, p in zip(axes, ("p50", "p99")):
        for key, label in systems:
            pts = []
            src = lruns if key == "litellm" else runs
            for rate in sorted({r["rate"] for r in src if r["system"] == key}):
                c = combine(by(src, key, rate))
                if c and c["lat_ms"][p] is not None and c["success"] > 0.5:
                    pts.append((rate, c["lat_ms"][p]))
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
        ax.axhline(P99_BOUND_MS, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, open loop)")
        ax.set_title(f"{p} latency vs rate")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (ms), log scale")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("Zero-delay mock on 127.0.0.1; dotted line: the 5 ms p99 bound")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(results: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    rdir = results_dir(out_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    png = rdir / "latency-vs-rate.png"
    has_plot = plot(results, png)
    md_path = out_dir / "BENCHMARKS.md"
    runs = results.get("runs", [])
    mode = results["mode"]
    systems = results.get("systems", {})
    rates = mode["rates"]
    L: list[str] = []
    w = L.append

    w("# sluice benchmarks")
    w("")
    w(f"Generated by `bench/run{' --quick' if mode['name'] == 'quick' else ''}` on {results['started']} "
      f"({results.get('elapsed_s', 0) / 60:.1f} min). Do not edit by hand: run it again.")
    ls, le = results.get("load_start", [0, 0, 0]), results.get("load_end", [0, 0, 0])
    w("")
    w(f"**Load average** (1/5/15 min) at start {ls[0]:.2f} / {ls[1]:.2f} / {ls[2]:.2f}, at end "
      f"{le[0]:.2f} / {le[1]:.2f} / {le[2]:.2f}. Each run's 1-minute load is in `{rel(rdir / 'results.json')}`. "
      "The machine is shared with other work; the load generator, this script and the systems run on it too.")
    w("")

    # ---------------- targets
    t_rows = targets(results)
    w("## Targets")
    w("")
    w("| target | measured | result |")
    w("|---|---|---|")
    for name, measured, ok in t_rows:
        w(f"| {name} | {measured} | {'PASS' if ok else ('FAIL' if ok is False else 'n/a')} |")
    w("")

    # ---------------- latency
    w("## Latency, success, CPU and memory by rate")
    w("")
    w(f"Open loop with latency correction (`oha -q RATE --latency-correction`), {mode['duration']} s per run, "
      f"{mode['rounds']} round(s) per rate with the systems alternated and rotated each round; numbers are the median "
      "over rounds (peak RSS: the maximum). CPU is the system's processes' CPU time over the run's wall time, in % of one core "
      "(the mock's own CPU is not included but for `direct`). `ok` counts 2xx answers over all requests sent. "
      "'Other work' is the CPU that processes outside the benchmark used during the run (the machine is shared); a run "
      f"during which it exceeded {results.get('foreign_limit_pct', 25):.0f} % of a core was repeated (up to twice) and the "
      "least disturbed try kept. A system whose `ok` falls while the others stay at 100 % failed inside: its log "
      "lines are counted at the end of this page.")
    w("")
    for rate in rates:
        w(f"### {rate} req/s")
        w("")
        w("| system | p50 ms | p90 ms | p99 ms | p99.9 ms | ok | achieved req/s | CPU % | peak RSS MB | p99 < 5 ms, no errors | other work, % of a core |")
        w("|---|---|---|---|---|---|---|---|---|---|---|")
        for key, label in systems.items():
            c = combine(by(runs, key, rate))
            if not c:
                continue
            extra = f" (+ Postgres {c['ledger_cpu_pct']:.0f} %)" if c.get("ledger_cpu_pct") is not None else ""
            lat = c["lat_ms"]
            w(f"| {label} | {f(lat['p50'])} | {f(lat['p90'])} | {f(lat['p99'])} | {f(lat['p99.9'])} | "
              f"{c['success'] * 100:.2f} % | {c['achieved_rps']:.0f} | {c['cpu_pct']:.0f}{extra} | {c['rss_mb']:.1f} | "
              f"{'yes' if c['sustained'] else 'no'} | {c['foreign_cpu_pct']:.0f} |")
        w("")

    # ---------------- added
    w("## Added latency (via − direct), µs")
    w("")
    w("Per round: the system's percentile minus the direct run's percentile in the same round; then the median over rounds. "
      "The ratio columns compare sluice's added latency with nginx's at the same rate.")
    w("")
    w("| rate | system | +p50 | +p90 | +p99 | +p99.9 | ÷ nginx p50 | ÷ nginx p99 |")
    w("|---|---|---|---|---|---|---|---|")
    for rate in rates:
        ng = added_by_round(runs, "nginx", rate)
        for key, label in systems.items():
            if key == "direct" or not by(runs, key, rate):
                continue
            c = combine(by(runs, key, rate))
            if c["success"] < 0.99:
                w(f"| {rate} | {label} | failing: {c['success'] * 100:.1f} % of answers 2xx (median round) | | | | – | – |")
                continue
            if c["achieved_rps"] < 0.95 * rate:
                w(f"| {rate} | {label} | overloaded: answered {c['achieved_rps']:.0f} req/s, p50 {f(c['lat_ms']['p50'], 0)} ms "
                  "| | | | – | – |")
                continue
            a = added_by_round(runs, key, rate)
            r50 = ratio(a["p50"], ng["p50"]) if key != "nginx" else None
            r99 = ratio(a["p99"], ng["p99"]) if key != "nginx" else None
            w(f"| {rate} | {label} | {us(a['p50'])} | {us(a['p90'])} | {us(a['p99'])} | {us(a['p99.9'])} | "
              f"{f(r50, 2) + '×' if r50 is not None else '–'} | {f(r99, 2) + '×' if r99 is not None else '–'} |")
    w("")

    # ---------------- ceiling
    w("## Highest rate sustained (p99 < 5 ms, no errors, ≥ 95 % of the offered rate answered)")
    w("")
    cr = mode.get("ceiling_rates", [])
    w(f"Rates tried: {', '.join(str(x) for x in rates + cr)} req/s (above {rates[-1]}, {mode['ceiling_duration']} s each, "
      "only for systems that sustained every lower rate). LiteLLM: its own ladder below.")
    w("")
    w("| system | highest sustained rate | highest rate answered in full, any latency | note |")
    w("|---|---|---|---|")
    allruns = results.get("runs", []) + results.get("ceiling_runs", [])
    for key, label in systems.items():
        best, note = ceiling(results, key)
        cap = capacity(allruns, key)
        w(f"| {label} | {str(best) + ' req/s' if best else 'none of the rates tried'} | "
          f"{str(cap) + ' req/s' if cap else '–'} | {note} |")
    lc = litellm_ceiling(results)
    if results.get("litellm_runs"):
        lcap = capacity([r for r in results["litellm_runs"] if r["system"] == "litellm"], "litellm")
        w(f"| LiteLLM proxy | {str(lc) + ' req/s' if lc else 'none of the rates tried'} | "
          f"{str(lcap) + ' req/s' if lcap else '–'} | see its ladder |")
    w("")
    if results.get("ceiling_runs"):
        w("<details><summary>Ceiling runs</summary>")
        w("")
        w("| system | rate | p50 ms | p99 ms | p99.9 ms | ok | achieved req/s | CPU % | RSS MB | oha CPU % | other work % | sustained |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in results["ceiling_runs"]:
            lat = r["lat_ms"]
            w(f"| {systems.get(r['system'], r['system'])} | {r['rate']} | {f(lat['p50'])} | {f(lat['p99'])} | {f(lat['p99.9'])} | "
              f"{r['success'] * 100:.2f} % | {r['achieved_rps']:.0f} | {r['cpu_pct']:.0f} | {r['rss_mb']:.1f} | "
              f"{r['oha_cpu_pct']:.0f} | {r.get('foreign_cpu_pct', 0):.0f} | {'yes' if r['sustained'] else 'no'} |")
        w("")
        w("</details>")
        w("")

    # ---------------- litellm
    if results.get("litellm_runs") or results.get("litellm_error"):
        w("## LiteLLM proxy")
        w("")
        if results.get("litellm_error"):
            w(f"The LiteLLM phase failed: `{results['litellm_error']}`")
            w("")
        w(f"LiteLLM {results['versions'].get('litellm')} (`litellm --num_workers 1`, pinned to the same core as the other "
          f"systems), {mode['litellm_duration']} s per rate, each rate right after a direct run at the same rate; the ladder stops "
          "at the first rate it cannot keep up with.")
        w("")
        w("| rate | p50 ms | p90 ms | p99 ms | p99.9 ms | ok | achieved req/s | +p50 µs | +p99 µs | CPU % | RSS MB | sustained |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        lr = results.get("litellm_runs", [])
        for r in lr:
            if r["system"] != "litellm":
                continue
            d = next((x for x in lr if x["system"] == "direct" and x["rate"] == r["rate"]), None)
            lat = r["lat_ms"]
            a50 = (lat["p50"] - d["lat_ms"]["p50"]) * 1000 if d and lat["p50"] is not None else None
            a99 = (lat["p99"] - d["lat_ms"]["p99"]) * 1000 if d and lat["p99"] is not None else None
            w(f"| {r['rate']} | {f(lat['p50'])} | {f(lat['p90'])} | {f(lat['p99'])} | {f(lat['p99.9'])} | "
              f"{r['success'] * 100:.2f} % | {r['achieved_rps']:.0f} | {us(a50)} | {us(a99)} | {r['cpu_pct']:.0f} | "
              f"{r['rss_mb']:.1f} | {'yes' if r['sustained'] else 'no'} |")
        w("")

    # ---------------- callgrind
    cg = results.get("callgrind")
    if cg and cg.get("sluice") and cg.get("nginx"):
        w("## Instructions per request (callgrind)")
        w("")
        w(f"User-space instructions per proxied request, counted by valgrind's callgrind over {cg['n']} sequential requests "
          "after a 300-request warm-up (billing off for sluice; the same nginx configuration). Unlike the latencies above, "
          "this count does not move with other load on the machine. Kernel work (syscalls, TCP) is not included: both "
          "make the same system calls per request (2 `writev`, 2 `recvfrom`, about 1.3 `epoll_wait`, measured with strace).")
        w("")
        w("| system | instructions per request | ratio to nginx |")
        w("|---|---|---|")
        w(f"| sluice, billing off | {cg['sluice']:,.0f} | {cg['sluice'] / cg['nginx']:.1f}× |")
        w(f"| nginx (proxy_pass) | {cg['nginx']:,.0f} | 1.0× |")
        w("")
        w("Where sluice's instructions go, and what would cut them: [bench/PROFILE.md](bench/PROFILE.md).")
        w("")

    # ---------------- streaming
    st = results.get("streaming")
    if st:
        sc = st["script"]
        w("## Streaming: time to first byte and inter-chunk gaps")
        w("")
        zd = st.get("zero_delay") or {}
        if zd.get("direct") and zd.get("sluice"):
            d, s = zd["direct"], zd["sluice"]
            w(f"**Instant stream** (the mock sends 5 events at once; {d['n']} sequential streams each, a new client "
              f"connection per stream): TTFB p50 direct {f(d['ttfb_p50'])} ms, through sluice {f(s['ttfb_p50'])} ms "
              f"(added {us((s['ttfb_p50'] - d['ttfb_p50']) * 1000)} µs); p99 {f(d['ttfb_p99'])} vs {f(s['ttfb_p99'])} ms.")
            w("")
        w(f"**Paced stream**: the mock streams {sc['chunks']} content events {sc['chunk_ms']} ms apart after {sc['first_byte_ms']} ms; "
          f"{st['n']} streams per system, 4 at a time, direct and through sluice (billing off) alternated in batches. "
          "TTFB is from sending the request to the first content event; a gap is the time between two content events "
          "as the client reads them; deviation is |gap − "
          f"{sc['chunk_ms']} ms|.")
        w("")
        w("| path | complete streams | TTFB p50 ms | TTFB p99 ms | gap mean ms | gap p50 ms | gap p99 ms | gap min–max ms | deviation p50 ms | deviation p99 ms |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for key in ("direct", "sluice"):
            s = st.get(key)
            if not s:
                continue
            w(f"| {key} | {s['complete']}/{s['streams']} | {f(s['ttfb_p50'])} | {f(s['ttfb_p99'])} | {f(s['gap_mean'])} | "
              f"{f(s['gap_p50'])} | {f(s['gap_p99'])} | {f(s['gap_min'])}–{f(s['gap_max'])} | {f(s['gap_dev_p50'])} | "
              f"{f(s['gap_dev_p99'])} |")
        d, s = st.get("direct"), st.get("sluice")
        if d and s and d["ttfb_p50"] is not None and s["ttfb_p50"] is not None:
            w("")
            w(f"Added TTFB: p50 {us((s['ttfb_p50'] - d['ttfb_p50']) * 1000)} µs, p99 {us((s['ttfb_p99'] - d['ttfb_p99']) * 1000)} µs. "
              f"Mean gap through sluice {f(s['gap_mean'])} ms vs {f(d['gap_mean'])} ms direct: events are forwarded as they arrive, "
              "not batched. (Here the mock, and through sluice also the gateway, sit idle for 20 ms before the first "
              "event, so the added TTFB includes waking one more idle process on a virtual machine; the instant "
              "stream above shows the gateway's own share.)")
        w("")

    # ---------------- failover
    fo = results.get("failover")
    if fo:
        w("## Failover cost")
        w("")
        w(f"{mode['failovers']} sequential requests per case at about 20 req/s against a route whose primary fails and whose "
          "backup is a healthy zero-delay mock. Non-streaming cases time the whole answer; streaming cases time the first "
          "content event. Extra = the case's latency minus the healthy baseline's of the same kind, same gateway. "
          "sluice's watchdog is `timeouts.firstByte: 50ms`; LiteLLM's `stream_timeout`/`timeout` is 0.05 s for the "
          "hanging primary. 'every request fails over' runs sluice with `--health-window 1ms` (failures are forgotten at "
          "once, so each request tries the primary first) and LiteLLM with `disable_cooldowns: true`; "
          "'default health window' shows sluice as deployed: the primary is demoted after its first failure.")
        w("")
        w("| gateway | case | ok | failed over | p50 ms | p90 ms | extra p50 ms | extra p90 ms |")
        w("|---|---|---|---|---|---|---|---|")
        for gw, cases in fo.items():
            base = {False: None, True: None}
            for label, c in cases.items():
                if c["model"] == "fo-base":
                    base[c["stream"]] = c
            for label, c in cases.items():
                b = base[c["stream"]]
                e50 = c["p50"] - b["p50"] if b and c["model"] != "fo-base" and c["p50"] is not None and b["p50"] is not None else None
                e90 = c["p90"] - b["p90"] if b and c["model"] != "fo-base" and c["p90"] is not None and b["p90"] is not None else None
                w(f"| {gw} | {label} | {c['ok']}/{c['n']} | {c['failed_over'] if c['failed_over'] is not None else '–'} | {f(c['p50'])} | "
                  f"{f(c['p90'])} | {f(e50) if e50 is not None else '–'} | {f(e90) if e90 is not None else '–'} |")
        w("")

    # ---------------- gateway logs
    lf = results.get("log_findings")
    if lf:
        w("## Warnings and errors the gateways logged")
        w("")
        w("Counted from each sluice process's log over the whole run (most frequent first). Failover cases log a "
          "warning per failed attempt by design; anything else here deserves a look.")
        w("")
        w("| process | count | first at | message |")
        w("|---|---|---|---|")
        for proc, items in lf.items():
            for it in items:
                msg = it["message"].replace("|", "\\|")
                w(f"| {proc} | {it['count']} | {it['first'][11:19]} | {msg} |")
        w("")

    # ---------------- plot
    if has_plot:
        w("## Latency against rate")
        w("")
        w(f"![p50 and p99 latency against offered rate]({rel(png, md_path.parent)})")
        w("")

    # ---------------- machine, versions, configs
    m = results.get("machine", {})
    w("## Machine")
    w("")
    w(f"- CPU: {m.get('cpu')} ({m.get('cores')} cores visible), memory {m.get('memory')}")
    w(f"- OS: {m.get('os')}, kernel {m.get('kernel')}")
    w("- Pinning (taskset): the load generator (oha, 1 worker thread) and the orchestration script on core 0; the mock "
      "upstream and every system under test (sluice, nginx with 1 worker, LiteLLM with 1 worker) share core 1. "
      "Postgres is not pinned (it runs where the scheduler puts it; its CPU is shown next to sluice's).")
    w("- All traffic on 127.0.0.1, HTTP/1.1 keep-alive, 64 client connections.")
    w("")
    w("## Versions")
    w("")
    for k, v in results.get("versions", {}).items():
        w(f"- {k}: {v}")
    w("")
    w("## Method")
    w("")
    w(f"- Request (every system, rate runs): `POST /v1/chat/completions` with `{BODY_DOC}`.")
    w("- The mock is `sluice-gateway chaos` with an empty script: answers at once (`first_byte_ms` 0).")
    w("- sluice, billing off: `serve --auth none` (SLI rollups still flushed to a SQLite file every 10 s). Billing on: "
      "`--auth keys` with an account and key made by `sluice-gateway admin`; each request authenticates, reserves and "
      "settles in the ledger (SQLite file, or a dedicated Postgres database `sluice_bench` that is dropped at the end).")
    w("- A run counts as sustained when p99 < 5 ms, no non-2xx answer, no transport error, and at least 95 % of the offered "
      "rate was answered (a few requests cut by oha's deadline at the end of a run are not errors).")
    w("")
    w("## Configurations")
    w("")
    for name, text in results.get("configs", {}).items():
        lang = "nginx" if name.endswith(".conf") else "yaml"
        w(f"<details><summary>{name}</summary>")
        w("")
        w(f"```{lang}")
        w(text.rstrip())
        w("```")
        w("")
        w("</details>")
        w("")
    notes = results.get("notes")
    if notes:
        w("## Notes")
        w("")
        w(notes)
        w("")
    md_path.write_text("\n".join(L))
    return md_path


BODY_DOC = '{"model":"bench-model","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'


def rel(p: Path, base: Path = ROOT) -> str:
    try:
        return str(p.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(p)


def targets(results: dict) -> list[tuple[str, str, bool | None]]:
    runs = results.get("runs", [])
    rows = []
    for rate in TARGET_RATES:
        if not by(runs, "sluice", rate) or not by(runs, "nginx", rate):
            continue
        s, n = added_by_round(runs, "sluice", rate), added_by_round(runs, "nginx", rate)
        for p, k in (("p50", 1.5), ("p99", 2.0)):
            r = ratio(s[p], n[p])
            ok = (s[p] is not None and n[p] is not None and s[p] <= k * max(n[p], 0))
            rows.append((f"sluice added {p} ≤ {k}× nginx added {p} at {rate} req/s (billing off)",
                         f"{us(s[p])} µs vs {us(n[p])} µs ({f(r, 2) + '×' if r is not None else 'nginx added ≤ 0'})", ok))
    c = combine(by(runs, "sluice", 5000))
    if c:
        ok = c["success"] >= 1.0 and c["non2xx"] == 0 and c["errors"] == 0 and c["rss_mb"] < 100 and c["achieved_rps"] >= 4750
        rows.append(("5k req/s on 2 cores, 100 % success, RSS < 100 MB (billing off)",
                     f"{c['success'] * 100:.3f} % ok, {c['achieved_rps']:.0f} req/s answered, peak RSS {c['rss_mb']:.1f} MB, "
                     f"p99 {f(c['lat_ms']['p99'])} ms", ok))
    best, _ = ceiling(results, "sluice")
    lc = litellm_ceiling(results)
    allruns = results.get("runs", []) + results.get("ceiling_runs", [])
    scap = capacity(allruns, "sluice")
    lcap = capacity([r for r in results.get("litellm_runs", []) if r["system"] == "litellm"], "litellm")
    if scap and lcap:
        rows.append(("(context) highest rate answered in full, any latency: sluice ÷ LiteLLM",
                     f"{scap} ÷ {lcap} req/s = {scap / lcap:.0f}× (sluice's figure is the highest rate tried that it kept up with)",
                     None))
    if results.get("litellm_runs"):
        if lc:
            ok = best is not None and best >= 20 * lc
            rows.append(("≥ 20× the rate LiteLLM sustains under the same p99 bound",
                         f"sluice {best or 0} req/s vs LiteLLM {lc} req/s ({(best or 0) / lc:.0f}×)", ok))
        else:
            lr = [r for r in results["litellm_runs"] if r["system"] == "litellm"]
            lowest = min((r["rate"] for r in lr), default=None)
            rows.append(("≥ 20× the rate LiteLLM sustains under the same p99 bound",
                         f"sluice {best or 0} req/s; LiteLLM sustained none of the rates tried (lowest {lowest} req/s), "
                         f"so the ratio is above {(best or 0) / lowest:.0f}×" if lowest else "LiteLLM not measured",
                         bool(best and lowest and best >= 20 * lowest)))
    return rows
