//! `ModelRouteStatus` from the group's resolution, its gateway Deployment and the
//! ledger.
//!
//! Conditions:
//! - `ResolvedRefs`: True when every candidate names an Upstream that resolved (reason
//!   `Resolved`), or some of them (`PartiallyResolved`, listing the missing ones); False
//!   when none did (`NoCandidateResolved`, with the message).
//! - `Degraded`: True (`CandidatesMissing`) when the route is served with some
//!   candidates missing; otherwise False.
//! - `Ready`: True (`Serving`) when the route is in its group's config and the gateway
//!   has an available pod; False when it is left out (`NoCandidateResolved`,
//!   `ModelConflict` or `Invalid`, with resolve's messages) or no gateway pod is
//!   available (`GatewayUnavailable`); Unknown (`GatewayPending`) before the Deployment
//!   exists.

use std::collections::BTreeSet;
use std::time::SystemTime;

use kube::ResourceExt;
use sluice_crds::model_route::{CandidateStatus, ModelRouteStatus};
use sluice_crds::snapshot::RouteConfig;
use sluice_crds::{ModelRoute, Problem, Severity};

use super::Observations;
use super::conditions::{Status, set_condition, with_runbook};
use super::format::{one_decimal, percent, time};
use super::upstream::describe;

/// The gateway Deployment's replica counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatewayState {
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// Everything a route's status is computed from.
#[derive(Clone, Copy, Debug)]
pub struct RouteInputs<'a> {
    /// The route.
    pub route: &'a ModelRoute,
    /// Its config when the group serves it.
    pub config: Option<&'a RouteConfig>,
    /// Its problems from the group's resolve.
    pub problems: &'a [&'a Problem],
    /// Keys of the namespace's Upstreams that resolved.
    pub known_upstreams: &'a BTreeSet<String>,
    /// The group's Deployment, `None` before it exists.
    pub gateway: Option<GatewayState>,
    /// The ledger's figures; `None` when it could not be read (figures are kept).
    pub observations: Option<&'a Observations>,
    /// Now.
    pub now: SystemTime,
}

/// Computes the status.
pub fn route_status(prev: Option<&ModelRouteStatus>, inputs: &RouteInputs<'_>) -> ModelRouteStatus {
    let route = inputs.route;
    let namespace = route.namespace().unwrap_or_else(|| "default".into());
    let key = format!("{namespace}/{}", route.name_any());
    let generation = route.metadata.generation;
    let mut next = prev.cloned().unwrap_or_default();
    next.observed_generation = generation;

    let missing: Vec<&str> = route
        .spec
        .candidates
        .iter()
        .map(|c| c.upstream.as_str())
        .filter(|u| !inputs.known_upstreams.contains(&format!("{namespace}/{u}")))
        .collect();
    let resolved_count = route.spec.candidates.len() - missing.len();
    next.candidate_count = Some(u32::try_from(resolved_count).unwrap_or(u32::MAX));

    if let Some(obs) = inputs.observations {
        let (total, bad, failovers) = obs.route(&key);
        next.requests5m = Some(total);
        next.failovers5m = Some(failovers);
        next.availability5m = percent(total - bad, total);
        next.candidates = inputs.config.map(|c| candidates(c, obs)).unwrap_or_default();
    } else if inputs.config.is_none() {
        next.candidates.clear();
    }

    let now = time(inputs.now);
    let missing_list = missing.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ");
    let (status, reason, message) = if missing.is_empty() {
        (Status::True, "Resolved", format!("all {resolved_count} candidates resolved to Upstreams"))
    } else if resolved_count > 0 {
        (Status::True, "PartiallyResolved", format!("Upstreams not found: {missing_list}"))
    } else {
        let message = format!("no candidate resolved to an Upstream; not found: {missing_list}");
        (Status::False, "NoCandidateResolved", with_runbook(message, "config-rejected"))
    };
    set_condition(&mut next.conditions, "ResolvedRefs", status, reason, message, generation, &now);

    let total = route.spec.candidates.len();
    let (status, reason, message) = match (inputs.config.is_some(), missing.is_empty()) {
        (true, false) => {
            let message = format!("serving with {resolved_count} of {total} candidates; missing: {missing_list}");
            (Status::True, "CandidatesMissing", with_runbook(message, "config-rejected"))
        }
        (true, true) => (Status::False, "AllCandidatesResolved", "no candidate is missing".to_string()),
        (false, _) => (Status::False, "NotServed", "the route is not served (see Ready)".to_string()),
    };
    set_condition(&mut next.conditions, "Degraded", status, reason, message, generation, &now);

    let (status, reason, message) = ready(inputs);
    set_condition(&mut next.conditions, "Ready", status, reason, message, generation, &now);
    next
}

fn ready(inputs: &RouteInputs<'_>) -> (Status, &'static str, String) {
    let group = inputs.route.spec.gateway.as_deref().unwrap_or("default");
    if inputs.config.is_none() {
        let errors: Vec<&&Problem> = inputs.problems.iter().filter(|p| p.severity == Severity::Error).collect();
        let reason = errors.first().map_or("Invalid", |p| reason_for(p));
        let message = errors.iter().map(|p| describe(p)).collect::<Vec<_>>().join("; ");
        let message = if message.is_empty() { "the route is not served".into() } else { message };
        return (Status::False, reason, with_runbook(message, "config-rejected"));
    }
    match inputs.gateway {
        None => (Status::Unknown, "GatewayPending", format!("waiting for Deployment sluice-gateway-{group}")),
        Some(g) if g.available > 0 => (
            Status::True,
            "Serving",
            format!("served by gateway {group} ({}/{} replicas available)", g.available, g.desired),
        ),
        Some(g) => {
            let message = format!("no gateway pod of {group} is available (0/{} replicas)", g.desired);
            (Status::False, "GatewayUnavailable", with_runbook(message, "gateway-pods-not-ready"))
        }
    }
}

/// The condition reason of an error that left a route out.
pub fn reason_for(p: &Problem) -> &'static str {
    if p.field == "spec.candidates" {
        "NoCandidateResolved"
    } else if p.field == "spec.model" && p.message.contains("already served") {
        "ModelConflict"
    } else {
        "Invalid"
    }
}

fn candidates(config: &RouteConfig, obs: &Observations) -> Vec<CandidateStatus> {
    config
        .candidates
        .iter()
        .map(|c| {
            let t = obs.upstream(&c.upstream);
            // docs/design.md §4.1: weight × recent success ratio; no data counts as 1.0.
            let ratio = obs.recent_ratio(&c.upstream).unwrap_or(1.0);
            CandidateStatus {
                upstream: c.upstream.rsplit_once('/').map_or(c.upstream.as_str(), |(_, n)| n).to_string(),
                effective_weight: Some(one_decimal(f64::from(c.weight) * ratio)),
                success_rate: percent(t.ok, t.attempts - t.client_errors),
                circuit: obs.circuit(&c.upstream),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
