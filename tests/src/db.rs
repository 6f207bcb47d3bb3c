//! Ledger databases for billing tests: a SQLite file in a tempdir, or a private schema
//! in the test Postgres (`SLUICE_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), dropped again when the handle goes away,
//! so runs are independent and repeatable. Also reads the reservation and journal rows
//! that the [`Ledger`] API does not expose, to compare them with what clients saw.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use sluice_ledger::Ledger;
use sqlx::Row as _;
use sqlx::any::AnyPoolOptions;
use tempfile::TempDir;

/// The default test Postgres.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Which database a ledger lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://FILE`.
    Sqlite,
    /// `postgres://…` with a private schema.
    Postgres,
}

/// A private ledger database for one test.
pub struct LedgerDb {
    /// `--ledger` URL for gateways and CLI commands.
    pub url: String,
    /// Which database.
    pub backend: Backend,
    /// `(admin URL, schema)` of a Postgres schema to drop on drop.
    schema: Option<(String, String)>,
    _dir: Option<TempDir>,
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
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}_{:012x}", std::process::id(), rand_u64() & 0xffff_ffff_ffff)
}

fn rand_u64() -> u64 {
    // No rand dependency in the harness: time and a counter are unique enough here.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ (N.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 48)
}

impl LedgerDb {
    /// A fresh SQLite ledger file in its own tempdir.
    pub fn sqlite() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
        Ok(Self { url, backend: Backend::Sqlite, schema: None, _dir: Some(dir) })
    }

    /// A fresh schema in the test Postgres. When it is unreachable: an error if `CI` is
    /// set, else `None` after printing why the test is skipped.
    pub async fn postgres() -> anyhow::Result<Option<Self>> {
        sqlx::any::install_default_drivers();
        let base = std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_string());
        let admin = AnyPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(5)).connect(&base).await;
        let admin = match admin {
            Ok(pool) => pool,
            Err(e) if std::env::var_os("CI").is_some() => {
                anyhow::bail!("Postgres at {base} is unreachable and CI is set: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: Postgres at {base} is unreachable: {e}");
                return Ok(None);
            }
        };
        let schema = unique("sluice_e2e");
        sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.context("creating a test schema")?;
        admin.close().await;
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Ok(Some(Self { url, backend: Backend::Postgres, schema: Some((base, schema)), _dir: None }))
    }

    /// Either backend by name, for tests written once for both (`None`: skipped).
    pub async fn of(backend: Backend) -> anyhow::Result<Option<Self>> {
        match backend {
            Backend::Sqlite => Self::sqlite().map(Some),
            Backend::Postgres => Self::postgres().await,
        }
    }

    /// A new ledger handle (runs the migrations if this is the first).
    pub async fn connect(&self) -> anyhow::Result<Ledger> {
        Ledger::connect(&self.url).await.with_context(|| format!("connecting the ledger {}", self.url))
    }

    async fn pool(&self) -> anyhow::Result<sqlx::AnyPool> {
        sqlx::any::install_default_drivers();
        Ok(AnyPoolOptions::new().max_connections(1).connect(&self.url).await?)
    }

    /// Every reservation, by id.
    pub async fn reservations(&self) -> anyhow::Result<Vec<ReservationRow>> {
        let pool = self.pool().await?;
        let rows = sqlx::query(
            "SELECT id, request_id, state, amount_nanos, charged_nanos, input_tokens, output_tokens, upstream, \
             created_at_ms, expires_at_ms, closed_at_ms FROM reservations ORDER BY id",
        )
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        rows.iter()
            .map(|r| {
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
                })
            })
            .collect()
    }

    /// Reservations by request id (the last one if a request id repeats).
    pub async fn reservations_by_request(&self) -> anyhow::Result<BTreeMap<String, ReservationRow>> {
        Ok(self.reservations().await?.into_iter().map(|r| (r.request_id.clone(), r)).collect())
    }

    /// The whole journal, in order.
    pub async fn journal(&self) -> anyhow::Result<Vec<JournalRow>> {
        let pool = self.pool().await?;
        let rows = sqlx::query("SELECT kind, amount_nanos, balance_delta, reservation_id, request_id FROM journal ORDER BY id")
            .fetch_all(&pool)
            .await?;
        pool.close().await;
        rows.iter()
            .map(|r| {
                Ok(JournalRow {
                    kind: r.try_get(0)?,
                    amount: r.try_get(1)?,
                    balance_delta: r.try_get(2)?,
                    reservation_id: r.try_get(3)?,
                    request_id: r.try_get(4)?,
                })
            })
            .collect()
    }

    /// Journal rows per kind.
    pub async fn journal_kinds(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for row in self.journal().await? {
            *out.entry(row.kind).or_default() += 1;
        }
        Ok(out)
    }
}

impl Drop for LedgerDb {
    fn drop(&mut self) {
        let Some((base, schema)) = self.schema.take() else { return };
        // Async work cannot run in drop: a thread with its own runtime drops the schema,
        // also when the test failed.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let pool = AnyPoolOptions::new().max_connections(1).connect(&base).await.ok()?;
                let done = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&pool).await.ok();
                pool.close().await;
                done
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("could not drop a test schema; it is left behind");
        }
    }
}
