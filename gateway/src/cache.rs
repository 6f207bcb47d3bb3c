//! The response and embedding cache (docs/design.md §13): exact-match answers kept in
//! two tiers, an in-process one bounded by bytes (`quick_cache`) in front of a shared one
//! every gateway reads (Redis, optional, [`shared`]). A key is a SHA-256 of what can
//! change the answer and of a scope (the account, unless the route shares its cache),
//! so one tenant never reads another's answer.
//!
//! The shared tier can fail without failing a request: an error or a slow answer is a
//! miss, and after one the tier is skipped for [`shared::PAUSE`].
//!
//! [`embeddings`] caches `/v1/embeddings` per input item, [`completions`] the other
//! inbound APIs' answers whole.

use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::CACHE_CONTROL;
use http::{HeaderMap, HeaderName};

pub mod completions;
pub mod embeddings;
pub mod key;
pub mod shared;

/// `x-sluice-cache` on answers: `hit`, `stale`, `miss` or `bypass`; on requests:
/// `refresh` or `bypass` (see [`Directive`]).
pub const X_SLUICE_CACHE: HeaderName = HeaderName::from_static("x-sluice-cache");
/// `x-sluice-cache-hits`: of an embeddings batch, the inputs answered from the cache,
/// `HITS/INPUTS`.
pub const X_SLUICE_CACHE_HITS: HeaderName = HeaderName::from_static("x-sluice-cache-hits");

/// What the in-process tier holds at most by default (`--cache-max-bytes`).
pub const DEFAULT_MAX_BYTES: u64 = 128 * 1024 * 1024;
/// Bytes counted per entry beyond its key and value (the tier's own bookkeeping, roughly).
const OVERHEAD: u32 = 96;

/// A cache key: SHA-256 of what can change the answer, and of its scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub [u8; 32]);

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // A digest's bytes are uniform already: eight of them are the hash.
        state.write_u64(u64::from_le_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5], self.0[6], self.0[7],
        ]));
    }
}

/// The hasher of the in-process tier's map: a [`Key`] hashes to eight of its digest's
/// bytes, so nothing is hashed twice.
#[derive(Clone, Default)]
struct Digested(u64);

impl std::hash::Hasher for Digested {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only keys are hashed here, and they write one u64; anything else is folded in.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

impl Key {
    /// The key of `parts`, each length-prefixed so no two lists of parts collide: their
    /// SHA-256, by `ring`'s assembly, which is twice as fast as a portable version where
    /// the CPU has no SHA instructions (bench/PROFILE.md).
    ///
    /// The parts are laid out in one buffer and hashed in one call: fed part by part,
    /// the digest's bookkeeping per call cost as much as hashing a request's bytes.
    pub fn of(parts: &[&[u8]]) -> Key {
        let mut text = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
        for p in parts {
            text.extend_from_slice(&(p.len() as u64).to_be_bytes());
            text.extend_from_slice(p);
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &text).as_ref());
        Key(key)
    }

    /// As stored in the shared tier: `sluice:c:` and the hex digest.
    pub fn shared_name(&self) -> String {
        let mut name = String::with_capacity(9 + 64);
        name.push_str("sluice:c:");
        for b in self.0 {
            name.push_str(&format!("{b:02x}"));
        }
        name
    }
}

/// One cached answer (or one embedding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When it was stored (unix ms).
    pub stored_at_ms: i64,
    /// How long it lives from then.
    pub ttl: Duration,
    /// The model id the upstream named in the answer.
    pub model: String,
    /// The cached bytes.
    pub body: Bytes,
}

impl Entry {
    /// A new entry stored now.
    pub fn new(model: &str, body: Bytes, ttl: Duration) -> Self {
        Self { stored_at_ms: now_ms(), ttl, model: model.to_owned(), body }
    }

    /// Its age at `now_ms`.
    pub fn age(&self, now_ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(now_ms - self.stored_at_ms).unwrap_or(0))
    }

    /// The shared tier's form: stored-at and ttl (ms, big-endian), the model's length
    /// and the model, then the body.
    pub fn encode(&self) -> Bytes {
        let model = self.model.as_bytes();
        let len = u16::try_from(model.len()).unwrap_or(u16::MAX);
        let mut out = BytesMut::with_capacity(18 + model.len() + self.body.len());
        out.put_i64(self.stored_at_ms);
        out.put_u64(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX));
        out.put_u16(len);
        out.put_slice(&model[..usize::from(len)]);
        out.put_slice(&self.body);
        out.freeze()
    }

    /// Reads [`encode`](Self::encode)'s form; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Entry> {
        let stored_at_ms = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let ttl = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
        let len = usize::from(u16::from_be_bytes(bytes.get(16..18)?.try_into().ok()?));
        let model = std::str::from_utf8(bytes.get(18..18 + len)?).ok()?.to_owned();
        let body = Bytes::copy_from_slice(bytes.get(18 + len..)?);
        Some(Entry { stored_at_ms, ttl: Duration::from_millis(ttl), model, body })
    }

    /// Whether it is still fresh at `now_ms` on a route that serves entries `ttl` long
    /// (an entry is kept longer than that for `staleIfError`).
    pub fn fresh(&self, now_ms: i64, ttl: Duration) -> bool {
        self.age(now_ms) < ttl
    }

    fn weight(&self) -> u32 {
        let size = self.body.len() + self.model.len() + 32;
        u32::try_from(size).unwrap_or(u32::MAX).saturating_add(OVERHEAD)
    }

    fn expired(&self, now_ms: i64) -> bool {
        self.age(now_ms) >= self.ttl
    }
}

