//! Reading the ledger for status: rollups of the last 5 minutes and fresh heartbeats,
//! and budget evaluation.

use std::time::SystemTime;

use sluice_crds::snapshot::BudgetConfig;
use sluice_ledger::budget::{self, BudgetReport};
use sluice_ledger::{Ledger, LedgerError};

use crate::status::{HEARTBEAT_FRESHNESS, Observations, unix_minute, window_minutes};

/// Rollups of `routes` and `upstreams` (ledger keys, `namespace/name`) over the status
/// window ending at `now`, and heartbeats younger than a minute.
pub async fn observe(ledger: &Ledger, routes: &[String], upstreams: &[String], now: SystemTime) -> Result<Observations, LedgerError> {
    let (from, to) = window_minutes(now);
    Ok(Observations {
        route_minutes: ledger.route_minutes(routes, from, to).await?,
        upstream_minutes: ledger.upstream_minutes(upstreams, from, to).await?,
        heartbeats: ledger.heartbeats(now.checked_sub(HEARTBEAT_FRESHNESS).unwrap_or(SystemTime::UNIX_EPOCH)).await?,
    })
}

/// Why a budget could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The policy was refused by the budget maths.
    #[error(transparent)]
    Budget(#[from] budget::BudgetError),
}

/// Evaluates a resolved budget at `now`: `sluice_gateway::budgets::policy` and
/// `sluice_ledger::budget::evaluate`, with the operator's clock.
pub async fn evaluate(ledger: &Ledger, config: &BudgetConfig, now: SystemTime) -> Result<BudgetReport, EvaluateError> {
    let policy = sluice_gateway::budgets::policy(config);
    let now = unix_minute(now);
    let minutes = ledger.route_minutes(&config.routes, now - policy.lookback_minutes() + 1, now).await?;
    Ok(budget::evaluate(&policy, &minutes, now)?)
}
