use super::*;

const T0: i64 = 1_796_000_000_000 - 1_796_000_000_000 % 60_000;
const M: i64 = 60_000;

fn checks(pattern: &[(i64, bool)]) -> Vec<Check> {
    pattern.iter().map(|&(at_ms, ok)| Check { at_ms, ok }).collect()
}

/// Checks every `every` ms from `from` while `until`, with `ok` deciding each one.
fn every(from: i64, until: i64, every: i64, ok: impl Fn(i64) -> bool) -> Vec<Check> {
    (0..).map(|i| from + i * every).take_while(|t| *t < until).map(|t| Check { at_ms: t, ok: ok(t) }).collect()
}

fn candidate<'a>(interval: Option<i64>, checks: &'a [Check], live: &'a BTreeMap<i64, Counts>) -> CandidateHistory<'a> {
    CandidateHistory { interval_ms: interval, checks, live, circuit: Circuit::Closed }
}

#[test]
fn a_failing_candidate_opens_an_incident_that_resolves_after_two_good_checks() {
    // Checks every 10 s; the primary fails from minute 3 to minute 6 (exclusive).
    let bad = |t: i64| !(T0 + 3 * M..T0 + 6 * M).contains(&t);
    let primary = every(T0, T0 + 20 * M, 10_000, bad);
    let backup = every(T0, T0 + 20 * M, 10_000, |_| true);
    let none = BTreeMap::new();
    let history = RouteHistory {
        clients: &none,
        objective: 0.999,
        candidates: vec![candidate(Some(10_000), &primary, &none), candidate(Some(10_000), &backup, &none)],
    };
    let during = replay(&history, T0, T0 + 4 * M + 30_000);
    assert_eq!(during.status, Status::DegradedPerformance);
    // Every check of the last two intervals failed and no live attempt succeeded.
    assert_eq!(during.candidates, vec![Status::MajorOutage, Status::Operational]);
    assert_eq!(during.incidents.len(), 1);
    assert_eq!(during.incidents[0].started_ms, T0 + 3 * M);
    assert_eq!(during.incidents[0].resolved_ms, None);
    assert_eq!(during.incidents[0].worst, Status::DegradedPerformance);

    // The first good check alone is not enough: one check later it is operational.
    let one_good = replay(&history, T0, T0 + 6 * M + 5_000);
    assert_eq!(one_good.candidates[0], Status::DegradedPerformance);
    let two_good = replay(&history, T0, T0 + 6 * M + 10_000);
    assert_eq!(two_good.candidates[0], Status::Operational);
    assert_eq!(two_good.status, Status::Operational);

    let after = replay(&history, T0, T0 + 10 * M);
    assert_eq!(after.status, Status::Operational);
    assert_eq!(after.incidents.len(), 1);
    assert_eq!(after.incidents[0].started_ms, T0 + 3 * M);
    assert_eq!(after.incidents[0].resolved_ms, Some(T0 + 6 * M));
}

#[test]
fn a_live_failure_after_the_good_checks_holds_the_recovery() {
    let primary = checks(&[(T0 + 5_000, false), (T0 + 65_000, true), (T0 + 70_000, true)]);
    let mut live = BTreeMap::new();
    live.insert(1 + T0 / M, Counts { ok: 3, failed: 1 });
    let history = RouteHistory {
        clients: &BTreeMap::new(),
        objective: 0.999,
        candidates: vec![candidate(Some(5_000), &primary, &live)],
    };
    let r = replay(&history, T0, T0 + 75_000);
    assert_eq!(r.candidates, vec![Status::DegradedPerformance]);
    // A minute later the failure is before the older of two newer good checks.
    let later = checks(&[(T0 + 5_000, false), (T0 + 65_000, true), (T0 + 125_000, true), (T0 + 130_000, true)]);
    let history = RouteHistory { candidates: vec![candidate(Some(5_000), &later, &live)], ..history };
    assert_eq!(replay(&history, T0, T0 + 131_000).candidates, vec![Status::Operational]);
}

#[test]
fn clients_failing_make_a_partial_outage_and_the_incident_keeps_the_worst_state() {
    let none = BTreeMap::new();
    let mut clients = BTreeMap::new();
    clients.insert(T0 / M + 2, Counts { ok: 90, failed: 10 });
    let mut live = BTreeMap::new();
    live.insert(T0 / M + 2, Counts { ok: 90, failed: 10 });
    let history = RouteHistory {
        clients: &clients,
        objective: 0.99,
        candidates: vec![candidate(None, &[], &live), candidate(None, &[], &none)],
    };
    let during = replay(&history, T0, T0 + 3 * M);
    assert_eq!(during.status, Status::PartialOutage);
    assert_eq!(during.incidents[0].worst, Status::PartialOutage);
    // Five minutes after the bad minute, the window no longer holds it.
    let after = replay(&history, T0, T0 + 8 * M);
    assert_eq!(after.status, Status::Operational);
    assert_eq!(after.incidents.len(), 1);
    assert_eq!(after.incidents[0].started_ms, T0 + 2 * M);
    assert_eq!(after.incidents[0].resolved_ms, Some(T0 + 7 * M));
    assert_eq!(after.incidents[0].changes, vec![(T0 + 2 * M, Status::PartialOutage)]);
}

#[test]
fn the_circuit_weighs_only_now() {
    let none = BTreeMap::new();
    let mut c = candidate(None, &[], &none);
    c.circuit = Circuit::Open;
    let history = RouteHistory { clients: &none, objective: 0.999, candidates: vec![c] };
    let r = replay(&history, T0, T0 + 10 * M);
    assert_eq!(r.candidates, vec![Status::PartialOutage]);
    assert_eq!(r.status, Status::DegradedPerformance);
    assert_eq!(r.incidents.len(), 1);
    assert_eq!(r.incidents[0].started_ms, T0 + 10 * M);
}

#[test]
fn every_candidate_in_major_outage_is_a_major_outage() {
    let dead = every(T0, T0 + 5 * M, 30_000, |_| false);
    let none = BTreeMap::new();
    let history = RouteHistory {
        clients: &none,
        objective: 0.999,
        candidates: vec![candidate(Some(30_000), &dead, &none), candidate(Some(30_000), &dead, &none)],
    };
    let r = replay(&history, T0, T0 + 4 * M);
    assert_eq!(r.status, Status::MajorOutage);
    assert_eq!(r.incidents[0].worst, Status::MajorOutage);
    assert_eq!(r.incidents[0].started_ms, T0);
}
