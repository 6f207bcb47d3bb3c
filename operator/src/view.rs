//! What the operator knows about one namespace, resolved: pure functions from the
//! cached resources to per-group snapshots, per-budget configs and per-resource problems.
//!
//! Resolution is per gateway group: `resolve()` over the namespace's Upstreams, the
//! group's live ModelRoutes and the ErrorBudgets touching them. So model names must be
//! unique within a group (two groups may serve the same model), and one bad resource
//! only ever affects itself.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use sluice_crds::resolve::defaults;
use sluice_crds::snapshot::BudgetConfig;
use sluice_crds::{ErrorBudget, Manifests, ModelRoute, Problem, Resolved, SecretLookup, Severity, Upstream, resolve};

/// The gateway group of a route (`spec.gateway`, default `default`).
pub fn group_of(route: &ModelRoute) -> &str {
    route.spec.gateway.as_deref().unwrap_or(defaults::GATEWAY)
}

/// True while a resource exists and is not being deleted.
pub fn is_live<K: ResourceExt>(obj: &K) -> bool {
    obj.meta().deletion_timestamp.is_none()
}

/// One gateway group of one namespace, resolved.
#[derive(Clone, Debug)]
pub struct GroupView {
    /// Namespace.
    pub namespace: String,
    /// Group name.
    pub group: String,
    /// The group's live routes, sorted by name.
    pub routes: Vec<ModelRoute>,
    /// `resolve()` output; the snapshot's upstreams are pruned to those its routes use.
    pub resolved: Resolved,
    /// Keys (`namespace/name`) of the namespace's Upstreams that resolved.
    pub known_upstreams: BTreeSet<String>,
}

impl GroupView {
    /// Problems of one route, errors first.
    pub fn route_problems(&self, name: &str) -> Vec<&Problem> {
        let resource = format!("ModelRoute {}/{name}", self.namespace);
        self.resolved.problems.iter().filter(|p| p.resource == resource).collect()
    }

    /// Owner references to every route of the group.
    pub fn owners(&self) -> Vec<OwnerReference> {
        owner_references(&self.routes)
    }

    /// The render input of this group.
    pub fn group<'a>(&'a self, owners: &'a [OwnerReference]) -> crate::render::Group<'a> {
        crate::render::Group {
            namespace: &self.namespace,
            name: &self.group,
            snapshot: &self.resolved.snapshot,
            owners,
        }
    }
}

/// Owner references to `routes` (sorted by name, routes without a uid skipped).
///
/// None is the controller: the objects of a group are shared by all its routes, and
/// naming one of them controller would make that choice flip as routes come and go. Each
/// is an owner, so that `.owns()` triggers reach every route and the garbage collector
/// removes the objects once the last route is gone, should the operator not.
pub fn owner_references(routes: &[ModelRoute]) -> Vec<OwnerReference> {
    let mut refs: Vec<OwnerReference> = routes
        .iter()
        .filter_map(|r| {
            Some(OwnerReference {
                api_version: sluice_crds::API_VERSION.into(),
                kind: "ModelRoute".into(),
                name: r.metadata.name.clone()?,
                uid: r.metadata.uid.clone()?,
                controller: None,
                block_owner_deletion: None,
            })
        })
        .collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs
}

/// Resolves group `group` of namespace `namespace` from every cached resource (other
/// namespaces, other groups and routes being deleted are filtered out here).
pub fn group_view(
    namespace: &str,
    group: &str,
    upstreams: &[Upstream],
    routes: &[ModelRoute],
    budgets: &[ErrorBudget],
) -> GroupView {
    let in_ns = |ns: Option<&str>| ns.unwrap_or(defaults::NAMESPACE) == namespace;
    // Inputs come from watch caches in no particular order (it differs from one operator
    // process to the next); sorted by name, the rendered snapshot is the same whatever
    // the order, so an operator restart does not rewrite ConfigMaps or reload gateways.
    let mut upstreams: Vec<Upstream> =
        upstreams.iter().filter(|u| in_ns(u.metadata.namespace.as_deref()) && is_live(*u)).cloned().collect();
    upstreams.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut routes: Vec<ModelRoute> = routes
        .iter()
        .filter(|r| in_ns(r.metadata.namespace.as_deref()) && is_live(*r) && group_of(r) == group)
        .cloned()
        .collect();
    routes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let names: BTreeSet<&str> = routes.iter().filter_map(|r| r.metadata.name.as_deref()).collect();
    let mut budgets: Vec<ErrorBudget> = budgets
        .iter()
        .filter(|b| in_ns(b.metadata.namespace.as_deref()) && is_live(*b))
        .filter(|b| b.spec.routes.iter().any(|r| names.contains(r.as_str())))
        .cloned()
        .collect();
    budgets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let manifests = Manifests { upstreams, routes: routes.clone(), budgets, problems: Vec::new() };
    // Secret presence does not change what a gateway is given (a missing key is mounted
    // as absent and reported on the Upstream), so every reference counts as present.
    let mut resolved = resolve(&manifests, &|_: &str, _: &str, _: &str| true);
    let known_upstreams = resolved.snapshot.upstreams.keys().cloned().collect();
    let used: BTreeSet<String> =
        resolved.snapshot.routes.iter().flat_map(|r| r.candidates.iter().map(|c| c.upstream.clone())).collect();
    resolved.snapshot.upstreams.retain(|key, _| used.contains(key));
    GroupView { namespace: namespace.into(), group: group.into(), routes, resolved, known_upstreams }
}

