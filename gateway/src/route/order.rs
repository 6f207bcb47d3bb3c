//! Candidate order for one walk (docs/design.md §4.1): trials first, then descending effective
//! weight (`weighted` picks the first at random in proportion to it), and skipped
//! upstreams only when nothing else is left (fail open).

use std::sync::atomic::Ordering;
use tokio::time::Instant;

use rand::Rng;
use sluice_crds::model_route::Selection;

use crate::config::Route;
use crate::health::{Availability, HealthSettings};

/// A candidate chosen for a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// Index into `route.candidates`.
    pub idx: usize,
    /// Whether it holds a trial slot (returned when recorded or cancelled).
    pub trial: bool,
}

/// Orders the candidates of `route` that are not `excluded`.
pub fn order(
    route: &Route,
    settings: &HealthSettings,
    now: Instant,
    excluded: &[bool],
    rng: &mut impl Rng,
) -> Vec<Pick> {
    let mut trials = Vec::new();
    let mut available: Vec<(usize, f64)> = Vec::new();
    let mut skipped: Vec<(usize, f64)> = Vec::new();
    for (idx, c) in route.candidates.iter().enumerate() {
        if excluded.get(idx).copied().unwrap_or(false) {
            continue;
        }
        let up = &c.upstream;
        let weight = f64::from(c.cfg.weight);
        let saturated = up.cfg.max_concurrent_requests.is_some_and(|max| up.in_flight.load(Ordering::Relaxed) >= max);
        let availability = up.health.availability(&up.cfg.circuit_breaker, settings, now);
        match availability {
            Availability::Trial if saturated => {
                up.health.cancel_trial();
                skipped.push((idx, weight));
            }
            Availability::Trial => {
                up.metrics.effective_weight.set(weight * up.health.success_ratio(settings, now));
                trials.push(Pick { idx, trial: true });
            }
            Availability::Available(ratio) if !saturated => {
                let effective = weight * ratio;
                up.metrics.effective_weight.set(effective);
                available.push((idx, effective));
            }
            Availability::Available(ratio) => skipped.push((idx, weight * ratio)),
            Availability::Skipped => {
                let effective = weight * up.health.success_ratio(settings, now);
                up.metrics.effective_weight.set(effective);
                skipped.push((idx, effective));
            }
        }
        up.metrics.circuit.set(up.health.circuit(now).gauge());
    }
    // Stable sort: ties keep spec order.
    let by_weight = |v: &mut Vec<(usize, f64)>| v.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_weight(&mut available);
    if route.cfg.selection == Selection::Weighted && available.len() > 1 {
        let total: f64 = available.iter().map(|(_, w)| w).sum();
        if total > 0.0 {
            let mut point = rng.random_range(0.0..total);
            let chosen = available
                .iter()
                .position(|(_, w)| {
                    point -= w;
                    point < 0.0
                })
                .unwrap_or(0);
            let first = available.remove(chosen);
            available.insert(0, first);
        }
    }
    let mut picks = trials;
    picks.extend(available.into_iter().map(|(idx, _)| Pick { idx, trial: false }));
    if picks.is_empty() {
        by_weight(&mut skipped);
        picks.extend(skipped.into_iter().map(|(idx, _)| Pick { idx, trial: false }));
    }
    picks
}
