//! A private ledger database for one test: a SQLite file in the temp dir, or a schema
//! of its own in the test Postgres (`SLUICE_TEST_POSTGRES_URL`, default
//! [`DEFAULT_POSTGRES_URL`]). Dropping the handle removes it again, also when the test
//! failed, so runs are independent and repeatable.
//!
//! Without a reachable Postgres, [`TestDb::postgres`] skips (`Ok(None)`, the reason on
//! stderr) unless `CI` is set: then it is an error, so nothing skips silently in CI.
//!
//! It also reads the reservation and journal rows that the [`Ledger`] API does not
//! expose, to compare them with what clients saw.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::Row as _;
use sqlx::any::AnyPoolOptions;

use crate::{Ledger, LedgerError};

/// The test Postgres when `SLUICE_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Which database a test ledger lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://FILE`.
    Sqlite,
    /// `postgres://…` with a private schema.
    Postgres,
}

/// Why a test database could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TestDbError {
    /// `CI` is set and the test Postgres cannot be reached.
    #[error("Postgres at {url} is unreachable and CI is set: {source}")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// The connection error.
        source: sqlx::Error,
    },
    /// A statement on the test database failed.
    #[error("test database: {0}")]
    Sql(#[from] sqlx::Error),
    /// The ledger could not connect to it.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A private database for one test; removed when dropped.
#[derive(Debug)]
pub struct TestDb {
    /// The `--ledger` URL, for [`Ledger::connect`], gateways and CLI commands.
    pub url: String,
    /// Which database.
    pub backend: Backend,
    place: Place,
}

#[derive(Debug)]
enum Place {
    Sqlite(PathBuf),
    /// `(admin URL, schema)`.
    Postgres(String, String),
    Removed,
}

/// One row of the `reservations` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationRow {
    /// Id.
    pub id: i64,
    /// The request it was made for (`x-request-id`).
    pub request_id: String,
    /// `open`, `settled`, `released` or `expired`.
    pub state: String,
    /// Held amount.
    pub amount: i64,
    /// Charged amount, once settled.
    pub charged: Option<i64>,
    /// Prompt tokens of the settlement.
    pub input_tokens: Option<i64>,
    /// Completion tokens of the settlement.
    pub output_tokens: Option<i64>,
    /// Web searches of the settlement.
    pub web_searches: Option<i64>,
    /// The upstream key that served (`default/name`).
    pub upstream: Option<String>,
    /// Creation, unix ms.
    pub created_at_ms: i64,
    /// Expiry, unix ms.
    pub expires_at_ms: i64,
    /// When it was settled, released or expired, unix ms.
    pub closed_at_ms: Option<i64>,
}

/// One row of the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRow {
    /// `open`, `reserve`, `settle`, `release`, `expire`, `late_settle`, `topup`.
    pub kind: String,
    /// The amount the row is about.
    pub amount: i64,
    /// Change of the balance.
    pub balance_delta: i64,
    /// The reservation, if any.
    pub reservation_id: Option<i64>,
    /// The request, if any.
    pub request_id: Option<String>,
    /// The grant, if any (docs/design.md §5a).
    pub grant_id: Option<i64>,
    /// Prompt tokens of a grant settlement.
    pub input_tokens: Option<i64>,
    /// Completion tokens of a grant settlement.
    pub output_tokens: Option<i64>,
    /// Web searches of a grant settlement.
    pub web_searches: Option<i64>,
    /// The upstream that served a grant settlement.
    pub upstream: Option<String>,
}

/// One row of the `grants` table (docs/design.md §5a).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantRow {
    /// Id.
    pub id: i64,
    /// The account.
    pub account_id: i64,
    /// The process that holds it.
    pub holder: String,
    /// What it holds (while open).
    pub amount: i64,
    /// What its settlements charged.
    pub settled: i64,
    /// `open`, `returned` or `expired`.
    pub state: String,
    /// End of its validity for new requests, unix ms.
    pub valid_until_ms: i64,
    /// When the reaper may expire it, unix ms.
    pub expires_at_ms: i64,
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}_{:016x}", std::process::id(), rand::random::<u64>())
}

impl TestDb {
    /// A fresh SQLite file in the temp dir (created by the first connection).
    pub fn sqlite() -> TestDb {
        let path = std::env::temp_dir().join(format!("{}.db", unique("sluice_test")));
        let url = format!("sqlite://{}", path.display());
        TestDb { url, backend: Backend::Sqlite, place: Place::Sqlite(path) }
    }

