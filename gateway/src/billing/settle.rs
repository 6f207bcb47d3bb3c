//! Settling a reservation with what the answer cost, or releasing it.

use crate::config::Route;
use crate::usage::Usage;

use super::Held;

/// The name a settlement gives instead of an upstream's when the answer came from the
/// cache (docs/design.md §13): the bill's "cache hit" line. Upstream keys are
/// `namespace/name`, so it names none of them.
pub const CACHE_HIT: &str = "cache";

/// Settles with what each attempt used at its candidate's price (one attempt, or those of
/// a resumed stream, docs/design.md §4.5) and the hold's `cached` answers served from the cache at
/// the route's cache price, or releases when nothing was used. Returns once
/// the settlement committed (docs/design.md §5a), `true`; `false` when it failed. Dropping
/// the future does not cancel the settlement. Errors are logged, not returned.
pub async fn settle(route: &Route, charges: &[(usize, Usage)], reservation: Option<Held>) -> bool {
    let Some(Held { reservation, limits, cached }) = reservation else { return true };
    let mut charge: Option<(i64, sluice_ledger::Usage)> = None;
    for (candidate, u) in charges {
        let Some(c) = route.candidates.get(*candidate) else { continue };
        let cost = c.cfg.price.map_or(0, |p| p.cost_of(&u.metered()));
        let cost = i64::try_from(cost).unwrap_or(i64::MAX);
        // The ledger names the upstream that served the start of the answer.
        let (total, usage) = charge.get_or_insert_with(|| {
            let upstream = Some(c.upstream.cfg.key.clone());
            (0, sluice_ledger::Usage { upstream, ..sluice_ledger::Usage::default() })
        });
        *total = total.saturating_add(cost);
        usage.input_tokens += u.prompt_tokens;
        usage.output_tokens += u.completion_tokens;
        usage.web_searches += u.server_tool_use.web_search_requests;
    }
    if cached > 0 {
        let cost = i64::try_from(route.cache.price_nanos.saturating_mul(cached)).unwrap_or(i64::MAX);
        let (total, _) = charge.get_or_insert_with(|| {
            (0, sluice_ledger::Usage { upstream: Some(CACHE_HIT.to_owned()), ..sluice_ledger::Usage::default() })
        });
        *total = total.saturating_add(cost);
    }
    if let Some(limits) = limits {
        let (cost, tokens) = charge.as_ref().map_or((0, 0), |(cost, u)| (*cost, u.input_tokens + u.output_tokens));
        limits.settle(i64::try_from(tokens).unwrap_or(i64::MAX), cost);
    }
    // `_open` leaves `sluice_reservations_open` when this settlement is done.
    let Some((r, _open)) = reservation else { return true };
    let spend = route.metrics.spend.clone();
    // As in `reserve`: the transaction must not be cancelled half way by a client
    // that goes away, so it runs in its own task.
    let task = tokio::spawn(async move {
        let _open = _open;
        match charge {
            None => match r.release().await {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, "releasing a reservation failed; the reaper will release it at expiry");
                    false
                }
            },
            Some((cost, usage)) => match r.settle(cost, usage).await {
                Ok(s) => {
                    spend.inc_by(u64::try_from(s.charged_nanos).unwrap_or(0));
                    true
                }
                Err(e) => {
                    tracing::error!(error = %e, "settling a reservation failed; the reaper will release it at expiry");
                    false
                }
            },
        }
    });
    match task.await {
        Ok(billed) => billed,
        Err(e) => {
            tracing::error!(error = %e, "the settlement task failed; the reaper will release the reservation at expiry");
            false
        }
    }
}
