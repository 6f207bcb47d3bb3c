#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

//! The ledger reads of the page on SQLite and PostgreSQL.

use std::time::{Duration, SystemTime};

use sluice_crds::error_budget::BudgetMethod;
use sluice_crds::snapshot::{BudgetConfig, LatencyConfig};
use sluice_ledger::testing::{Backend, TestDb, eventually};
use sluice_ledger::{RouteMinute, UpstreamMinute};
use sluice_status::load::Cache;
use sluice_status::{Catalog, RouteSpec};

use crate::support::add_check;

async fn reads_on(backend: Backend) {
    let Some(db) = TestDb::of(backend).await.unwrap() else { return };
    let ledger = db.connect().await.unwrap();
    let day = 20_000;
    let mut a = RouteMinute::new("ns/a", "chat", day * 1440 + 5);
    a.record(false, 10);
    a.record(true, 10);
    let mut b = RouteMinute::new("ns/a", "chat", day * 1440 + 6);
    b.record(false, 10);
    // The same minute on another inbound API: the page counts the route's requests.
    let mut c = RouteMinute::new("ns/a", "messages", day * 1440 + 6);
    c.record(true, 10);
    let mut u = UpstreamMinute::new("ns/up", day * 1440 + 5);
    u.record("ok", Some(30));
    u.record("http_5xx", None);
    u.record("http_4xx", Some(20));
    ledger.write_rollups(&[a, b, c], &[u]).await.unwrap();

    let days = ledger.route_days(&["ns/a".into()], day, day).await.unwrap();
    assert_eq!(days.len(), 1);
    assert_eq!((days[0].at, days[0].total, days[0].bad), (day, 4, 2));
    let minutes = ledger.route_counts(&["ns/a".into()], day * 1440 + 6).await.unwrap();
    assert_eq!(minutes.iter().map(|m| (m.at, m.total, m.bad)).collect::<Vec<_>>(), [(day * 1440 + 6, 2, 1)]);

    let now = SystemTime::now();
    add_check(&db, "ns/a", "ns/up", now - Duration::from_secs(5), "ok").await;
    add_check(&db, "ns/a", "ns/up", now, "connect").await;
    add_check(&db, "ns/other", "ns/up", now, "ok").await;
    let checks = ledger.synthetic_checks(&["ns/a".into()], &["ns/up".into()], 0).await.unwrap();
    let outcomes: Vec<&str> = checks.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "connect"]);
}

