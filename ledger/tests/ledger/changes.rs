//! The change feed (`Ledger::changes`, docs/design.md §5a): what one process writes,
//! another process's handle hears, in order, within 1 s; and a feed that cannot vouch
//! for what it missed says `All`.

use std::time::{Duration, Instant};

use sluice_ledger::{Change, KeySelector, Ledger, key_hash};
use tokio::sync::broadcast::Receiver;

use crate::on_both;
use crate::support::Db;

/// The next change, and how long it took to come (at most 5 s: the contract is 1 s,
/// asserted by the caller, the rest is room to print what came instead).
async fn next(rx: &mut Receiver<Change>) -> (Change, Duration) {
    let started = Instant::now();
    let change = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a change within 5 s")
        .expect("the feed is open");
    (change, started.elapsed())
}

async fn another_process_hears_every_change_in_order(db: &Db) {
    // `watcher` plays a gateway; `admin` another process on the same database.
    let watcher = Ledger::connect(&db.url).await.unwrap();
    let admin = &db.ledger;
    let mut rx = watcher.changes();
    assert_eq!(next(&mut rx).await.0, Change::All, "a new feed starts with All");
    let account = admin.create_account("team-a", 0).await.unwrap();

    let mut waits = Vec::new();
    admin.topup("team-a", 5).await.unwrap();
    let (change, took) = next(&mut rx).await;
    assert_eq!(change, Change::Account(account.id));
    waits.push(took);

    let key = admin.create_key("team-a").await.unwrap();
    let hash = key_hash(&key).unwrap();
    let (change, took) = next(&mut rx).await;
    assert_eq!(change, Change::Key(hash.clone()));
    waits.push(took);

    admin.revoke_key(KeySelector::Key(&key)).await.unwrap();
    let (change, took) = next(&mut rx).await;
    assert_eq!(change, Change::Key(hash.clone()));
    waits.push(took);

    // A second revocation changes nothing, so says nothing; several changes in one go
    // arrive in commit order.
    admin.revoke_key(KeySelector::Key(&key)).await.unwrap();
    admin.topup("team-a", 1).await.unwrap();
    admin.topup("team-a", 2).await.unwrap();
    assert_eq!(next(&mut rx).await.0, Change::Account(account.id));
    assert_eq!(next(&mut rx).await.0, Change::Account(account.id));
    assert!(rx.try_recv().is_err(), "nothing else was changed");

    // The writer's own handle hears its own changes too, and a second subscriber of a
    // handle shares its watcher.
    let mut own = admin.changes();
    let mut second = watcher.changes();
    assert_eq!(next(&mut own).await.0, Change::All);
    admin.topup("team-a", 3).await.unwrap();
    assert_eq!(next(&mut own).await.0, Change::Account(account.id));
    assert_eq!(next(&mut second).await.0, Change::Account(account.id));
    assert_eq!(next(&mut rx).await.0, Change::Account(account.id));

    eprintln!("{} change feed delays: {waits:?}", admin.kind());
    for took in waits {
        assert!(took <= Duration::from_secs(1), "a change took {took:?} to arrive");
    }
    watcher.close().await;
}
on_both!(changes_reach_other_processes, super::another_process_hears_every_change_in_order);

/// Only the most recent changes are kept; a watcher further behind starts over with
/// All instead of missing some.
async fn a_watcher_too_far_behind_hears_all(db: &Db) {
    let watcher = Ledger::connect(&db.url).await.unwrap();
    let mut rx = watcher.changes();
    assert_eq!(next(&mut rx).await.0, Change::All);
    db.ledger.create_account("team-a", 0).await.unwrap();
    // Prune as `record` would after 10 000 more changes, without making them.
    let raw = sqlx::AnyPool::connect(&db.url).await.unwrap();
    db.ledger.topup("team-a", 1).await.unwrap();
    sqlx::query("UPDATE ledger_change_seq SET seq = seq + 20000").execute(&raw).await.unwrap();
    db.ledger.topup("team-a", 1).await.unwrap();
    sqlx::query("DELETE FROM ledger_changes WHERE seq < 20000").execute(&raw).await.unwrap();
    raw.close().await;
    // The first top-up may or may not have been read before the prune.
    let mut seen = vec![next(&mut rx).await.0];
    if seen[0] != Change::All {
        seen.push(next(&mut rx).await.0);
    }
    assert_eq!(seen.last(), Some(&Change::All), "{seen:?}");
    watcher.close().await;
}
on_both!(pruned_changes_mean_all, super::a_watcher_too_far_behind_hears_all);
