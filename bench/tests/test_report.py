"""Tests of the bench's report side (stats, targets, BENCHMARKS.md) on made-up runs: no
gateway, load generator or network. Run from the repo root with
`python3 -m unittest discover -s bench/tests` (or `pytest bench/tests`)."""

from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice_bench import report, settings, stats, systems, targets  # noqa: E402 - after the path it is found on

RATES = [1000, 5000]


def run(system: str, rate: int, rnd: int, p50_ms: float, p99_ms: float | None = None, **over) -> dict:
    """One oha run as load.run_oha_once records it, answered in full on a quiet machine."""
    p99_ms = p50_ms * 3 if p99_ms is None else p99_ms
    r = {
        "system": system, "rate": rate, "round": rnd, "duration": 8,
        "ok": rate * 8, "non2xx": 0, "errors": 0, "aborted_at_deadline": 0, "success": 1.0,
        "achieved_rps": float(rate),
        "lat_ms": {"p50": p50_ms, "p90": p50_ms * 2, "p99": p99_ms, "p99.9": p99_ms * 2},
        "mean_ms": p50_ms, "cpu_pct": 40.0, "rss_mb": 20.0, "ledger_cpu_pct": None, "oha_cpu_pct": 30.0,
        "foreign_cpu_pct": 2.0, "load1": 0.5, "codes": {"200": rate * 8}, "error_kinds": {},
    }
    r.update(over)
    r["sustained"] = r["lat_ms"]["p99"] < settings.P99_BOUND_MS and r["non2xx"] == 0 and r["achieved_rps"] >= 0.95 * rate
    return r


# p50 in ms per system and rate, the same every round but for a per-round shift (every
# system's run in a round shifted alike) that the per-round differences cancel; the
# median shift is 0, so the medians over rounds are these figures.
P50 = {
    "direct": {1000: 0.100, 5000: 0.120},
    "sluice": {1000: 0.180, 5000: 0.210},
    "sluice-cache-hit": {1000: 0.130, 5000: 0.150},  # +30 µs over direct
    "sluice-cache-miss": {1000: 0.185, 5000: 0.216},  # +5 µs / +6 µs over sluice
    "nginx": {1000: 0.160, 5000: 0.190},
}
SHIFT_MS = [0.0, 0.050, -0.020]


def results(p50: dict | None = None, rates: list[int] | None = None, **run_over) -> dict:
    p50 = p50 or P50
    rates = rates or RATES
    runs = []
    for rate in rates:
        for rnd, shift in enumerate(SHIFT_MS):
            for key, by_rate in p50.items():
                if rate in by_rate:
                    runs.append(run(key, rate, rnd, by_rate[rate] + shift, **run_over.get(key, {})))
    return {
        "mode": {"name": "full", "rates": rates, "rounds": len(SHIFT_MS), "duration": 8, "ceiling_rates": [],
                 "ceiling_duration": 5, "failovers": 40},
        "foreign_limit_pct": 25.0,
        "started": "2026-01-01T00:00:00+00:00",
        "elapsed_s": 60,
        "load_start": [0.1, 0.1, 0.1],
        "load_end": [0.2, 0.2, 0.2],
        "systems": {"direct": "direct (mock)", "sluice": "sluice, billing off",
                    "sluice-cache-hit": "sluice, billing off, cache hit",
                    "sluice-cache-miss": "sluice, billing off, cache miss (no-cache: upstream, then stored)",
                    "nginx": "nginx (proxy_pass)"},
        "runs": runs,
        "versions": {},
    }


def render(res: dict) -> str:
    with tempfile.TemporaryDirectory() as d, mock.patch.object(report, "plot", return_value=False):
        return report.render(res, Path(d)).read_text()


def section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 1)
    return md[start:end if end >= 0 else None]


def cache_rows(res: dict) -> dict[str, tuple[str, bool | None]]:
    return {name: (measured, ok) for name, measured, ok in targets.cache_targets(res)}


