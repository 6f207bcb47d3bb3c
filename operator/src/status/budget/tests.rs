use std::time::Duration;

use sluice_ledger::RouteMinute;
use sluice_ledger::budget::BudgetPolicy;

use super::*;
use crate::testing::{budget, route, upstream};
use crate::view::budget_view;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_746_100_830)
}

const NOW_MINUTE: i64 = 29_101_680;

fn report(bad_per_minute: u64) -> BudgetReport {
    let b = budget("team-a", "slo", &["chat"]);
    let view = budget_view(&b, &[upstream("team-a", "east")], &[route("team-a", "chat", "m", None, &["east"])]);
    let config = view.config.unwrap();
    let policy = BudgetPolicy::from(&config);
    let minutes: Vec<RouteMinute> = (0..60)
        .map(|i| {
            let mut m = RouteMinute::new("team-a/chat", "chat", NOW_MINUTE - i);
            m.total = 1000;
            m.bad = bad_per_minute;
            m
        })
        .collect();
    sluice_ledger::budget::evaluate(&policy, &minutes, NOW_MINUTE).unwrap()
}

fn inputs<'a>(
    b: &'a ErrorBudget,
    view: &'a BudgetView,
    r: Option<Result<&'a BudgetReport, &'a str>>,
) -> BudgetInputs<'a> {
    BudgetInputs { budget: b, view, report: r, now: now() }
}

fn condition<'a>(s: &'a ErrorBudgetStatus, t: &str) -> (&'a str, &'a str) {
    let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
    (c.status.as_str(), c.reason.as_str())
}

fn fixture() -> (ErrorBudget, BudgetView) {
    let b = budget("team-a", "slo", &["chat"]);
    let view = budget_view(&b, &[upstream("team-a", "east")], &[route("team-a", "chat", "m", None, &["east"])]);
    (b, view)
}

#[test]
fn a_healthy_budget() {
    let (b, view) = fixture();
    let r = report(0);
    let s = budget_status(None, &inputs(&b, &view, Some(Ok(&r))));
    assert_eq!(s.state.as_deref(), Some("Healthy"));
    assert_eq!((s.good_events, s.total_events), (Some(60_000), Some(60_000)));
    assert_eq!(s.budget.as_deref(), Some("60"));
    assert_eq!(s.consumed.as_deref(), Some("0"));
    assert_eq!(s.remaining_percent.as_deref(), Some("100.0"));
    assert_eq!(s.burn_rates.get("1h").map(String::as_str), Some("0.0"));
    assert_eq!(s.last_evaluated.as_deref(), Some("2025-05-01T12:00:30Z"));
    assert_eq!(condition(&s, "Ready"), ("True", "Evaluated"));
    assert_eq!(condition(&s, "Burning"), ("False", "NoAlertsFiring"));
    assert_eq!(condition(&s, "Exhausted"), ("False", "BudgetRemaining"));
    assert_eq!(transition(None, &s), None);
}

#[test]
fn burning_then_exhausted_are_transitions_with_events() {
    let (b, view) = fixture();
    let healthy = budget_status(None, &inputs(&b, &view, Some(Ok(&report(0)))));
    // 2% errors against a 0.1% budget over 1h: burn rate 20 > 14.4 on 1h and 5m.
    let r = report(20);
    let burning = budget_status(Some(&healthy), &inputs(&b, &view, Some(Ok(&r))));
    assert_eq!(burning.firing_alerts, ["page", "ticket"]);
    // 1200 bad events against 60 allowed: exhausted as well.
    assert_eq!(burning.state.as_deref(), Some("Exhausted"));
    assert_eq!(condition(&burning, "Burning"), ("True", "AlertsFiring"));
    assert_eq!(condition(&burning, "Exhausted"), ("True", "BudgetExhausted"));
    let t = transition(Some(&healthy), &burning).unwrap();
    assert_eq!((t.warning, t.reason), (true, "BudgetExhausted"));
    assert_eq!(t.note, "2000.0% of the error budget is consumed");
    assert_eq!(transition(Some(&burning), &burning), None);
}

#[test]
fn burning_without_exhaustion() {
    let (b, view) = fixture();
    let mut r = report(0);
    r.state = BudgetState::Burning;
    r.firing_alerts = vec!["ticket".into()];
    let s = budget_status(None, &inputs(&b, &view, Some(Ok(&r))));
    let t = transition(None, &s).unwrap();
    assert_eq!(t.reason, "BudgetBurning");
    assert!(t.note.starts_with("burn-rate alerts firing: ticket;"), "{}", t.note);
}

#[test]
fn a_failed_evaluation_keeps_the_figures() {
    let (b, view) = fixture();
    let before = budget_status(None, &inputs(&b, &view, Some(Ok(&report(0)))));
    let after = budget_status(Some(&before), &inputs(&b, &view, Some(Err("connection refused"))));
    assert_eq!(condition(&after, "Ready"), ("False", "EvaluationFailed"));
    assert_eq!((after.total_events, after.state.as_deref()), (before.total_events, Some("Healthy")));
}

#[test]
fn an_invalid_budget_shows_no_figures() {
    let (mut b, _) = fixture();
    b.spec.objective = "42".into();
    let view = budget_view(&b, &[], &[]);
    let s = budget_status(None, &inputs(&b, &view, None));
    assert_eq!(condition(&s, "Ready"), ("False", "Invalid"));
    assert_eq!((s.state, s.total_events), (None, None));
    let msg = &s.conditions[0].message;
    assert!(msg.starts_with("spec.objective: objective must be"), "{msg}");
}

#[test]
fn no_served_route_is_not_ready() {
    let b = budget("team-a", "slo", &["nothing"]);
    let view = budget_view(&b, &[], &[]);
    let r = report(0);
    let s = budget_status(None, &inputs(&b, &view, Some(Ok(&r))));
    assert_eq!(condition(&s, "Ready"), ("False", "NoRoutes"));
}
