//! Which candidate next (docs/design.md §4.1, §4.2): each upstream's
//! [`health`](crate::health) (success ratio, circuit breaker, 429 cooldown) gives the
//! candidate [`order`] of a walk; [`walk`] goes through the walks with failover, hedging
//! and [`backoff`](crate::backoff) between them. The background checks of
//! [`crate::checks`] feed the same health.

pub mod order;
pub mod walk;

pub use walk::{DispatchCtx, Dispatched, Failed, dispatch};

#[cfg(test)]
mod tests;
