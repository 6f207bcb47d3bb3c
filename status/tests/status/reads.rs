#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

//! The ledger reads of the page on SQLite and PostgreSQL.

use std::time::{Duration, SystemTime};

use sluice_ledger::testing::{Backend, TestDb};
use sluice_ledger::{RouteMinute, UpstreamMinute};

use crate::support::{add_check, ensure_checks_table};

async fn reads_on(backend: Backend) {
    let Some(db) = TestDb::of(backend).await.unwrap() else { return };
    let ledger = db.connect().await.unwrap();
    ensure_checks_table(&db).await;
    let day = 20_000;
    let mut a = RouteMinute::new("ns/a", day * 1440 + 5);
    a.record(false, 10);
    a.record(true, 10);
    let mut b = RouteMinute::new("ns/a", day * 1440 + 6);
    b.record(false, 10);
    let mut u = UpstreamMinute::new("ns/up", day * 1440 + 5);
    u.record("ok", Some(30));
    u.record("http_5xx", None);
    u.record("http_4xx", Some(20));
    ledger.write_rollups(&[a, b], &[u]).await.unwrap();

    let days = ledger.route_days(&["ns/a".into()], day, day).await.unwrap();
    assert_eq!(days.len(), 1);
    assert_eq!((days[0].at, days[0].total, days[0].bad), (day, 3, 1));
    let minutes = ledger.route_counts(&["ns/a".into()], day * 1440 + 6).await.unwrap();
    assert_eq!(minutes.len(), 1);

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
