//! Accounts, keys, settlement, release, reaper, dropped guards.

use std::time::{Duration, SystemTime};

use sluice_ledger::testing::eventually;
use sluice_ledger::{LedgerError, SettleOutcome, Usage};

use crate::on_both;
use crate::support::Db;

const USD: i64 = 1_000_000_000;
const TTL: Duration = Duration::from_secs(60);

fn usage() -> Usage {
    Usage { input_tokens: 10, output_tokens: 20, web_searches: 1, upstream: Some("default/up".into()) }
}

async fn assert_journal_ok(db: &Db, name: &str) {
    let check = db.ledger.journal_verify(name).await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
}

async fn accounts_and_keys(db: &Db) {
    let l = &db.ledger;
    let a = l.create_account("alice", 15 * USD).await.unwrap();
    assert_eq!((a.name.as_str(), a.balance_nanos, a.reserved_nanos), ("alice", 15 * USD, 0));
    let err = l.create_account("alice", USD).await.unwrap_err();
    assert_eq!(err.to_string(), "account \"alice\" already exists");
    let err = l.create_account("bob", -1).await.unwrap_err();
    assert_eq!(err.to_string(), "opening balance must not be negative, got -1 nanodollars");
    let err = l.topup("nobody", USD).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
    let err = l.topup("alice", -5).await.unwrap_err();
    assert_eq!(err.to_string(), "top-up amount must not be negative, got -5 nanodollars");
    let err = l.topup("alice", i64::MAX).await.unwrap_err();
    assert!(matches!(err, LedgerError::Overflow { .. }), "{err}");

    let a = l.topup("alice", USD / 2).await.unwrap();
    assert_eq!(a.balance_nanos, 15 * USD + USD / 2);
    assert_eq!(l.account("alice").await.unwrap(), Some(a.clone()));
    assert_eq!(l.account_by_id(a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(l.account("nobody").await.unwrap(), None);

    let key = l.create_key("alice").await.unwrap();
    assert!(key.starts_with("sk-sluice-") && key.len() >= "sk-sluice-".len() + 32);
    let who = l.authenticate(&key).await.unwrap().unwrap();
    assert_eq!((who.id, who.name.as_str()), (a.id, "alice"));
    assert_eq!(l.authenticate(&format!("{key}x")).await.unwrap(), None);
    assert_eq!(l.authenticate("Bearer nonsense").await.unwrap(), None);
    assert!(matches!(l.create_key("nobody").await, Err(LedgerError::UnknownAccount(_))));
    assert_journal_ok(db, "alice").await;
    assert_eq!(l.journal_verify("alice").await.unwrap().entries, 2);
    l.ping().await.unwrap();
}
on_both!(accounts_and_keys_work, super::accounts_and_keys);

async fn settlement_is_idempotent_and_capped(db: &Db) {
    let l = &db.ledger;
    let a = l.create_account("carol", 10 * USD).await.unwrap();

    let r = l.reserve(a.id, USD, TTL, "req-1").await.unwrap();
    let id = r.id();
    assert_eq!((r.amount_nanos(), r.account_id(), r.request_id()), (USD, a.id, "req-1"));
    assert_eq!(l.account("carol").await.unwrap().unwrap().reserved_nanos, USD);
    let s = r.settle(400_000_000, usage()).await.unwrap();
    assert_eq!(s.outcome, SettleOutcome::Settled);
    assert_eq!((s.charged_nanos, s.released_nanos, s.uncollected_nanos), (400_000_000, 600_000_000, 0));
    // What the answer used is kept with the settlement: tokens, web searches, upstream.
    let row = db.reservations().await.into_iter().find(|r| r.id == id).expect("the reservation's row");
    assert_eq!(
        (row.input_tokens, row.output_tokens, row.web_searches, row.upstream.as_deref()),
        (Some(10), Some(20), Some(1), Some("default/up"))
    );
    // A second settle (e.g. a retried flush) charges nothing and reports the first.
    let again = l.settle_reservation(id, 900_000_000, &usage()).await.unwrap();
    assert_eq!(again.outcome, SettleOutcome::AlreadySettled);
    assert_eq!(again.charged_nanos, 400_000_000);
    let acct = l.account("carol").await.unwrap().unwrap();
    assert_eq!((acct.balance_nanos, acct.reserved_nanos), (10 * USD - 400_000_000, 0));

    // Actual cost above the reservation: charge the reservation, record the rest.
    let r = l.reserve(a.id, USD, TTL, "req-2").await.unwrap();
    let s = r.settle(USD + USD / 2, Usage::default()).await.unwrap();
    assert_eq!((s.charged_nanos, s.released_nanos, s.uncollected_nanos), (USD, 0, USD / 2));
    let check = l.journal_verify("carol").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    assert_eq!(check.uncollected_nanos, USD / 2);
    assert_eq!(check.balance_nanos, 10 * USD - 400_000_000 - USD);

    let err = l.settle_reservation(999_999, 1, &usage()).await.unwrap_err();
    assert_eq!(err.to_string(), "no reservation with id 999999");
    let r = l.reserve(a.id, 1, TTL, "req-neg").await.unwrap();
    let err = l.settle_reservation(r.id(), -1, &usage()).await.unwrap_err();
    assert!(matches!(err, LedgerError::NegativeAmount { .. }), "{err}");
    assert!(r.release().await.unwrap());
    assert_eq!(l.open_reservations().await.unwrap(), 0);
    assert_journal_ok(db, "carol").await;
}
on_both!(settlement, super::settlement_is_idempotent_and_capped);

async fn release_and_refusals(db: &Db) {
    let l = &db.ledger;
    let a = l.create_account("dave", 3 * USD).await.unwrap();
    let r = l.reserve(a.id, 2 * USD, TTL, "req-1").await.unwrap();
    let err = l.reserve(a.id, 2 * USD, TTL, "req-2").await.unwrap_err();
    assert!(
        matches!(err, LedgerError::InsufficientFunds { available_nanos, needed_nanos }
            if available_nanos == USD && needed_nanos == 2 * USD),
        "{err}"
    );
    assert_eq!(err.to_string(), "insufficient funds: 2000000000 nanodollars needed, 1000000000 available");
    let id = r.id();
    assert!(r.release().await.unwrap());
    assert!(!l.release_reservation(id).await.unwrap(), "second release is a no-op");
    let late = l.settle_reservation(id, USD, &usage()).await.unwrap();
    assert_eq!(late.outcome, SettleOutcome::AfterRelease);
    assert_eq!((late.charged_nanos, late.uncollected_nanos), (0, USD));
    let acct = l.account("dave").await.unwrap().unwrap();
    assert_eq!((acct.balance_nanos, acct.reserved_nanos), (3 * USD, 0));

    assert!(matches!(l.reserve(a.id + 1000, 1, TTL, "x").await, Err(LedgerError::UnknownAccountId(_))));
    assert!(matches!(l.reserve(a.id, -1, TTL, "x").await, Err(LedgerError::NegativeAmount { .. })));
    assert!(matches!(l.release_reservation(999_999).await, Err(LedgerError::UnknownReservation(_))));
    assert_journal_ok(db, "dave").await;
}
on_both!(release, super::release_and_refusals);

async fn reaper_releases_expired(db: &Db) {
    let l = &db.ledger;
    let a = l.create_account("erin", 5 * USD).await.unwrap();
    let short = l.reserve(a.id, USD, Duration::from_secs(1), "short").await.unwrap();
    let long = l.reserve(a.id, USD, Duration::from_secs(3600), "long").await.unwrap();
    assert_eq!(l.reap_expired(SystemTime::now()).await.unwrap(), 0);
    let later = SystemTime::now() + Duration::from_secs(5);
    assert!(short.expires_at() <= later);
    assert_eq!(l.reap_expired(later).await.unwrap(), 1);
    assert_eq!(l.reap_expired(later).await.unwrap(), 0);
    assert_eq!(l.open_reservations().await.unwrap(), 1);

    // The request finishes after the reaper gave the money back: nothing is charged.
    let s = short.settle(USD / 2, usage()).await.unwrap();
    assert_eq!(s.outcome, SettleOutcome::AfterRelease);
    assert_eq!(s.charged_nanos, 0);
    let s = long.settle(USD / 4, usage()).await.unwrap();
    assert_eq!(s.outcome, SettleOutcome::Settled);
    let acct = l.account("erin").await.unwrap().unwrap();
    assert_eq!((acct.balance_nanos, acct.reserved_nanos), (5 * USD - USD / 4, 0));
    let check = l.journal_verify("erin").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    assert_eq!(check.uncollected_nanos, USD / 2);
}
on_both!(reaper, super::reaper_releases_expired);

async fn dropped_guard_releases(db: &Db) {
    let l = &db.ledger;
    let a = l.create_account("frank", 5 * USD).await.unwrap();
    {
        let _forgotten = l.reserve(a.id, 2 * USD, TTL, "dropped").await.unwrap();
    }
    assert_eq!(l.dropped_reservations(), 1);
    // The guard's drop hands the release to a task: wait for it.
    let released =
        eventually(Duration::from_secs(10), async || l.account("frank").await.unwrap().unwrap().reserved_nanos == 0)
            .await;
    assert!(released, "dropped reservation not released");
    let acct = l.account("frank").await.unwrap().unwrap();
    assert_eq!(acct.balance_nanos, 5 * USD);
    assert_eq!(l.open_reservations().await.unwrap(), 0);
    assert_journal_ok(db, "frank").await;
}
on_both!(dropped_guard, super::dropped_guard_releases);
