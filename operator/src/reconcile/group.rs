//! Applying and deleting the objects of gateway groups, and sweeping a namespace for
//! groups whose objects are stale (a route left) or orphaned (no route left).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

use super::{Context, apply, delete};
use crate::error::Error;
use crate::render::{
    GATEWAY_LABEL, LEDGER_SECRET, desired_configmap, desired_deployment, desired_pdb, desired_secret, desired_service,
    object_name,
};
use crate::status::route::GatewayState;
use crate::view::{GroupView, group_view, groups_in, is_live};

/// A group handled by [`sync_namespace`].
#[derive(Clone, Debug)]
pub struct Synced {
    /// The group, resolved.
    pub view: GroupView,
    /// Its Deployment's replicas as the API server answered the apply; `None` when the
    /// group serves nothing (its objects were deleted).
    pub gateway: Option<GatewayState>,
}

/// The replica counts of a Deployment.
pub fn gateway_state(d: &Deployment) -> GatewayState {
    GatewayState {
        desired: d.spec.replicas.unwrap_or(1),
        available: d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0),
    }
}

/// Brings namespace `namespace` in line for group `focus` and for every group whose
/// rendered ConfigMap is stale (its owners are not the group's live routes) or orphaned
/// (no live route left). A route with uid `exclude` (being deleted) counts as gone.
///
/// Order of calls: the ledger Secret (once, if any group is applied), then per group
/// (`focus` first, then the others by name) ConfigMap, Deployment, Service and
/// PodDisruptionBudget applied, or Deployment, Service, PodDisruptionBudget and
/// ConfigMap deleted; last, the ledger Secret is deleted when a group was deleted and
/// no live route is left in the namespace.
pub async fn sync_namespace(
    ctx: &Context,
    namespace: &str,
    focus: &str,
    exclude: Option<&str>,
) -> Result<Vec<Synced>, Error> {
    let upstreams = ctx.stores.upstreams();
    let mut routes = ctx.stores.routes();
    if let Some(uid) = exclude {
        routes.retain(|r| r.metadata.uid.as_deref() != Some(uid));
    }
    let budgets = ctx.stores.budgets();
    let live_groups = groups_in(namespace, &routes);

    let mut todo = vec![focus.to_string()];
    for (group, owners) in rendered_groups(ctx, namespace) {
        let wanted: BTreeSet<String> = routes
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(namespace) && is_live(*r))
            .filter(|r| crate::view::group_of(r) == group)
            .filter_map(|r| r.metadata.uid.clone())
            .collect();
        if group != focus && (wanted.is_empty() || wanted != owners) {
            todo.push(group);
        }
    }

    let mut synced = Vec::new();
    let mut secret_applied = false;
    let mut deleted = false;
    for group in todo {
        let view = group_view(namespace, &group, &upstreams, &routes, &budgets);
        let owners = view.owners();
        let g = view.group(&owners);
        let (Some(cm), Some(deploy), Some(svc), Some(pdb)) =
            (desired_configmap(&g), desired_deployment(&g, &ctx.config.gateway), desired_service(&g), desired_pdb(&g))
        else {
            delete_group(ctx, namespace, &group).await?;
            deleted = true;
            synced.push(Synced { view, gateway: None });
            continue;
        };
        if !secret_applied {
            apply(&ctx.client, namespace, &desired_secret(namespace, &ctx.config.ledger_url)).await?;
            secret_applied = true;
        }
        apply(&ctx.client, namespace, &cm).await?;
        let deploy = apply(&ctx.client, namespace, &deploy).await?;
        apply(&ctx.client, namespace, &svc).await?;
        apply(&ctx.client, namespace, &pdb).await?;
        tracing::info!(namespace, group, routes = view.resolved.snapshot.routes.len(), "gateway group applied");
        synced.push(Synced { gateway: Some(gateway_state(&deploy)), view });
    }
    if deleted && live_groups.is_empty() {
        delete::<Secret>(&ctx.client, namespace, LEDGER_SECRET).await?;
        tracing::info!(namespace, "no route left in the namespace; ledger Secret deleted");
    }
    Ok(synced)
}

/// Deletes a group's Deployment, Service, PodDisruptionBudget and ConfigMap.
pub async fn delete_group(ctx: &Context, namespace: &str, group: &str) -> Result<(), Error> {
    let name = object_name(group);
    delete::<Deployment>(&ctx.client, namespace, &name).await?;
    delete::<Service>(&ctx.client, namespace, &name).await?;
    delete::<PodDisruptionBudget>(&ctx.client, namespace, &name).await?;
    delete::<ConfigMap>(&ctx.client, namespace, &name).await?;
    tracing::info!(namespace, group, "gateway group has no route to serve; its objects were deleted");
    Ok(())
}

/// Groups with a cached, operator-managed ConfigMap in `namespace`, and the uids that
/// ConfigMap names as owners.
fn rendered_groups(ctx: &Context, namespace: &str) -> BTreeMap<String, BTreeSet<String>> {
    ctx.stores
        .configmaps
        .state()
        .iter()
        .filter(|cm| cm.namespace().as_deref() == Some(namespace))
        .filter_map(|cm| {
            let group = cm.labels().get(GATEWAY_LABEL)?.clone();
            let owners =
                cm.owner_references().iter().filter(|o| o.kind == "ModelRoute").map(|o| o.uid.clone()).collect();
            Some((group, owners))
        })
        .collect()
}
