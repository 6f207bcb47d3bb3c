use std::time::Duration;

use sluice_ledger::{Heartbeat, RouteMinute, UpstreamHeartbeat, UpstreamMinute};

use super::*;
use crate::status::conditions::status_of;
use crate::testing::{route, upstream};
use crate::view::{GroupView, group_view};
use sluice_crds::upstream::CircuitState;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_746_100_830)
}

const NOW_MINUTE: i64 = 29_101_680;

fn view(routes: &[ModelRoute]) -> GroupView {
    group_view("team-a", "default", &[upstream("team-a", "east"), upstream("team-a", "west")], routes, &[])
}

fn status_of_route(
    v: &GroupView,
    name: &str,
    gateway: Option<GatewayState>,
    obs: Option<&Observations>,
    prev: Option<&ModelRouteStatus>,
) -> ModelRouteStatus {
    let r = v.routes.iter().find(|r| r.name_any() == name).unwrap();
    let problems = v.route_problems(name);
    let key = format!("team-a/{name}");
    let inputs = RouteInputs {
        route: r,
        config: v.resolved.snapshot.routes.iter().find(|c| c.key == key),
        problems: &problems,
        known_upstreams: &v.known_upstreams,
        gateway,
        observations: obs,
        now: now(),
    };
    route_status(prev, &inputs)
}

fn condition<'a>(s: &'a ModelRouteStatus, t: &str) -> (&'a str, &'a str, &'a str) {
    let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

const UP: Option<GatewayState> = Some(GatewayState { desired: 2, available: 2 });

#[test]
fn a_fully_resolved_route_with_a_gateway_is_ready() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["east", "west"])]);
    let s = status_of_route(&v, "chat", UP, None, None);
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.candidate_count, Some(2));
    assert_eq!(condition(&s, "ResolvedRefs"), ("True", "Resolved", "all 2 candidates resolved to Upstreams"));
    assert_eq!(condition(&s, "Degraded"), ("False", "AllCandidatesResolved", "no candidate is missing"));
    assert_eq!(condition(&s, "Ready"), ("True", "Serving", "served by gateway default (2/2 replicas available)"));
}

#[test]
fn a_missing_candidate_degrades_the_route() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["east", "gone"])]);
    let s = status_of_route(&v, "chat", UP, None, None);
    assert_eq!(s.candidate_count, Some(1));
    assert_eq!(condition(&s, "ResolvedRefs"), ("True", "PartiallyResolved", "Upstreams not found: \"gone\""));
    assert_eq!(
        condition(&s, "Degraded"),
        (
            "True",
            "CandidatesMissing",
            "serving with 1 of 2 candidates; missing: \"gone\"; runbook: docs/operate.md#config-rejected"
        )
    );
    assert_eq!(condition(&s, "Ready").0, "True");
}

#[test]
fn no_resolved_candidate_means_not_resolved_and_not_ready() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["gone", "lost"])]);
    let s = status_of_route(&v, "chat", None, None, None);
    assert_eq!(s.candidate_count, Some(0));
    assert_eq!(
        condition(&s, "ResolvedRefs"),
        (
            "False",
            "NoCandidateResolved",
            "no candidate resolved to an Upstream; not found: \"gone\", \"lost\"; runbook: docs/operate.md#config-rejected"
        )
    );
    assert_eq!(condition(&s, "Degraded").1, "NotServed");
    let ready = condition(&s, "Ready");
    assert_eq!((ready.0, ready.1), ("False", "NoCandidateResolved"));
    assert_eq!(
        ready.2,
        "spec.candidates: no candidate resolved to an Upstream; the route is left out; runbook: docs/operate.md#config-rejected"
    );
}

#[test]
fn a_model_conflict_is_its_own_reason() {
    let v = view(&[route("team-a", "a", "gpt-4o", None, &["east"]), route("team-a", "b", "gpt-4o", None, &["west"])]);
    let s = status_of_route(&v, "b", UP, None, None);
    assert_eq!(condition(&s, "Ready").1, "ModelConflict");
    assert_eq!(condition(&s, "ResolvedRefs").0, "True", "its refs are fine");
}

#[test]
fn readiness_follows_the_gateway_deployment() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["east"])]);
    let pending = status_of_route(&v, "chat", None, None, None);
    assert_eq!(
        condition(&pending, "Ready"),
        ("Unknown", "GatewayPending", "waiting for Deployment sluice-gateway-default")
    );
    let down = status_of_route(&v, "chat", Some(GatewayState { desired: 2, available: 0 }), None, Some(&pending));
    assert_eq!(
        condition(&down, "Ready"),
        (
            "False",
            "GatewayUnavailable",
            "no gateway pod of default is available (0/2 replicas); runbook: docs/operate.md#gateway-pods-not-ready"
        )
    );
}

#[test]
fn figures_come_from_the_route_and_its_candidates() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["east", "west"])]);
    let mut m = RouteMinute::new("team-a/chat", "chat", NOW_MINUTE);
    m.total = 400;
    m.bad = 3;
    m.failovers = 12;
    let mut earlier = RouteMinute::new("team-a/chat", "chat", NOW_MINUTE - 2);
    earlier.total = 100;
    let mut east = UpstreamMinute::new("team-a/east", NOW_MINUTE);
    east.record("ok", Some(100));
    east.record("http_5xx", None);
    east.record("http_4xx", Some(50));
    let obs = Observations {
        route_minutes: vec![m, earlier, RouteMinute::new("team-a/other", "chat", NOW_MINUTE)],
        upstream_minutes: vec![east],
        heartbeats: vec![Heartbeat {
            gateway_id: "gw-1".into(),
            at: now(),
            upstreams: vec![UpstreamHeartbeat {
                upstream: "team-a/east".into(),
                circuit: "Open".into(),
                effective_weight: 40.0,
                successes: 3,
                failures: 1,
            }],
        }],
    };
    let s = status_of_route(&v, "chat", UP, Some(&obs), None);
    assert_eq!((s.requests5m, s.failovers5m), (Some(500), Some(12)));
    assert_eq!(s.availability5m.as_deref(), Some("99.40"));
    assert_eq!(s.candidates.len(), 2);
    let east = &s.candidates[0];
    assert_eq!(east.upstream, "east");
    assert_eq!(east.effective_weight.as_deref(), Some("75.0"), "100 × 3/4 from the heartbeat");
    assert_eq!(east.success_rate.as_deref(), Some("50.00"), "ok over judged (4xx left out)");
    assert_eq!(east.circuit, Some(CircuitState::Open));
    let west = &s.candidates[1];
    assert_eq!(
        (west.effective_weight.as_deref(), west.success_rate.as_deref(), west.circuit),
        (Some("100.0"), None, None)
    );
}

#[test]
fn unchanged_inputs_give_an_identical_status() {
    let v = view(&[route("team-a", "chat", "gpt-4o", None, &["east"])]);
    let first = status_of_route(&v, "chat", UP, Some(&Observations::default()), None);
    let again = status_of_route(&v, "chat", UP, Some(&Observations::default()), Some(&first));
    assert_eq!(first, again, "so the status loop patches nothing");
    assert_eq!(status_of(&again.conditions, "Ready"), Some("True"));
}
