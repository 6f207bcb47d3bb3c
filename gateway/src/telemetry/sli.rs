//! Per-minute SLI rollups kept in memory and flushed to the ledger about every 10 s and
//! at shutdown (docs/design.md §5). A failed flush keeps its rows for the next one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sluice_ledger::{Heartbeat, Ledger, LedgerError, RouteMinute, UpstreamHeartbeat, UpstreamMinute};

use crate::attempt::outcome::Outcome;
use crate::config::Runtime;
use crate::route::health::HealthSettings;

/// Rollups not yet flushed, by minute and then by key (looked up by `&str`, so that
/// counting a request allocates nothing once its row exists).
#[derive(Default)]
pub struct Sli {
    routes: Mutex<HashMap<i64, HashMap<String, RouteMinute>>>,
    upstreams: Mutex<HashMap<i64, HashMap<String, UpstreamMinute>>>,
}

/// Everything pending in `map`, which is left empty.
fn take_all<R>(map: &Mutex<HashMap<i64, HashMap<String, R>>>) -> Vec<R> {
    let taken = std::mem::take(&mut *map.lock().unwrap_or_else(|e| e.into_inner()));
    taken.into_values().flat_map(HashMap::into_values).collect()
}

/// Applies `f` to the row of `key` in `minute`, made by `new` if missing.
fn with_row<R>(
    map: &Mutex<HashMap<i64, HashMap<String, R>>>,
    minute: i64,
    key: &str,
    new: impl FnOnce() -> R,
    f: impl FnOnce(&mut R),
) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    let rows = map.entry(minute).or_default();
    match rows.get_mut(key) {
        Some(row) => f(row),
        None => f(rows.entry(key.to_owned()).or_insert_with(new)),
    }
}

fn minute_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| (d.as_secs() / 60) as i64)
}

impl Sli {
    /// Counts a request that matters to the SLO (client errors are left out by the caller).
    pub fn request(&self, route_key: &str, bad: bool, latency_ms: u64, failovers: u64) {
        let minute = minute_now();
        with_row(
            &self.routes,
            minute,
            route_key,
            || RouteMinute::new(route_key, "chat", minute),
            |row| {
                row.record(bad, latency_ms);
                row.failovers += failovers;
            },
        );
    }

    /// Counts an upstream attempt.
    pub fn attempt(&self, upstream_key: &str, outcome: Outcome, first_byte_ms: Option<u64>) {
        let minute = minute_now();
        with_row(
            &self.upstreams,
            minute,
            upstream_key,
            || UpstreamMinute::new(upstream_key, minute),
            |row| {
                row.record(outcome.as_str(), first_byte_ms);
            },
        );
    }

    /// Writes everything pending; on failure it stays pending.
    pub async fn flush(&self, ledger: &Ledger) -> Result<(), LedgerError> {
        let routes = take_all(&self.routes);
        let upstreams = take_all(&self.upstreams);
        if let Err(e) = ledger.write_rollups(&routes, &upstreams).await {
            for row in routes {
                with_row(
                    &self.routes,
                    row.minute,
                    &row.route,
                    || RouteMinute::new(row.route.clone(), row.api.clone(), row.minute),
                    |r| r.merge(&row),
                );
            }
            for row in upstreams {
                let new = || UpstreamMinute::new(row.upstream.clone(), row.minute);
                with_row(&self.upstreams, row.minute, &row.upstream, new, |entry| {
                    for (outcome, n) in &row.attempts_by_outcome {
                        *entry.attempts_by_outcome.entry(outcome.clone()).or_default() += n;
                    }
                    for (a, b) in entry.first_byte_buckets.iter_mut().zip(row.first_byte_buckets.iter()) {
                        *a += b;
                    }
                });
            }
            return Err(e);
        }
        Ok(())
    }
}

/// This process's view of its upstreams, for the operator's status.
pub fn heartbeat(gateway_id: &str, runtime: &Runtime, settings: &HealthSettings) -> Heartbeat {
    let now = Instant::now();
    let mut upstreams: Vec<UpstreamHeartbeat> = runtime
        .upstreams
        .values()
        .map(|u| {
            let ratio = u.health.success_ratio(settings, now);
            // The highest configured weight among the routes using it.
            let weight = runtime
                .routes
                .values()
                .flat_map(|r| r.candidates.iter())
                .filter(|c| c.upstream.cfg.key == u.cfg.key)
                .map(|c| c.cfg.weight)
                .max()
                .unwrap_or(0);
            let (successes, failures) = u.health.counts(settings, now);
            UpstreamHeartbeat {
                upstream: u.cfg.key.clone(),
                circuit: u.health.circuit(now).as_str().to_string(),
                effective_weight: f64::from(weight) * ratio,
                successes,
                failures,
            }
        })
        .collect();
    upstreams.sort_by(|a, b| a.upstream.cmp(&b.upstream));
    Heartbeat { gateway_id: gateway_id.to_string(), at: SystemTime::now(), upstreams }
}
