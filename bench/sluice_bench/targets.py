"""The targets BENCHMARKS.md checks, each with what was measured and PASS/FAIL (or
`None` for a row given as context)."""

from __future__ import annotations

import statistics

from .stats import (added_by_round, added_over_by_round, answered_in_full, by, capacity, ceiling, combine, f,
                    litellm_ceiling, ratio, us)

TARGET_RATES = (1000, 5000)


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
    for rate in TARGET_RATES[:1]:
        if by(runs, "sluice", rate) and by(runs, "sluice-anthropic", rate):
            s, a = added_by_round(runs, "sluice", rate), added_by_round(runs, "sluice-anthropic", rate)
            if s["p50"] is not None and a["p50"] is not None:
                extra = a["p50"] - s["p50"]
                rows.append((f"Anthropic-protocol translation adds ≤ 30 µs p50 over the OpenAI passthrough at {rate} req/s",
                             f"{us(a['p50'])} µs added (vs the mock's Anthropic path) vs {us(s['p50'])} µs "
                             f"(vs its OpenAI path): {us(extra)} µs", extra <= 30))
    rows += messages_targets(results)
    tr = results.get("tracing")
    if tr and tr.get("runs"):
        rate = tr["rate"]
        off, on = added_by_round(tr["runs"], "sluice", rate), added_by_round(tr["runs"], "sluice-traced", rate)
        if off["p50"] is not None and on["p50"] is not None:
            ok = on["p50"] <= 1.2 * max(off["p50"], 0) and tr["exports"] > 0
            r = ratio(on["p50"], off["p50"])
            rows.append((f"traces on (sampling 1.0) add ≤ 20 % to sluice's added p50 at {rate} req/s",
                         f"{us(on['p50'])} µs on vs {us(off['p50'])} µs off ({f(r, 2) + '×' if r is not None else 'off ≤ 0'}), "
                         f"{tr['exports']} OTLP exports", ok))
    c = combine(by(runs, "sluice", 5000))
    if c:
        ok = c["success"] >= 1.0 and c["non2xx"] == 0 and c["errors"] == 0 and c["rss_mb"] < 100 and c["achieved_rps"] >= 4750
        rows.append(("5k req/s on 2 cores, 100 % success, RSS < 100 MB (billing off)",
                     f"{c['success'] * 100:.3f} % ok, {c['achieved_rps']:.0f} req/s answered, peak RSS {c['rss_mb']:.1f} MB, "
                     f"p99 {f(c['lat_ms']['p99'])} ms", ok))
    rows += billing_targets(results)
    rows += limit_targets(results)
    rows += cache_targets(results)
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


#: Billing on may add at most this much to billing off's p99 at BILLING_RATE.
BILLING_P99_SLACK_MS = 15.0
BILLING_RATE = 5000


def billing_targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """Billing on one account (docs/design.md §5a): SQLite and Postgres each at 5k req/s
    through one gateway, every request answered and p99 within 15 ms of billing off; two
    gateways on the same Postgres account together answer in full a higher rate than
    one does, and more at most (the scaling runs: the same rates for both, enough
    connections that the load generator is not what limits them)."""
    runs = results.get("runs", [])
    rows = []
    off = combine(by(runs, "sluice", BILLING_RATE))
    for key, what in (("sluice-pg", "Postgres"), ("sluice-sqlite", "SQLite")):
        c = combine(by(runs, key, BILLING_RATE))
        if not c or not off:
            continue
        p99, p99_off = c["lat_ms"]["p99"], off["lat_ms"]["p99"]
        ok = (c["success"] >= 1.0 and c["non2xx"] == 0 and c["errors"] == 0 and c["achieved_rps"] >= 0.95 * BILLING_RATE
              and p99 is not None and p99_off is not None and p99 <= p99_off + BILLING_P99_SLACK_MS)
        rows.append((f"billing on {what}, one account, one gateway: {BILLING_RATE // 1000}k req/s all answered, "
                     f"p99 ≤ billing off's + {BILLING_P99_SLACK_MS:.0f} ms",
                     f"{c['success'] * 100:.3f} % ok, {c['achieved_rps']:.0f} req/s answered, p99 {f(p99)} ms vs {f(p99_off)} ms off",
                     ok))
    scaling = results.get("scaling_runs")
    if scaling:
        one, two = capacity(scaling, "sluice-pg"), capacity(scaling, "sluice-pg-2gw")
        most = {k: max((r["achieved_rps"] for r in scaling if r["system"] == k), default=0.0)
                for k in ("sluice-pg", "sluice-pg-2gw")}
        rows.append(("two gateways on one Postgres account together answer more than one gateway does",
                     f"in full: two {two or 0} req/s, one {one or 0} req/s; at most: two {most['sluice-pg-2gw']:.0f} req/s, "
                     f"one {most['sluice-pg']:.0f} req/s ({most['sluice-pg-2gw'] / max(most['sluice-pg'], 1):.2f}×; "
                     f"{results.get('scaling_conns', 64)} connections, any latency)",
                     bool(two and (one is None or two > one) and most["sluice-pg-2gw"] > most["sluice-pg"])))
    else:
        # Results from before the scaling phase had its own runs.
        allruns = runs + results.get("ceiling_runs", [])
        if by(allruns, "sluice-pg-2gw", BILLING_RATE):
            one, two = capacity(allruns, "sluice-pg"), capacity(allruns, "sluice-pg-2gw")
            rows.append(("two gateways on one Postgres account together answer in full more than one gateway does",
                         f"two: {two or 0} req/s, one: {one or 0} req/s (highest rate tried answered in full, any latency)",
                         bool(two and (one is None or two > one))))
    return rows


