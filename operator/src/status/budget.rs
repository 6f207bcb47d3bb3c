//! `ErrorBudgetStatus` from the budget's resolution and `sluice_ledger::budget::evaluate`.
//!
//! Conditions:
//! - `Ready`: True (`Evaluated`) when valid and at least one route is counted (the
//!   message lists routes that are not); False when invalid (`Invalid`), when no route
//!   is served (`NoRoutes`) or when the ledger could not be read (`EvaluationFailed`,
//!   figures kept from the previous status).
//! - `Burning`: True (`AlertsFiring`) while any burn-rate alert fires.
//! - `Exhausted`: True (`BudgetExhausted`) once 100% of the budget is consumed.

use std::time::SystemTime;

use sluice_crds::error_budget::ErrorBudgetStatus;
use sluice_crds::{ErrorBudget, Severity};
use sluice_ledger::budget::{BudgetReport, BudgetState};

use super::Transition;
use super::conditions::{Status, set_condition, with_runbook};
use super::format::{rfc3339, time};
use super::upstream::describe;
use crate::view::BudgetView;

/// Everything a budget's status is computed from.
#[derive(Clone, Copy, Debug)]
pub struct BudgetInputs<'a> {
    /// The budget.
    pub budget: &'a ErrorBudget,
    /// Its resolution across groups.
    pub view: &'a BudgetView,
    /// The evaluation: `None` when the budget is invalid, `Err` when it failed.
    pub report: Option<Result<&'a BudgetReport, &'a str>>,
    /// Now.
    pub now: SystemTime,
}

/// `Healthy`, `Burning` or `Exhausted`.
pub fn state_name(state: BudgetState) -> &'static str {
    match state {
        BudgetState::Healthy => "Healthy",
        BudgetState::Burning => "Burning",
        BudgetState::Exhausted => "Exhausted",
    }
}

/// Computes the status.
pub fn budget_status(prev: Option<&ErrorBudgetStatus>, inputs: &BudgetInputs<'_>) -> ErrorBudgetStatus {
    let generation = inputs.budget.metadata.generation;
    let now = time(inputs.now);
    let mut next = prev.cloned().unwrap_or_default();
    next.observed_generation = generation;
    next.last_evaluated = Some(rfc3339(inputs.now));

    let errors: Vec<String> =
        inputs.view.problems.iter().filter(|p| p.severity == Severity::Error).map(describe).collect();
    let warnings: Vec<String> =
        inputs.view.problems.iter().filter(|p| p.severity == Severity::Warning).map(describe).collect();
    let counted = inputs.view.config.as_ref().map_or(0, |c| c.routes.len());

    let ready = match (&inputs.view.config, inputs.report) {
        (None, _) | (_, None) => {
            clear(&mut next);
            (Status::False, "Invalid", with_runbook(errors.join("; "), "config-rejected"))
        }
        (Some(_), Some(Err(e))) => (
            Status::False,
            "EvaluationFailed",
            with_runbook(format!("the ledger could not be read: {e}"), "ledger-unreachable"),
        ),
        (Some(_), Some(Ok(report))) => {
            fill(&mut next, report);
            if counted == 0 {
                let message = format!("none of its routes is served; {}", warnings.join("; "));
                (Status::False, "NoRoutes", with_runbook(message, "config-rejected"))
            } else if warnings.is_empty() {
                (Status::True, "Evaluated", format!("{counted} routes counted"))
            } else {
                (Status::True, "Evaluated", format!("{counted} routes counted; {}", warnings.join("; ")))
            }
        }
    };
    set_condition(&mut next.conditions, "Ready", ready.0, ready.1, ready.2, generation, &now);

    let firing = !next.firing_alerts.is_empty();
    let (status, reason, message) = if firing {
        let message = format!("burn-rate alerts firing: {}", next.firing_alerts.join(", "));
        (Status::True, "AlertsFiring", with_runbook(message, "budget-burning"))
    } else {
        (Status::False, "NoAlertsFiring", "no burn-rate alert fires".to_string())
    };
    set_condition(&mut next.conditions, "Burning", status, reason, message, generation, &now);

    let exhausted = next.state.as_deref() == Some("Exhausted");
    let consumed = next.consumed_percent.clone().unwrap_or_else(|| "0.0".into());
    let (status, reason, message) = if exhausted {
        (
            Status::True,
            "BudgetExhausted",
            with_runbook(format!("{consumed}% of the error budget is consumed"), "budget-burning"),
        )
    } else {
        (Status::False, "BudgetRemaining", format!("{consumed}% of the error budget is consumed"))
    };
    set_condition(&mut next.conditions, "Exhausted", status, reason, message, generation, &now);
    next
}

fn fill(status: &mut ErrorBudgetStatus, r: &BudgetReport) {
    status.state = Some(state_name(r.state).into());
    status.budget = Some(r.budget.clone());
    status.consumed = Some(r.consumed.clone());
    status.consumed_percent = Some(r.consumed_percent.clone());
    status.remaining_percent = Some(r.remaining_percent.clone());
    status.burn_rates = r.burn_rates.clone();
    status.good_events = Some(r.good_events);
    status.total_events = Some(r.total_events);
    status.firing_alerts = r.firing_alerts.clone();
}

fn clear(status: &mut ErrorBudgetStatus) {
    let conditions = std::mem::take(&mut status.conditions);
    *status = ErrorBudgetStatus {
        observed_generation: status.observed_generation,
        last_evaluated: status.last_evaluated.take(),
        conditions,
        ..ErrorBudgetStatus::default()
    };
}

/// `BudgetBurning` / `BudgetExhausted` when the state moved into one of them.
pub fn transition(prev: Option<&ErrorBudgetStatus>, next: &ErrorBudgetStatus) -> Option<Transition> {
    let before = prev.and_then(|p| p.state.as_deref());
    let after = next.state.as_deref();
    if before == after {
        return None;
    }
    let consumed = next.consumed_percent.as_deref().unwrap_or("0.0");
    match after {
        Some("Burning") => Some(Transition {
            warning: true,
            reason: "BudgetBurning",
            note: format!(
                "burn-rate alerts firing: {}; {consumed}% of the budget consumed",
                next.firing_alerts.join(", ")
            ),
        }),
        Some("Exhausted") => Some(Transition {
            warning: true,
            reason: "BudgetExhausted",
            note: format!("{consumed}% of the error budget is consumed"),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
