//! Histogram buckets and counting, and a ledger from before rollups had an API
//! (schema 6) upgrading.

use super::*;
use crate::testing::{Backend, TestDb};

#[test]
fn bucket_index_uses_inclusive_upper_bounds() {
    assert_eq!(latency_bucket_index(0), 0);
    assert_eq!(latency_bucket_index(5), 0);
    assert_eq!(latency_bucket_index(6), 1);
    assert_eq!(latency_bucket_index(10_000), 17);
    assert_eq!(latency_bucket_index(60_000), 21);
    assert_eq!(latency_bucket_index(60_001), 22);
    assert_eq!(LATENCY_BUCKET_COUNT, 23);
}

#[test]
fn record_never_counts_a_request_bad_twice() {
    let mut m = RouteMinute::new("default/r", "chat", 7);
    m.record(true, 90_000);
    m.record(false, 120);
    assert_eq!((m.total, m.bad), (2, 1));
    assert_eq!(m.latency_buckets.iter().sum::<u64>(), 1);
    assert_eq!(m.latency_buckets[6], 1);
}

/// A ledger with route rollups written at schema 6 (keyed by route and minute): after
/// migration 7 they are `chat` rows with the same counters, and a row of another API
/// for the same route and minute is stored beside them and summed with them.
async fn upgrade_from_v6(db: &TestDb) {
    use crate::ledger::{Embedded, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
    sqlx::any::install_default_drivers();
    let v6 = match db.backend {
        Backend::Sqlite => Embedded(&SQLITE_MIGRATIONS.0[..6]),
        Backend::Postgres => Embedded(&POSTGRES_MIGRATIONS.0[..6]),
    };
    let url = if db.url.starts_with("sqlite") { format!("{}?mode=rwc", db.url) } else { db.url.clone() };
    let raw = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(v6).await.unwrap().run(&raw).await.unwrap();
    for statement in [
        "INSERT INTO route_minutes (route, minute, total, bad, failovers, lat_3, lat_22) \
         VALUES ('ns/a', 100, 7, 2, 1, 4, 1)",
        "INSERT INTO route_minutes (route, minute, total, bad) VALUES ('ns/b', 101, 3, 3)",
    ] {
        sqlx::query(statement).execute(&raw).await.unwrap();
    }
    raw.close().await;

    let l = db.connect().await.unwrap();
    let mut a = RouteMinute::new("ns/a", "chat", 100);
    (a.total, a.bad, a.failovers) = (7, 2, 1);
    a.latency_buckets[3] = 4;
    a.latency_buckets[22] = 1;
    let mut b = RouteMinute::new("ns/b", "chat", 101);
    (b.total, b.bad) = (3, 3);
    let keys = ["ns/a".to_owned(), "ns/b".to_owned()];
    assert_eq!(l.route_api_minutes(&keys, 0, 1000).await.unwrap(), [a.clone(), b]);

    let mut messages = RouteMinute::new("ns/a", "messages", 100);
    messages.record(false, 20);
    l.write_rollups(&[messages.clone(), a.clone()], &[]).await.unwrap();
    let mut chat = a.clone();
    chat.merge(&a);
    let ns_a = ["ns/a".to_owned()];
    assert_eq!(l.route_api_minutes(&ns_a, 0, 1000).await.unwrap(), [chat.clone(), messages.clone()]);
    let mut summed = RouteMinute::new("ns/a", ALL_APIS, 100);
    summed.merge(&chat);
    summed.merge(&messages);
    assert_eq!(l.route_minutes(&ns_a, 0, 1000).await.unwrap(), [summed]);
    l.close().await;
}

#[tokio::test]
async fn a_v6_ledger_with_route_rollups_upgrades_on_sqlite() {
    upgrade_from_v6(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn a_v6_ledger_with_route_rollups_upgrades_on_postgres() {
    if let Some(db) = TestDb::postgres().await.unwrap() {
        upgrade_from_v6(&db).await;
    }
}