#: A key with limits may add at most this much to its unlimited twin's p50 (µs) at LIMIT_RATE.
LIMIT_P50_SLACK_US = 5.0
LIMIT_RATE = 5000
#: The most lease takes (ledger transactions) per 1,000 requests of a limited key, at every
#: rate. A round trip per request would be 1,000. What a run measures is mostly its start:
#: each run finds the key's three meters idle (their leases given back) and grows their
#: leases from nothing, about 15 takes in all, then takes about once a second more, so
#: the count per 1,000 falls with the requests a run sends: about 4 at 1k req/s for 4 s
#: (the quick mode's fewest requests), under 1 at 5k req/s. 10 leaves room for noise
#: while still failing on anything that takes per request or per hundred requests.
LIMIT_TAKES_PER_1K = 10.0
#: The limited systems and their unlimited twins: the same gateway process and account.
LIMITED_TWINS = (("sluice-pg-limited", "sluice-pg", "Postgres"), ("sluice-sqlite-limited", "sluice-sqlite", "SQLite"))
#: The systems loaded at once with their twins (bench/sluice_bench/phases.py,
#: `at_once_phase`): (name, system, twin). A `control-` pair is a gateway against
#: itself: the spread of two identical halves, what the method resolves. The limited key
#: is compared on the route without prices: on a priced route both halves' p50 is set by
#: where their answers fall in their settlement batches, which moved the billing
#: gateways' controls by up to ±17 µs (median of 5 rounds); the limits themselves do the
#: same work on either route.
AT_ONCE_PAIRS = (
    ("limits-pg", "sluice-pg-limited-unpriced", "sluice-pg-unpriced"),
    ("control-pg", "sluice-pg-unpriced", "sluice-pg-unpriced"),
    ("limits-sqlite", "sluice-sqlite-limited-unpriced", "sluice-sqlite-unpriced"),
    ("control-sqlite", "sluice-sqlite-unpriced", "sluice-sqlite-unpriced"),
    ("cache-miss", "sluice-cache-miss", "sluice-cache-twin"),
    ("control-off", "sluice", "sluice"),
)
#: The billing systems the pairs above name as `<key>-unpriced`: each also runs at once
#: on the route without prices (settings.UNPRICED_BODY).
UNPRICED_TWINS = tuple(sorted({k.removesuffix("-unpriced") for _, a, b in AT_ONCE_PAIRS for k in (a, b)
                               if k.endswith("-unpriced")}))
#: The control of each pair: the same gateway against itself.
AT_ONCE_CONTROLS = {"limits-pg": "control-pg", "limits-sqlite": "control-sqlite", "cache-miss": "control-off"}


