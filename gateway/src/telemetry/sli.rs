//! Per-minute SLI rollups kept in memory and flushed to the ledger about every 10 s and
//! at shutdown (docs/design.md §5). A route's requests are counted per inbound API
//! (docs/design.md §12). A failed flush keeps its rows for the next one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_ledger::{Ledger, LedgerError, RouteMinute, UpstreamMinute};

use crate::endpoint::Endpoint;
use crate::outcome::Outcome;

/// The maps of every request's counts: hashed with foldhash, not SipHash (their keys
/// are minutes and config names, not a client's text).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Rollups not yet flushed, by minute and then by key (looked up by `&str`, so that
/// counting a request allocates nothing once its row exists). A route key holds one row
/// per inbound API it served in that minute, at most [`Endpoint::ALL`]'s five.
#[derive(Default)]
pub struct Sli {
    routes: Mutex<Map<i64, Map<String, Vec<RouteMinute>>>>,
    upstreams: Mutex<Map<i64, Map<String, UpstreamMinute>>>,
}

/// Everything pending in `map`, which is left empty.
fn take_all<R>(map: &Mutex<Map<i64, Map<String, R>>>) -> Vec<R> {
    let taken = std::mem::take(&mut *map.lock().unwrap_or_else(|e| e.into_inner()));
    taken.into_values().flat_map(Map::into_values).collect()
}

/// Applies `f` to the row of `key` in `minute`, made by `new` if missing.
fn with_row<R>(
    map: &Mutex<Map<i64, Map<String, R>>>,
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

/// The row of inbound API `api` among a route's rows of one minute, made by `new` if
/// missing.
fn api_row<'a>(rows: &'a mut Vec<RouteMinute>, api: &str, new: impl FnOnce() -> RouteMinute) -> &'a mut RouteMinute {
    let at = match rows.iter().position(|r| r.api == api) {
        Some(at) => at,
        None => {
            rows.push(new());
            rows.len() - 1
        }
    };
    &mut rows[at]
}

fn minute_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| (d.as_secs() / 60) as i64)
}

impl Sli {
    /// Counts a request that came in on inbound API `api` and matters to the SLO (client
    /// errors are left out by the caller), in its route's row of that API.
    pub fn request(&self, route_key: &str, api: Endpoint, bad: bool, latency_ms: u64, failovers: u64) {
        let minute = minute_now();
        with_row(&self.routes, minute, route_key, Vec::new, |rows| {
            let row = api_row(rows, api.api(), || RouteMinute::new(route_key, api.api(), minute));
            row.record(bad, latency_ms);
            row.failovers += failovers;
        });
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
        let routes: Vec<RouteMinute> = take_all(&self.routes).into_iter().flatten().collect();
        let upstreams = take_all(&self.upstreams);
        if let Err(e) = ledger.write_rollups(&routes, &upstreams).await {
            for row in routes {
                with_row(&self.routes, row.minute, &row.route, Vec::new, |rows| {
                    api_row(rows, &row.api, || RouteMinute::new(row.route.clone(), row.api.clone(), row.minute))
                        .merge(&row);
                });
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Requests, bad and failovers per (route, api).
    type Sums = BTreeMap<(String, String), (u64, u64, u64)>;

    /// What is pending, per (route, api); panics if a minute holds two rows of one route
    /// and API.
    fn pending(sli: &Sli) -> Sums {
        let map = sli.routes.lock().unwrap();
        let mut sums = Sums::new();
        for (minute, by_route) in map.iter() {
            for (route, rows) in by_route {
                for (i, r) in rows.iter().enumerate() {
                    assert_eq!((&r.route, r.minute), (route, *minute));
                    assert!(!rows[..i].iter().any(|earlier| earlier.api == r.api), "two rows of {r:?}");
                    let s = sums.entry((r.route.clone(), r.api.clone())).or_default();
                    *s = (s.0 + r.total, s.1 + r.bad, s.2 + r.failovers);
                }
            }
        }
        sums
    }

    fn key(route: &str, api: &str) -> (String, String) {
        (route.to_owned(), api.to_owned())
    }

    #[test]
    fn a_route_keeps_one_row_per_inbound_api() {
        let sli = Sli::default();
        sli.request("ns/r", Endpoint::Chat, false, 10, 0);
        sli.request("ns/r", Endpoint::Chat, true, 0, 1);
        sli.request("ns/r", Endpoint::Messages, false, 20, 2);
        sli.request("ns/other", Endpoint::Chat, false, 5, 0);
        // Summed over minutes: the requests may straddle one.
        assert_eq!(
            pending(&sli),
            BTreeMap::from([
                (key("ns/other", "chat"), (1, 0, 0)),
                (key("ns/r", "chat"), (2, 1, 1)),
                (key("ns/r", "messages"), (1, 0, 2)),
            ])
        );
        let flushed: Vec<RouteMinute> = take_all(&sli.routes).into_iter().flatten().collect();
        assert!(flushed.iter().all(|r| r.api == "chat" || r.api == "messages"), "{flushed:?}");
    }

    #[tokio::test]
    async fn a_failed_flush_keeps_each_api_in_its_own_row() {
        let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
        ledger.close().await;
        let sli = Sli::default();
        sli.request("ns/r", Endpoint::Chat, false, 10, 0);
        sli.request("ns/r", Endpoint::Responses, true, 0, 1);
        assert!(sli.flush(&ledger).await.is_err());
        // A request after the failed flush joins the row of its API.
        sli.request("ns/r", Endpoint::Chat, false, 10, 0);
        assert_eq!(
            pending(&sli),
            BTreeMap::from([(key("ns/r", "chat"), (2, 0, 0)), (key("ns/r", "responses"), (1, 1, 1))])
        );
    }
}