class CacheTargets(unittest.TestCase):
    def test_pass_at_5k_with_per_round_differences(self):
        rows = cache_rows(results())
        self.assertEqual(len(rows), 2)
        hit = next(v for k, v in rows.items() if k.startswith("cache hit adds ≤ 50 µs p50") and "5k req/s" in k)
        miss = next(v for k, v in rows.items() if k.startswith("cache miss") and "≤ 10 µs p50" in k and "5k req/s" in k)
        self.assertEqual(hit, ("p50 0.150 ms vs 0.120 ms `direct`: +30 µs (per round, median of 3)", True))
        self.assertEqual(miss, ("p50 0.216 ms vs 0.210 ms `sluice`: +6 µs (per round, median of 3)", True))

    def test_median_of_per_round_differences_not_difference_of_medians(self):
        res = results(rates=[5000])
        hit = [0.140, 0.210, 0.330]  # vs direct's 0.100, 0.200, 0.300: +40, +10, +30 µs
        for r in res["runs"]:
            if r["system"] in ("direct", "sluice-cache-hit"):
                v = [0.100, 0.200, 0.300] if r["system"] == "direct" else hit
                r["lat_ms"]["p50"] = v[r["round"]]
        rows = cache_rows(res)
        # medians 0.210 − 0.200 would be +10 µs; per round the median is +30 µs
        self.assertIn("p50 0.210 ms vs 0.200 ms `direct`: +30 µs", next(m for k, (m, _) in rows.items()
                                                                     if k.startswith("cache hit")))

    def test_fail_over_the_limits(self):
        p50 = {k: dict(v) for k, v in P50.items()}
        p50["sluice-cache-hit"][5000] = 0.120 + 0.051
        p50["sluice-cache-miss"][5000] = 0.210 + 0.011
        rows = cache_rows(results(p50))
        self.assertEqual([ok for _, ok in rows.values()], [False, False])
        self.assertIn("+51 µs", next(m for k, (m, _) in rows.items() if k.startswith("cache hit")))
        self.assertIn("+11 µs", next(m for k, (m, _) in rows.items() if k.startswith("cache miss")))

    def test_a_disturbed_or_overloaded_run_is_not_comparable(self):
        res = results(**{"sluice-cache-miss": {"foreign_cpu_pct": 60.0},
                         "direct": {"achieved_rps": 3000.0}})
        rows = cache_rows(res)
        hit = next(m for k, (m, ok) in rows.items() if k.startswith("cache hit") and not ok)
        miss = next(m for k, (m, ok) in rows.items() if k.startswith("cache miss") and not ok)
        self.assertIn("not comparable: direct answered 3000 req/s", hit)
        self.assertIn("not comparable: other work used 60 % of a core during the sluice-cache-miss run", miss)

    def test_highest_rate_both_ran_without_5k(self):
        rows = cache_rows(results(rates=[1000]))
        for name, (_, ok) in rows.items():
            self.assertIn("at 1k req/s (billing off) (5k req/s not run: the highest rate both ran)", name)
            self.assertTrue(ok)

    def test_no_cache_runs_no_rows(self):
        p50 = {k: v for k, v in P50.items() if not k.startswith("sluice-cache")}
        self.assertEqual(targets.cache_targets(results(p50)), [])

    def test_in_the_targets_table(self):
        names = [name for name, _, _ in targets.targets(results())]
        self.assertEqual(sum(1 for n in names if n.startswith("cache ")), 2)


