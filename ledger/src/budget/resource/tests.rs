//! ErrorBudget manifests resolved by sluice-crds, evaluated on an in-memory ledger.

use std::time::{Duration, SystemTime};

use sluice_crds::Manifests;
use sluice_crds::snapshot::BudgetConfig;

use super::*;
use crate::budget::tests::minute;
use crate::budget::{BudgetState, evaluate};

const MANIFESTS: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: east, namespace: team-a}
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:9101/v1
  auth:
    secretRef: {name: key, key: apiKey}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: chat, namespace: team-a}
spec:
  model: m
  candidates:
  - upstream: east
    model: m
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: other, namespace: team-a}
spec:
  model: o
  candidates:
  - upstream: east
    model: o
---
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata: {name: availability, namespace: team-a}
spec:
  routes: [chat]
  objective: "99"
  window: 1h
---
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata: {name: latency, namespace: team-a}
spec:
  routes: [chat]
  objective: "99.95"
  window: 30d
  method: timeslices
  timeslice: 5m
  latency: {threshold: 10s, percentile: 99}
  alerts:
  - {name: fast, longWindow: 1h, shortWindow: 5m, burnRate: "14.4"}
"#;

/// The minute the tests evaluate at, and an instant 30 s into it.
const NOW_MINUTE: i64 = 29_101_680;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_MINUTE.unsigned_abs() * 60 + 30)
}

fn budgets() -> Vec<BudgetConfig> {
    let mut manifests = Manifests::default();
    manifests.parse_str("test.yaml", MANIFESTS);
    let resolved = sluice_crds::resolve(&manifests, &|_: &str, _: &str, _: &str| true);
    let problems: Vec<String> = resolved.errors().map(ToString::to_string).collect();
    assert!(problems.is_empty(), "{problems:?}");
    resolved.snapshot.budgets
}

fn budget(name: &str) -> BudgetConfig {
    budgets().into_iter().find(|b| b.name == name).unwrap()
}

#[test]
fn the_resource_defaults_become_the_sre_workbook_policy() {
    let policy = BudgetPolicy::from(&budget("availability"));
    assert_eq!(policy, BudgetPolicy::new(0.99, Duration::from_secs(3600)));
}

#[test]
fn every_field_of_the_resource_reaches_the_policy() {
    let policy = BudgetPolicy::from(&budget("latency"));
    let expected = BudgetPolicy {
        objective: 0.9995,
        window: Duration::from_secs(30 * 86_400),
        method: BudgetMethod::Timeslices,
        timeslice: Some(Duration::from_secs(300)),
        latency: Some(LatencySli { threshold_ms: 10_000, percentile: 99.0 }),
        alerts: vec![AlertPolicy {
            name: "fast".into(),
            long: Duration::from_secs(3600),
            short: Duration::from_secs(300),
            burn_rate: 14.4,
        }],
    };
    assert_eq!(policy, expected);
}

#[test]
fn unix_minute_counts_whole_minutes_and_clamps_before_the_epoch() {
    assert_eq!(unix_minute(now()), NOW_MINUTE);
    assert_eq!(unix_minute(SystemTime::UNIX_EPOCH + Duration::from_secs(59)), 0);
    assert_eq!(unix_minute(SystemTime::UNIX_EPOCH - Duration::from_secs(60)), 0);
}

#[tokio::test]
async fn evaluation_reads_the_budget_routes_up_to_now() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let config = budget("availability");
    let rows = [
        minute("team-a/chat", NOW_MINUTE, 90, 10),
        minute("team-a/chat", NOW_MINUTE - 59, 100, 0),
        // Outside the 1h window, inside the 3d burn-rate lookback.
        minute("team-a/chat", NOW_MINUTE - 60, 0, 50),
        // After now, and another route: neither counts.
        minute("team-a/chat", NOW_MINUTE + 1, 0, 1000),
        minute("team-a/other", NOW_MINUTE, 0, 1000),
    ];
    ledger.write_rollups(&rows, &[]).await.unwrap();

    let report = ledger.evaluate_budget(&config, now()).await.unwrap();
    assert_eq!((report.good_events, report.total_events), (190, 200));
    assert_eq!((report.budget.as_str(), report.consumed.as_str()), ("2", "10"));
    assert_eq!(report.state, BudgetState::Exhausted);
    // The same rows, as stored, through the pure maths.
    let stored = ledger.route_minutes(&config.routes, 0, NOW_MINUTE).await.unwrap();
    let policy = BudgetPolicy::from(&config);
    assert_eq!(report, evaluate(&policy, &stored, NOW_MINUTE).unwrap());
}

#[tokio::test]
async fn a_policy_the_maths_refuses_is_a_budget_error() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let config = BudgetConfig { objective_ratio: 1.5, ..budget("availability") };
    let err = ledger.evaluate_budget(&config, now()).await.unwrap_err();
    assert!(matches!(err, EvaluateError::Budget(BudgetError::Objective(o)) if o == 1.5), "{err:?}");
}
