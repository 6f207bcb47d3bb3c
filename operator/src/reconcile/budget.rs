//! The ErrorBudget reconciler: status only, from `sluice_ledger::budget::evaluate`.
//!
//! Per reconcile: resolve the budget across the groups of its routes (from the caches),
//! evaluate it on the ledger, `POST` a `BudgetBurning`/`BudgetExhausted` event on those
//! transitions, and patch the status (always: `lastEvaluated` moves). Also run for
//! every ErrorBudget each status interval.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use sluice_crds::ErrorBudget;

use super::{Context, patch_status};
use crate::error::Error;
use crate::metrics::Kind;
use crate::status::budget::{BudgetInputs, budget_status, transition};
use crate::view::budget_view;

/// Reconciles one ErrorBudget's status.
pub async fn reconcile(budget: Arc<ErrorBudget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(Kind::ErrorBudget);
    if budget.namespace().is_none() {
        return Err(Error::NoNamespace(budget.name_any()));
    }
    ctx.caches_ready().await?;
    let view = budget_view(&budget, &ctx.stores.upstreams(), &ctx.stores.routes());
    let now = ctx.now();
    let evaluated = match &view.config {
        Some(config) => Some(ctx.ledger.evaluate_budget(config, now).await.map_err(|e| {
            ctx.metrics.ledger_error();
            tracing::warn!(budget = %config.key, error = %e, "evaluating the budget failed");
            e.to_string()
        })),
        None => None,
    };
    let inputs = BudgetInputs {
        budget: &budget,
        view: &view,
        report: evaluated.as_ref().map(|r| r.as_ref().map_err(String::as_str)),
        now,
    };
    let prev = budget.status.as_ref();
    let next = budget_status(prev, &inputs);
    if let Some(t) = transition(prev, &next) {
        ctx.publish(budget.as_ref(), &t).await;
    }
    patch_status(&ctx, Kind::ErrorBudget, budget.as_ref(), &next).await?;
    Ok(Action::await_change())
}
