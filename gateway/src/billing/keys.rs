//! The key → account cache behind [`authenticate`](super::authenticate): a request
//! with a key seen in the last second is authenticated without touching the ledger
//! (docs/design.md §3.1, §5a).
//!
//! Keys are cached by their stored form ([`key_hash`]), never in clear. An entry, known
//! (the account) or unknown (a negative entry: unknown or revoked key), lives at most
//! `ttl` (1 s in the gateway), and goes at once when the ledger's change feed
//! ([`Ledger::changes`]) says that key changed ([`Change::Key`]: created or revoked) or
//! that anything may have ([`Change::All`], or a lagged feed). So a key revoked by
//! `admin key revoke` in any process is refused within the feed's delay, and within
//! `ttl` even if the feed is silent. The cache holds at most `capacity` entries.
//!
//! While the ledger cannot be reached, an entry confirmed within the last
//! [`DEFAULT_STALE`] is served all the same (stale-if-error): during a database restart
//! the keys in use keep authenticating, and their requests are billed from the balance
//! grants the process holds (docs/design.md §5a); a key not seen lately is refused
//! with 503 `ledger_unavailable`. A feed that says "anything may have changed" (its
//! reconnects during such an outage) expires the entries rather than dropping them; a
//! key the feed names as changed is dropped.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sluice_ledger::{AccountRef, Change, Ledger, LedgerError, key_hash};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::TryRecvError;

/// How long an entry may be served without asking the ledger.
pub const DEFAULT_TTL: Duration = Duration::from_secs(1);
/// Entries kept at most (a few hundred bytes each).
pub const DEFAULT_CAPACITY: usize = 65_536;
/// How long after its last confirmation an entry may still be served while the ledger
/// cannot be reached: the default grant validity, the time a grant also serves without
/// the database.
pub const DEFAULT_STALE: Duration = Duration::from_secs(30);

/// A bounded, briefly-lived map from key hash to account (or to "no such key").
pub struct KeyCache {
    ttl: Duration,
    stale: Duration,
    capacity: usize,
    state: Mutex<State>,
}

/// What the cache knows of one key hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Fresh: the account, or `None` for a key that authenticates nobody.
    Hit(Option<AccountRef>),
    /// Not known, or expired: ask the ledger, then [`KeyCache::put`] with this generation.
    Miss(u64),
}

struct State {
    entries: HashMap<String, Entry>,
    /// The ledger's change feed, once subscribed (again after it closed).
    changes: Option<Receiver<Change>>,
    /// Counts the invalidations applied: an answer read under an older generation may
    /// predate one of them, and is not stored.
    generation: u64,
}

struct Entry {
    account: Option<AccountRef>,
    /// When the ledger last said so.
    confirmed: Instant,
    /// Served without asking until then.
    expires: Instant,
}

