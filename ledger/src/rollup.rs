//! Per-minute SLI rollups (docs/design.md §5).
//!
//! Gateway pods aggregate in memory and flush every ~10 s with
//! [`Ledger::write_rollups`], which *adds* to the stored minute, so several pods (and
//! several flushes of one pod) may write the same minute. Route and upstream keys are
//! opaque strings chosen by the caller (the gateway uses `namespace/name`).
//!
//! A route's minute is stored as one row per inbound API that served it
//! ([`RouteMinute::api`], docs/design.md §12). Every read that error budgets and status
//! use sums those rows back into the route's minute; [`Ledger::route_api_minutes`]
//! reads them apart.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::budget::MinuteCounts;
use crate::error::LedgerError;
use crate::ledger::{Ledger, from_db, to_db, unix_ms};

mod sql;

/// Upper bounds (inclusive, milliseconds) of the latency and first-byte histogram
/// buckets. A last, implicit bucket counts everything slower than 60 s, so a histogram
/// has [`LATENCY_BUCKET_COUNT`] counters.
pub const LATENCY_BUCKETS_MS: [u64; 22] = [
    5, 10, 25, 50, 75, 100, 150, 250, 400, 600, 800, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 15000, 20000, 30000,
    60000,
];

/// Counters per histogram: one per bound plus the +Inf bucket.
pub const LATENCY_BUCKET_COUNT: usize = LATENCY_BUCKETS_MS.len() + 1;

/// The [`RouteMinute::api`] of a minute summed over every inbound API of its route, as
/// [`Ledger::route_minutes`] reads them. Never stored: [`Ledger::write_rollups`] refuses it.
pub const ALL_APIS: &str = "*";

/// The attempt outcomes of docs/design.md §3 (`sluice_upstream_attempts_total{outcome}`).
pub const UPSTREAM_OUTCOMES: [&str; 9] =
    ["ok", "http_4xx", "http_429", "http_5xx", "connect", "first_byte_timeout", "idle_timeout", "reset", "budget"];

/// One route's counters for one minute, of one inbound API or of all of them.
///
/// Contract with the budget maths: `total` counts the requests that matter to the SLO
/// (good or bad; client errors are left out), `bad` those that were bad by status
/// (5xx, or 429 after backoff ran out), and `latency_buckets` the latency of the
/// *other* requests (`total − bad` of them), so a request is never bad twice.
/// [`RouteMinute::record`] keeps to this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteMinute {
    /// Route key, e.g. `namespace/name`.
    pub route: String,
    /// The inbound API the requests came in on: `chat`, `completions`, `embeddings`,
    /// `messages` or `responses` (docs/design.md §12); [`ALL_APIS`] on a minute summed
    /// over them.
    pub api: String,
    /// Unix minute (seconds since the epoch ÷ 60).
    pub minute: i64,
    /// Requests that count for the SLO.
    pub total: u64,
    /// Requests bad by status.
    pub bad: u64,
    /// Failovers (attempts after the first) in this minute.
    pub failovers: u64,
    /// Latency histogram of the requests not bad by status; see [`LATENCY_BUCKETS_MS`].
    pub latency_buckets: [u64; LATENCY_BUCKET_COUNT],
}

/// One upstream's attempts for one minute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamMinute {
    /// Upstream key, e.g. `namespace/name`.
    pub upstream: String,
    /// Unix minute.
    pub minute: i64,
    /// Attempts per outcome label (see [`UPSTREAM_OUTCOMES`]); zero counts may be absent.
    pub attempts_by_outcome: BTreeMap<String, u64>,
    /// Time to first byte of attempts that got one; see [`LATENCY_BUCKETS_MS`].
    pub first_byte_buckets: [u64; LATENCY_BUCKET_COUNT],
}

/// The histogram bucket for a duration in milliseconds: the first bound ≥ `ms`, or the
/// +Inf bucket.
pub fn latency_bucket_index(ms: u64) -> usize {
    LATENCY_BUCKETS_MS.partition_point(|&bound| bound < ms)
}

impl RouteMinute {
    /// An empty minute of `route`'s requests on inbound API `api`.
    pub fn new(route: impl Into<String>, api: impl Into<String>, minute: i64) -> RouteMinute {
        RouteMinute {
            route: route.into(),
            api: api.into(),
            minute,
            total: 0,
            bad: 0,
            failovers: 0,
            latency_buckets: [0; LATENCY_BUCKET_COUNT],
        }
    }

    /// Counts one request: bad by status, or good by status with its latency.
    pub fn record(&mut self, bad: bool, latency_ms: u64) {
        self.total += 1;
        if bad {
            self.bad += 1;
        } else {
            self.latency_buckets[latency_bucket_index(latency_ms)] += 1;
        }
    }

    /// Adds another minute's counters (same route and minute assumed; the API is not
    /// looked at, so that the minutes of several APIs add up to the route's).
    pub fn merge(&mut self, other: &RouteMinute) {
        self.total += other.total;
        self.bad += other.bad;
        self.failovers += other.failovers;
        for (mine, theirs) in self.latency_buckets.iter_mut().zip(other.latency_buckets) {
            *mine += theirs;
        }
    }
}