def at_once(results: dict, name: str) -> dict | None:
    """A pair's runs at once (see AT_ONCE_PAIRS): per round a's p50 − b's (µs), the median
    over rounds, the same for its control, and why they are not comparable (a half that
    did not keep up, other work above the quiet limit); `None` when the pair did not run."""
    section = results.get("at_once") or {}
    quiet = results.get("foreign_limit_pct", 25.0)

    def diffs(pair: str) -> tuple[list[float], list[str]]:
        runs = [r for r in section.get("runs", []) if r["pair"] == pair]
        out, why = [], []
        for r in runs:
            a50, b50 = r["a"]["lat_ms"]["p50"], r["b"]["lat_ms"]["p50"]
            if a50 is not None and b50 is not None:
                out.append((a50 - b50) * 1000)
            for k in ("a", "b"):
                if r[k]["ok"] < r[k]["sent"] or r[k]["achieved_rps"] < 0.95 * r[k].get("offered_rps", section["rate"] / 2):
                    why.append(f"round {r['round']}: {r[k]['system']} answered {r[k]['ok']:,} of {r[k]['sent']:,} "
                               f"at {r[k]['achieved_rps']:.0f} req/s")
            if r["foreign_cpu_pct"] > quiet:
                why.append(f"round {r['round']}: other work used {r['foreign_cpu_pct']:.0f} % of a core")
        return out, why

    d, why = diffs(name)
    if not d:
        return None
    c, cwhy = diffs(AT_ONCE_CONTROLS.get(name, ""))
    med = statistics.median
    return {"rate": section["rate"], "extra": med(d), "rounds": d, "control": med(c) if c else None,
            "control_rounds": c, "behind": why + cwhy}


def at_once_row(results: dict, name: str, what: str, against: str, billing: str,
                most: float) -> tuple[str, str, bool | None] | None:
    """The target row of a pair run at once: `what` adds at most `most` µs p50 `against`
    its twin, when both halves kept up on a quiet machine and the control (the gateway
    against itself) resolves `most` (its median within ±`most`)."""
    t = at_once(results, name)
    if t is None:
        return None
    resolved = t["control"] is not None and abs(t["control"]) <= most
    rounds = ", ".join(us(x) for x in t["rounds"])
    measured = (f"{us(t['extra'])} µs (median of rounds {rounds}); the same gateway against itself "
                f"{us(t['control'])} µs" + ("" if resolved else f", which does not resolve {most:.0f} µs")
                + (f"; not comparable: {'; '.join(t['behind'])}" if t["behind"] else ""))
    return (f"{what} ≤ {most:.0f} µs p50 {against} at {t['rate'] // 1000}k req/s ({billing}; both loaded at once, "
            f"{t['rate'] / 2000:g}k req/s each: see [At once](#at-once))",
            measured, not t["behind"] and resolved and t["extra"] <= most)


def limit_targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """Limits on a key (docs/design.md §5b): a key whose limits do not bind, against its
    unlimited twin on the same gateway and account, in the same rate matrix. Admitting
    from leases in memory adds at most 5 µs to p50 (per round, limited − unlimited, the
    median over rounds; at 5k req/s, or the highest rate both ran), and the leases cost the
    ledger at most 10 transactions per 1,000 requests at every rate."""
    runs = results.get("runs", [])
    rows = []
    for key, twin, what in LIMITED_TWINS:
        t = twin_at(results, key, twin, LIMIT_RATE)
        if t is None:
            continue
        rate, note, extra, lim, unl = t["rate"], t["note"], t["extra"], t["system"], t["base"]
        # An overloaded run's p50 is its queue, a disturbed one's the other work's: a few
        # µs are comparable only when both kept up on a quiet machine.
        behind = comparable(results, {"limited": lim, "unlimited": unl})
        # Measured at once with its twin when the run has it (the target); runs one
        # after another are then context: their rounds differ by more than 5 µs.
        pair = at_once_row(results, f"limits-{'pg' if what == 'Postgres' else 'sqlite'}", "limited key adds",
                           "over the unlimited key", f"billing on {what}, the route without prices", LIMIT_P50_SLACK_US)
        if pair:
            rows.append(pair)
        rows.append(((f"(context: runs one after another) limited key over the unlimited key at {rate // 1000}k req/s"
                      if pair else f"limited key adds ≤ {LIMIT_P50_SLACK_US:.0f} µs p50 over the unlimited key at "
                      f"{rate // 1000}k req/s") + f" (billing on {what}){note}",
                     f"p50 {f(lim['lat_ms']['p50'])} ms limited vs {f(unl['lat_ms']['p50'])} ms unlimited: {us(extra)} µs "
                     f"(per round, median of {lim['rounds']})"
                     + (f"; not comparable: {'; '.join(behind)}" if behind else ""),
                     None if pair else not behind and extra is not None and extra <= LIMIT_P50_SLACK_US))
        per = {r: combine(by(runs, key, r)).get("lease_takes_per_1k") for r in t["rates"]}
        if any(v is None for v in per.values()):
            continue
        rows.append((f"lease transactions per 1,000 requests ≤ {LIMIT_TAKES_PER_1K:.0f} at every rate "
                     f"(limited key, billing on {what})",
                     ", ".join(f"{f(v, 2)} at {r // 1000}k req/s" for r, v in per.items())
                     + " (`sluice_limit_lease_takes_total`, one transaction per take)",
                     max(per.values()) <= LIMIT_TAKES_PER_1K))
    return rows


