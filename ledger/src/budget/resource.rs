//! An ErrorBudget resource as the operator and `sluice-gateway budgets` see it (a
//! resolved [`BudgetConfig`]): its [`BudgetPolicy`], and its evaluation against the
//! rollups stored in the ledger. Both callers go through here, so the status an
//! operator writes and the table the command prints cannot disagree.

use std::time::{Duration, SystemTime};

use sluice_crds::error_budget::BudgetMethod as CrdMethod;
use sluice_crds::snapshot::BudgetConfig;

use super::{
    AlertPolicy, BudgetError, BudgetMethod, BudgetPolicy, BudgetReport, LatencySli, MinuteSeries, evaluate_minutes,
};
use crate::{Ledger, LedgerError};

/// Why a budget could not be evaluated against the ledger.
#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    /// Reading the rollups failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The budget maths refused the policy.
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

impl From<&BudgetConfig> for BudgetPolicy {
    /// The policy a resolved ErrorBudget states; the maths validates it.
    fn from(b: &BudgetConfig) -> BudgetPolicy {
        BudgetPolicy {
            objective: b.objective_ratio,
            window: Duration::from_millis(b.window_ms),
            method: match b.method {
                CrdMethod::Occurrences => BudgetMethod::Occurrences,
                CrdMethod::Timeslices => BudgetMethod::Timeslices,
            },
            timeslice: b.timeslice_ms.map(Duration::from_millis),
            latency: b
                .latency
                .map(|l| LatencySli { threshold_ms: l.threshold_ms, percentile: f64::from(l.percentile) }),
            alerts: b
                .alerts
                .iter()
                .map(|a| AlertPolicy {
                    name: a.name.clone(),
                    long: Duration::from_millis(a.long_window_ms),
                    short: Duration::from_millis(a.short_window_ms),
                    burn_rate: a.burn_rate,
                })
                .collect(),
        }
    }
}

/// The unix minute `t` falls in (0 before the epoch).
pub fn unix_minute(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs() / 60).unwrap_or(i64::MAX))
}

impl Ledger {
    /// Evaluates the budget `config` at `now`: reads the rollups of its routes over the
    /// policy's lookback ending at `now`'s minute, summed per minute
    /// ([`Ledger::budget_minutes`]), and hands them to [`evaluate_minutes`].
    pub async fn evaluate_budget(&self, config: &BudgetConfig, now: SystemTime) -> Result<BudgetReport, EvaluateError> {
        let policy = BudgetPolicy::from(config);
        let now = unix_minute(now);
        let from = now - policy.lookback_minutes() + 1;
        let rows = self.budget_minutes(&config.routes, from, now, policy.slow_from()).await?;
        Ok(evaluate_minutes(&policy, &MinuteSeries::from_rows(from, &rows), now)?)
    }
}

#[cfg(test)]
mod tests;