class CacheSection(unittest.TestCase):
    def test_section_rows_per_rate(self):
        md = render(results())
        sec = section(md, "Response cache")
        self.assertIn("gateway's own floor", sec)
        self.assertIn("never reaches an upstream", sec)
        self.assertIn("`cache-control: no-cache`", sec)
        self.assertIn("(see [Response cache](#response-cache))", md)
        self.assertIn("- Response cache (billing off): `" + settings.CACHE_BODY + "`", md)
        rows = [line for line in sec.splitlines() if line.startswith("| 1000 |") or line.startswith("| 5000 |")]
        self.assertEqual(len(rows), 2)
        cells = [c.strip() for c in rows[1].strip("|").split("|")]
        # rate, direct p50, no cache p50/p99, hit p50/p99, miss p50/p99, hit added p50/p99,
        # miss extra p50/p99, CPU
        self.assertEqual(cells[:13], ["5000", "0.120", "0.210", "0.630", "0.150", "0.450", "0.216", "0.648",
                                      "+30", "+90", "+6", "+18", "40 / 40 / 40"])
        self.assertEqual(len(cells), 13)
        # the targets table says PASS for both
        tgt = section(md, "Targets")
        self.assertRegex(tgt, r"\| cache hit adds ≤ 50 µs p50 [^|]*5k req/s[^|]*\| [^|]*\| PASS \|")
        self.assertRegex(tgt, r"\| cache miss [^|]*≤ 10 µs p50 [^|]*5k req/s[^|]*\| [^|]*\| PASS \|")

    def test_no_section_without_cache_runs(self):
        p50 = {k: v for k, v in P50.items() if not k.startswith("sluice-cache")}
        res = results(p50)
        res["systems"] = {k: v for k, v in res["systems"].items() if not k.startswith("sluice-cache")}
        md = render(res)
        self.assertNotIn("Response cache", md)
        self.assertNotIn("| cache hit", md)

    def test_only_hit_rows(self):
        p50 = {k: v for k, v in P50.items() if k != "sluice-cache-miss"}
        sec = section(render(results(p50)), "Response cache")
        row = next(line for line in sec.splitlines() if line.startswith("| 5000 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        self.assertEqual(cells[6:8], ["–", "–"])
        self.assertEqual(cells[10:12], ["–", "–"])
        self.assertEqual(cells[8], "+30")


class LimitTargetsUnchanged(unittest.TestCase):
    """limit_targets shares `comparable` with the cache targets: its wording stays."""

    def test_not_comparable_wording(self):
        p50 = {"sluice-sqlite": {5000: 0.300}, "sluice-sqlite-limited": {5000: 0.303}}
        res = results(p50, **{"sluice-sqlite-limited": {"foreign_cpu_pct": 40.0}})
        for r in res["runs"]:
            if r["system"] == "sluice-sqlite-limited":
                r["lease_takes"] = 10
        rows = targets.limit_targets(res)
        self.assertEqual(rows[0][1], "p50 0.303 ms limited vs 0.300 ms unlimited: +3 µs (per round, median of 3); "
                                     "not comparable: other work used 40 % of a core during the limited run")
        self.assertIs(rows[0][2], False)


def route_spec(marker: str) -> str:
    """The `spec:` of the bench manifests' document that contains `marker`."""
    doc = next(d for d in systems.sluice_manifests(12345).split("\n---\n") if marker in d)
    return doc[doc.index("spec:"):].strip()


class Configuration(unittest.TestCase):
    def test_cached_route_in_the_manifests(self):
        man = systems.sluice_manifests(12345)
        doc = next(d for d in man.split("\n---\n") if f"model: {settings.CACHE_MODEL}\n" in d)
        self.assertIn("kind: ModelRoute", doc)
        self.assertIn("  cache: {completions: deterministic}\n", doc)
        self.assertIn("  - upstream: mock\n", doc)
        # the other routes cache no completion
        self.assertEqual(man.count("cache:"), 1)

    def test_the_cache_twin_differs_by_the_cache_alone(self):
        cached, twin = route_spec(f"model: {settings.CACHE_MODEL}\n"), route_spec(f"model: {settings.CACHE_TWIN_MODEL}\n")
        self.assertEqual(twin, cached.replace("  cache: {completions: deterministic}\n", "")
                         .replace(settings.CACHE_MODEL, settings.CACHE_TWIN_MODEL))
        self.assertEqual(len(settings.CACHE_TWIN_MODEL), len(settings.CACHE_MODEL))
        self.assertEqual(settings.CACHE_TWIN_BODY.replace(settings.CACHE_TWIN_MODEL, settings.CACHE_MODEL),
                         settings.CACHE_BODY)
        self.assertIn(("cache-miss", "sluice-cache-miss", "sluice-cache-twin"), targets.AT_ONCE_PAIRS)

    def test_the_limits_are_compared_on_the_benchmark_route_without_prices(self):
        priced = route_spec(f"model: {settings.MODEL}\n  deadline")
        unpriced = route_spec(f"model: {settings.UNPRICED_MODEL}\n")
        self.assertEqual(unpriced, priced.replace('\n    price: {input: "1.00", output: "2.00"}', "")
                         .replace(f"  model: {settings.MODEL}\n  deadline", f"  model: {settings.UNPRICED_MODEL}\n  deadline"))
        self.assertEqual(settings.UNPRICED_BODY.replace(settings.UNPRICED_MODEL, settings.MODEL), settings.BODY)
        # Each limits pair and its control on that route, the limited key against its
        # unlimited twin on the same gateway.
        pairs = {name: (a, b) for name, a, b in targets.AT_ONCE_PAIRS}
        for ledger in ("pg", "sqlite"):
            self.assertEqual(pairs[f"limits-{ledger}"],
                             (f"sluice-{ledger}-limited-unpriced", f"sluice-{ledger}-unpriced"))
            self.assertEqual(pairs[f"control-{ledger}"], (f"sluice-{ledger}-unpriced",) * 2)
            self.assertIn(f"sluice-{ledger}-limited", targets.UNPRICED_TWINS)

    def test_bodies(self):
        import json

        body, cached = json.loads(settings.BODY), json.loads(settings.CACHE_BODY)
        self.assertEqual(cached.pop("model"), settings.CACHE_MODEL)
        self.assertEqual(cached.pop("temperature"), 0)
        body.pop("model")
        self.assertEqual(cached, body)
        self.assertEqual(report.CACHE_BODY_DOC, settings.CACHE_BODY)
        self.assertEqual(report.BODY_DOC, settings.BODY)

    def test_added_by_round_baseline(self):
        res = results()
        a = stats.added_by_round(res["runs"], "sluice-cache-miss", 1000, baseline="sluice")
        self.assertAlmostEqual(a["p50"], 5.0, places=6)



class Callgrind(unittest.TestCase):
    def test_cache_rows_against_the_plain_request(self):
        res = results()
        res["callgrind"] = {"n": 1000, "sluice": 84_600, "sluice-anthropic": 107_100, "sluice-cache-hit": 67_000,
                            "sluice-cache-miss": 122_000, "nginx": 24_250}
        md = section(render(res), "Instructions per request (callgrind)")
        self.assertIn("| sluice, billing off, cache hit | 67,000 | 2.8× | -17,600 |", md)
        self.assertIn("| sluice, billing off, cache miss (no-cache: upstream, then stored) | 122,000 | 5.0× | +37,400 |", md)
        self.assertIn("SHA-256 in software", md)

    def test_stream_rows_against_nginx_streaming(self):
        res = results()
        res["callgrind"] = {"n": 1000, "sluice": 78_700, "sluice-stream": 188_100, "nginx": 24_250,
                            "nginx-stream": 40_000}
        md = section(render(res), "Instructions per request (callgrind)")
        self.assertIn("| sluice, billing off, streamed (`stream: true`, 5 content events) | 188,100 | "
                      "4.7× (of nginx streaming) | +109,400 |", md)
        self.assertIn("| nginx (proxy_pass), streamed | 40,000 | 1.0× | |", md)

    def test_no_cache_counts_no_cache_rows(self):
        res = results()
        res["callgrind"] = {"n": 1000, "sluice": 84_600, "nginx": 24_250}
        md = section(render(res), "Instructions per request (callgrind)")
        self.assertNotIn("cache", md)


# The Messages passthrough beside the chat passthrough: +80 µs (sluice over direct) and
# +85 µs (sluice-messages over direct-anthropic) at 1k req/s.
MSG_P50 = {
    "direct": {1000: 0.100, 5000: 0.120},
    "sluice": {1000: 0.180, 5000: 0.210},
    "direct-anthropic": {1000: 0.110, 5000: 0.130},
    "sluice-messages": {1000: 0.195, 5000: 0.240},
    "nginx": {1000: 0.160, 5000: 0.190},
}


def messages_results(p50: dict | None = None, **run_over) -> dict:
    res = results(p50 or MSG_P50, **run_over)
    res["systems"] = {"direct": "direct (mock)", "direct-anthropic": "direct (mock), Anthropic protocol",
                      "sluice": "sluice, billing off",
                      "sluice-messages": "sluice, billing off, /v1/messages passthrough (anthropic candidate)",
                      "nginx": "nginx (proxy_pass)"}
    return res


def messages_rows(res: dict) -> list[tuple[str, str, bool | None]]:
    return targets.messages_targets(res)


class MessagesTargets(unittest.TestCase):
    def test_latency_row_passes_within_the_tolerance(self):
        rows = messages_rows(messages_results())
        self.assertEqual(len(rows), 1)
        name, measured, ok = rows[0]
        self.assertIn("`/v1/messages` passthrough (anthropic candidate) adds no more p50 than the Chat Completions "
                      "passthrough at 1k req/s", name)
        self.assertIn("tolerance +10 µs", name)
        self.assertEqual(measured, "+85 µs added (vs the mock's `/v1/messages`) vs +80 µs (chat, vs its "
                                   "`/v1/chat/completions`): +5 µs (per round, median of 3)")
        self.assertIs(ok, True)

    def test_latency_row_fails_past_the_tolerance(self):
        p50 = {k: dict(v) for k, v in MSG_P50.items()}
        p50["sluice-messages"][1000] = 0.110 + 0.091  # +91 µs: 11 µs over chat's +80
        name, measured, ok = messages_rows(messages_results(p50))[0]
        self.assertIn(": +11 µs (per round", measured)
        self.assertIs(ok, False)

    def test_baseline_is_the_mocks_messages_path(self):
        res = messages_results()
        self.assertEqual(stats.BASELINES["sluice-messages"], "direct-anthropic")
        a = stats.added_by_round(res["runs"], "sluice-messages", 1000)
        self.assertAlmostEqual(a["p50"], 85.0, places=6)

    def test_per_round_differences_not_difference_of_medians(self):
        res = messages_results(rates=[1000])
        # added per round: messages +85, +105, +120 (median +105), chat +80, +100, +60
        # (median +80): the medians' difference would be +25 µs; per round it is +5, +5,
        # +60, median +5
        p50 = {"direct": [0.100] * 3, "direct-anthropic": [0.110] * 3,
               "sluice-messages": [0.195, 0.215, 0.230], "sluice": [0.180, 0.200, 0.160]}
        for r in res["runs"]:
            if r["system"] in p50:
                r["lat_ms"]["p50"] = p50[r["system"]][r["round"]]
        extra = stats.added_over_by_round(res["runs"], "sluice-messages", "sluice", 1000)["p50"]
        self.assertAlmostEqual(extra, 5.0, places=6)
        name, measured, ok = messages_rows(res)[0]
        self.assertIn("+105 µs added (vs the mock's `/v1/messages`) vs +80 µs (chat", measured)
        self.assertIn(": +5 µs (per round, median of 3)", measured)
        self.assertIs(ok, True)

    def test_a_disturbed_run_is_not_comparable(self):
        res = messages_results(**{"direct-anthropic": {"foreign_cpu_pct": 50.0}})
        _, measured, ok = messages_rows(res)[0]
        self.assertIn("not comparable: other work used 50 % of a core during the direct-anthropic run", measured)
        self.assertIs(ok, False)

    def test_instructions_row(self):
        res = messages_results()
        res["callgrind"] = {"n": 2000, "sluice": 78_000, "sluice-messages": 79_500, "nginx": 24_250}
        rows = messages_rows(res)
        self.assertEqual(len(rows), 2)
        name, measured, ok = rows[1]
        self.assertEqual(name, "instructions per `/v1/messages` passthrough request ≤ the Chat Completions "
                               "passthrough's + 3 % (callgrind, the same process)")
        self.assertEqual(measured, "79,500 vs 78,000: +1,500 (+1.9 %)")
        self.assertIs(ok, True)
        res["callgrind"]["sluice-messages"] = 80_400  # +3.1 %
        self.assertIs(messages_rows(res)[1][2], False)

    def test_no_messages_runs_no_rows(self):
        self.assertEqual(messages_rows(results()), [])
        res = results()
        res["callgrind"] = {"n": 2000, "sluice": 78_000, "nginx": 24_250}
        self.assertEqual(messages_rows(res), [])

    def test_in_the_targets_table_and_the_report(self):
        res = messages_results()
        res["callgrind"] = {"n": 2000, "sluice": 78_000, "sluice-messages": 79_500, "nginx": 24_250}
        md = render(res)
        tgt = section(md, "Targets")
        self.assertRegex(tgt, r"\| `/v1/messages` passthrough \(anthropic candidate\) adds no more p50 [^|]*\| [^|]*\| PASS \|")
        self.assertRegex(tgt, r"\| instructions per `/v1/messages` passthrough request [^|]*\| [^|]*\| PASS \|")
        added = section(md, "Added latency (via − direct), µs")
        self.assertIn("subtract the mock answering the Messages request on its own `/v1/messages`", added)
        self.assertIn("| 1000 | sluice, billing off, /v1/messages passthrough (anthropic candidate) | +85 |", added)
        cg = section(md, "Instructions per request (callgrind)")
        self.assertIn("| sluice, billing off, `/v1/messages` passthrough (anthropic candidate) | 79,500 | 3.3× | +1,500 |", cg)
        self.assertIn("- The route `bench-claude` (billing off)", md)
        self.assertIn("`" + settings.MESSAGES_BODY + "`", md)

    def test_no_anthropic_wording_without_its_rows(self):
        md = render(results())
        self.assertNotIn("bench-claude", md)
        self.assertNotIn("/v1/messages", md)


class MessagesConfiguration(unittest.TestCase):
    def test_body_names_the_route_whose_candidate_speaks_anthropic(self):
        import json

        body = json.loads(settings.MESSAGES_BODY)
        self.assertEqual(body["model"], settings.ANTHROPIC_MODEL)
        self.assertEqual(settings.MESSAGES_PATH, "/v1/messages")
        self.assertEqual(settings.MESSAGES_HEADERS, {"anthropic-version": "2023-06-01"})
        docs = systems.sluice_manifests(12345).split("\n---\n")
        route = next(d for d in docs if "kind: ModelRoute" in d and f"  model: {settings.ANTHROPIC_MODEL}\n" in d)
        upstream = route.split("- upstream: ", 1)[1].split("\n", 1)[0]
        # the candidate's model is the client's: the splice leaves the bytes as they were
        self.assertIn(f"    model: {settings.ANTHROPIC_MODEL}\n", route)
        up = next(d for d in docs if "kind: Upstream" in d and f"  name: {upstream}\n" in d)
        self.assertIn("  protocol: anthropic\n", up)
        # the same bytes as the direct baseline's, and as the report says
        self.assertEqual(settings.MESSAGES_BODY, settings.ANTHROPIC_DIRECT_BODY)
        self.assertEqual(report.MESSAGES_BODY_DOC, settings.MESSAGES_BODY)


if __name__ == "__main__":
    unittest.main()


def pair_run(pair: str, first: str, second: str, rnd: int, a50: float, b50: float, **over) -> dict:
    """One run of two systems at once, as load.run_at_once records it (5k req/s, halves
    answered in full on a quiet machine)."""
    def half(system: str, p50: float) -> dict:
        return {"system": system, "ok": 20000, "sent": 20000, "achieved_rps": 2500.0,
                "lat_ms": {"p50": p50, "p90": p50 * 2, "p99": p50 * 3, "p99.9": p50 * 6}}
    r = {"pair": pair, "round": rnd, "rate": 5000, "duration": 8, "foreign_cpu_pct": 2.0,
         "a": half(first, a50), "b": half(second, b50)}
    r.update(over)
    return r


def at_once_results(miss_us: float = 4.0, control_us: float = 1.0, **over) -> dict:
    """The cache results above plus the miss and its control at once: per round the miss
    `miss_us` above its twin and the control `control_us` apart, over a round shift that
    both halves share."""
    res = results()
    runs = []
    for rnd, shift in enumerate(SHIFT_MS):
        base = 0.300 + shift
        runs.append(pair_run("cache-miss", "sluice-cache-miss", "sluice", rnd, base + miss_us / 1000, base,
                             **over.get("cache-miss", {})))
        runs.append(pair_run("control-off", "sluice", "sluice", rnd, base + control_us / 1000, base,
                             **over.get("control-off", {})))
    res["at_once"] = {"rate": 5000, "runs": runs}
    return res


class AtOnce(unittest.TestCase):
    def rows(self, res: dict) -> list[tuple[str, str, bool | None]]:
        return [r for r in targets.cache_targets(res) if "cache miss" in r[0]]

    def test_the_pair_at_once_is_the_target_and_the_runs_apart_context(self):
        rows = self.rows(at_once_results())
        self.assertEqual(len(rows), 2)
        (name, measured, ok), (ctx, _, ctx_ok) = rows
        self.assertIn("(billing off; both loaded at once, 2.5k req/s each: see [At once](#at-once))", name)
        self.assertIn("≤ 10 µs p50 over its twin (the cached route's request to the same route without `cache`) at 5k req/s", name)
        self.assertTrue(ok, measured)
        self.assertIn("+4 µs (median of rounds +4, +4, +4); the same gateway against itself +1 µs", measured)
        self.assertTrue(ctx.startswith("(context: runs one after another) cache miss"), ctx)
        self.assertIsNone(ctx_ok)

    def test_over_the_bound_fails(self):
        (_, measured, ok), _ = self.rows(at_once_results(miss_us=12.0))
        self.assertFalse(ok)
        self.assertIn("+12 µs", measured)

    def test_a_control_that_does_not_resolve_the_bound_fails(self):
        (_, measured, ok), _ = self.rows(at_once_results(miss_us=3.0, control_us=-15.0))
        self.assertFalse(ok)
        self.assertIn("-15 µs, which does not resolve 10 µs", measured)

    def test_a_half_that_fell_behind_or_other_work_is_not_comparable(self):
        slow = {"a": {"system": "sluice-cache-miss", "ok": 15000, "sent": 20000, "achieved_rps": 1875.0,
                      "lat_ms": {"p50": 0.3, "p90": 0.6, "p99": 0.9, "p99.9": 1.8}}}
        (_, measured, ok), _ = self.rows(at_once_results(**{"cache-miss": slow}))
        self.assertFalse(ok)
        self.assertIn("not comparable: round 0: sluice-cache-miss answered 15,000 of 20,000 at 1875 req/s", measured)
        (_, measured, ok), _ = self.rows(at_once_results(**{"control-off": {"foreign_cpu_pct": 40.0}}))
        self.assertFalse(ok)
        self.assertIn("other work used 40 % of a core", measured)

    def test_without_runs_at_once_the_old_target_stands(self):
        rows = self.rows(results())
        self.assertEqual(len(rows), 1)
        self.assertTrue(rows[0][0].startswith("cache miss (no-cache: upstream, stored) adds ≤ 10 µs p50"))
        self.assertIsNotNone(rows[0][2])

    def test_section(self):
        md = render(at_once_results())
        sec = section(md, "At once")
        self.assertIn("| cache-miss | sluice-cache-miss | sluice | 0.304 / 0.300 |", sec)
        self.assertIn("| control-off | sluice | sluice |", sec)
        self.assertIn("| +4, +4, +4 | +4 |", sec)
        self.assertIn("see [At once](#at-once))", md)
