//! The change feed: top-ups and key changes, from whichever process made them, to every
//! process that caches what they change (docs/design.md §5a: "top-ups and key
//! revocations reach every gateway within 1 s").
//!
//! Writing: [`Ledger::topup`], [`Ledger::create_key`] and [`Ledger::revoke_key`] call
//! [`record`] inside their own transaction. It takes the next change number from the
//! one-row `ledger_change_seq` (an UPDATE, so changes commit in the order of their
//! numbers), appends a row to `ledger_changes` (the most recent [`KEEP`] rows are kept)
//! and, on Postgres, sends `NOTIFY sluice_ledger` (delivered at commit, never for a
//! rolled-back change).
//!
//! Reading: [`Ledger::changes`] starts, once per [`Ledger`] handle, a watcher task that
//! reads the rows after the last number it saw, on Postgres whenever a notification
//! arrives (a `LISTEN` connection of its own, reconnected with backoff) and every
//! [`POSTGRES_CHECK`] in any case, on SQLite every [`SQLITE_CHECK`].

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{Any, AnyPool, Row, Transaction};
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;

use crate::error::LedgerError;
use crate::ledger::{Inner, Ledger};

/// Something another process may have cached that changed in the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// The balance of the account with this id went up (a top-up).
    Account(i64),
    /// The API key with this hash ([`key_hash`](crate::key_hash): hex SHA-256, as stored)
    /// was created or revoked: what it authenticates as changed.
    Key(String),
    /// Anything may have changed and changes may have been missed: drop everything cached.
    /// Sent when the watcher starts (before that, nothing was watched), after its
    /// Postgres `LISTEN` connection was (re)established, after the database could not be
    /// read, and when it fell more than [`KEEP`] changes behind.
    All,
}

/// How often the watcher reads new changes on SQLite.
pub const SQLITE_CHECK: Duration = Duration::from_millis(250);
/// How often the watcher reads new changes on Postgres without a notification (the
/// fallback when `LISTEN` is down or a notification was lost).
pub const POSTGRES_CHECK: Duration = Duration::from_secs(1);
/// Change rows kept in `ledger_changes`; a watcher further behind sends [`Change::All`].
pub const KEEP: i64 = 10_000;
/// Messages a receiver may fall behind before it gets `RecvError::Lagged`.
const CAPACITY: usize = 1024;
/// The Postgres notification channel (per database: a notification from another schema
/// only costs one extra read).
const CHANNEL: &str = "sluice_ledger";
/// Rows read per query.
const BATCH: i64 = 512;
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The feed of one [`Ledger`] handle: how to watch, and the watcher once started.
pub(crate) struct Feed {
    every: Duration,
    /// The Postgres URL to `LISTEN` on (it may hold a password: never printed).
    listen_url: Option<String>,
    running: Mutex<Option<(broadcast::Sender<Change>, JoinHandle<()>)>>,
}

/// Stops a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Ledger {
    /// Subscribes to the ledger's changes (top-ups, keys created and revoked), from every
    /// process on this database, the caller's own included.
    ///
    /// Semantics a subscriber may rely on:
    /// - A change committed at `t` is delivered by `t` + 250 ms (plus one read) on
    ///   SQLite; on Postgres within milliseconds (`LISTEN`/`NOTIFY`), and by `t` + 1 s
    ///   (plus one read) when notifications are not coming through (the periodic check).
    ///   This holds while the database answers reads.
    /// - Every change is delivered, as itself or covered by a later [`Change::All`], in
    ///   commit order, and never before it is visible to reads through this handle.
    ///   Changes that change nothing (revoking a revoked key) are not sent.
    /// - When the watcher cannot vouch for what it missed, it sends `All`; the first
    ///   message of a new watcher is `All`. A receiver that lags (`RecvError::Lagged`)
    ///   must treat that as `All` too.
    ///
    /// The watcher starts with the first call on a handle (later calls share it) and
    /// stops once the last clone of the handle is dropped (receivers then get
    /// `RecvError::Closed`) or [`close`](Self::close)d (then nothing more is sent). Must
    /// be called within a tokio runtime.
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        let feed = &self.inner.changes;
        let mut running = feed.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((tx, task)) = running.as_ref()
            && !task.is_finished()
        {
            return tx.subscribe();
        }
        let (tx, rx) = broadcast::channel(CAPACITY);
        let watcher = watch(Arc::downgrade(&self.inner), tx.clone(), feed.every, feed.listen_url.clone());
        *running = Some((tx, tokio::spawn(watcher)));
        rx
    }
}

impl Feed {
    /// The feed of a SQLite ledger (periodic checks only).
    pub(crate) fn sqlite() -> Feed {
        Feed { every: SQLITE_CHECK, listen_url: None, running: Mutex::new(None) }
    }

    /// The feed of a Postgres ledger at `url` (`LISTEN` plus periodic checks).
    pub(crate) fn postgres(url: &str) -> Feed {
        Feed { every: POSTGRES_CHECK, listen_url: Some(url.to_owned()), running: Mutex::new(None) }
    }
}

