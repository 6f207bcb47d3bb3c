//! The shared tier (docs/design.md §13): Redis, read by every gateway. It may fail at
//! any time without failing a request: a read that errs or takes longer than [`TIMEOUT`]
//! is a miss, a write that fails is dropped, and after either the tier is left alone
//! for [`PAUSE`] (so an outage costs no request more than one timeout), then tried
//! again on a new connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

use super::{Entry, Key, now_ms};

/// The longest a read or a connection may take before it counts as a miss.
pub const TIMEOUT: Duration = Duration::from_millis(100);
/// How long the tier is skipped after it failed.
pub const PAUSE: Duration = Duration::from_secs(1);

/// A Redis tier. Cheap to clone.
#[derive(Clone)]
pub struct Shared {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    /// Unix ms until which the tier is skipped.
    paused_until: AtomicI64,
    /// `sluice_cache_shared_errors_total`.
    errors: Counter,
}

impl Shared {
    /// A tier at `url` (`redis://HOST:PORT/DB`, `rediss://…`, `unix://PATH`); connects on
    /// first use. Errors only for a URL that is not one.
    pub fn new(url: &str, errors: Counter) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        Ok(Self { inner: Arc::new(Inner { client, conn: Mutex::new(None), paused_until: AtomicI64::new(0), errors }) })
    }

    async fn connection(&self) -> Option<MultiplexedConnection> {
        if now_ms() < self.inner.paused_until.load(Ordering::Relaxed) {
            return None;
        }
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Some(c.clone());
        }
        match tokio::time::timeout(TIMEOUT, self.inner.client.get_multiplexed_async_connection()).await {
            Ok(Ok(c)) => {
                *slot = Some(c.clone());
                Some(c)
            }
            Ok(Err(e)) => {
                drop(slot);
                self.failed(&e.to_string()).await;
                None
            }
            Err(_) => {
                drop(slot);
                self.failed("connecting timed out").await;
                None
            }
        }
    }

    async fn failed(&self, why: &str) {
        self.inner.errors.inc();
        let until = now_ms() + i64::try_from(PAUSE.as_millis()).unwrap_or(1000);
        let before = self.inner.paused_until.swap(until, Ordering::Relaxed);
        *self.inner.conn.lock().await = None;
        if before < now_ms() {
            tracing::warn!(
                error = why,
                "the shared cache tier failed; it is skipped for 1 s (requests go on as misses)"
            );
        }
    }

    /// The entries of `keys`, in order (`None` for a miss, and for all of them when the
    /// tier cannot answer in time).
    pub async fn get_many(&self, keys: &[Key]) -> Vec<Option<Entry>> {
        let none = || keys.iter().map(|_| None).collect();
        let Some(mut conn) = self.connection().await else { return none() };
        let names: Vec<String> = keys.iter().map(Key::shared_name).collect();
        let mut mget = redis::cmd("MGET");
        mget.arg(&names);
        let read = mget.query_async::<Vec<Option<Vec<u8>>>>(&mut conn);
        match tokio::time::timeout(TIMEOUT, read).await {
            Ok(Ok(values)) if values.len() == keys.len() => {
                values.into_iter().map(|v| v.and_then(|b| Entry::decode(&b))).collect()
            }
            Ok(Ok(_)) => none(),
            Ok(Err(e)) => {
                self.failed(&e.to_string()).await;
                none()
            }
            Err(_) => {
                self.failed("a read timed out").await;
                none()
            }
        }
    }

    /// Writes `entries` in the background, each expiring with its TTL.
    pub fn put_many(&self, entries: Vec<(Key, Entry)>) {
        let this = self.clone();
        tokio::spawn(async move {
            let Some(mut conn) = this.connection().await else { return };
            let mut pipe = redis::pipe();
            for (key, entry) in &entries {
                let left = entry.ttl.saturating_sub(entry.age(now_ms())).as_millis().max(1);
                pipe.cmd("SET").arg(key.shared_name()).arg(entry.encode().as_ref()).arg("PX").arg(left as u64).ignore();
            }
            match tokio::time::timeout(TIMEOUT * 10, pipe.query_async::<()>(&mut conn)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => this.failed(&e.to_string()).await,
                Err(_) => this.failed("a write timed out").await,
            }
        });
    }
}
