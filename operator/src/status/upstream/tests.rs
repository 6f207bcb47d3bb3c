use std::collections::BTreeMap;
use std::time::Duration;

use sluice_ledger::{Heartbeat, UpstreamHeartbeat, UpstreamMinute};

use super::*;
use crate::status::conditions::status_of;

/// 2025-05-01T12:00:30Z, unix minute 29_101_680.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_746_100_830)
}

const NOW_MINUTE: i64 = 29_101_680;

fn minute(key: &str, minute: i64, outcomes: &[(&str, u64)], first_byte: &[(usize, u64)]) -> UpstreamMinute {
    let mut m = UpstreamMinute::new(key, minute);
    m.attempts_by_outcome = outcomes.iter().map(|(o, n)| (o.to_string(), *n)).collect::<BTreeMap<_, _>>();
    for (bucket, n) in first_byte {
        m.first_byte_buckets[*bucket] = *n;
    }
    m
}

fn beat(pod: &str, key: &str, circuit: &str) -> Heartbeat {
    Heartbeat {
        gateway_id: pod.into(),
        at: now(),
        upstreams: vec![UpstreamHeartbeat {
            upstream: key.into(),
            circuit: circuit.into(),
            effective_weight: 100.0,
            successes: 9,
            failures: 1,
        }],
    }
}

fn inputs<'a>(problems: &'a [Problem], obs: Option<&'a Observations>) -> UpstreamInputs<'a> {
    UpstreamInputs { key: "team-a/east", generation: Some(4), problems, observations: obs, now: now() }
}

#[test]
fn figures_come_from_five_minutes_of_rollups() {
    let obs = Observations {
        upstream_minutes: vec![
            // 180 ok + 2 http_5xx + 20 client errors; 2 failures are the newest at minute -1.
            minute("team-a/east", NOW_MINUTE - 3, &[("ok", 100), ("http_4xx", 20)], &[(7, 100)]),
            minute(
                "team-a/east",
                NOW_MINUTE - 1,
                &[("ok", 80), ("http_5xx", 1), ("connect", 1), ("reset", 0)],
                &[(8, 80)],
            ),
            minute("team-a/other", NOW_MINUTE, &[("http_5xx", 50)], &[]),
        ],
        heartbeats: vec![beat("gw-1", "team-a/east", "Closed"), beat("gw-2", "team-a/east", "HalfOpen")],
        ..Observations::default()
    };
    let s = upstream_status(None, &inputs(&[], Some(&obs)));
    assert_eq!(s.observed_generation, Some(4));
    assert_eq!(s.requests5m, Some(202));
    // 180 / (202 − 20 client errors)
    assert_eq!(s.success_rate.as_deref(), Some("98.90"));
    // 100 in (150, 250], 80 in (250, 400]: the median is in the first bucket.
    assert_eq!(s.ttfb_p50.as_deref(), Some("240ms"));
    assert_eq!(s.ttfb_p99.as_deref(), Some("397ms"));
    assert_eq!(s.circuit, Some(CircuitState::HalfOpen));
    let lf = s.last_failure.clone().expect("a failure");
    // A tie (1 http_5xx, 1 connect) goes to the first outcome of the contract's order.
    assert_eq!((lf.reason.as_str(), lf.time.as_str()), ("http_5xx", "2025-05-01T11:59:00Z"));
    assert_eq!(status_of(&s.conditions, "Ready"), Some("True"));
}

#[test]
fn no_traffic_means_no_rate_but_zero_requests() {
    let s = upstream_status(None, &inputs(&[], Some(&Observations::default())));
    assert_eq!((s.requests5m, s.success_rate, s.ttfb_p50, s.circuit), (Some(0), None, None, None));
}

#[test]
fn an_open_circuit_anywhere_wins_and_is_a_transition() {
    let obs = Observations {
        heartbeats: vec![beat("gw-1", "team-a/east", "Closed"), beat("gw-2", "team-a/east", "Open")],
        ..Observations::default()
    };
    let before = upstream_status(None, &inputs(&[], Some(&Observations::default())));
    let after = upstream_status(Some(&before), &inputs(&[], Some(&obs)));
    assert_eq!(after.circuit, Some(CircuitState::Open));
    let ready = after.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "CircuitOpen"));
    assert_eq!(ready.message, "the circuit is open in 1 of 2 gateway pods; runbook: docs/operate.md#upstream-down");
    let t = transition(Some(&before), &after).expect("opened");
    assert_eq!((t.warning, t.reason), (true, "CircuitOpened"));
    assert_eq!(transition(Some(&after), &after), None, "staying open is not a new transition");
}

#[test]
fn the_ledger_being_down_keeps_the_figures() {
    let obs = Observations {
        upstream_minutes: vec![minute("team-a/east", NOW_MINUTE, &[("ok", 10)], &[])],
        ..Observations::default()
    };
    let before = upstream_status(None, &inputs(&[], Some(&obs)));
    let after = upstream_status(Some(&before), &inputs(&[], None));
    assert_eq!(after, before);
}

#[test]
fn a_failure_that_left_the_window_is_remembered() {
    let obs = Observations {
        upstream_minutes: vec![minute("team-a/east", NOW_MINUTE, &[("first_byte_timeout", 3)], &[])],
        ..Observations::default()
    };
    let before = upstream_status(None, &inputs(&[], Some(&obs)));
    let after = upstream_status(Some(&before), &inputs(&[], Some(&Observations::default())));
    assert_eq!(after.last_failure.map(|f| f.reason).as_deref(), Some("first_byte_timeout"));
}

#[test]
fn problems_make_it_not_ready() {
    let missing =
        [Problem::warning("Upstream team-a/east", "spec.auth.secretRef", "Secret team-a/keys has no key \"apiKey\"")];
    let s = upstream_status(None, &inputs(&missing, None));
    let ready = &s.conditions[0];
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "SecretMissing"));
    assert_eq!(
        ready.message,
        "spec.auth.secretRef: Secret team-a/keys has no key \"apiKey\"; runbook: docs/operate.md#config-rejected"
    );
    let invalid = [Problem::error(
        "Upstream team-a/east",
        "spec.baseUrl",
        "baseUrl must be an http:// or https:// URL with a host",
    )];
    let s = upstream_status(None, &inputs(&invalid, None));
    assert_eq!(s.conditions[0].reason, "Invalid");
}
