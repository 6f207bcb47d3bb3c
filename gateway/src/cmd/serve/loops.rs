//! The background loops of `serve`: config reload, synthetic probes and checks, SLI
//! flush, heartbeat, the reservation reaper and the synthetic checks' retention.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::source::Source;
use crate::server::Gateway;

use super::ServeArgs;

/// The background loops; dropping the handle does not stop them, `abort()` does.
pub struct Loops(Vec<tokio::task::JoinHandle<()>>);

impl Loops {
    /// Stops every loop.
    pub fn abort(&self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// How often rows older than the synthetic checks' retention are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Starts config reload, probe, synthetic check, SLI flush, heartbeat and reaper loops.
pub fn spawn_loops(gw: Arc<Gateway>, args: &ServeArgs, gateway_id: String) -> Loops {
    let mut handles = Vec::new();
    let reload_every = args.reload_interval;
    let g = gw.clone();
    handles.push(tokio::spawn(async move {
        let Some(source) = g.source.clone() else { return };
        let mut last = source.fingerprint(g.books.secrets.dir());
        let mut tick = tokio::time::interval(reload_every);
        loop {
            tick.tick().await;
            // File reads and a reload's parsing block: keep them off the threads that
            // serve requests (a slow volume would otherwise stall every request).
            let (g, source) = (g.clone(), source.clone());
            match tokio::task::spawn_blocking(move || reload_if_changed(&g, &source, last)).await {
                Ok(now) => last = now,
                Err(e) => tracing::error!(error = %e, "the configuration check failed"),
            }
        }
    }));
    if let Some(limiter) = gw.billing.limiter.clone() {
        // Limit leases (docs/design.md §5b): returned when a window ends or a key goes
        // idle, renewed before they run out.
        handles.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(sluice_ledger::limits::limiter::TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                limiter.tick(i64::try_from(now).unwrap_or(i64::MAX)).await;
            }
        }));
    }
    if gw.cache.is_some() {
        let g = gw.clone();
        handles.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                if let Some(c) = &g.cache {
                    g.books.metrics.cache.bytes.set(i64::try_from(c.sweep()).unwrap_or(i64::MAX));
                }
            }
        }));
    }
    let g = gw.clone();
    handles.push(tokio::spawn(async move { crate::checks::probe::run(&g.current, &g.books).await }));
    let (g, id) = (gw.clone(), gateway_id.clone());
    handles.push(tokio::spawn(async move {
        crate::checks::synthetic::run(&g.current, &g.books, g.billing.ledger.as_ref(), &id).await;
    }));
    if let Some(ledger) = gw.billing.ledger.clone() {
        let g = gw.clone();
        let every = args.flush_interval;
        handles.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut pruned: Option<Instant> = None;
            loop {
                tick.tick().await;
                if let Err(e) = g.books.sli.flush(&ledger).await {
                    tracing::warn!(error = %e, "SLI flush failed; will retry");
                }
                if let Some(rt) = g.current.get() {
                    let hb = rt.heartbeat(&gateway_id, &g.books.settings);
                    if let Err(e) = ledger.heartbeat(hb).await {
                        tracing::warn!(error = %e, "heartbeat failed");
                    }
                }
                match ledger.reap_expired(SystemTime::now()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(closed = n, "closed expired reservations, grants and limit leases"),
                    Err(e) => tracing::warn!(error = %e, "reservation reaper failed"),
                }
                if pruned.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
                    pruned = Some(Instant::now());
                    let before = SystemTime::now()
                        .checked_sub(sluice_ledger::SYNTHETIC_RETENTION)
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    match ledger.prune_synthetic(before).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(deleted = n, "pruned synthetic checks past their retention"),
                        Err(e) => tracing::warn!(error = %e, "pruning synthetic checks failed"),
                    }
                }
            }
        }));
    }
    Loops(handles)
}

/// Picks up rotated keys, and reloads the config if its files changed since `last`;
/// returns the files' fingerprint now.
fn reload_if_changed(g: &Gateway, source: &Source, last: u64) -> u64 {
    if let Some(rt) = g.current.get() {
        // Rotated keys are picked up even when the config did not change.
        g.books.secrets.refresh(&rt.snapshot);
    }
    let now = source.fingerprint(g.books.secrets.dir());
    if now != last {
        match g.reload() {
            Ok(routes) => tracing::info!(routes, "configuration reloaded"),
            Err(e) => tracing::error!("new configuration refused, the previous one keeps serving: {e}"),
        }
    }
    now
}