#: The response cache's side by side (docs/design.md §13), on the billing-off gateway:
#: (system, baseline, most µs its p50 may exceed the baseline's, what the row measures).
#: A hit never reaches an upstream: its added latency is compared with the mock answering
#: directly (the same loopback HTTP hop, the floor any answer pays); a miss, sent with
#: `cache-control: no-cache` (no read; upstream; stored), with the same gateway's
#: uncached route.
CACHE_HIT_ADDED_P50_US = 50.0
CACHE_MISS_EXTRA_P50_US = 10.0
CACHE_RATE = 5000
CACHE_PAIRS = (("sluice-cache-hit", "direct", CACHE_HIT_ADDED_P50_US, "cache hit adds", "over the mock answering directly"),
               ("sluice-cache-miss", "sluice", CACHE_MISS_EXTRA_P50_US, "cache miss (no-cache: upstream, stored) adds",
                "over the uncached route (`sluice`)"))


def comparable(results: dict, pair: dict[str, dict]) -> list[str]:
    """Why two runs' p50s are not comparable to a few µs: one of them did not keep up
    (its p50 is its queue) or other work took more than the quiet limit (its p50 is the
    other work's). Empty when they are."""
    quiet = results.get("foreign_limit_pct", 25.0)
    why = [f"{name} answered {c['achieved_rps']:.0f} req/s, {c['success'] * 100:.2f} % ok"
           for name, c in pair.items() if not answered_in_full(c)]
    why += [f"other work used {c['foreign_cpu_pct']:.0f} % of a core during the {name} run"
            for name, c in pair.items() if c["foreign_cpu_pct"] > quiet]
    return why


def twin_at(results: dict, key: str, base: str, want: int) -> dict | None:
    """`key` beside `base` at rate `want`, or the highest rate both ran: the rate, a note
    when it is not `want`, the per-round p50 difference (median over rounds), both
    combined runs and why they are not comparable (see [`comparable`]); `None` when they
    share no rate."""
    runs = results.get("runs", [])
    both = sorted({r["rate"] for r in runs if r["system"] == key} & {r["rate"] for r in runs if r["system"] == base})
    if not both:
        return None
    rate = want if want in both else both[-1]
    c, b = combine(by(runs, key, rate)), combine(by(runs, base, rate))
    return {
        "rates": both,
        "rate": rate,
        "note": "" if rate == want else f" ({want // 1000}k req/s not run: the highest rate both ran)",
        "extra": added_by_round(runs, key, rate, baseline=base)["p50"],
        "system": c,
        "base": b,
        "behind": comparable(results, {key: c, base: b}),
    }