#[tokio::test]
async fn reads_on_sqlite() {
    reads_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn reads_on_postgres() {
    reads_on(Backend::Postgres).await;
}

fn minute_of(route: &str, minute: i64, good: u64, bad: u64, latency_ms: u64) -> RouteMinute {
    let mut m = RouteMinute::new(route, "chat", minute);
    for _ in 0..good {
        m.record(false, latency_ms);
    }
    for _ in 0..bad {
        m.record(true, latency_ms);
    }
    m
}

/// The page keeps each budget's minutes between requests and reads only the last ones
/// again; its reports stay what the ledger evaluates from scratch, while flushes add to
/// the last minutes, time passes and minutes leave the window.
async fn budgets_stay_exact_across_refreshes(backend: Backend) {
    let Some(db) = TestDb::of(backend).await.unwrap() else { return };
    let ledger = db.connect().await.unwrap();
    let route = |key: &str| RouteSpec {
        key: key.into(),
        model: key.into(),
        candidates: Vec::new(),
        objective: 0.99,
        synthetic_interval_ms: None,
    };
    let budget = |key: &str, routes: &[&str], method, latency| BudgetConfig {
        key: key.into(),
        name: key.into(),
        namespace: "ns".into(),
        routes: routes.iter().map(|r| (*r).to_owned()).collect(),
        objective: "99".into(),
        objective_ratio: 0.99,
        window_ms: 6 * 3_600_000,
        method,
        timeslice_ms: None,
        latency,
        alerts: Vec::new(),
    };
    let slow = Some(LatencyConfig { threshold_ms: 200, percentile: 90 });
    let catalog = Catalog {
        routes: vec![route("ns/a"), route("ns/b")],
        budgets: vec![
            budget("ns/both", &["ns/a", "ns/b"], BudgetMethod::Occurrences, None),
            budget("ns/slices", &["ns/a"], BudgetMethod::Timeslices, slow),
        ],
    };
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let m0 = sluice_ledger::budget::unix_minute(t0);
    // Three days back (the longest burn-rate window), a bad hour, today's traffic.
    let mut rows = vec![minute_of("ns/a", m0 - 3 * 1440 + 1, 100, 50, 50)];
    for back in 0..60 {
        rows.push(minute_of("ns/b", m0 - 300 - back, 10, 5, 50));
    }
    for back in 0..5 {
        rows.push(minute_of("ns/a", m0 - back, 20, 0, if back == 2 { 900 } else { 50 }));
    }
    ledger.write_rollups(&rows, &[]).await.unwrap();

    let mut cache = Cache::default();
    let steps: [(u64, Vec<RouteMinute>); 4] = [
        (0, Vec::new()),
        // A flush adds to the minute just read, and to the one before it.
        (20, vec![minute_of("ns/a", m0, 0, 7, 50), minute_of("ns/b", m0 - 1, 3, 0, 50)]),
        // Two minutes on: the oldest minute has left the lookback; a new one is bad.
        (140, vec![minute_of("ns/a", m0 + 2, 1, 9, 900)]),
        // Six hours on: the bad hour of ns/b has left the window.
        (6 * 3600, Vec::new()),
    ];
    let mut at = t0;
    for (step, (secs, writes)) in steps.into_iter().enumerate() {
        at += Duration::from_secs(secs);
        ledger.write_rollups(&writes, &[]).await.unwrap();
        let history = cache.refresh(&ledger, &catalog, at).await.unwrap();
        for b in &catalog.budgets {
            let fresh = ledger.evaluate_budget(b, at).await.unwrap();
            assert_eq!(history.budgets[&b.key].as_ref().unwrap(), &fresh, "{} at step {step}", b.key);
        }
        if step == 2 {
            let consumed = |key: &str| history.budgets[key].as_ref().unwrap().consumed.clone();
            assert!(consumed("ns/both").parse::<u64>().unwrap() > 300, "the bad hour counts");
            assert_ne!(consumed("ns/slices"), "0s", "the slow minute counts");
        }
    }
}

#[tokio::test]
async fn budgets_stay_exact_across_refreshes_on_sqlite() {
    budgets_stay_exact_across_refreshes(Backend::Sqlite).await;
}

#[tokio::test]
async fn budgets_stay_exact_across_refreshes_on_postgres() {
    budgets_stay_exact_across_refreshes(Backend::Postgres).await;
}

/// A source whose ledger is connected later, counting how often it is asked for it.
struct Later {
    catalog: Catalog,
    ledger: std::sync::Mutex<Option<sluice_ledger::Ledger>>,
    asked: std::sync::atomic::AtomicUsize,
}

impl sluice_status::Source for Later {
    fn catalog(&self) -> Option<Catalog> {
        Some(self.catalog.clone())
    }
    fn ledger(&self) -> Option<sluice_ledger::Ledger> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.ledger.lock().unwrap().clone()
    }
}

/// The router reads the history as soon as it has a ledger, before anyone asks for the
/// page, and stops once it has.
#[tokio::test]
async fn the_router_reads_the_history_before_the_first_visitor() {
    let db = TestDb::of(Backend::Sqlite).await.unwrap().unwrap();
    let (ledger, catalog) = crate::support::seeded(&db).await;
    let source = std::sync::Arc::new(Later { catalog, ledger: std::sync::Mutex::new(None), asked: Default::default() });
    let asked = || source.asked.load(std::sync::atomic::Ordering::SeqCst);
    let _app = sluice_status::router(source.clone(), sluice_status::Options::default());
    assert!(eventually(Duration::from_secs(10), async || asked() >= 2).await, "the router does not wait for a ledger");
    *source.ledger.lock().unwrap() = Some(ledger);
    let before = asked();
    assert!(
        eventually(Duration::from_secs(10), async || asked() >= before + 2).await,
        "the router did not read the ledger"
    );
    // One more try would come within a second if the read had failed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = asked();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(asked(), after, "the router keeps reading after its first read");
}