/// What a request's headers ask of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    /// Read and store.
    Use,
    /// `Cache-Control: no-cache` or `x-sluice-cache: refresh`: do not read, store the
    /// fresh answer.
    Refresh,
    /// `Cache-Control: no-store` or `x-sluice-cache: bypass`: neither read nor store.
    Bypass,
}

impl Directive {
    /// From the request's `Cache-Control` and `x-sluice-cache` headers.
    /// One pass over their words: a bypass anywhere wins over a refresh.
    pub fn of(headers: &HeaderMap) -> Directive {
        let values = headers.get_all(CACHE_CONTROL).iter().chain(headers.get_all(X_SLUICE_CACHE).iter());
        let words = values.filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim);
        let mut directive = Directive::Use;
        for word in words {
            let is = |name: &str| word.eq_ignore_ascii_case(name);
            if is("no-store") || is("bypass") {
                return Directive::Bypass;
            }
            if is("no-cache") || is("refresh") {
                directive = Directive::Refresh;
            }
        }
        directive
    }
}

/// The process's cache: the in-process tier and, when configured, the shared one.
pub struct Cache {
    local: quick_cache::sync::Cache<Key, Arc<Entry>, Weight, BuildHasherDefault<Digested>>,
    shared: Option<shared::Shared>,
}

/// An in-process entry weighs its bytes (see [`Entry::weight`]).
#[derive(Clone)]
struct Weight;

impl quick_cache::Weighter<Key, Arc<Entry>> for Weight {
    fn weight(&self, _: &Key, e: &Arc<Entry>) -> u64 {
        u64::from(e.weight())
    }
}

impl Cache {
    /// A cache of at most `max_bytes` in process, reading `shared` behind it.
    ///
    /// The in-process tier is `quick_cache`: a lookup takes a shard's read lock and an
    /// insert its write lock, with nothing deferred to a collector (a miss stores its
    /// answer on the request's path; bench/PROFILE.md). Entries past their lifetime
    /// are not served ([`get_many`](Self::get_many)) and are swept by [`sweep`](Self::sweep).
    pub fn new(max_bytes: u64, shared: Option<shared::Shared>) -> Self {
        // Each shard holds its share of the bytes: enough shards that writers rarely
        // meet, few enough that the largest answer stored still fits in one.
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let fit = usize::try_from(max_bytes / (2 * completions::MAX_ENTRY_BYTES as u64)).unwrap_or(usize::MAX);
        let items = usize::try_from(max_bytes / 1024).unwrap_or(usize::MAX).max(64);
        let options = quick_cache::OptionsBuilder::new()
            .shards(fit.clamp(1, cores * 4))
            .estimated_items_capacity(items)
            .weight_capacity(max_bytes)
            .build();
        let hasher = BuildHasherDefault::default();
        let local = match options {
            Ok(o) => quick_cache::sync::Cache::with_options(o, Weight, hasher, Default::default()),
            // Only refused when a capacity is unset; both are set above.
            Err(_) => quick_cache::sync::Cache::with(items, max_bytes, Weight, hasher, Default::default()),
        };
        Self { local, shared }
    }

    /// The entries of `keys`, in order: the in-process tier first, then one round trip
    /// to the shared tier for what it lacks (entries found there are kept in process).
    pub async fn get_many(&self, keys: &[Key]) -> Vec<Option<Arc<Entry>>> {
        let now = now_ms();
        let mut found: Vec<Option<Arc<Entry>>> =
            keys.iter().map(|k| self.local.get(k).filter(|e| !e.expired(now))).collect();
        let Some(shared) = &self.shared else { return found };
        let missing: Vec<usize> = (0..keys.len()).filter(|i| found[*i].is_none()).collect();
        if missing.is_empty() {
            return found;
        }
        let names: Vec<Key> = missing.iter().map(|i| keys[*i]).collect();
        for (i, entry) in missing.into_iter().zip(shared.get_many(&names).await) {
            if let Some(e) = entry.filter(|e| !e.expired(now)) {
                let e = Arc::new(e);
                self.local.insert(keys[i], e.clone());
                found[i] = Some(e);
            }
        }
        found
    }

