//! Reading the ledger for status: rollups of the last 5 minutes and fresh heartbeats.
//! Budgets are evaluated by the ledger itself (`Ledger::evaluate_budget`), as for
//! `sluice-gateway budgets`.

use std::time::SystemTime;

use sluice_ledger::{Ledger, LedgerError};

use crate::status::{HEARTBEAT_FRESHNESS, Observations, window_minutes};

/// Rollups of `routes` and `upstreams` (ledger keys, `namespace/name`) over the status
/// window ending at `now`, and heartbeats younger than a minute.
pub async fn observe(
    ledger: &Ledger,
    routes: &[String],
    upstreams: &[String],
    now: SystemTime,
) -> Result<Observations, LedgerError> {
    let (from, to) = window_minutes(now);
    Ok(Observations {
        route_minutes: ledger.route_minutes(routes, from, to).await?,
        upstream_minutes: ledger.upstream_minutes(upstreams, from, to).await?,
        heartbeats: ledger.heartbeats(now.checked_sub(HEARTBEAT_FRESHNESS).unwrap_or(SystemTime::UNIX_EPOCH)).await?,
    })
}
