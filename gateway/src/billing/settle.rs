//! Settling a reservation with what the answer cost, or releasing it.

use crate::config::Route;
use crate::relay::sse::Usage;

use super::Held;

/// Settles with the serving candidate's price, or releases on failure. Also runs at the
/// end of a relayed stream, where nobody could take an error, so errors are logged, not
/// returned.
pub async fn settle(route: &Route, candidate: Option<usize>, reservation: Option<Held>, usage: Option<Usage>) {
    // `_open` leaves `sluice_reservations_open` when this settlement is done.
    let Some(Held { reservation: r, _open }) = reservation else { return };
    let cand = candidate.and_then(|i| route.candidates.get(i));
    let charge = match (cand, usage) {
        (Some(c), Some(u)) => {
            let (uncached, cache_read, cache_write, output) = u.priced_parts();
            let cost = c.cfg.price.map_or(0, |p| p.cost_nanos_usage(uncached, cache_read, cache_write, output));
            let usage = sluice_ledger::Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                upstream: Some(c.upstream.cfg.key.clone()),
            };
            Some((i64::try_from(cost).unwrap_or(i64::MAX), usage))
        }
        _ => None,
    };
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
