//! Reserve → settle throughput on SQLite (temp file) and Postgres, with N concurrent
//! tasks. `cargo bench -p sluice-ledger` prints a table; Postgres comes from
//! `SLUICE_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and is
//! skipped with a note when unreachable. `SLUICE_BENCH_FLOWS` sets flows per run.

use std::io::Write;
use std::time::{Duration, Instant};

use sluice_ledger::{Ledger, Usage};

mod common;

use common::BoxError;

const CONCURRENCY: [usize; 4] = [1, 8, 32, 128];

struct Row {
    backend: &'static str,
    tasks: usize,
    flows: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let flows = common::flows();
    let mut out = std::io::stdout().lock();
    let mut rows = Vec::new();
    for db in common::ledgers(&mut out).await? {
        for tasks in CONCURRENCY {
            rows.push(run(&db.ledger, db.backend, tasks, flows).await?);
        }
        db.remove().await?;
    }

    writeln!(
        out,
        "{:<9} {:>5} {:>6} {:>8} {:>9} {:>8} {:>8}",
        "backend", "tasks", "flows", "secs", "flows/s", "p50 ms", "p99 ms"
    )?;
    for mut r in rows {
        r.latencies.sort();
        writeln!(
            out,
            "{:<9} {:>5} {:>6} {:>8.2} {:>9.0} {:>8.2} {:>8.2}",
            r.backend,
            r.tasks,
            r.flows,
            r.elapsed.as_secs_f64(),
            r.flows as f64 / r.elapsed.as_secs_f64(),
            common::percentile_ms(&r.latencies, 50),
            common::percentile_ms(&r.latencies, 99),
        )?;
    }
    Ok(())
}

/// `flows` reserve→settle flows spread over `tasks` tasks, all on one account (the
/// worst case: every flow contends for the same row).
async fn run(ledger: &Ledger, backend: &'static str, tasks: usize, flows: usize) -> Result<Row, BoxError> {
    let account = ledger.create_account(&format!("bench-{tasks}"), i64::MAX / 2).await?;
    let per_task = flows / tasks;
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let ledger = ledger.clone();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for i in 0..per_task {
                let begin = Instant::now();
                let r = ledger.reserve(account.id, 1_000_000, Duration::from_secs(60), &format!("b-{t}-{i}")).await?;
                r.settle(600_000, Usage { input_tokens: 100, output_tokens: 50, web_searches: 0, upstream: None })
                    .await?;
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
    let check = ledger.journal_verify(&account.name).await?;
    if !check.is_consistent() {
        return Err(format!("journal inconsistent after the run: {check:?}").into());
    }
    Ok(Row { backend, tasks, flows: per_task * tasks, elapsed, latencies })
}
