//! docs/design.md §5a against real databases, through [`Biller`]: concurrent holds on a
//! tiny balance never overdraw, idle and shut-down grants are returned, a killed
//! process's grant is expired by the reaper at its `expires_at`, and a settlement
//! resolves only once its batch committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_ledger::{Biller, BillerConfig, LedgerError, SettleOutcome, Usage};

use crate::on_both;
use crate::support::Db;

const ESTIMATE: i64 = 1_000_000;

fn config(holder: &str) -> BillerConfig {
    BillerConfig { grant_max_nanos: 20 * ESTIMATE, ..BillerConfig::new(holder) }
}

fn usage() -> Usage {
    Usage { input_tokens: 3, output_tokens: 4, web_searches: 2, upstream: Some("default/only".into()) }
}

async fn open_grants(db: &Db) -> u64 {
    db.ledger.open_grants().await.unwrap()
}

/// 200 tasks race 5 holds each on an account of 37.5 estimates: each reserve ends in a
/// hold or `InsufficientFunds`; `balance − reserved ≥ 0` at every sample; once the
/// grants are returned the balance is the opening minus exactly what was charged, and
/// the journal explains it.
async fn racing_holds_never_overdraw(db: &Db) {
    let l = db.ledger.clone();
    let opening = ESTIMATE * 37 + ESTIMATE / 2;
    let account = l.create_account("tiny", opening).await.unwrap();
    let biller = Biller::start(l.clone(), config("racer"), None);

    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (l, done) = (l.clone(), done.clone());
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !done.load(Ordering::Relaxed) {
                let a = l.account("tiny").await.unwrap().unwrap();
                assert!(a.balance_nanos - a.reserved_nanos >= 0 && a.reserved_nanos >= 0, "overdraft observed: {a:?}");
                samples += 1;
                tokio::task::yield_now().await;
            }
            samples
        })
    };
    let charged = Arc::new(AtomicI64::new(0));
    let (served, refused, dropped) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for t in 0..200i64 {
        let (b, charged, served, refused, dropped) =
            (biller.clone(), charged.clone(), served.clone(), refused.clone(), dropped.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..5i64 {
                match b.reserve(account.id, ESTIMATE, &format!("req-{t}-{i}")).await {
                    Ok(hold) => {
                        served.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                        match (t + i) % 4 {
                            0 => hold.release().await.unwrap(),
                            // More than the estimate: capped, the rest uncollected.
                            1 => {
                                let s = hold.settle(ESTIMATE + 7, usage()).await.unwrap();
                                assert_eq!((s.charged_nanos, s.uncollected_nanos), (ESTIMATE, 7));
                                charged.fetch_add(s.charged_nanos, Ordering::Relaxed);
                            }
                            2 => {
                                dropped.fetch_add(1, Ordering::Relaxed);
                                drop(hold);
                            }
                            _ => {
                                let s = hold.settle(ESTIMATE / 3, usage()).await.unwrap();
                                assert_eq!(s.outcome, SettleOutcome::Settled);
                                charged.fetch_add(s.charged_nanos, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(LedgerError::InsufficientFunds { available_nanos, needed_nanos }) => {
                        assert_eq!(needed_nanos, ESTIMATE);
                        assert!(available_nanos < ESTIMATE, "refused with {available_nanos} available");
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    biller.shutdown(Duration::from_secs(10)).await;
    done.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    let (served, refused) = (served.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!("grants race: {served} served, {refused} refused, {samples} samples, dropped {}", biller.dropped_holds());
    assert_eq!(served + refused, 1000);
    assert!(served >= 37, "at least the affordable number is served: {served}");
    assert!(refused > 0, "the wallet ran dry");
    let a = l.account("tiny").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (opening - charged.load(Ordering::Relaxed), 0));
    assert!(a.balance_nanos >= 0);
    let check = l.journal_verify("tiny").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    assert_eq!(open_grants(db).await, 0);
    assert_eq!(biller.dropped_holds(), dropped.load(Ordering::Relaxed), "dropped holds are counted");
}
on_both!(racing_holds_never_overdraw, super::racing_holds_never_overdraw);

/// Settlements leave one journal row each, with the grant, the request and the usage.
async fn one_journal_row_per_settlement(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("rows", 100 * ESTIMATE).await.unwrap();
    let biller = Biller::start(l.clone(), config("rows"), None);
    let mut settles = Vec::new();
    for i in 0..50 {
        let hold = biller.reserve(account.id, ESTIMATE, &format!("row-{i}")).await.unwrap();
        settles.push(tokio::spawn(hold.settle(ESTIMATE / 2, usage())));
    }
    for s in settles {
        s.await.unwrap().unwrap();
    }
    let journal = db.journal().await;
    let rows: Vec<_> = journal.iter().filter(|j| j.kind == "settle").collect();
    assert_eq!(rows.len(), 50);
    assert!(rows.iter().all(|j| j.grant_id.is_some() && j.reservation_id.is_none() && j.amount == ESTIMATE / 2));
    assert!(rows.iter().all(|j| (j.input_tokens, j.output_tokens, j.web_searches, j.upstream.as_deref())
        == (Some(3), Some(4), Some(2), Some("default/only"))));
    let mut ids: Vec<_> = rows.iter().filter_map(|j| j.request_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50, "one row per request");
    let takes = journal.iter().filter(|j| j.kind == "reserve").count();
    assert!(takes < 50, "grants, not a reservation per request: {takes} takes");
    biller.shutdown(Duration::from_secs(5)).await;
    assert!(l.journal_verify("rows").await.unwrap().is_consistent());
}
on_both!(one_journal_row_per_settlement, super::one_journal_row_per_settlement);

/// A grant unused for `idle` with nothing in flight is returned (time injected).
async fn an_idle_grant_is_returned(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("idle", 100 * ESTIMATE).await.unwrap();
    let biller = Biller::start(l.clone(), BillerConfig { idle: Duration::from_secs(3600), ..config("idle") }, None);
    let hold = biller.reserve(account.id, ESTIMATE, "r1").await.unwrap();
    biller.maintain(SystemTime::now() + Duration::from_secs(7200)).await;
    assert_eq!(open_grants(db).await, 1, "a grant with a hold in flight is not idle");
    hold.settle(ESTIMATE, usage()).await.unwrap();
    biller.renewals_done().await;
    biller.maintain(SystemTime::now()).await;
    assert_eq!(open_grants(db).await, 1, "used just now");
    biller.maintain(SystemTime::now() + Duration::from_secs(3601)).await;
    assert_eq!(open_grants(db).await, 0, "returned once idle");
    let a = l.account("idle").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (99 * ESTIMATE, 0));
    let kinds: Vec<String> = db.journal().await.into_iter().filter(|j| j.grant_id.is_some()).map(|j| j.kind).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("reserve"));
    assert_eq!(kinds.last().map(String::as_str), Some("release"));
    assert!(l.journal_verify("idle").await.unwrap().is_consistent());
    // The next request takes a new grant.
    let hold = biller.reserve(account.id, ESTIMATE, "r2").await.unwrap();
    hold.release().await.unwrap();
    assert_eq!(open_grants(db).await, 1);
}
on_both!(an_idle_grant_is_returned, super::an_idle_grant_is_returned);

/// A process that dies holding a grant: the reaper (any process) expires it exactly at
/// its `expires_at` = validity end + the deadline slack, not a millisecond before.
async fn the_reaper_expires_a_dead_holders_grant_at_expires_at(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("orphan", 100 * ESTIMATE).await.unwrap();
    // Nothing may act on the real clock here, however slowly the test runs: an hour of
    // idleness and validity leaves the maintenance loop nothing to return or renew, and
    // an hour's `retry_after` keeps the reservation from starting a refill however long
    // the take before it lasted. So the journal below is the reservation's take alone.
    // (A grant found idle before it was ever used would still be returned and a second
    // one taken: docs/design.md §5a holds one grant per account and process.)
    let hour = Duration::from_secs(3600);
    let cfg = BillerConfig { idle: hour, validity: hour, retry_after: hour, ..config("doomed") };
    let biller = Biller::start(l.clone(), cfg, None);
    biller.set_deadline_slack(Duration::from_secs(120));
    let hold = biller.reserve(account.id, ESTIMATE, "r1").await.unwrap();
    hold.settle(ESTIMATE / 4, usage()).await.unwrap();
    // The process dies: nothing is returned (and no renewal runs behind the test's back).
    biller.renewals_done().await;
    drop(biller);
    let grants = db.grants().await;
    assert_eq!(grants.len(), 1);
    let g = &grants[0];
    assert_eq!((g.state.as_str(), g.holder.as_str(), g.settled), ("open", "doomed", ESTIMATE / 4));
    assert_eq!(g.expires_at_ms - g.valid_until_ms, 120_000, "expires_at = validity end + the longest deadline");
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(ms as u64);
    assert_eq!(l.reap_expired(at(g.expires_at_ms - 1)).await.unwrap(), 0);
    assert_eq!(open_grants(db).await, 1);
    assert_eq!(l.reap_expired(at(g.expires_at_ms)).await.unwrap(), 1);
    assert_eq!(l.reap_expired(at(g.expires_at_ms)).await.unwrap(), 0);
    let a = l.account("orphan").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (100 * ESTIMATE - ESTIMATE / 4, 0));
    let kinds: Vec<String> =
        db.journal().await.into_iter().filter(|j| j.grant_id == Some(g.id)).map(|j| j.kind).collect();
    // What it settled is posted by the expiry (or by a renewal, had it lived).
    assert_eq!(kinds, ["reserve", "settle", "post", "expire"]);
    assert!(l.journal_verify("orphan").await.unwrap().is_consistent());
}
on_both!(
    the_reaper_expires_a_dead_holders_grant_at_expires_at,
    super::the_reaper_expires_a_dead_holders_grant_at_expires_at
);

/// Shutdown commits what is queued and returns every grant; later reservations are
/// refused as unavailable.
async fn shutdown_returns_grants(db: &Db) {
    let l = db.ledger.clone();
    let a1 = l.create_account("one", 100 * ESTIMATE).await.unwrap();
    let a2 = l.create_account("two", 100 * ESTIMATE).await.unwrap();
    let biller = Biller::start(l.clone(), config("leaving"), None);
    for a in [&a1, &a2] {
        let hold = biller.reserve(a.id, ESTIMATE, "r").await.unwrap();
        // Queued (its first poll hands it to the writer), its commit not awaited:
        // shutdown must still commit it. A spawned task alone may not have run yet.
        let mut settling = Box::pin(hold.settle(ESTIMATE, usage()));
        std::future::poll_fn(|cx| {
            assert!(settling.as_mut().poll(cx).is_pending());
            std::task::Poll::Ready(())
        })
        .await;
        tokio::spawn(settling);
    }
    biller.shutdown(Duration::from_secs(10)).await;
    assert_eq!(open_grants(db).await, 0);
    for name in ["one", "two"] {
        let a = l.account(name).await.unwrap().unwrap();
        assert_eq!((a.balance_nanos, a.reserved_nanos), (99 * ESTIMATE, 0), "{name}");
        assert!(l.journal_verify(name).await.unwrap().is_consistent());
    }
    let after = biller.reserve(a1.id, ESTIMATE, "late").await;
    assert!(matches!(after, Err(LedgerError::Unavailable(_))), "{after:?}");
}
on_both!(shutdown_returns_grants, super::shutdown_returns_grants);

/// A settle future resolves only once its batch committed: while another transaction
/// holds the grant's row (Postgres) or the database (SQLite), it stays pending; once
/// that lets go, it resolves and its journal row is there.
async fn a_settlement_resolves_only_after_its_commit(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("wait", 100 * ESTIMATE).await.unwrap();
    let biller = Biller::start(l.clone(), config("waiter"), None);
    let hold = biller.reserve(account.id, ESTIMATE, "slow").await.unwrap();
    sqlx::any::install_default_drivers();
    let blocker = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let mut tx = blocker.begin().await.unwrap();
    if db.url.starts_with("postgres") {
        // A batch locks its grants (never the account row).
        sqlx::query("SELECT id FROM grants WHERE account_id = $1 FOR UPDATE")
            .bind(account.id)
            .execute(&mut *tx)
            .await
            .unwrap();
    } else {
        // Take SQLite's write lock.
        sqlx::query("UPDATE accounts SET created_at_ms = created_at_ms WHERE id = $1")
            .bind(account.id)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let settle = tokio::spawn(hold.settle(ESTIMATE / 2, usage()));
    // The batch cannot commit while the lock is held, however long this waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!settle.is_finished(), "the settlement resolved before its batch could commit");
    assert!(!db.journal().await.iter().any(|j| j.kind == "settle"));
    tx.rollback().await.unwrap();
    let billed = settle.await.unwrap().unwrap();
    assert_eq!(billed.charged_nanos, ESTIMATE / 2);
    assert!(
        db.journal().await.iter().any(|j| j.kind == "settle" && j.request_id.as_deref() == Some("slow")),
        "resolved, so committed"
    );
    blocker.close().await;
    biller.shutdown(Duration::from_secs(5)).await;
}
on_both!(a_settlement_resolves_only_after_its_commit, super::a_settlement_resolves_only_after_its_commit);

/// A top-up serves again on the next request after a refusal (once the refusal is
/// older than `retry_after`).
async fn a_topup_serves_again(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("dry", ESTIMATE / 2).await.unwrap();
    let biller = Biller::start(l.clone(), BillerConfig { retry_after: Duration::ZERO, ..config("dry") }, None);
    let refused = biller.reserve(account.id, ESTIMATE, "r1").await;
    assert!(
        matches!(refused, Err(LedgerError::InsufficientFunds { available_nanos, needed_nanos: ESTIMATE }) if available_nanos == ESTIMATE / 2),
        "{refused:?}"
    );
    l.topup("dry", ESTIMATE).await.unwrap();
    let hold = biller.reserve(account.id, ESTIMATE, "r2").await.unwrap();
    hold.settle(ESTIMATE, usage()).await.unwrap();
    biller.shutdown(Duration::from_secs(5)).await;
    let a = l.account("dry").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (ESTIMATE / 2, 0));
}
on_both!(a_topup_serves_again, super::a_topup_serves_again);

/// A grant in use posts what it settled to the account row when it renews (at half its
/// validity): the stored row catches up while the grant stays open, and the balance read
/// before that already had it taken out.
async fn settlements_reach_the_account_row_at_the_next_renewal(db: &Db) {
    let l = db.ledger.clone();
    let account = l.create_account("posted", 100 * ESTIMATE).await.unwrap();
    let biller = Biller::start(l.clone(), config("poster"), None);
    // In flight throughout, so the grant is in use, not idle.
    let open = biller.reserve(account.id, ESTIMATE, "open").await.unwrap();
    for i in 0..5 {
        let hold = biller.reserve(account.id, ESTIMATE, &format!("p{i}")).await.unwrap();
        hold.settle(ESTIMATE / 2, usage()).await.unwrap();
    }
    let spent = 5 * ESTIMATE / 2;
    let a = l.account("posted").await.unwrap().unwrap();
    assert_eq!(a.balance_nanos, 100 * ESTIMATE - spent, "read with what is not posted taken out");
    sqlx::any::install_default_drivers();
    let raw = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let stored = async || -> i64 {
        sqlx::query_scalar("SELECT balance_nanos FROM accounts WHERE id = $1")
            .bind(account.id)
            .fetch_one(&raw)
            .await
            .unwrap()
    };
    // Growing renewals (the rate asks for more) posted what had settled before them; a
    // settlement after the last one is in the grant only.
    let last = biller.reserve(account.id, ESTIMATE, "last").await.unwrap();
    biller.renewals_done().await;
    last.settle(ESTIMATE / 2, usage()).await.unwrap();
    let spent = spent + ESTIMATE / 2;
    assert!(stored().await > 100 * ESTIMATE - spent, "not all posted yet");
    // Past half the validity: the maintenance renews, and the renewal posts.
    biller.maintain(SystemTime::now() + config("poster").validity / 2 + Duration::from_secs(1)).await;
    biller.renewals_done().await;
    assert_eq!(stored().await, 100 * ESTIMATE - spent);
    raw.close().await;
    assert_eq!(open_grants(db).await, 1, "posted while the grant is still open");
    let check = l.journal_verify("posted").await.unwrap();
    assert!(check.is_consistent() && check.unposted_nanos == 0, "{check:?}");
    open.release().await.unwrap();
    biller.shutdown(Duration::from_secs(5)).await;
}
on_both!(
    settlements_reach_the_account_row_at_the_next_renewal,
    super::settlements_reach_the_account_row_at_the_next_renewal
);