    /// Stores `entries` in both tiers; the shared tier is written in the background.
    pub fn put_many(&self, entries: Vec<(Key, Entry)>) {
        if entries.is_empty() {
            return;
        }
        let mut for_shared = Vec::new();
        for (key, entry) in entries {
            if self.shared.is_some() {
                for_shared.push((key, entry.clone()));
            }
            self.local.insert(key, Arc::new(entry));
        }
        if let Some(shared) = &self.shared {
            shared.put_many(for_shared);
        }
    }

    /// Lets go of the in-process entries past their lifetime (`ttl` plus
    /// `staleIfError`), and says how many bytes the tier then holds (for
    /// `sluice_cache_bytes`).
    pub fn sweep(&self) -> u64 {
        let now = now_ms();
        self.local.retain(|_, e| !e.expired(now));
        self.local.weight()
    }
}

/// Unix ms now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_the_shared_form() {
        let e = Entry {
            stored_at_ms: 1_700_000_000_123,
            ttl: Duration::from_secs(60),
            model: "m-1".into(),
            body: Bytes::from_static(b"[0.5]"),
        };
        assert_eq!(Entry::decode(&e.encode()), Some(e));
        assert_eq!(Entry::decode(b"short"), None);
    }

    #[test]
    fn keys_prefix_each_part_with_its_length() {
        assert_ne!(Key::of(&[b"ab", b"c"]), Key::of(&[b"a", b"bc"]));
        assert_eq!(Key::of(&[b"x"]).shared_name().len(), 9 + 64);
        // SHA-256 of the length (8 bytes, big-endian) then the part: the shared tier's
        // names do not change with the implementation.
        assert_eq!(
            Key::of(&[b"abc"]).shared_name(),
            "sluice:c:c3494ca1a2cf8eeb8a11ded316fb55b83c3bbbedb6313cd50415251e5d09e12f"
        );
    }

    #[test]
    fn directives_follow_cache_control_and_the_sluice_header() {
        let of = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, http::HeaderValue::from_static(v));
            }
            Directive::of(&h)
        };
        assert_eq!(of(&[]), Directive::Use);
        assert_eq!(of(&[("cache-control", "max-age=0, no-cache")]), Directive::Refresh);
        assert_eq!(of(&[("cache-control", "no-store")]), Directive::Bypass);
        assert_eq!(of(&[("x-sluice-cache", "refresh")]), Directive::Refresh);
        assert_eq!(of(&[("x-sluice-cache", "Bypass")]), Directive::Bypass);
        assert_eq!(of(&[("cache-control", "no-cache"), ("x-sluice-cache", "bypass")]), Directive::Bypass);
        assert_eq!(of(&[("cache-control", "no-cache, no-store")]), Directive::Bypass);
    }

    #[tokio::test]
    async fn the_local_tier_is_bounded_by_bytes_and_expires_entries() {
        let cache = Cache::new(10_000, None);
        let key = |i: u32| Key::of(&[&i.to_be_bytes()]);
        let big = Bytes::from(vec![b'0'; 1_000]);
        for i in 0..50 {
            cache.put_many(vec![(key(i), Entry::new("m", big.clone(), Duration::from_secs(60)))]);
        }
        assert!(cache.sweep() <= 10_000, "{}", cache.sweep());
        let old = Entry { stored_at_ms: now_ms() - 61_000, ..Entry::new("m", big, Duration::from_secs(60)) };
        cache.put_many(vec![(key(99), old.clone())]);
        assert_eq!(cache.get_many(&[key(99)]).await, vec![None]);
        // Past its lifetime an entry is let go at the next sweep.
        let cache = Cache::new(10_000, None);
        cache.put_many(vec![(key(99), old)]);
        assert_eq!(cache.local.len(), 1);
        assert_eq!(cache.sweep(), 0);
        assert!(cache.local.is_empty());
    }

    #[tokio::test]
    async fn the_largest_answer_stored_fits_in_a_small_tier_on_any_machine() {
        // Split by cores alone (8 on 2 cores), 12 MiB would give shards too small for it.
        let cache = Cache::new(3 * completions::MAX_ENTRY_BYTES as u64, None);
        let body = Bytes::from(vec![b'x'; completions::MAX_ENTRY_BYTES]);
        let k = Key::of(&[b"large"]);
        cache.put_many(vec![(k, Entry::new("m", body.clone(), Duration::from_secs(60)))]);
        let found = cache.get_many(&[k]).await.pop().flatten();
        assert_eq!(found.map(|e| e.body.len()), Some(body.len()));
    }
}
