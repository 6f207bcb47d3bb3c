//! SQL for the rollup tables, built once from the bucket count so that columns and
//! binds cannot drift apart. `lat_N`/`fb_N` are the histogram columns of the migration.

use std::fmt::Write as _;
use std::sync::LazyLock;

use super::{ALL_APIS, LATENCY_BUCKET_COUNT};

/// `INSERT … ON CONFLICT DO UPDATE` adding to the stored minute of a route and inbound
/// API. Binds: route, api, minute, total, bad, failovers, then every latency bucket.
pub(super) fn upsert_route_minute() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        let buckets = columns("lat_");
        let mut sql = format!(
            "INSERT INTO route_minutes (route, api, minute, total, bad, failovers, {}) VALUES ({}) \
             ON CONFLICT (route, minute, api) DO UPDATE SET \
             total = route_minutes.total + excluded.total, \
             bad = route_minutes.bad + excluded.bad, \
             failovers = route_minutes.failovers + excluded.failovers",
            buckets.join(", "),
            placeholders(1, 6 + LATENCY_BUCKET_COUNT),
        );
        for c in &buckets {
            let _ = write!(sql, ", {c} = route_minutes.{c} + excluded.{c}");
        }
        sql
    });
    &SQL
}

/// Upsert of the first-byte histogram. Binds: upstream, minute, then every bucket.
pub(super) fn upsert_upstream_minute() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        let buckets = columns("fb_");
        let updates: Vec<String> =
            buckets.iter().map(|c| format!("{c} = upstream_minutes.{c} + excluded.{c}")).collect();
        format!(
            "INSERT INTO upstream_minutes (upstream, minute, {}) VALUES ({}) \
             ON CONFLICT (upstream, minute) DO UPDATE SET {}",
            buckets.join(", "),
            placeholders(1, 2 + LATENCY_BUCKET_COUNT),
            updates.join(", "),
        )
    });
    &SQL
}

/// Route, api, minute, total, bad, failovers and every latency bucket of the minutes of
/// `keys` routes: the stored rows with `by_api` (ordered by route, api, minute), else
/// summed per route and minute over the APIs, with api [`ALL_APIS`] (ordered by route,
/// minute). Binds: from, to, then the route names.
pub(super) fn select_route_minutes(keys: usize, by_api: bool) -> String {
    let counters = ["total", "bad", "failovers"].into_iter().map(str::to_owned).chain(columns("lat_"));
    let (api, counters, group) = if by_api {
        ("api".to_owned(), counters.collect::<Vec<_>>(), "ORDER BY route, api, minute")
    } else {
        (
            format!("CAST('{ALL_APIS}' AS TEXT)"),
            counters.map(|c| format!("CAST(SUM({c}) AS BIGINT)")).collect(),
            "GROUP BY route, minute ORDER BY route, minute",
        )
    };
    format!(
        "SELECT route, {api}, minute, {} FROM route_minutes \
         WHERE minute >= $1 AND minute <= $2 AND route IN ({}) {group}",
        counters.join(", "),
        placeholders(3, keys),
    )
}

/// The minutes of `keys` routes, the histogram reduced to all of it and the buckets
/// from `slow_from` on (0 without one): summed per minute across the routes and their
/// inbound APIs, or per route and minute with `by_route` (route first). Binds: from, to, then the route
/// names. Postgres sums `BIGINT` into `NUMERIC`, which the `Any` driver cannot decode:
/// hence the casts.
pub(super) fn select_budget_minutes(keys: usize, slow_from: Option<usize>, by_route: bool) -> String {
    let buckets = columns("lat_");
    let slow = match slow_from {
        Some(first) if first < buckets.len() => {
            format!("CAST(SUM({}) AS BIGINT)", buckets[first..].join(" + "))
        }
        _ => "0".to_owned(),
    };
    let key = if by_route { "route, minute" } else { "minute" };
    format!(
        "SELECT {key}, CAST(SUM(total) AS BIGINT), CAST(SUM(bad) AS BIGINT), \
         CAST(SUM({}) AS BIGINT), {slow} FROM route_minutes \
         WHERE minute >= $1 AND minute <= $2 AND route IN ({}) GROUP BY {key} ORDER BY {key}",
        buckets.join(" + "),
        placeholders(3, keys),
    )
}

/// Binds: from, to, then `keys` upstream names.
pub(super) fn select_upstream_minutes(keys: usize) -> String {
    format!(
        "SELECT upstream, minute, {} FROM upstream_minutes \
         WHERE minute >= $1 AND minute <= $2 AND upstream IN ({})",
        columns("fb_").join(", "),
        placeholders(3, keys),
    )
}

/// Binds: from, to, then `keys` upstream names.
pub(super) fn select_upstream_outcomes(keys: usize) -> String {
    format!(
        "SELECT upstream, minute, outcome, attempts FROM upstream_outcomes \
         WHERE minute >= $1 AND minute <= $2 AND upstream IN ({})",
        placeholders(3, keys),
    )
}

fn columns(prefix: &str) -> Vec<String> {
    (0..LATENCY_BUCKET_COUNT).map(|i| format!("{prefix}{i}")).collect()
}

/// `$first, $first+1, …` (`count` of them).
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}
