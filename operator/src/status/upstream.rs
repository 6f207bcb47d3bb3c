//! `UpstreamStatus` from the Upstream's problems and the ledger.
//!
//! - `successRate`: `ok` attempts over judged attempts (all but `http_4xx`, which says
//!   nothing about the upstream, as in the gateway's own health), two decimals.
//! - `requests5m`: every attempt. `ttfbP50`/`ttfbP99`: from the first-byte histograms.
//! - `circuit`: the worst state in fresh heartbeats. `lastFailure`: the most frequent
//!   failure outcome of the newest minute that had one, at the start of that minute;
//!   kept from the previous status once it leaves the window.
//! - `Ready`: False when invalid, when the auth Secret key is missing, or when a pod
//!   has the circuit open.

use std::time::SystemTime;

use sluice_crds::upstream::{CircuitState, LastFailure, UpstreamStatus};
use sluice_crds::{Problem, Severity};

use super::conditions::{Status, set_condition, with_runbook};
use super::format::{duration, histogram_quantile, percent, rfc3339, time};
use super::{Observations, Transition};

/// Everything an Upstream's status is computed from.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamInputs<'a> {
    /// Ledger key, `namespace/name`.
    pub key: &'a str,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// Its problems (see [`crate::view::upstream_problems`]).
    pub problems: &'a [Problem],
    /// The ledger's figures; `None` when it could not be read (figures are kept).
    pub observations: Option<&'a Observations>,
    /// Now.
    pub now: SystemTime,
}

/// Computes the status.
pub fn upstream_status(prev: Option<&UpstreamStatus>, inputs: &UpstreamInputs<'_>) -> UpstreamStatus {
    let mut next = prev.cloned().unwrap_or_default();
    next.observed_generation = inputs.generation;
    if let Some(obs) = inputs.observations {
        let t = obs.upstream(inputs.key);
        next.success_rate = percent(t.ok, t.attempts - t.client_errors);
        next.requests5m = Some(t.attempts);
        next.ttfb_p50 = histogram_quantile(&t.first_byte, 0.50).map(duration);
        next.ttfb_p99 = histogram_quantile(&t.first_byte, 0.99).map(duration);
        next.circuit = obs.circuit(inputs.key);
        if let Some((minute, reason)) = t.last_failure {
            let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(minute).unwrap_or(0) * 60);
            next.last_failure = Some(LastFailure { reason, time: rfc3339(at) });
        }
    }
    let now = time(inputs.now);
    let errors: Vec<String> = inputs.problems.iter().filter(|p| p.severity == Severity::Error).map(describe).collect();
    let warnings: Vec<String> =
        inputs.problems.iter().filter(|p| p.severity == Severity::Warning).map(describe).collect();
    let (status, reason, message) = if !errors.is_empty() {
        (Status::False, "Invalid", with_runbook(errors.join("; "), "config-rejected"))
    } else if !warnings.is_empty() {
        (Status::False, "SecretMissing", with_runbook(warnings.join("; "), "config-rejected"))
    } else if next.circuit == Some(CircuitState::Open) {
        let (pods, open) = inputs.observations.map(|o| o.open_in(inputs.key)).unwrap_or((0, 0));
        (
            Status::False,
            "CircuitOpen",
            with_runbook(format!("the circuit is open in {open} of {pods} gateway pods"), "upstream-down"),
        )
    } else {
        (Status::True, "Available", "valid, and no gateway pod has the circuit open".to_string())
    };
    set_condition(&mut next.conditions, "Ready", status, reason, message, inputs.generation, &now);
    next
}

/// `CircuitOpened` when the worst circuit state became Open.
pub fn transition(prev: Option<&UpstreamStatus>, next: &UpstreamStatus) -> Option<Transition> {
    let was_open = prev.and_then(|p| p.circuit) == Some(CircuitState::Open);
    (!was_open && next.circuit == Some(CircuitState::Open)).then(|| Transition {
        warning: true,
        reason: "CircuitOpened",
        note: format!(
            "circuit opened; success rate {} over 5m",
            next.success_rate.as_deref().map_or_else(|| "unknown".to_string(), |s| format!("{s}%"))
        ),
    })
}

/// `field: message` (or the message alone).
pub fn describe(p: &Problem) -> String {
    if p.field.is_empty() { p.message.clone() } else { format!("{}: {}", p.field, p.message) }
}

#[cfg(test)]
mod tests;