impl UpstreamMinute {
    /// An empty minute.
    pub fn new(upstream: impl Into<String>, minute: i64) -> UpstreamMinute {
        UpstreamMinute {
            upstream: upstream.into(),
            minute,
            attempts_by_outcome: BTreeMap::new(),
            first_byte_buckets: [0; LATENCY_BUCKET_COUNT],
        }
    }

    /// Counts one attempt with its outcome label and, if a first byte arrived, its time.
    pub fn record(&mut self, outcome: &str, first_byte_ms: Option<u64>) {
        // Looked up by `&str` first: no allocation once the outcome has been seen.
        match self.attempts_by_outcome.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                self.attempts_by_outcome.insert(outcome.to_owned(), 1);
            }
        }
        if let Some(ms) = first_byte_ms {
            self.first_byte_buckets[latency_bucket_index(ms)] += 1;
        }
    }

    /// All attempts, any outcome.
    pub fn attempts(&self) -> u64 {
        self.attempts_by_outcome.values().sum()
    }
}

impl Ledger {
    /// Adds the given minutes to the stored ones, in one transaction: a route minute to
    /// the stored row of its route, API and minute. A route minute whose `api` is empty
    /// or [`ALL_APIS`] is refused ([`LedgerError::RollupApi`]) and nothing is written.
    pub async fn write_rollups(&self, routes: &[RouteMinute], upstreams: &[UpstreamMinute]) -> Result<(), LedgerError> {
        if routes.is_empty() && upstreams.is_empty() {
            return Ok(());
        }
        if let Some(m) = routes.iter().find(|m| m.api.is_empty() || m.api == ALL_APIS) {
            return Err(LedgerError::RollupApi { route: m.route.clone(), minute: m.minute, api: m.api.clone() });
        }
        let mut tx = self.begin_write().await?;
        for m in routes {
            let mut q = sqlx::query(sql::upsert_route_minute())
                .bind(&m.route)
                .bind(&m.api)
                .bind(m.minute)
                .bind(to_db("total", m.total)?)
                .bind(to_db("bad", m.bad)?)
                .bind(to_db("failovers", m.failovers)?);
            for count in m.latency_buckets {
                q = q.bind(to_db("latency bucket", count)?);
            }
            q.execute(&mut *tx).await?;
        }
        for m in upstreams {
            let mut q = sqlx::query(sql::upsert_upstream_minute()).bind(&m.upstream).bind(m.minute);
            for count in m.first_byte_buckets {
                q = q.bind(to_db("first-byte bucket", count)?);
            }
            q.execute(&mut *tx).await?;
            for (outcome, &count) in m.attempts_by_outcome.iter().filter(|(_, c)| **c > 0) {
                sqlx::query(
                    "INSERT INTO upstream_outcomes (upstream, minute, outcome, attempts) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (upstream, minute, outcome) \
                     DO UPDATE SET attempts = upstream_outcomes.attempts + excluded.attempts",
                )
                .bind(&m.upstream)
                .bind(m.minute)
                .bind(outcome)
                .bind(to_db("attempts", count)?)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The minutes of `routes` with `from_minute ≤ minute ≤ to_minute`, each summed over
    /// the route's inbound APIs (`api` is [`ALL_APIS`]), ordered by route then minute.
    /// Minutes without traffic have no row.
    pub async fn route_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<RouteMinute>, LedgerError> {
        self.read_route_minutes(routes, from_minute, to_minute, false).await
    }

    /// The stored minutes of `routes` with `from_minute ≤ minute ≤ to_minute`, one per
    /// route, inbound API and minute, ordered by route, API, minute. The rows of a
    /// route's minute add up to what [`Ledger::route_minutes`] reads.
    pub async fn route_api_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<RouteMinute>, LedgerError> {
        self.read_route_minutes(routes, from_minute, to_minute, true).await
    }

    async fn read_route_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
        by_api: bool,
    ) -> Result<Vec<RouteMinute>, LedgerError> {
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let text = sql::select_route_minutes(routes.len(), by_api);
        let mut q = sqlx::query(&text).bind(from_minute).bind(to_minute);
        for route in routes {
            q = q.bind(route);
        }
        let rows = q.fetch_all(&self.inner.reader).await?;
        rows.iter().map(route_minute_from_row).collect()
    }

    /// What [`budget::evaluate_minutes`](crate::budget::evaluate_minutes) reads: the
    /// minutes of `routes` with `from_minute ≤ minute ≤ to_minute`, summed across the
    /// routes and their inbound APIs in the database, with the requests in histogram buckets from `slow_from`
    /// on counted as slow, ordered by minute. Five numbers a minute instead of a row of
    /// every bucket per route: a 30-day budget reads 43,200 of them.
    pub async fn budget_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
        slow_from: Option<usize>,
    ) -> Result<Vec<(i64, MinuteCounts)>, LedgerError> {
        let rows = self.reduced_minutes(routes, from_minute, to_minute, slow_from, false).await?;
        rows.iter().map(|row| Ok((row.try_get(0)?, reduced(row, 1)?))).collect()
    }

    /// [`Ledger::budget_minutes`] per route (summed over its inbound APIs): one query for
    /// the last minutes of several budgets that count slow requests alike, ordered by
    /// route, minute.
    pub async fn budget_route_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
        slow_from: Option<usize>,
    ) -> Result<Vec<(String, i64, MinuteCounts)>, LedgerError> {
        let rows = self.reduced_minutes(routes, from_minute, to_minute, slow_from, true).await?;
        rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?, reduced(row, 2)?))).collect()
    }

    async fn reduced_minutes(
        &self,
        routes: &[String],
        from_minute: i64,
        to_minute: i64,
        slow_from: Option<usize>,
        by_route: bool,
    ) -> Result<Vec<AnyRow>, LedgerError> {
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let text = sql::select_budget_minutes(routes.len(), slow_from, by_route);
        let mut q = sqlx::query(&text).bind(from_minute).bind(to_minute);
        for route in routes {
            q = q.bind(route);
        }
        Ok(q.fetch_all(&self.inner.reader).await?)
    }

    /// Stored minutes of `upstreams` with `from_minute ≤ minute ≤ to_minute`, ordered by
    /// upstream then minute.
    pub async fn upstream_minutes(
        &self,
        upstreams: &[String],
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<UpstreamMinute>, LedgerError> {
        if upstreams.is_empty() {
            return Ok(Vec::new());
        }
        let mut by_key: BTreeMap<(String, i64), UpstreamMinute> = BTreeMap::new();
        let text = sql::select_upstream_minutes(upstreams.len());
        let mut q = sqlx::query(&text).bind(from_minute).bind(to_minute);
        for upstream in upstreams {
            q = q.bind(upstream);
        }
        for row in q.fetch_all(&self.inner.reader).await? {
            let mut m = UpstreamMinute::new(row.try_get::<String, _>(0)?, row.try_get(1)?);
            for (i, slot) in m.first_byte_buckets.iter_mut().enumerate() {
                *slot = from_db(row.try_get(i + 2)?);
            }
            by_key.insert((m.upstream.clone(), m.minute), m);
        }
        let text = sql::select_upstream_outcomes(upstreams.len());
        let mut q = sqlx::query(&text).bind(from_minute).bind(to_minute);
        for upstream in upstreams {
            q = q.bind(upstream);
        }
        for row in q.fetch_all(&self.inner.reader).await? {
            let key: (String, i64) = (row.try_get(0)?, row.try_get(1)?);
            let m = by_key.entry(key.clone()).or_insert_with(|| UpstreamMinute::new(key.0, key.1));
            m.attempts_by_outcome.insert(row.try_get(2)?, from_db(row.try_get(3)?));
        }
        Ok(by_key.into_values().collect())
    }

    /// Deletes rollups of minutes before `before_minute` and heartbeats older than
    /// `heartbeats_before` (retention). Returns the rows deleted.
    pub async fn prune_rollups(&self, before_minute: i64, heartbeats_before: SystemTime) -> Result<u64, LedgerError> {
        let mut tx = self.begin_write().await?;
        let mut deleted = 0;
        for table in ["route_minutes", "upstream_minutes", "upstream_outcomes"] {
            deleted += sqlx::query(&format!("DELETE FROM {table} WHERE minute < $1"))
                .bind(before_minute)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        deleted += sqlx::query("DELETE FROM heartbeats WHERE at_ms < $1")
            .bind(unix_ms(heartbeats_before))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(deleted)
    }
}

/// The total, bad, timed, slow columns of a reduced minute from column `at` on.
fn reduced(row: &AnyRow, at: usize) -> Result<MinuteCounts, LedgerError> {
    Ok(MinuteCounts {
        total: from_db(row.try_get(at)?),
        bad: from_db(row.try_get(at + 1)?),
        timed: from_db(row.try_get(at + 2)?),
        slow: from_db(row.try_get(at + 3)?),
    })
}

/// Reads the columns of [`sql::select_route_minutes`]: route, api, minute, total, bad,
/// failovers, then the latency buckets.
fn route_minute_from_row(row: &AnyRow) -> Result<RouteMinute, LedgerError> {
    let mut m = RouteMinute::new(row.try_get::<String, _>(0)?, row.try_get::<String, _>(1)?, row.try_get(2)?);
    m.total = from_db(row.try_get(3)?);
    m.bad = from_db(row.try_get(4)?);
    m.failovers = from_db(row.try_get(5)?);
    for (i, slot) in m.latency_buckets.iter_mut().enumerate() {
        *slot = from_db(row.try_get(i + 6)?);
    }
    Ok(m)
}

#[cfg(test)]
mod tests;
