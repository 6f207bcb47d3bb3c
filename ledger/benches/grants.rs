//! Balance grants and group commit (docs/design.md §5a) against the per-request path of
//! §5, side by side, on one hot account: `flows` reserve → settle flows over N
//! concurrent tasks. `cargo bench -p sluice-ledger --bench grants` prints a table:
//! flows/s (= settlements/s), grant takes (renewals) per second and the mean batch size.
//! On Postgres, `grants x2` splits the same tasks between two holders, each with its own
//! pool, as two gateway processes on one account are. Their batches write only their
//! own grant's row, so neither waits for the other; with the same tasks in all, each
//! holder's batches are about half as large, so this row shows what a second holder
//! costs the ledger, not the serving capacity it adds (bench/run measures that).
//! Postgres comes from `SLUICE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and is skipped with a note when
//! unreachable. `SLUICE_BENCH_FLOWS` sets flows per per-request run (default 4000);
//! runs from grants do ten times as many (they are 10–30× faster, and a run of a few
//! hundred milliseconds says little).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_ledger::{Biller, BillerConfig, BillerObserver, Ledger, RenewalResult, Usage};

mod common;

use common::{BenchLedger, BoxError};

const CONCURRENCY: [usize; 3] = [1, 32, 128];
const ESTIMATE: i64 = 1_000_000;
/// Runs from grants do this many times the flows of a per-request run.
const GRANT_FLOWS: usize = 10;

#[derive(Debug, Default)]
struct Counts {
    takes: AtomicU64,
    batches: AtomicU64,
    settled: AtomicU64,
}

impl BillerObserver for Counts {
    fn renewal(&self, result: RenewalResult) {
        if result == RenewalResult::Ok {
            self.takes.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn batch(&self, size: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.settled.fetch_add(size as u64, Ordering::Relaxed);
    }
}

/// How a run's flows reach the database.
#[derive(Clone, Copy)]
enum Path {
    /// Every reservation and settlement its own transactions (docs/design.md §5).
    PerRequest,
    /// From grants, settled by group commit, over this many holders.
    Grants(usize),
}

impl Path {
    fn label(self) -> String {
        match self {
            Path::PerRequest => "per-request".to_owned(),
            Path::Grants(1) => "grants".to_owned(),
            Path::Grants(n) => format!("grants x{n}"),
        }
    }
}

struct Row {
    backend: &'static str,
    path: Path,
    tasks: usize,
    flows: usize,
    elapsed: Duration,
    takes: u64,
    batches: u64,
    latencies: Vec<Duration>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let flows = common::flows();
    let mut out = std::io::stdout().lock();
    let mut rows = Vec::new();
    for db in common::ledgers(&mut out).await? {
        for tasks in CONCURRENCY {
            rows.push(run(&db, Path::PerRequest, tasks, flows).await?);
            rows.push(run(&db, Path::Grants(1), tasks, GRANT_FLOWS * flows).await?);
            // One SQLite file has one writer; several processes on it are not a
            // deployment sluice supports.
            if db.backend == "postgres" && tasks > 1 {
                rows.push(run(&db, Path::Grants(2), tasks, GRANT_FLOWS * flows).await?);
            }
        }
        db.remove().await?;
    }

    writeln!(
        out,
        "{:<9} {:<12} {:>5} {:>6} {:>7} {:>14} {:>9} {:>10} {:>7} {:>7}",
        "backend", "path", "tasks", "flows", "secs", "settlements/s", "grants/s", "mean batch", "p50 ms", "p99 ms"
    )?;
    for mut r in rows {
        r.latencies.sort();
        let secs = r.elapsed.as_secs_f64();
        let (grants, batch) = match r.path {
            Path::Grants(_) => {
                (format!("{:.0}", r.takes as f64 / secs), format!("{:.1}", r.flows as f64 / r.batches.max(1) as f64))
            }
            Path::PerRequest => ("-".to_owned(), "1".to_owned()),
        };
        writeln!(
            out,
            "{:<9} {:<12} {:>5} {:>6} {:>7.2} {:>14.0} {:>9} {:>10} {:>7.2} {:>7.2}",
            r.backend,
            r.path.label(),
            r.tasks,
            r.flows,
            secs,
            r.flows as f64 / secs,
            grants,
            batch,
            common::percentile_ms(&r.latencies, 50),
            common::percentile_ms(&r.latencies, 99),
        )?;
    }
    Ok(())
}

/// `flows` reserve → settle flows over `tasks` tasks on one account: per request in the
/// database, or from the grants of [`Biller`]s with group commit, task `t` on holder
/// `t % holders`.
async fn run(db: &BenchLedger, path: Path, tasks: usize, flows: usize) -> Result<Row, BoxError> {
    let ledger = &db.ledger;
    let name = format!("bench-{}-{tasks}", path.label().replace(' ', ""));
    let account = ledger.create_account(&name, i64::MAX / 2).await?;
    let counts = Arc::new(Counts::default());
    let mut pools = Vec::new();
    let mut billers = Vec::new();
    if let Path::Grants(holders) = path {
        for h in 0..holders {
            let pool = if h == 0 { ledger.clone() } else { Ledger::connect(&db.url).await? };
            let observer: Arc<dyn BillerObserver> = counts.clone();
            let config = BillerConfig::new(format!("bench-{h}"));
            billers.push(Biller::start(pool.clone(), config, Some(observer)));
            pools.push(pool);
        }
    }
    let per_task = flows / tasks;
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let ledger = ledger.clone();
        let biller = (!billers.is_empty()).then(|| billers[t % billers.len()].clone());
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            let usage = || Usage { input_tokens: 100, output_tokens: 50, web_searches: 0, upstream: None };
            for i in 0..per_task {
                let begin = Instant::now();
                let id = format!("b-{t}-{i}");
                match &biller {
                    Some(b) => {
                        b.reserve(account.id, ESTIMATE, &id).await?.settle(600_000, usage()).await?;
                    }
                    None => {
                        ledger
                            .reserve(account.id, ESTIMATE, Duration::from_secs(60), &id)
                            .await?
                            .settle(600_000, usage())
                            .await?;
                    }
                }
                latencies.push(begin.elapsed());
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(flows);
    for h in handles {
        latencies.extend(h.await??);
    }
    let elapsed = started.elapsed();
    for b in &billers {
        b.shutdown(Duration::from_secs(10)).await;
    }
    for pool in pools.iter().skip(1) {
        pool.close().await;
    }
    let check = ledger.journal_verify(&name).await?;
    if !check.is_consistent() {
        return Err(format!("journal check failed after the {} run: {check:?}", path.label()).into());
    }
    Ok(Row {
        backend: db.backend,
        path,
        tasks,
        flows: latencies.len(),
        elapsed,
        takes: counts.takes.load(Ordering::Relaxed),
        batches: counts.batches.load(Ordering::Relaxed),
        latencies,
    })
}