    /// A fresh schema in the test Postgres; `Ok(None)` after printing why when it is
    /// unreachable and `CI` is not set.
    pub async fn postgres() -> Result<Option<TestDb>, TestDbError> {
        sqlx::any::install_default_drivers();
        let base = std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned());
        let admin =
            AnyPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(5)).connect(&base).await;
        let admin = match admin {
            Ok(pool) => pool,
            Err(source) if std::env::var_os("CI").is_some() => {
                return Err(TestDbError::Unreachable { url: base, source });
            }
            Err(e) => {
                eprintln!("SKIPPED: Postgres at {base} is unreachable: {e}");
                return Ok(None);
            }
        };
        let schema = unique("sluice_test");
        let created = sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await;
        admin.close().await;
        created?;
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Ok(Some(TestDb { url, backend: Backend::Postgres, place: Place::Postgres(base, schema) }))
    }

    /// Either backend, for tests written once for both (`Ok(None)`: skipped).
    pub async fn of(backend: Backend) -> Result<Option<TestDb>, TestDbError> {
        match backend {
            Backend::Sqlite => Ok(Some(Self::sqlite())),
            Backend::Postgres => Self::postgres().await,
        }
    }

    /// A new ledger handle on it (the first one runs the migrations).
    pub async fn connect(&self) -> Result<Ledger, LedgerError> {
        Ledger::connect(&self.url).await
    }

    /// Every reservation, by id.
    pub async fn reservations(&self) -> Result<Vec<ReservationRow>, TestDbError> {
        let pool = self.pool().await?;
        let rows = sqlx::query(
            "SELECT id, request_id, state, amount_nanos, charged_nanos, input_tokens, output_tokens, upstream, \
             created_at_ms, expires_at_ms, closed_at_ms, web_searches FROM reservations ORDER BY id",
        )
        .fetch_all(&pool)
        .await;
        pool.close().await;
        let read = |r: &sqlx::any::AnyRow| {
            Ok(ReservationRow {
                id: r.try_get(0)?,
                request_id: r.try_get(1)?,
                state: r.try_get(2)?,
                amount: r.try_get(3)?,
                charged: r.try_get(4)?,
                input_tokens: r.try_get(5)?,
                output_tokens: r.try_get(6)?,
                upstream: r.try_get(7)?,
                created_at_ms: r.try_get(8)?,
                expires_at_ms: r.try_get(9)?,
                closed_at_ms: r.try_get(10)?,
                web_searches: r.try_get(11)?,
            })
        };
        rows?.iter().map(read).collect()
    }

    /// Reservations by request id (the last one if a request id repeats).
    pub async fn reservations_by_request(&self) -> Result<BTreeMap<String, ReservationRow>, TestDbError> {
        Ok(self.reservations().await?.into_iter().map(|r| (r.request_id.clone(), r)).collect())
    }

    /// The whole journal, in order.
    pub async fn journal(&self) -> Result<Vec<JournalRow>, TestDbError> {
        let pool = self.pool().await?;
        let rows = sqlx::query("SELECT kind, amount_nanos, balance_delta, reservation_id, request_id, grant_id, input_tokens, output_tokens, upstream, web_searches FROM journal ORDER BY id")
            .fetch_all(&pool)
            .await;
        pool.close().await;
        let read = |r: &sqlx::any::AnyRow| {
            Ok(JournalRow {
                kind: r.try_get(0)?,
                amount: r.try_get(1)?,
                balance_delta: r.try_get(2)?,
                reservation_id: r.try_get(3)?,
                request_id: r.try_get(4)?,
                grant_id: r.try_get(5)?,
                input_tokens: r.try_get(6)?,
                output_tokens: r.try_get(7)?,
                upstream: r.try_get(8)?,
                web_searches: r.try_get(9)?,
            })
        };
        rows?.iter().map(read).collect()
    }

    /// The settlement rows of the journal (`settle`, or `late_settle` after an expiry),
    /// in order: what a billed request left with balance grants (docs/design.md §5a).
    pub async fn settlements(&self) -> Result<Vec<JournalRow>, TestDbError> {
        let mut rows = self.journal().await?;
        rows.retain(|j| j.kind == "settle" || j.kind == "late_settle");
        Ok(rows)
    }

    /// Every grant, by id.
    pub async fn grants(&self) -> Result<Vec<GrantRow>, TestDbError> {
        let pool = self.pool().await?;
        let rows = sqlx::query(
            "SELECT id, account_id, holder, amount_nanos, settled_nanos, state, valid_until_ms, expires_at_ms \
             FROM grants ORDER BY id",
        )
        .fetch_all(&pool)
        .await;
        pool.close().await;
        let read = |r: &sqlx::any::AnyRow| {
            Ok(GrantRow {
                id: r.try_get(0)?,
                account_id: r.try_get(1)?,
                holder: r.try_get(2)?,
                amount: r.try_get(3)?,
                settled: r.try_get(4)?,
                state: r.try_get(5)?,
                valid_until_ms: r.try_get(6)?,
                expires_at_ms: r.try_get(7)?,
            })
        };
        rows?.iter().map(read).collect()
    }

    /// Journal rows per kind.
    pub async fn journal_kinds(&self) -> Result<BTreeMap<String, u64>, TestDbError> {
        let mut out = BTreeMap::new();
        for row in self.journal().await? {
            *out.entry(row.kind).or_default() += 1;
        }
        Ok(out)
    }

    async fn pool(&self) -> Result<AnyPool, sqlx::Error> {
        sqlx::any::install_default_drivers();
        AnyPoolOptions::new().max_connections(1).connect(&self.url).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.place, Place::Removed) {
            Place::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
            Place::Postgres(base, schema) => drop_schema(base, schema),
            Place::Removed => {}
        }
    }
}

/// Async work cannot run in `drop`: a thread with its own runtime drops the schema.
fn drop_schema(base: String, schema: String) {
    let statement = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
    let dropped = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        rt.block_on(async {
            let pool = AnyPoolOptions::new().max_connections(1).connect(&base).await.ok()?;
            let done = sqlx::query(&statement).execute(&pool).await.ok();
            pool.close().await;
            done
        })
    })
    .join();
    if !matches!(dropped, Ok(Some(_))) {
        eprintln!("could not drop the test schema {schema}; it is left behind");
    }
}