impl fmt::Debug for Feed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Feed")
            .field("every", &self.every)
            .field("listen", &self.listen_url.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records a change in the caller's write transaction: a top-up of `account_id`
/// (`key_hash` `None`), or a key of it created or revoked.
pub(crate) async fn record(
    ledger: &Ledger,
    tx: &mut Transaction<'static, Any>,
    account_id: i64,
    key_hash: Option<&str>,
    at_ms: i64,
) -> Result<(), LedgerError> {
    let seq: i64 = sqlx::query_scalar("UPDATE ledger_change_seq SET seq = seq + 1 WHERE one = 1 RETURNING seq")
        .fetch_one(&mut **tx)
        .await?;
    sqlx::query("INSERT INTO ledger_changes (seq, account_id, key_hash, at_ms) VALUES ($1, $2, $3, $4)")
        .bind(seq)
        .bind(account_id)
        .bind(key_hash)
        .bind(at_ms)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM ledger_changes WHERE seq <= $1").bind(seq - KEEP).execute(&mut **tx).await?;
    if ledger.is_postgres() {
        // NOTIFY takes no bind parameters; the payload is our own integer.
        sqlx::query(&format!("NOTIFY {CHANNEL}, '{seq}'")).execute(&mut **tx).await?;
    }
    Ok(())
}

/// The watcher: reads new changes on every wake-up and every `every`, and sends them.
async fn watch(inner: Weak<Inner>, tx: broadcast::Sender<Change>, every: Duration, listen_url: Option<String>) {
    let wake = Arc::new(Notify::new());
    let lost = Arc::new(AtomicBool::new(false));
    let _listener = listen_url.map(|url| AbortOnDrop(tokio::spawn(listen(url, wake.clone(), lost.clone()))));
    let mut seen: Option<i64> = None;
    let mut failing = false;
    loop {
        let Some(inner) = inner.upgrade() else { return };
        if inner.reader.is_closed() {
            return;
        }
        let reset = lost.swap(false, Ordering::SeqCst);
        match read_after(&inner.reader, seen).await {
            Ok((changes, last)) => {
                if failing {
                    tracing::info!("the ledger's change feed reads again");
                }
                match changes {
                    Some(changes) if !reset && !failing => {
                        for change in changes {
                            let _ = tx.send(change);
                        }
                    }
                    _ => {
                        let _ = tx.send(Change::All);
                    }
                }
                seen = Some(last);
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot read the ledger's changes; will retry");
                }
                failing = true;
            }
        }
        drop(inner);
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// The changes after number `seen` and the last number read; `None` for the changes
/// when they cannot all be told (no `seen` yet, or rows already pruned).
async fn read_after(pool: &AnyPool, seen: Option<i64>) -> Result<(Option<Vec<Change>>, i64), sqlx::Error> {
    let Some(mut last) = seen else {
        return Ok((None, current(pool).await?));
    };
    let mut changes = Vec::new();
    loop {
        let rows = sqlx::query(
            "SELECT seq, account_id, key_hash FROM ledger_changes \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(last)
        .bind(BATCH)
        .fetch_all(pool)
        .await?;
        for row in &rows {
            let seq: i64 = row.try_get(0)?;
            if seq != last + 1 {
                // Pruned before we read it (numbers are gapless).
                return Ok((None, current(pool).await?.max(last)));
            }
            last = seq;
            let key_hash: Option<String> = row.try_get(2)?;
            changes.push(match key_hash {
                Some(hash) => Change::Key(hash),
                None => Change::Account(row.try_get(1)?),
            });
        }
        if rows.len() < usize::try_from(BATCH).unwrap_or(usize::MAX) {
            return Ok((Some(changes), last));
        }
    }
}

/// The number of the last change committed.
async fn current(pool: &AnyPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT seq FROM ledger_change_seq WHERE one = 1").fetch_one(pool).await
}

/// Postgres: wakes the watcher on every notification, and flags `lost` whenever the
/// `LISTEN` connection is re-established, since notifications sent while nobody listened
/// are gone. (The first connection needs no flag: the watcher's first message is `All`.)
async fn listen(url: String, wake: Arc<Notify>, lost: Arc<AtomicBool>) {
    let mut backoff = BACKOFF_MIN;
    let mut first = true;
    loop {
        let (listened, Err(e)) = listen_once(&url, &wake, &lost, first).await;
        if listened {
            backoff = BACKOFF_MIN;
            first = false;
        }
        tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "the ledger's LISTEN connection failed; the periodic check carries changes meanwhile");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One `LISTEN` connection, until it fails; whether it got as far as listening.
async fn listen_once(
    url: &str,
    wake: &Notify,
    lost: &AtomicBool,
    first: bool,
) -> (bool, Result<Infallible, sqlx::Error>) {
    let mut listener = match PgListener::connect(url).await {
        Ok(l) => l,
        Err(e) => return (false, Err(e)),
    };
    if let Err(e) = listener.listen(CHANNEL).await {
        return (false, Err(e));
    }
    let mut reconnected = !first;
    loop {
        if reconnected {
            lost.store(true, Ordering::SeqCst);
            wake.notify_one();
        }
        // `Ok(None)`: the connection dropped and was re-established (and re-LISTENed).
        match listener.try_recv().await {
            Ok(Some(_)) => {
                reconnected = false;
                wake.notify_one();
            }
            Ok(None) => reconnected = true,
            Err(e) => return (true, Err(e)),
        }
    }
}
