"""Reading the recorded runs: rounds combined, added latency per round, ratios, ceilings
and capacity, and number formatting for the tables."""

from __future__ import annotations

import math
import statistics

from .settings import P99_BOUND_MS, PERCENTILES


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
    # A limited key's lease takes, pooled over the rounds.
    if all("lease_takes" in r for r in rounds):
        out["lease_takes"] = sum(r["lease_takes"] for r in rounds)
        sent = out["ok"] + out["non2xx"] + out["errors"]
        out["lease_takes_per_1k"] = 1000 * out["lease_takes"] / sent if sent else None
    # Sustained: the median round keeps p99 under the bound and keeps up, and no round
    # had an error (one noisy round on a shared machine does not fail a rate).
    p99 = out["lat_ms"]["p99"]
    out["sustained"] = (p99 is not None and p99 < P99_BOUND_MS and out["non2xx"] == 0 and out["errors"] == 0
                        and out["achieved_rps"] >= 0.95 * out["rate"]
                        and sum(1 for r in rounds if r["sustained"]) * 2 > len(rounds) - 1)
    out["rounds"] = len(rounds)
    return out


# The direct run a system's added latency is measured against, when it is not `direct`:
# the translated route and the Messages passthrough are compared with the Messages
# request sent to the mock natively.
BASELINES = {"sluice-anthropic": "direct-anthropic", "sluice-messages": "direct-anthropic"}


def added_by_round(runs: list[dict], system: str, rate: int, baseline: str | None = None) -> dict:
    """via − baseline per percentile (µs), per round (same round, same machine state), then
    the median. The baseline is the direct run (BASELINES) unless one is given."""
    per: dict[str, list[float]] = {p: [] for p in PERCENTILES}
    baseline = baseline or BASELINES.get(system, "direct")
    for r in by(runs, system, rate):
        d = [x for x in by(runs, baseline, rate) if x.get("round") == r.get("round")]
        if not d:
            continue
        for p in PERCENTILES:
            if r["lat_ms"][p] is not None and d[0]["lat_ms"][p] is not None:
                per[p].append((r["lat_ms"][p] - d[0]["lat_ms"][p]) * 1000)
    return {p: statistics.median(v) if v else None for p, v in per.items()}


def added_over_by_round(runs: list[dict], system: str, other: str, rate: int) -> dict:
    """What `system` adds over its baseline minus what `other` adds over its own (µs), per
    percentile, per round (each run against its baseline in the same round), then the
    median over the rounds where all four ran."""
    per: dict[str, list[float]] = {p: [] for p in PERCENTILES}
    for rnd in sorted({r.get("round") for r in by(runs, system, rate)}, key=lambda x: (x is None, x)):
        a = added_by_round([r for r in runs if r.get("round") == rnd], system, rate)
        b = added_by_round([r for r in runs if r.get("round") == rnd], other, rate)
        for p in PERCENTILES:
            if a[p] is not None and b[p] is not None:
                per[p].append(a[p] - b[p])
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


#: A run answered its rate in full when every answer was 2xx and at least this share of
#: the offered rate was answered. Open loop, a system that answers 95 % of 10k req/s for
#: 5 s has 2.5k requests queued behind it (a p50 of a quarter second): it did not keep up.
IN_FULL = 0.99


def answered_in_full(r: dict) -> bool:
    return r["non2xx"] == 0 and r["errors"] == 0 and r["achieved_rps"] >= IN_FULL * r["rate"]


def capacity(runs: list[dict], system: str) -> int | None:
    """Highest rate answered in full (all 2xx, ≥ 99 % of the offered rate), whatever the latency."""
    best = None
    for rate in sorted({r["rate"] for r in runs if r["system"] == system}):
        c = combine(by(runs, system, rate))
        if c and answered_in_full(c):
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