/// The gateway groups that have live routes in `namespace`, sorted.
pub fn groups_in(namespace: &str, routes: &[ModelRoute]) -> BTreeSet<String> {
    routes
        .iter()
        .filter(|r| r.metadata.namespace.as_deref().unwrap_or(defaults::NAMESPACE) == namespace && is_live(*r))
        .map(|r| group_of(r).to_string())
        .collect()
}

/// An ErrorBudget resolved across every group its routes are in.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetView {
    /// The budget's config (routes: the served ones, in spec order), or `None` when it
    /// is invalid.
    pub config: Option<BudgetConfig>,
    /// Its problems, errors first.
    pub problems: Vec<Problem>,
}

/// Resolves `budget` against the routes of every group (a budget may span groups).
pub fn budget_view(budget: &ErrorBudget, upstreams: &[Upstream], routes: &[ModelRoute]) -> BudgetView {
    let namespace = budget.metadata.namespace.clone().unwrap_or_else(|| defaults::NAMESPACE.into());
    let name = budget.name_any();
    let key = format!("{namespace}/{name}");
    let resource = format!("ErrorBudget {key}");
    let named: BTreeSet<&str> = budget.spec.routes.iter().map(String::as_str).collect();
    let groups: BTreeSet<String> = routes
        .iter()
        .filter(|r| r.metadata.namespace.as_deref().unwrap_or(defaults::NAMESPACE) == namespace && is_live(*r))
        .filter(|r| r.metadata.name.as_deref().is_some_and(|n| named.contains(n)))
        .map(|r| group_of(r).to_string())
        .collect();
    let budgets = std::slice::from_ref(budget);
    let resolutions: Vec<Resolved> = if groups.is_empty() {
        let manifests = Manifests { budgets: budgets.to_vec(), ..Manifests::default() };
        vec![resolve(&manifests, &|_: &str, _: &str, _: &str| true)]
    } else {
        groups.iter().map(|g| group_view(&namespace, g, upstreams, routes, budgets).resolved).collect()
    };
    let mut served: BTreeSet<String> = BTreeSet::new();
    let mut config: Option<BudgetConfig> = None;
    for r in &resolutions {
        if let Some(b) = r.snapshot.budgets.iter().find(|b| b.key == key) {
            served.extend(b.routes.iter().cloned());
            config.get_or_insert_with(|| b.clone());
        }
    }
    if let Some(c) = &mut config {
        c.routes =
            budget.spec.routes.iter().map(|r| format!("{namespace}/{r}")).filter(|k| served.contains(k)).collect();
    }
    let mut problems: Vec<Problem> = Vec::new();
    for p in resolutions.iter().flat_map(|r| r.problems.iter()).filter(|p| p.resource == resource) {
        let unserved_warning = p.severity == Severity::Warning && p.field.starts_with("spec.routes[");
        let still_unserved = route_index(&p.field)
            .and_then(|i| budget.spec.routes.get(i))
            .is_none_or(|r| !served.contains(&format!("{namespace}/{r}")));
        if (!unserved_warning || still_unserved) && !problems.contains(p) {
            problems.push(p.clone());
        }
    }
    problems.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.field.cmp(&b.field)));
    BudgetView { config, problems }
}

fn route_index(field: &str) -> Option<usize> {
    field.strip_prefix("spec.routes[")?.strip_suffix(']')?.parse().ok()
}

/// The problems of one Upstream (validation, and a missing auth Secret key).
pub fn upstream_problems(upstream: &Upstream, secrets: &dyn SecretLookup) -> Vec<Problem> {
    let manifests = Manifests { upstreams: vec![upstream.clone()], ..Manifests::default() };
    resolve(&manifests, secrets).problems
}

#[cfg(test)]
mod tests;
