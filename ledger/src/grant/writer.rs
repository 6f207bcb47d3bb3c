//! Group commit (docs/design.md §5a): one writer task per process turns settlements into
//! batches, one transaction each. A batch closes when its window (`--settle-window`) has
//! passed since its first settlement, or at [`MAX_BATCH`] settlements, or at once when no
//! hold is open that could still join it (a lone request does not pay the window). A batch that fails
//! is retried, unchanged, with backoff until it commits (the database may be away for a
//! while); it is idempotent (see [`Ledger::settle_batch`]), so an unknown commit outcome
//! is harmless. Each settlement's waiter is told only after its batch committed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::Shared;
use crate::ledger::Ledger;
use crate::reservation::Usage;

/// Settlements per batch at most.
pub(crate) const MAX_BATCH: usize = 256;
/// First and largest pause between attempts of a failing batch.
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// One settlement to write.
#[derive(Debug)]
pub(crate) struct Job {
    pub account_id: i64,
    pub grant_id: i64,
    /// The hold's number within its grant: with `grant_id`, the idempotency key.
    pub hold_id: i64,
    pub request_id: String,
    /// Taken from the balance: `min(actual, estimate)`.
    pub charged: i64,
    /// `actual − charged`.
    pub uncollected: i64,
    pub usage: Usage,
    pub at_ms: i64,
    /// Told whether money moved (the grant was open), once committed.
    pub reply: Option<oneshot::Sender<bool>>,
}

/// A message to the writer.
pub(crate) enum Msg {
    Settle(Job),
    /// Answered once everything sent before it has committed.
    Flush(oneshot::Sender<()>),
}

/// Starts the writer on a thread and runtime of its own, so that its commits (which
/// every answer waits for) are not queued behind the serving runtime's request tasks:
/// under load that runtime gets to a socket's readiness only every few milliseconds,
/// and a batch takes several round trips. If the thread or its runtime cannot be made
/// (the OS refuses), that is logged and settlements fail as "the writer has stopped".
pub(crate) fn start(ledger: Ledger, shared: Arc<Shared>, window: Duration, rx: mpsc::UnboundedReceiver<Msg>) {
    let spawned = std::thread::Builder::new().name("sluice-settle".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return tracing::error!(error = %e, "the settlement writer's runtime could not start"),
        };
        runtime.block_on(async move {
            let ledger = match ledger.for_own_runtime() {
                Ok(own) => own,
                Err(e) => {
                    tracing::warn!(error = %e, "the settlement writer has no pool of its own; it uses the shared one");
                    ledger
                }
            };
            run(ledger, shared, window, rx).await;
        });
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "no thread for the settlement writer");
    }
}

/// Runs the writer until every sender is gone and the queue is empty.
async fn run(ledger: Ledger, shared: Arc<Shared>, window: Duration, mut rx: mpsc::UnboundedReceiver<Msg>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = rx.recv().await {
        take(first, &mut batch, &mut flushes);
        let close = tokio::time::Instant::now() + window;
        while batch.len() < MAX_BATCH {
            // What is queued already goes in without waiting.
            match rx.try_recv() {
                Ok(m) => {
                    take(m, &mut batch, &mut flushes);
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            // Nothing could join: no hold is open that might settle within the window.
            if batch.is_empty() || shared.open_holds.load(Ordering::Relaxed) <= 0 {
                break;
            }
            match tokio::time::timeout_at(close, rx.recv()).await {
                Ok(Some(m)) => take(m, &mut batch, &mut flushes),
                Ok(None) | Err(_) => break,
            }
        }
        if !batch.is_empty() {
            commit(&ledger, &shared, &mut batch).await;
        }
        for f in flushes.drain(..) {
            let _ = f.send(());
        }
    }
}

fn take(m: Msg, batch: &mut Vec<Job>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match m {
        Msg::Settle(j) => batch.push(j),
        Msg::Flush(f) => flushes.push(f),
    }
}

/// Commits `batch` (retrying until it does), then updates the books and tells the waiters.
async fn commit(ledger: &Ledger, shared: &Shared, batch: &mut Vec<Job>) {
    let mut pause = RETRY_FIRST;
    let mut attempt = 0u32;
    let applied = loop {
        // Its own task: a transaction is never cancelled half way.
        let (l, jobs) = (ledger.clone(), std::mem::take(batch));
        let task = tokio::spawn(async move {
            let r = l.settle_batch(&jobs).await;
            (jobs, r)
        });
        match task.await {
            Ok((jobs, Ok(applied))) => {
                *batch = jobs;
                break applied;
            }
            Ok((jobs, Err(e))) => {
                *batch = jobs;
                attempt += 1;
                shared.observer.settle_retry();
                if attempt == 1 || attempt.is_power_of_two() {
                    tracing::warn!(error = %e, settlements = batch.len(), attempt, "a settlement batch failed; retrying until it commits");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "a settlement batch task failed; its settlements are lost from this process");
                return;
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    };
    shared.observer.batch(batch.len());
    for (job, moved) in batch.drain(..).zip(applied) {
        shared.committed(job.account_id, job.grant_id, job.charged, moved);
        if let Some(reply) = job.reply {
            let _ = reply.send(moved);
        }
    }
}
