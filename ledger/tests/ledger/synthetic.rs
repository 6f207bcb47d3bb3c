//! Synthetic checks (docs/design.md §10): a row per check, its cost as spend of the
//! system account made on demand, balance kept at 0, journal consistent, old rows pruned.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_ledger::{Ledger, SYNTHETIC_ACCOUNT, SyntheticCheck};
use sqlx::Row;

use crate::on_both;
use crate::support::Db;

/// A `synthetic_checks` row: route, upstream, gateway, at, outcome, first byte, cost.
type CheckRow = (String, String, String, i64, String, Option<i64>, i64);

fn check(upstream: &str, outcome: &str, first_byte_ms: Option<u64>, cost_nanos: i64, at: SystemTime) -> SyntheticCheck {
    SyntheticCheck {
        route: "ns/chat".into(),
        upstream: upstream.into(),
        gateway_id: "gw-1".into(),
        at,
        outcome: outcome.into(),
        first_byte_ms,
        cost_nanos,
    }
}

async fn checks_are_stored_and_their_cost_is_spend(db: &Db) {
    let l = &db.ledger;
    let t0 = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    let s = Duration::from_secs(1);
    assert!(l.account(SYNTHETIC_ACCOUNT).await.unwrap().is_none());
    l.record_synthetic(&check("ns/backup", "http_5xx", None, 0, t0)).await.unwrap();
    let made = l.account(SYNTHETIC_ACCOUNT).await.unwrap().expect("made by the first check, even a free one");
    assert_eq!((made.balance_nanos, made.reserved_nanos), (0, 0));
    l.record_synthetic(&check("ns/primary", "ok", Some(42), 1_500, t0 + s)).await.unwrap();
    l.record_synthetic(&check("ns/primary", "ok", Some(40), 2_500, t0 + 2 * s)).await.unwrap();

    let account = l.account(SYNTHETIC_ACCOUNT).await.unwrap().unwrap();
    assert_eq!((account.balance_nanos, account.reserved_nanos), (0, 0), "never holds money");
    assert_eq!(l.synthetic_spend().await.unwrap(), 4_000);
    let verify = l.journal_verify(SYNTHETIC_ACCOUNT).await.unwrap();
    assert!(verify.is_consistent(), "{verify:?}");
    assert_eq!(verify.entries, 5, "open, then a topup and a settle per paid check");

    let raw = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let rows = sqlx::query(
        "SELECT route, upstream, gateway_id, at_ms, outcome, first_byte_ms, cost_nanos FROM synthetic_checks ORDER BY id",
    )
    .fetch_all(&raw)
    .await
    .unwrap();
    let rows: Vec<CheckRow> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6))).collect();
    let ms = 1_700_000_000_123i64;
    let row = |up: &str, at: i64, outcome: &str, fb: Option<i64>, cost: i64| {
        ("ns/chat".to_string(), up.to_string(), "gw-1".to_string(), at, outcome.to_string(), fb, cost)
    };
    assert_eq!(
        rows,
        vec![
            row("ns/backup", ms, "http_5xx", None, 0),
            row("ns/primary", ms + 1000, "ok", Some(42), 1_500),
            row("ns/primary", ms + 2000, "ok", Some(40), 2_500),
        ]
    );
    let journal = sqlx::query(
        "SELECT j.kind, j.amount_nanos, j.balance_delta, j.reserved_delta, j.request_id FROM journal j \
         JOIN accounts a ON a.id = j.account_id WHERE a.name = $1 ORDER BY j.id",
    )
    .bind(SYNTHETIC_ACCOUNT)
    .fetch_all(&raw)
    .await
    .unwrap();
    let journal: Vec<(String, i64, i64, i64, Option<String>)> =
        journal.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect();
    let id = |at: i64| Some(format!("synthetic:ns/chat:ns/primary:{at}"));
    assert_eq!(
        journal,
        vec![
            ("open".into(), 0, 0, 0, None),
            ("topup".into(), 1_500, 1_500, 0, id(ms + 1000)),
            ("settle".into(), 1_500, -1_500, 0, id(ms + 1000)),
            ("topup".into(), 2_500, 2_500, 0, id(ms + 2000)),
            ("settle".into(), 2_500, -2_500, 0, id(ms + 2000)),
        ]
    );

    // Retention: rows go, the money's journal stays.
    assert_eq!(l.prune_synthetic(t0 + s + Duration::from_millis(500)).await.unwrap(), 2);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM synthetic_checks").fetch_one(&raw).await.unwrap();
    assert_eq!(left, 1);
    assert_eq!(l.synthetic_spend().await.unwrap(), 4_000);
    assert!(l.journal_verify(SYNTHETIC_ACCOUNT).await.unwrap().is_consistent());
    raw.close().await;

    let negative = l.record_synthetic(&check("ns/primary", "ok", None, -1, t0)).await.unwrap_err();
    assert_eq!(negative.to_string(), "synthetic check cost must not be negative, got -1 nanodollars");
}
on_both!(stored_and_billed, super::checks_are_stored_and_their_cost_is_spend);

/// Two gateways (two handles) checking at once make the account once and lose nothing.
async fn concurrent_gateways_share_the_account(db: &Db) {
    let other = Ledger::connect(&db.url).await.unwrap();
    let mut tasks = Vec::new();
    for (g, l) in [db.ledger.clone(), other.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..10u64 {
                let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + i);
                let mut c = check(&format!("ns/up-{g}"), "ok", Some(i), 7, at);
                c.gateway_id = format!("gw-{g}");
                l.record_synthetic(&c).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(db.ledger.synthetic_spend().await.unwrap(), 140);
    let verify = db.ledger.journal_verify(SYNTHETIC_ACCOUNT).await.unwrap();
    assert!(verify.is_consistent(), "{verify:?}");
    assert_eq!(verify.entries, 41);
    other.close().await;
}
on_both!(concurrent_gateways, super::concurrent_gateways_share_the_account);
