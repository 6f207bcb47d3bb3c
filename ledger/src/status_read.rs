//! Reads for the status page (docs/design.md §10): the route rollups summed the way the
//! page shows them, and the synthetic checks the gateway's scheduler stores.
//!
//! Every query here reads; none takes the write lock. Sums are cast to `BIGINT` because
//! Postgres sums a `BIGINT` column into a `NUMERIC`, which the `Any` driver cannot decode.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::error::LedgerError;
use crate::ledger::{Ledger, from_db};

/// One route's requests in one unit of time (a minute or a day).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteCount {
    /// Route key.
    pub route: String,
    /// Unix minute, or unix day (minute ÷ 1440) for [`Ledger::route_days`].
    pub at: i64,
    /// Requests that count for the SLO.
    pub total: u64,
    /// Requests bad by status.
    pub bad: u64,
}

/// One synthetic check as the `synthetic_checks` table stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCheck {
    /// Route key (as in `route_minutes.route`).
    pub route: String,
    /// Upstream key (as in `upstream_outcomes.upstream`).
    pub upstream: String,
    /// When the check finished, unix milliseconds.
    pub at_ms: i64,
    /// `ok`, or the outcome label of the failure.
    pub outcome: String,
}

impl Ledger {
    /// Requests per minute of `routes` from `from_minute` on, summed over each route's
    /// inbound APIs, ordered by route, minute.
    pub async fn route_counts(&self, routes: &[String], from_minute: i64) -> Result<Vec<RouteCount>, LedgerError> {
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let text = format!(
            "SELECT route, minute, CAST(SUM(total) AS BIGINT), CAST(SUM(bad) AS BIGINT) FROM route_minutes \
             WHERE minute >= $1 AND route IN ({}) GROUP BY route, minute ORDER BY route, minute",
            placeholders(2, routes.len())
        );
        self.counts(&text, &[from_minute], routes).await
    }

    /// Requests per unix day of `routes` for `from_day ≤ day ≤ to_day` (all inbound
    /// APIs), ordered by route, day. Days without traffic have no row.
    pub async fn route_days(
        &self,
        routes: &[String],
        from_day: i64,
        to_day: i64,
    ) -> Result<Vec<RouteCount>, LedgerError> {
        if routes.is_empty() || from_day > to_day {
            return Ok(Vec::new());
        }
        let text = format!(
            "SELECT route, minute / 1440 AS day, CAST(COALESCE(SUM(total), 0) AS BIGINT), \
             CAST(COALESCE(SUM(bad), 0) AS BIGINT) FROM route_minutes WHERE minute >= $1 AND minute < $2 \
             AND route IN ({}) GROUP BY route, minute / 1440 ORDER BY route, day",
            placeholders(3, routes.len())
        );
        self.counts(&text, &[from_day * 1440, (to_day + 1) * 1440], routes).await
    }

    /// Synthetic checks of `routes` × `upstreams` that finished at or after `since_ms`,
    /// ordered by route, upstream, time. Reads the `synthetic_checks` table of
    /// docs/design.md §10; naming both keys lets its index `(route, upstream, at_ms)`
    /// reach the time range directly.
    pub async fn synthetic_checks(
        &self,
        routes: &[String],
        upstreams: &[String],
        since_ms: i64,
    ) -> Result<Vec<StoredCheck>, LedgerError> {
        if routes.is_empty() || upstreams.is_empty() {
            return Ok(Vec::new());
        }
        let text = format!(
            "SELECT route, upstream, at_ms, outcome FROM synthetic_checks WHERE at_ms >= $1 \
             AND route IN ({}) AND upstream IN ({}) ORDER BY route, upstream, at_ms",
            placeholders(2, routes.len()),
            placeholders(2 + routes.len(), upstreams.len())
        );
        let mut q = sqlx::query(&text).bind(since_ms);
        for key in routes.iter().chain(upstreams) {
            q = q.bind(key);
        }
        let rows = q.fetch_all(&self.inner.reader).await?;
        rows.iter()
            .map(|row| {
                Ok(StoredCheck {
                    route: row.try_get(0)?,
                    upstream: row.try_get(1)?,
                    at_ms: row.try_get(2)?,
                    outcome: row.try_get(3)?,
                })
            })
            .collect()
    }

    /// Runs a [`RouteCount`] query: `text` binds `head` first, then `routes`, and
    /// selects route, time, total, bad.
    async fn counts(&self, text: &str, head: &[i64], routes: &[String]) -> Result<Vec<RouteCount>, LedgerError> {
        let mut q = sqlx::query(text);
        for value in head {
            q = q.bind(*value);
        }
        for r in routes {
            q = q.bind(r);
        }
        let rows = q.fetch_all(&self.inner.reader).await?;
        rows.iter()
            .map(|row| {
                Ok(RouteCount {
                    route: row.try_get(0)?,
                    at: row.try_get(1)?,
                    total: from_db(row.try_get(2)?),
                    bad: from_db(row.try_get(3)?),
                })
            })
            .collect()
    }
}

/// `$first, $first+1, …` for `n` binds.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}
