use std::time::{Duration, Instant};

use sluice_ledger::{AccountRef, Change, KeySelector, Ledger, key_hash};
use tokio::sync::broadcast;

use super::*;

fn acme() -> Option<AccountRef> {
    Some(AccountRef { id: 1, name: "acme".into(), limits: None })
}

/// A cache of `capacity` with a 1 s TTL, fed by a channel the test sends on.
fn cache(capacity: usize) -> (KeyCache, broadcast::Sender<Change>) {
    let (tx, rx) = broadcast::channel(4);
    let c = KeyCache::new(capacity, Duration::from_secs(1));
    c.subscribe(rx);
    (c, tx)
}

fn hit(c: &KeyCache, hash: &str, now: Instant) -> Option<Option<AccountRef>> {
    match c.get(hash, now) {
        Lookup::Hit(found) => Some(found),
        Lookup::Miss(_) => None,
    }
}

fn fill(c: &KeyCache, hash: &str, account: Option<AccountRef>, now: Instant) {
    let Lookup::Miss(generation) = c.get(hash, now) else { panic!("{hash} was cached") };
    c.put(hash.to_owned(), account, generation, now);
}

#[test]
fn known_and_unknown_keys_are_served_for_the_ttl_only() {
    let (c, _tx) = cache(8);
    let t0 = Instant::now();
    fill(&c, "known", acme(), t0);
    fill(&c, "unknown", None, t0);
    let almost = t0 + Duration::from_millis(999);
    assert_eq!(hit(&c, "known", almost), Some(acme()));
    assert_eq!(hit(&c, "unknown", almost), Some(None), "a negative entry is served too");
    let later = t0 + Duration::from_secs(1);
    assert_eq!(hit(&c, "known", later), None);
    assert_eq!(hit(&c, "unknown", later), None);
    // Refilled, it lives another TTL from then.
    fill(&c, "known", acme(), later);
    assert_eq!(hit(&c, "known", later + Duration::from_millis(999)), Some(acme()));
}

#[test]
fn a_key_change_drops_that_key_and_all_drops_everything() {
    let (c, tx) = cache(8);
    let now = Instant::now();
    for hash in ["a", "b", "c"] {
        fill(&c, hash, acme(), now);
    }
    let other = Some(AccountRef { id: 2, name: "other".into(), limits: None });
    fill(&c, "d", other.clone(), now);
    fill(&c, "new", None, now);
    tx.send(Change::Key("a".into())).unwrap();
    tx.send(Change::Key("new".into())).unwrap();
    assert_eq!(hit(&c, "a", now), None, "revoked");
    assert_eq!(hit(&c, "new", now), None, "created: the negative entry is gone");
    assert_eq!(hit(&c, "b", now), Some(acme()));
    // A change of account 2 (a top-up, or its limits, which its keys carry): its keys
    // are asked again, kept as the fallback; account 1's stay.
    tx.send(Change::Account(2)).unwrap();
    assert_eq!((hit(&c, "d", now), c.stale("d", now)), (None, Some(other)));
    assert_eq!(hit(&c, "b", now), Some(acme()));
    tx.send(Change::All).unwrap();
    assert_eq!((hit(&c, "b", now), hit(&c, "c", now)), (None, None));
    // Kept only as the fallback for a ledger that cannot be reached; the revoked key
    // is not even that.
    assert_eq!((c.stale("b", now), c.stale("a", now)), (Some(acme()), None));
}

#[test]
fn while_the_ledger_is_away_a_recent_answer_is_served_stale_within_the_bound() {
    let (c, tx) = cache(8);
    let t0 = Instant::now();
    fill(&c, "k", acme(), t0);
    fill(&c, "gone", None, t0);
    // The feed reconnects during the outage: nothing is fresh any more.
    tx.send(Change::All).unwrap();
    let during = t0 + Duration::from_secs(5);
    assert_eq!(hit(&c, "k", during), None);
    assert_eq!(c.stale("k", during), Some(acme()));
    assert_eq!(c.stale("gone", during), Some(None), "an unknown key stays unknown");
    assert_eq!(c.stale("never-seen", during), None);
    assert_eq!(c.stale("k", t0 + DEFAULT_STALE), Some(acme()));
    assert_eq!(c.stale("k", t0 + DEFAULT_STALE + Duration::from_millis(1)), None, "too old to vouch for");
}

