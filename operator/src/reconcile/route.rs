//! The ModelRoute reconciler: a route stands for its (namespace, gateway group).
//!
//! A route carries the finalizer [`FINALIZER`], so that its deletion is seen: the group
//! is re-rendered without it (and deleted when it was the last route) before the API
//! server lets it go. Per reconcile (see [`group::sync_namespace`] for the order):
//!
//! 1. no finalizer yet: JSON-patch it on, and stop (the change triggers the next run);
//! 2. apply the ledger Secret and the group's ConfigMap, Deployment, Service and
//!    PodDisruptionBudget, or delete them when the group serves nothing; the same for
//!    other groups of the namespace whose objects are stale or orphaned;
//! 3. patch the status of every route of those groups whose status changed;
//! 4. on deletion: 2 and 3 without the route, then JSON-patch the finalizer off.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use sluice_crds::ModelRoute;

use super::group::{self, Synced, gateway_state};
use super::{Context, patch_status};
use crate::error::Error;
use crate::metrics::Kind;
use crate::observe::observe;
use crate::render::object_name;
use crate::status::route::{RouteInputs, route_status};
use crate::view::{group_of, group_view, groups_in};

/// Finalizer on every ModelRoute: the group's objects are updated before it goes.
pub const FINALIZER: &str = "sluice.dev/gateway-config";
/// Routes are reconciled again after this long even without a change (drift repair).
pub const RESYNC: Duration = Duration::from_secs(300);

/// Reconciles the (namespace, group) of `route`.
pub async fn reconcile(route: Arc<ModelRoute>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(Kind::ModelRoute);
    let namespace = route.namespace().ok_or_else(|| Error::NoNamespace(route.name_any()))?;
    ctx.caches_ready().await?;
    let api: Api<ModelRoute> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, route, |event| {
        let ctx = ctx.clone();
        async move {
            match event {
                FinalizerEvent::Apply(route) => {
                    let synced = group::sync_namespace(&ctx, &namespace, group_of(&route), None).await?;
                    write_statuses(&ctx, &synced).await?;
                    Ok(Action::requeue(RESYNC))
                }
                FinalizerEvent::Cleanup(route) => {
                    let uid = route.uid();
                    let synced = group::sync_namespace(&ctx, &namespace, group_of(&route), uid.as_deref()).await?;
                    write_statuses(&ctx, &synced).await?;
                    tracing::info!(namespace, route = %route.name_any(), "route deleted; its gateway group was updated");
                    Ok(Action::await_change())
                }
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Patches the status of every route of `synced` whose computed status differs from
/// the cached one. The ledger is read once; when it fails its figures are kept. A
/// failed patch does not stop the others; the first error is returned.
pub async fn write_statuses(ctx: &Context, synced: &[Synced]) -> Result<usize, Error> {
    let now = ctx.now();
    let route_keys: Vec<String> = synced.iter().flat_map(|s| s.view.routes.iter().map(route_key)).collect();
    let upstream_keys: Vec<String> = synced
        .iter()
        .flat_map(|s| s.view.resolved.snapshot.routes.iter())
        .flat_map(|r| r.candidates.iter().map(|c| c.upstream.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let observations = match observe(&ctx.ledger, &route_keys, &upstream_keys, now).await {
        Ok(o) => Some(o),
        Err(e) => {
            ctx.metrics.ledger_error();
            tracing::warn!(error = %e, "reading the ledger failed; route statuses keep their figures");
            None
        }
    };
    let mut written = 0;
    let mut first_error = None;
    for s in synced {
        for route in &s.view.routes {
            // The cache may hold a newer status than the view's copy.
            let current = ctx.stores.routes.get(&ObjectRef::from_obj(route)).and_then(|r| r.status.clone());
            let key = route_key(route);
            let problems = s.view.route_problems(&route.name_any());
            let inputs = RouteInputs {
                route,
                config: s.view.resolved.snapshot.routes.iter().find(|c| c.key == key),
                problems: &problems,
                known_upstreams: &s.view.known_upstreams,
                gateway: s.gateway,
                observations: observations.as_ref(),
                now,
            };
            let next = route_status(current.as_ref(), &inputs);
            if current.as_ref() == Some(&next) {
                continue;
            }
            match patch_status(ctx, Kind::ModelRoute, route, &next).await {
                Ok(()) => written += 1,
                Err(Error::Kube(kube::Error::Api(s))) if s.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(route = %key, error = %e, "status patch failed");
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error.map_or(Ok(written), Err)
}

/// The status loop's part for routes: every group of every namespace, with the
/// cached Deployment, without applying anything.
pub async fn refresh_statuses(ctx: &Context) -> Result<usize, Error> {
    ctx.caches_ready().await?;
    let upstreams = ctx.stores.upstreams();
    let routes = ctx.stores.routes();
    let budgets = ctx.stores.budgets();
    let namespaces: BTreeSet<String> = routes.iter().filter_map(|r| r.namespace()).collect();
    let mut synced = Vec::new();
    for namespace in &namespaces {
        for group in groups_in(namespace, &routes) {
            let view = group_view(namespace, &group, &upstreams, &routes, &budgets);
            let deployment =
                ctx.stores.deployments.get(&ObjectRef::<Deployment>::new(&object_name(&group)).within(namespace));
            let gateway =
                if view.resolved.snapshot.routes.is_empty() { None } else { deployment.map(|d| gateway_state(&d)) };
            synced.push(Synced { view, gateway });
        }
    }
    write_statuses(ctx, &synced).await
}

fn route_key(route: &ModelRoute) -> String {
    format!("{}/{}", route.namespace().unwrap_or_default(), route.name_any())
}
