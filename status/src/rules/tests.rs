use super::*;

fn counts(ok: u64, failed: u64) -> Counts {
    Counts { ok, failed }
}

fn synthetic(latest: Option<bool>, previous: Option<bool>, recent: Counts) -> Option<Synthetic> {
    Some(Synthetic { latest_ok: latest, previous_ok: previous, recent })
}

#[test]
fn candidate_rules_table() {
    let closed = Some(Circuit::Closed);
    #[rustfmt::skip]
    let table: &[(&str, Evidence, Status)] = &[
        ("quiet, no checks", Evidence::default(), Status::Operational),
        ("good checks", Evidence { synthetic: synthetic(Some(true), Some(true), counts(2, 0)), circuit: closed, ..Default::default() }, Status::Operational),
        ("latest check failed", Evidence { synthetic: synthetic(Some(false), Some(true), counts(1, 1)), ..Default::default() }, Status::DegradedPerformance),
        ("latest two checks failed", Evidence { synthetic: synthetic(Some(false), Some(false), counts(1, 2)), ..Default::default() }, Status::PartialOutage),
        ("every attempt of two intervals failed", Evidence { synthetic: synthetic(Some(false), Some(false), counts(0, 2)), live_recent: counts(0, 7), ..Default::default() }, Status::MajorOutage),
        ("checks failed but live succeeded lately", Evidence { synthetic: synthetic(Some(false), Some(false), counts(0, 2)), live_recent: counts(1, 7), ..Default::default() }, Status::PartialOutage),
        ("no check in two intervals is not an outage", Evidence { synthetic: synthetic(Some(true), Some(true), counts(0, 0)), ..Default::default() }, Status::Operational),
        ("live 99 of 100 is not below 99 %", Evidence { live: counts(99, 1), ..Default::default() }, Status::Operational),
        ("live 98 of 100", Evidence { live: counts(98, 2), ..Default::default() }, Status::DegradedPerformance),
        ("live 90 of 100 is not below 90 %", Evidence { live: counts(90, 10), ..Default::default() }, Status::DegradedPerformance),
        ("live 89 of 100", Evidence { live: counts(89, 11), ..Default::default() }, Status::PartialOutage),
        ("live below 20 attempts says nothing", Evidence { live: counts(0, 19), ..Default::default() }, Status::Operational),
        ("without checks, every one of 20 live attempts failed", Evidence { live: counts(0, 20), ..Default::default() }, Status::MajorOutage),
        ("with checks, live failures alone are partial", Evidence { synthetic: synthetic(Some(true), Some(true), counts(2, 0)), live: counts(0, 20), ..Default::default() }, Status::PartialOutage),
        ("circuit half-open", Evidence { circuit: Some(Circuit::HalfOpen), ..Default::default() }, Status::DegradedPerformance),
        ("circuit open", Evidence { circuit: Some(Circuit::Open), ..Default::default() }, Status::PartialOutage),
        ("circuit unknown", Evidence { circuit: Some(Circuit::Unknown), ..Default::default() }, Status::Operational),
    ];
    for (name, evidence, want) in table {
        assert_eq!(candidate_rules(evidence), *want, "{name}");
    }
}

#[test]
fn route_rules_table() {
    use Status::*;
    #[rustfmt::skip]
    let table: &[(&str, &[Status], Counts, Status)] = &[
        ("all operational", &[Operational, Operational], counts(1000, 0), Operational),
        ("one candidate down, clients served", &[MajorOutage, Operational], counts(1000, 0), DegradedPerformance),
        ("one degraded", &[Operational, DegradedPerformance], counts(0, 0), DegradedPerformance),
        ("clients below the objective", &[Operational, Operational], counts(998, 2), PartialOutage),
        ("clients exactly at the objective", &[Operational, Operational], counts(999, 1), Operational),
        ("no traffic is no failure", &[PartialOutage, Operational], counts(0, 0), DegradedPerformance),
        ("every candidate in major outage", &[MajorOutage, MajorOutage], counts(0, 50), MajorOutage),
        ("one major, one partial, clients failing", &[MajorOutage, PartialOutage], counts(10, 50), PartialOutage),
    ];
    for (name, candidates, clients, want) in table {
        assert_eq!(route_rules(candidates, *clients, 0.999), *want, "{name}");
    }
}

#[test]
fn indicator_is_that_of_the_worst_route() {
    use Status::*;
    assert_eq!(indicator([]), Indicator::None);
    assert_eq!(indicator([Operational, Operational]), Indicator::None);
    assert_eq!(indicator([Operational, DegradedPerformance]), Indicator::Minor);
    assert_eq!(indicator([PartialOutage, DegradedPerformance]), Indicator::Major);
    assert_eq!(indicator([PartialOutage, MajorOutage]), Indicator::Critical);
}

#[test]
fn values_are_statuspages() {
    let values: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(values, ["operational", "degraded_performance", "partial_outage", "major_outage"]);
    for s in Status::ALL {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        assert_eq!(serde_json::to_value(s.indicator()).unwrap(), s.indicator().as_str());
    }
}