impl KeyCache {
    /// An empty cache of at most `capacity` entries (at least 1), each served for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            ttl,
            stale: DEFAULT_STALE.max(ttl),
            capacity: capacity.max(1),
            state: Mutex::new(State { entries: HashMap::new(), changes: None, generation: 0 }),
        }
    }

    /// The gateway's cache: default size and TTL, already listening to `ledger`'s change
    /// feed when called within a tokio runtime (so the feed's first `All` comes before
    /// the first request, not after it); else it subscribes on first use.
    pub fn watching(ledger: Option<&Ledger>) -> Self {
        let cache = Self::default();
        if let Some(ledger) = ledger
            && tokio::runtime::Handle::try_current().is_ok()
        {
            cache.subscribe(ledger.changes());
        }
        cache
    }

    /// The account of `key`, or `None` for a key that authenticates nobody, from the
    /// cache when it is fresh, else from the ledger (then cached).
    pub async fn authenticate(&self, ledger: &Ledger, key: &str) -> Result<Option<AccountRef>, LedgerError> {
        let Some(hash) = key_hash(key) else {
            // Cannot be a key: refused without the ledger, and not worth an entry.
            return Ok(None);
        };
        self.subscribe_if_needed(ledger);
        let generation = match self.get(&hash, Instant::now()) {
            Lookup::Hit(found) => return Ok(found),
            Lookup::Miss(generation) => generation,
        };
        let found = match ledger.authenticate_hash(&hash).await {
            Ok(found) => found,
            Err(e) if unreachable(&e) => match self.stale(&hash, Instant::now()) {
                Some(found) => return Ok(found),
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        self.put(hash, found.clone(), generation, Instant::now());
        Ok(found)
    }

    /// What the cache last knew of `hash`, if confirmed within the stale bound of `now`
    /// (served only while the ledger cannot be reached).
    pub fn stale(&self, hash: &str, now: Instant) -> Option<Option<AccountRef>> {
        let mut state = self.lock();
        state.drain();
        let e = state.entries.get(hash)?;
        (now.saturating_duration_since(e.confirmed) <= self.stale).then(|| e.account.clone())
    }

    /// Invalidates by the changes of `changes` from now on (the gateway's is the
    /// ledger's feed, subscribed on first use).
    pub fn subscribe(&self, changes: Receiver<Change>) {
        self.lock().changes = Some(changes);
    }

    /// What the cache knows of `hash` at `now`, after applying the changes received.
    pub fn get(&self, hash: &str, now: Instant) -> Lookup {
        let mut state = self.lock();
        state.drain();
        match state.entries.get(hash) {
            Some(e) if e.expires > now => Lookup::Hit(e.account.clone()),
            _ => Lookup::Miss(state.generation),
        }
    }

    /// Stores the ledger's answer for `hash`, read after [`get`](Self::get) returned
    /// `Miss(generation)`; dropped if a change arrived meanwhile (it may be older).
    pub fn put(&self, hash: String, account: Option<AccountRef>, generation: u64, now: Instant) {
        let capacity = self.capacity;
        let mut state = self.lock();
        state.drain();
        if state.generation != generation {
            return;
        }
        if state.entries.len() >= capacity && !state.entries.contains_key(&hash) {
            state.evict(capacity, now);
        }
        state.entries.insert(hash, Entry { account, confirmed: now, expires: now + self.ttl });
    }

    /// Entries held (some may have expired).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn subscribe_if_needed(&self, ledger: &Ledger) {
        let mut state = self.lock();
        if state.changes.is_none() {
            state.changes = Some(ledger.changes());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The map is valid after any panic: every update is a single insert or remove.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for KeyCache {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY, DEFAULT_TTL)
    }
}

impl State {
    /// Applies every change received so far.
    fn drain(&mut self) {
        let Some(mut changes) = self.changes.take() else { return };
        loop {
            match changes.try_recv() {
                Ok(Change::Key(hash)) => {
                    self.entries.remove(&hash);
                    self.generation += 1;
                }
                // A top-up, or the account's limits changed: its keys carry its limits.
                Ok(Change::Account(id)) => self.drop_account(id),
                Ok(Change::All) | Err(TryRecvError::Lagged(_)) => self.expire_all(),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => {
                    // The feed is gone: what it would have said is unknown. Subscribe again
                    // on the next lookup.
                    self.expire_all();
                    return;
                }
            }
        }
        self.changes = Some(changes);
    }

    /// The keys of account `id` are asked of the ledger again (they carry its limits);
    /// what was known stays for [`KeyCache::stale`].
    fn drop_account(&mut self, id: i64) {
        for e in self.entries.values_mut() {
            if e.account.as_ref().is_some_and(|a| a.id == id) {
                e.expires = e.confirmed;
            }
        }
        self.generation += 1;
    }

    /// Nothing may be served without asking the ledger again; what was known stays for
    /// [`KeyCache::stale`].
    fn expire_all(&mut self) {
        for e in self.entries.values_mut() {
            e.expires = e.confirmed;
        }
        self.generation += 1;
    }

    /// Makes room: expired entries first (the stale copies they keep are a fallback,
    /// worth less than fresh entries), then arbitrary ones down to 7/8 of `capacity` (so
    /// a flood of new keys evicts in batches, not on every insert).
    fn evict(&mut self, capacity: usize, now: Instant) {
        self.entries.retain(|_, e| e.expires > now);
        let keep = capacity - capacity / 8 - 1;
        if self.entries.len() > keep {
            let excess = self.entries.len() - keep;
            let victims: Vec<String> = self.entries.keys().take(excess).cloned().collect();
            for v in victims {
                self.entries.remove(&v);
            }
        }
    }
}

/// Whether `e` says the ledger could not be reached (rather than refusing the key).
fn unreachable(e: &LedgerError) -> bool {
    matches!(e, LedgerError::Database(_) | LedgerError::Unavailable(_))
}

#[cfg(test)]
mod tests;
