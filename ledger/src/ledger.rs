//! The [`Ledger`] handle: connecting, pools, migrations and small shared helpers.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{Any, AnyPool, Transaction};

use crate::error::LedgerError;
use crate::notify::Feed;

/// A handle on the ledger database. Cloning is cheap (one `Arc`); share one per process.
#[derive(Clone, Debug)]
pub struct Ledger {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    backend: Backend,
    /// Every write goes through this pool. For SQLite it holds exactly one connection, so
    /// writers queue in the pool instead of fighting over the database lock (no
    /// SQLITE_BUSY, no deadlock); for Postgres it is the same pool as `reader`.
    pub(crate) writer: AnyPool,
    /// Reads that need no write lock (authenticate, queries). WAL lets them run while a
    /// write is in progress.
    pub(crate) reader: AnyPool,
    /// Reservation guards dropped without settle/release (see [`Ledger::dropped_reservations`]).
    pub(crate) dropped: AtomicU64,
    /// The change feed of [`Ledger::changes`].
    pub(crate) changes: Feed,
    /// The URL of a Postgres ledger (it may hold a password: never printed), for
    /// [`Ledger::for_own_runtime`].
    postgres_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Migrations embedded at compile time, one list per database dialect.
#[derive(Debug)]
pub(crate) struct Embedded(pub(crate) &'static [(i64, &'static str, &'static str)]);

pub(crate) const SQLITE_MIGRATIONS: Embedded = Embedded(&[
    (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
    (2, "grants", include_str!("../migrations/sqlite/0002_grants.sql")),
    (3, "keys", include_str!("../migrations/sqlite/0003_keys.sql")),
    (4, "synthetic", include_str!("../migrations/sqlite/0004_synthetic.sql")),
    (5, "posting", include_str!("../migrations/sqlite/0005_posting.sql")),
    (6, "limits", include_str!("../migrations/sqlite/0006_limits.sql")),
    (7, "route api", include_str!("../migrations/sqlite/0007_route_api.sql")),
    (8, "web searches", include_str!("../migrations/sqlite/0008_web_searches.sql")),
]);

pub(crate) const POSTGRES_MIGRATIONS: Embedded = Embedded(&[
    (1, "init", include_str!("../migrations/postgres/0001_init.sql")),
    (2, "grants", include_str!("../migrations/postgres/0002_grants.sql")),
    (3, "keys", include_str!("../migrations/postgres/0003_keys.sql")),
    (4, "synthetic", include_str!("../migrations/postgres/0004_synthetic.sql")),
    (5, "posting", include_str!("../migrations/postgres/0005_posting.sql")),
    (6, "limits", include_str!("../migrations/postgres/0006_limits.sql")),
    (7, "route api", include_str!("../migrations/postgres/0007_route_api.sql")),
    (8, "web searches", include_str!("../migrations/postgres/0008_web_searches.sql")),
]);

/// Connections in the Postgres pool (shared by readers and writers).
const POSTGRES_POOL_SIZE: u32 = 16;
/// Reader connections for SQLite (the writer pool has one).
const SQLITE_READERS: u32 = 4;
/// Set on every SQLite connection. busy_timeout: how long to wait for the lock held by
/// another process (e.g. `admin` next to a gateway). WAL: readers never block the writer.
const SQLITE_PRAGMAS: [&str; 4] = [
    "PRAGMA busy_timeout = 10000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
];
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

impl Ledger {
    /// Opens the ledger at `url` and applies pending migrations (idempotent: connecting
    /// to an up-to-date database changes nothing).
    ///
    /// - `sqlite://PATH` (or `sqlite:PATH`): the file is created if missing and put in
    ///   WAL mode, so `admin` and `budgets` can read it while a gateway serves. Writes are
    ///   funnelled through one connection; `synchronous=NORMAL`, so a commit survives a
    ///   process crash but the last commits may be lost on power failure.
    ///   `sqlite::memory:` gives a private in-memory ledger (tests).
    /// - `postgres://…` (or `postgresql://…`): a pool of 16 connections; migrations
    ///   take an advisory lock, so several pods may start at once.
    pub async fn connect(url: &str) -> Result<Ledger, LedgerError> {
        install_default_drivers();
        let (backend, writer, reader) = if is_sqlite(url) {
            let (writer, reader) = open_sqlite(url).await?;
            (Backend::Sqlite, writer, reader)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = AnyPoolOptions::new()
                .max_connections(POSTGRES_POOL_SIZE)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect(url)
                .await?;
            (Backend::Postgres, pool.clone(), pool)
        } else {
            return Err(LedgerError::UnsupportedUrl(url.to_owned()));
        };
        let source = match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        migrate(&writer, source).await?;
        let changes = match backend {
            Backend::Sqlite => Feed::sqlite(),
            Backend::Postgres => Feed::postgres(url),
        };
        let postgres_url = (backend == Backend::Postgres).then(|| url.to_owned());
        Ok(Ledger {
            inner: Arc::new(Inner { backend, writer, reader, dropped: AtomicU64::new(0), changes, postgres_url }),
        })
    }

    /// A handle for work on a runtime of its own (the settlement writer, docs/design.md
    /// §5a), to be called on that runtime. On Postgres a pool of its own (two
    /// connections, opened when first used): a connection's socket is driven by the
    /// runtime it was opened on, and a serving runtime busy with thousands of requests
    /// polls its sockets late, which a commit waited on by every answer cannot afford.
    /// On SQLite this same handle: its connections run on threads of their own and the
    /// one writer connection must stay the only one.
    pub(crate) fn for_own_runtime(&self) -> Result<Ledger, LedgerError> {
        let Some(url) = &self.inner.postgres_url else {
            return Ok(self.clone());
        };
        let pool = AnyPoolOptions::new().max_connections(2).acquire_timeout(ACQUIRE_TIMEOUT).connect_lazy(url)?;
        Ok(Ledger {
            inner: Arc::new(Inner {
                backend: Backend::Postgres,
                writer: pool.clone(),
                reader: pool,
                dropped: AtomicU64::new(0),
                changes: Feed::postgres(url),
                postgres_url: Some(url.clone()),
            }),
        })
    }

    /// Whether the database is Postgres (some statements have a faster Postgres form).
    pub(crate) fn is_postgres(&self) -> bool {
        self.inner.backend == Backend::Postgres
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        match self.inner.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Checks that the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), LedgerError> {
        sqlx::query("SELECT 1").execute(&self.inner.reader).await?;
        Ok(())
    }

    /// How many [`Reservation`](crate::Reservation) guards were dropped without being
    /// settled or released since this handle was connected (a bug indicator; each one
    /// also logs a warning).
    pub fn dropped_reservations(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Closes all connections (waits for checked-out ones to come back).
    pub async fn close(&self) {
        self.inner.writer.close().await;
        self.inner.reader.close().await;
    }

    /// Starts a transaction that will write money. On SQLite it takes the write lock at
    /// once (`BEGIN IMMEDIATE`), so it can never fail half-way to upgrade a read lock.
    pub(crate) async fn begin_write(&self) -> Result<Transaction<'static, Any>, LedgerError> {
        Ok(match self.inner.backend {
            Backend::Sqlite => self.inner.writer.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.inner.writer.begin().await?,
        })
    }

    /// Starts a read-only transaction that sees one consistent snapshot.
    pub(crate) async fn begin_snapshot(&self) -> Result<Transaction<'static, Any>, LedgerError> {
        Ok(match self.inner.backend {
            // A deferred SQLite transaction keeps the snapshot of its first read.
            Backend::Sqlite => self.inner.reader.begin().await?,
            Backend::Postgres => {
                self.inner.reader.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?
            }
        })
    }
}

fn is_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:")
}

/// Opens the SQLite writer pool (one connection) and reader pool.
async fn open_sqlite(url: &str) -> Result<(AnyPool, AnyPool), LedgerError> {
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let url = if in_memory || url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    let options = || {
        AnyPoolOptions::new().acquire_timeout(ACQUIRE_TIMEOUT).after_connect(|conn, _meta| {
            Box::pin(async move {
                for pragma in SQLITE_PRAGMAS {
                    sqlx::query(pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
    };
    if in_memory {
        // One connection that never closes: an in-memory database dies with it.
        let pool =
            options().max_connections(1).min_connections(1).idle_timeout(None).max_lifetime(None).connect(&url).await?;
        return Ok((pool.clone(), pool));
    }
    let writer = options().max_connections(1).connect(&url).await?;
    let reader = options().max_connections(SQLITE_READERS).connect(&url).await?;
    Ok((writer, reader))
}

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        let migrations = self
            .0
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(version, Cow::Borrowed(description), MigrationType::Simple, Cow::Borrowed(sql), false)
            })
            .collect();
        Box::pin(std::future::ready(Ok(migrations)))
    }
}

/// Applies `source`'s pending migrations. A database migrated by a newer binary (a
/// rollback, or an old pod restarting while a new one rolls out) is used as it is, with
/// a warning: migrations are additive so that older binaries keep working on a newer
/// schema (docs/upgrade.md says what each schema change means for them).
async fn migrate(pool: &AnyPool, source: Embedded) -> Result<(), LedgerError> {
    let known = source.0.iter().map(|m| m.0).max().unwrap_or(0);
    let mut migrator = Migrator::new(source).await?;
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    let applied: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations").fetch_one(pool).await?;
    if let Some(applied) = applied.filter(|&v| v > known) {
        tracing::warn!(
            schema = applied,
            known,
            "the ledger's schema is newer than this binary's: running on it (see docs/upgrade.md)"
        );
    }
    Ok(())
}

/// Milliseconds since the Unix epoch (0 before it; saturating far in the future).
pub(crate) fn unix_ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// The inverse of [`unix_ms`] for values read back from the database.
pub(crate) fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Converts a counter to the database's BIGINT.
pub(crate) fn to_db(what: &'static str, value: u64) -> Result<i64, LedgerError> {
    i64::try_from(value).map_err(|_| LedgerError::TooLarge { what, value })
}

/// Converts a BIGINT counter read back; negative values (never written) read as 0.
pub(crate) fn from_db(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
