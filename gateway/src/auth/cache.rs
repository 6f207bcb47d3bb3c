//! A credential cached until shortly before it expires, fetched by one caller at a time.
//!
//! Every upstream call asks for the credential; almost every ask is a read of the cached
//! value. Within [`REFRESH_EARLY`] of its expiry the next caller fetches a fresh one
//! while the others wait for that same fetch (single flight), so a token endpoint sees
//! one request per refresh, not one per request in flight. A fetch that fails while the
//! old credential is still valid keeps serving the old one (and the next call tries
//! again); an expired credential is never handed out. Time is an input (`now`), so the
//! refresh rules are tested without waiting.

use std::sync::Mutex as SyncMutex;
use std::time::{Duration, SystemTime};

use tokio::sync::Mutex;

/// How long before its expiry a credential is refreshed.
pub const REFRESH_EARLY: Duration = Duration::from_secs(300);

/// A credential and when it stops being valid (`None`: never, e.g. a static key).
#[derive(Clone, Debug)]
pub struct Expiring<T> {
    /// The credential.
    pub value: T,
    /// When the issuer says it expires.
    pub expires_at: Option<SystemTime>,
}

impl<T> Expiring<T> {
    /// A credential that does not expire.
    pub fn forever(value: T) -> Self {
        Self { value, expires_at: None }
    }

    fn fresh_at(&self, now: SystemTime) -> bool {
        self.expires_at.is_none_or(|at| now + REFRESH_EARLY < at)
    }

    fn valid_at(&self, now: SystemTime) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

/// The cache. `T` is cheap to clone (an `Arc` or a short string).
pub struct Cached<T> {
    current: SyncMutex<Option<Expiring<T>>>,
    /// Held by the one caller that fetches; the others wait on it, then read.
    fetching: Mutex<()>,
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Self { current: SyncMutex::new(None), fetching: Mutex::new(()) }
    }
}

impl<T: Clone> Cached<T> {
    /// The cached credential if it is fresh at `now`; otherwise one caller runs `fetch`
    /// and everyone gets its result. If the fetch fails, a still-valid old credential is
    /// returned (the failure is logged); without one, the error is.
    pub async fn get<E, F, Fut>(&self, now: SystemTime, fetch: F) -> Result<T, E>
    where
        E: std::fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Expiring<T>, E>>,
    {
        if let Some(v) = self.fresh(now) {
            return Ok(v);
        }
        let _flight = self.fetching.lock().await;
        // Someone else may have fetched while we waited.
        if let Some(v) = self.fresh(now) {
            return Ok(v);
        }
        match fetch().await {
            Ok(fresh) => {
                let value = fresh.value.clone();
                *self.lock() = Some(fresh);
                Ok(value)
            }
            Err(e) => match self.lock().as_ref().filter(|c| c.valid_at(now)) {
                Some(old) => {
                    tracing::warn!(error = %e, "refreshing a credential failed; the current one is still valid and stays in use");
                    Ok(old.value.clone())
                }
                None => Err(e),
            },
        }
    }

    /// Forgets the credential (the upstream said it expired): the next `get` fetches.
    pub fn invalidate(&self) {
        *self.lock() = None;
    }

    fn fresh(&self, now: SystemTime) -> Option<T> {
        self.lock().as_ref().filter(|c| c.fresh_at(now)).map(|c| c.value.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Expiring<T>>> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn token(n: u32, expires: u64) -> Result<Expiring<String>, String> {
        Ok(Expiring { value: format!("t{n}"), expires_at: Some(at(expires)) })
    }

    #[tokio::test]
    async fn a_fresh_token_is_reused_and_refreshed_five_minutes_before_expiry() {
        let cache = Cached::<String>::default();
        let fetches = AtomicU32::new(0);
        let fetch = || async {
            let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
            token(n, 3600)
        };
        assert_eq!(cache.get(at(0), fetch).await, Ok("t1".to_string()));
        assert_eq!(cache.get(at(3299), fetch).await, Ok("t1".to_string()), "still more than 5 min left");
        assert_eq!(cache.get(at(3300), fetch).await, Ok("t2".to_string()), "refreshed 5 min early");
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_a_valid_token_but_never_an_expired_one() {
        let cache = Cached::<String>::default();
        assert_eq!(cache.get(at(0), || async { token(1, 3600) }).await, Ok("t1".to_string()));
        let down = || async { Err::<Expiring<String>, _>("token endpoint down".to_string()) };
        assert_eq!(cache.get(at(3500), down).await, Ok("t1".to_string()), "valid for 100 s more");
        assert_eq!(cache.get(at(3600), down).await, Err("token endpoint down".to_string()));
    }

    #[tokio::test]
    async fn invalidate_forces_a_fetch() {
        let cache = Cached::<String>::default();
        assert_eq!(cache.get(at(0), || async { token(1, 3600) }).await, Ok("t1".to_string()));
        cache.invalidate();
        assert_eq!(cache.get(at(1), || async { token(2, 3600) }).await, Ok("t2".to_string()));
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let cache = Arc::new(Cached::<String>::default());
        let fetches = Arc::new(AtomicU32::new(0));
        let (release, gate) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (cache, fetches, mut gate) = (cache.clone(), fetches.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get(at(0), || async move {
                        let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
                        let _ = gate.wait_for(|open| *open).await;
                        token(n, 3600)
                    })
                    .await
            }));
        }
        tokio::task::yield_now().await;
        let _ = release.send(true);
        for t in tasks {
            assert_eq!(t.await.ok(), Some(Ok("t1".to_string())));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_credential_without_expiry_is_fetched_once() {
        let cache = Cached::<String>::default();
        let v = cache.get(at(0), || async { Ok::<_, String>(Expiring::forever("static".to_string())) }).await;
        assert_eq!(v, Ok("static".to_string()));
        let again = cache.get(at(10_000_000), || async { Err::<Expiring<String>, _>("not called".to_string()) }).await;
        assert_eq!(again, Ok("static".to_string()));
    }
}
