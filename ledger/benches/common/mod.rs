//! What the ledger benches share: the two databases they run on, and the flow count.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use sluice_ledger::Ledger;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

pub type BoxError = Box<dyn Error + Send + Sync>;

/// Flows per run: `SLUICE_BENCH_FLOWS`, default 4000.
pub fn flows() -> usize {
    std::env::var("SLUICE_BENCH_FLOWS").ok().and_then(|v| v.parse().ok()).unwrap_or(4000)
}

/// One ledger a bench runs on, and what to remove after it.
pub struct BenchLedger {
    pub backend: &'static str,
    /// What `ledger` was connected to: another pool on the same database is another
    /// gateway process.
    #[allow(dead_code, reason = "the reservations bench runs one process")]
    pub url: String,
    pub ledger: Ledger,
    cleanup: Cleanup,
}

enum Cleanup {
    /// The SQLite file (with its `-wal` and `-shm`).
    File(PathBuf),
    /// The Postgres schema, dropped through the admin pool.
    Schema(PgPool, String),
}

/// A temporary SQLite file, then a schema of its own on Postgres from
/// `SLUICE_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when
/// Postgres is unreachable it is left out with a note on `out`.
pub async fn ledgers(name: &str, out: &mut impl Write) -> Result<Vec<BenchLedger>, BoxError> {
    let tag = format!("sluice_bench_{name}_{}", std::process::id());
    let path = std::env::temp_dir().join(format!("{tag}.db"));
    let url = format!("sqlite://{}", path.display());
    let ledger = Ledger::connect(&url).await?;
    let mut all = vec![BenchLedger { backend: "sqlite", url, ledger, cleanup: Cleanup::File(path) }];

    let base = std::env::var("SLUICE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    match PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(5)).connect(&base).await {
        Err(e) => writeln!(out, "postgres skipped: {base} unreachable: {e}")?,
        Ok(admin) => {
            sqlx::query(&format!("CREATE SCHEMA {tag}")).execute(&admin).await?;
            let sep = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{sep}options=-c%20search_path%3D{tag}");
            let ledger = Ledger::connect(&url).await?;
            all.push(BenchLedger { backend: "postgres", url, ledger, cleanup: Cleanup::Schema(admin, tag) });
        }
    }
    Ok(all)
}

impl BenchLedger {
    /// Closes the ledger and removes its file or schema.
    pub async fn remove(self) -> Result<(), BoxError> {
        self.ledger.close().await;
        match self.cleanup {
            Cleanup::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Cleanup::Schema(admin, schema) => {
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await?;
            }
        }
        Ok(())
    }
}

/// The `p`th percentile of sorted `latencies`, in milliseconds.
pub fn percentile_ms(latencies: &[Duration], p: usize) -> f64 {
    latencies[(latencies.len() - 1) * p / 100].as_secs_f64() * 1e3
}