def cache_targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """The response cache (issue 28): at 5k req/s (or the highest rate both ran) a hit
    adds at most 50 µs p50 over the gateway's own floor, taken to be the mock answering
    directly, and a miss at most 10 µs p50 over the same gateway without a cache (per
    round, the system − its baseline, the median over rounds); only when both runs kept
    up on a quiet machine, as for a limited key."""
    rows = []
    for key, base, most, what, against in CACHE_PAIRS:
        t = twin_at(results, key, base, CACHE_RATE)
        if t is None:
            continue
        rate, note, extra, c, b, behind = t["rate"], t["note"], t["extra"], t["system"], t["base"], t["behind"]
        pair = at_once_row(results, "cache-miss", what, "over its twin (the cached route's request to the same route "
                           "without `cache`)", "billing off", most) \
            if key == "sluice-cache-miss" else None
        if pair:
            rows.append(pair)
        rows.append(((f"(context: runs one after another) {what.removesuffix(' adds')} {against} at {rate // 1000}k req/s"
                      if pair else f"{what} ≤ {most:.0f} µs p50 {against} at {rate // 1000}k req/s") + f" (billing off){note}",
                     f"p50 {f(c['lat_ms']['p50'])} ms vs {f(b['lat_ms']['p50'])} ms `{base}`: {us(extra)} µs "
                     f"(per round, median of {c['rounds']})"
                     + (f"; not comparable: {'; '.join(behind)}" if behind else ""),
                     None if pair else not behind and extra is not None and extra <= most))
    return rows


#: The Messages passthrough (`POST /v1/messages` to the route whose candidate speaks
#: `anthropic`: the client's body sent on with the candidate's model spliced in) beside
#: the Chat Completions passthrough, on the same billing-off gateway: its added p50 (over
#: the mock answering the same Messages request on its own `/v1/messages`) may exceed
#: the chat passthrough's (over the mock's `/v1/chat/completions`) by at most
#: MESSAGES_P50_SLACK_US, per round, then the median over rounds, at MESSAGES_RATE (the
#: translation row's rate). Both add a few tens of µs there, and neighbouring runs' p50s
#: move by several µs on the shared machine: the slack is the noise, not a budget.
MESSAGES_RATE = 1000
MESSAGES_P50_SLACK_US = 10.0
#: Instructions per Messages passthrough request (callgrind, the same process) may exceed
#: the chat passthrough's by at most this share. The count is deterministic; the margin
#: is for what the two requests cannot share: other bytes to parse (a header more, other
#: members in the body and the answer, whose usage has four members to chat's three).
MESSAGES_INSTR_SLACK = 0.03


def messages_targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """The `/v1/messages` passthrough adds no more than the Chat Completions passthrough:
    in latency (the added p50s side by side in the same rounds, within
    MESSAGES_P50_SLACK_US, only when all four runs kept up on a quiet machine) and in
    instructions per request (within MESSAGES_INSTR_SLACK)."""
    runs = results.get("runs", [])
    rows = []
    rate = MESSAGES_RATE
    keys = ("sluice-messages", "direct-anthropic", "sluice", "direct")
    if all(by(runs, k, rate) for k in keys):
        m, c = added_by_round(runs, "sluice-messages", rate), added_by_round(runs, "sluice", rate)
        extra = added_over_by_round(runs, "sluice-messages", "sluice", rate)["p50"]
        combined = {k: combine(by(runs, k, rate)) for k in keys}
        behind = comparable(results, combined)
        rows.append((f"`/v1/messages` passthrough (anthropic candidate) adds no more p50 than the Chat Completions "
                     f"passthrough at {rate // 1000}k req/s (billing off; tolerance +{MESSAGES_P50_SLACK_US:.0f} µs: "
                     "latency at this size is noise-bound)",
                     f"{us(m['p50'])} µs added (vs the mock's `/v1/messages`) vs {us(c['p50'])} µs (chat, vs its "
                     f"`/v1/chat/completions`): {us(extra)} µs (per round, median of {combined['sluice-messages']['rounds']})"
                     + (f"; not comparable: {'; '.join(behind)}" if behind else ""),
                     not behind and extra is not None and extra <= MESSAGES_P50_SLACK_US))
    cg = results.get("callgrind") or {}
    if cg.get("sluice") and cg.get("sluice-messages"):
        msg, chat = cg["sluice-messages"], cg["sluice"]
        rows.append((f"instructions per `/v1/messages` passthrough request ≤ the Chat Completions passthrough's "
                     f"+ {MESSAGES_INSTR_SLACK * 100:.0f} % (callgrind, the same process)",
                     f"{msg:,.0f} vs {chat:,.0f}: {msg - chat:+,.0f} ({(msg / chat - 1) * 100:+.1f} %)",
                     msg <= chat * (1 + MESSAGES_INSTR_SLACK)))
    return rows
