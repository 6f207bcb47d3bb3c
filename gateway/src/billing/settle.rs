//! Settling a reservation with what the answer cost, or releasing it.

use crate::config::Route;
use crate::relay::sse::Usage;

use super::Held;

/// Settles with what each attempt used at its candidate's price (one attempt, or those of
/// a resumed stream, docs/design.md §4.5), or releases when nothing was used. Also runs at
/// the end of a relayed stream, where nobody could take an error, so errors are logged,
/// not returned.
pub async fn settle(route: &Route, charges: &[(usize, Usage)], reservation: Option<Held>) {
    // `_open` leaves `sluice_reservations_open` when this settlement is done.
    let Some(Held { reservation: r, _open }) = reservation else { return };
    let mut charge: Option<(i64, sluice_ledger::Usage)> = None;
    for (candidate, u) in charges {
        let Some(c) = route.candidates.get(*candidate) else { continue };
        let (uncached, cache_read, cache_write, output) = u.priced_parts();
        let cost = c.cfg.price.map_or(0, |p| p.cost_nanos_usage(uncached, cache_read, cache_write, output));
        let cost = i64::try_from(cost).unwrap_or(i64::MAX);
        // The ledger names the upstream that served the start of the answer.
        let (total, usage) = charge.get_or_insert_with(|| {
            (0, sluice_ledger::Usage { input_tokens: 0, output_tokens: 0, upstream: Some(c.upstream.cfg.key.clone()) })
        });
        *total = total.saturating_add(cost);
        usage.input_tokens += u.prompt_tokens;
        usage.output_tokens += u.completion_tokens;
    }
    let spend = route.metrics.spend.clone();
    // As in `reserve`: the transaction must not be cancelled half way by a client
    // that goes away, so it runs in its own task.
    let task = tokio::spawn(async move {
        let _open = _open;
        match charge {
            None => {
                if let Err(e) = r.release().await {
                    tracing::error!(error = %e, "releasing a reservation failed; the reaper will release it at expiry");
                }
            }
            Some((cost, usage)) => match r.settle(cost, usage).await {
                Ok(s) => {
                    spend.inc_by(u64::try_from(s.charged_nanos).unwrap_or(0));
                }
                Err(e) => tracing::error!(error = %e, "settling a reservation failed; the reaper will release it at expiry"),
            },
        }
    });
    if let Err(e) = task.await {
        tracing::error!(error = %e, "the settlement task failed; the reaper will release the reservation at expiry");
    }
}
