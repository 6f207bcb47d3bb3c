//! What the ledger benches share: the two databases they run on, and the flow count.

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use sluice_ledger::Ledger;
use sluice_ledger::testing::{Backend, TestDb};

pub type BoxError = Box<dyn Error + Send + Sync>;

/// Flows per run: `SLUICE_BENCH_FLOWS`, default 4000.
pub fn flows() -> usize {
    std::env::var("SLUICE_BENCH_FLOWS").ok().and_then(|v| v.parse().ok()).unwrap_or(4000)
}

/// One ledger a bench runs on, on a test database of its own (`sluice_ledger::testing`,
/// as the tests use: a temporary SQLite file, or a fresh Postgres schema).
pub struct BenchLedger {
    pub backend: &'static str,
    /// What `ledger` was connected to: another pool on the same database is another
    /// gateway process.
    #[allow(dead_code, reason = "the reservations bench runs one process")]
    pub url: String,
    pub ledger: Ledger,
    db: TestDb,
}

/// A temporary SQLite file, then a schema of its own on Postgres from
/// `SLUICE_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when
/// Postgres is unreachable it is left out with a note on `out` (an error under `CI`).
pub async fn ledgers(out: &mut impl Write) -> Result<Vec<BenchLedger>, BoxError> {
    let mut all = Vec::new();
    for (backend, name) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")] {
        match TestDb::of(backend).await? {
            Some(db) => {
                let ledger = db.connect().await?;
                all.push(BenchLedger { backend: name, url: db.url.clone(), ledger, db });
            }
            None => writeln!(out, "{name} skipped: the test database is unreachable")?,
        }
    }
    Ok(all)
}

impl BenchLedger {
    /// Closes the ledger and removes its file or schema.
    pub async fn remove(self) -> Result<(), BoxError> {
        self.ledger.close().await;
        drop(self.db);
        Ok(())
    }
}

/// The `p`th percentile of sorted `latencies`, in milliseconds.
pub fn percentile_ms(latencies: &[Duration], p: usize) -> f64 {
    latencies[(latencies.len() - 1) * p / 100].as_secs_f64() * 1e3
}
