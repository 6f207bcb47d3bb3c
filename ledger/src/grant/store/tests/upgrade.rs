//! A ledger from before posting existed (schema v4) upgrades with a grant open.

use super::*;

/// A ledger written before posting existed (schema v4: settlements moved the account row
/// themselves) with a grant open across the upgrade: after migration 5 its journal still
/// adds up, and the new settlements, posts and the return on that same grant keep it so.
async fn upgrade_from_v4(db: &TestDb) {
    use crate::ledger::{Embedded, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
    sqlx::any::install_default_drivers();
    let v4 = match db.backend {
        crate::testing::Backend::Sqlite => Embedded(&SQLITE_MIGRATIONS.0[..4]),
        crate::testing::Backend::Postgres => Embedded(&POSTGRES_MIGRATIONS.0[..4]),
    };
    let url = if db.url.starts_with("sqlite") { format!("{}?mode=rwc", db.url) } else { db.url.clone() };
    let raw = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(v4).await.unwrap().run(&raw).await.unwrap();
    // What the v4 code left (account 1, grant 1 of a fresh database): 1000 opened, a grant of 500 taken, 100 of it settled (the
    // settle row moving balance and reserved), 400 still held.
    for statement in [
        "INSERT INTO accounts (name, balance_nanos, reserved_nanos, created_at_ms) VALUES ('old', 900, 400, 1)",
        "INSERT INTO grants (account_id, holder, amount_nanos, settled_nanos, state, created_at_ms, renewed_at_ms, \
         valid_until_ms, expires_at_ms) VALUES (1, 'gw', 400, 100, 'open', 1, 1, 4611686018427387903, 4611686018427387903)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, at_ms) \
         VALUES (1, 'open', 1000, 1000, 0, 1000, 0, 1)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, grant_id, at_ms) \
         VALUES (1, 'reserve', 500, 0, 500, 1000, 500, 1, 1)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, \
         request_id, grant_id, hold_id, at_ms) VALUES (1, 'settle', 100, -100, -100, 900, 400, 'r1', 1, 1, 2)",
    ] {
        sqlx::query(statement).execute(&raw).await.unwrap();
    }
    raw.close().await;

    let l = db.connect().await.unwrap();
    let check = l.journal_verify("old").await.unwrap();
    assert!(check.is_consistent() && check.balance_nanos == 900 && check.unposted_nanos == 0, "{check:?}");
    // The same grant goes on under the new code.
    assert_eq!(l.settle_batch(&[job(1, 1, 2, 50)]).await.unwrap(), [true]);
    let check = l.journal_verify("old").await.unwrap();
    assert!(check.is_consistent() && check.balance_nanos == 850 && check.unposted_nanos == 50, "{check:?}");
    assert!(l.close_grant(1, 1, false, 3, None).await.unwrap());
    let a = l.account("old").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (850, 0));
    assert_eq!(stored(&l, 1).await, (850, 0));
    let check = l.journal_verify("old").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    l.close().await;
}

#[tokio::test]
async fn a_v4_ledger_with_an_open_grant_upgrades_on_sqlite() {
    upgrade_from_v4(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn a_v4_ledger_with_an_open_grant_upgrades_on_postgres() {
    if let Some(db) = TestDb::postgres().await.unwrap() {
        upgrade_from_v4(&db).await;
    }
}