#[tokio::test]
async fn an_unreachable_ledger_serves_the_keys_seen_lately_and_refuses_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.db");
    let ledger = Ledger::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    ledger.create_account("acme", 0).await.unwrap();
    let (seen, unseen) = (ledger.create_key("acme").await.unwrap(), ledger.create_key("acme").await.unwrap());
    let c = KeyCache::new(16, Duration::from_millis(1));
    assert_eq!(c.authenticate(&ledger, &seen).await.unwrap().map(|a| a.name).as_deref(), Some("acme"));
    ledger.close().await;
    std::thread::sleep(Duration::from_millis(5));
    let stale = c.authenticate(&ledger, &seen).await.unwrap();
    assert_eq!(stale.map(|a| a.name).as_deref(), Some("acme"), "served from the entry");
    assert!(c.authenticate(&ledger, &unseen).await.is_err(), "a key nobody vouches for is not guessed");
}

#[test]
fn a_lagged_or_closed_feed_drops_everything() {
    let (c, tx) = cache(8);
    let now = Instant::now();
    fill(&c, "a", acme(), now);
    for i in 0..10 {
        tx.send(Change::Account(i)).unwrap();
    }
    assert_eq!(hit(&c, "a", now), None, "lagged: changes were missed");
    fill(&c, "a", acme(), now);
    drop(tx);
    assert_eq!(hit(&c, "a", now), None, "closed: nobody vouches any more");
    // Without a feed the TTL still holds.
    fill(&c, "a", acme(), now);
    assert_eq!(hit(&c, "a", now), Some(acme()));
    assert_eq!(hit(&c, "a", now + Duration::from_secs(1)), None);
}

#[test]
fn an_answer_read_before_a_change_is_not_kept() {
    let (c, tx) = cache(8);
    let now = Instant::now();
    let Lookup::Miss(generation) = c.get("k", now) else { panic!("empty cache") };
    // The ledger answered "acme", then the key was revoked before the answer was stored.
    tx.send(Change::Key("k".into())).unwrap();
    c.put("k".into(), acme(), generation, now);
    assert_eq!(hit(&c, "k", now), None);
    fill(&c, "k", None, now);
    assert_eq!(hit(&c, "k", now), Some(None));
}

#[test]
fn the_size_is_bounded_and_expired_entries_go_first() {
    let (c, _tx) = cache(8);
    let t0 = Instant::now();
    for i in 0..4 {
        fill(&c, &format!("old{i}"), None, t0);
    }
    let t1 = t0 + Duration::from_millis(1500);
    for i in 0..4 {
        fill(&c, &format!("new{i}"), acme(), t1);
    }
    assert_eq!(c.len(), 8);
    fill(&c, "one-more", acme(), t1);
    assert_eq!(c.len(), 5, "the four expired entries made room");
    for i in 0..4 {
        assert_eq!(hit(&c, &format!("new{i}"), t1), Some(acme()));
    }
    for i in 0..100 {
        fill(&c, &format!("flood{i}"), None, t1);
        assert!(c.len() <= 8);
    }
}

#[tokio::test]
async fn the_gateway_cache_asks_the_ledger_once_and_hears_revocations() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    ledger.create_account("acme", 0).await.unwrap();
    let key = ledger.create_key("acme").await.unwrap();
    // A long TTL: only the feed can make this cache forget. The feed's first message
    // (All) is received before the key is cached, so only the revocation can drop it.
    let c = KeyCache::new(16, Duration::from_secs(3600));
    let mut started = ledger.changes();
    c.subscribe(ledger.changes());
    assert_eq!(started.recv().await.unwrap(), Change::All);
    assert_eq!(c.authenticate(&ledger, "not-a-key").await.unwrap(), None);
    assert!(c.is_empty(), "strings that cannot be keys are not cached");
    let found = c.authenticate(&ledger, &key).await.unwrap().unwrap();
    assert_eq!(found.name, "acme");
    let hash = key_hash(&key).unwrap();
    assert_eq!(c.get(&hash, Instant::now()), Lookup::Hit(Some(found)));

    ledger.revoke_key(KeySelector::Key(&key)).await.unwrap();
    let refused = sluice_ledger::testing::eventually(Duration::from_secs(1), async || {
        c.authenticate(&ledger, &key).await.unwrap().is_none()
    })
    .await;
    assert!(refused, "the revocation did not reach the cache within 1 s");
    assert_eq!(c.get(&hash, Instant::now()), Lookup::Hit(None), "now cached as unknown");
}

#[tokio::test]
async fn the_gateway_cache_listens_from_the_start() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    assert!(KeyCache::watching(Some(&ledger)).lock().changes.is_some());
    assert!(KeyCache::watching(None).lock().changes.is_none());
    // Outside a runtime it cannot start the feed; it subscribes on first use instead.
    let outside =
        std::thread::spawn(move || KeyCache::watching(Some(&ledger)).lock().changes.is_none()).join().unwrap();
    assert!(outside);
}
