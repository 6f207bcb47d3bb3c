//! The Upstream reconciler: status only (Upstreams render nothing themselves; the
//! groups that use one are reconciled through the ModelRoute controller's watch).
//!
//! Per reconcile: `GET` each Secret the spec names (auth, gcp and aws credentials) to see
//! whether its keys exist, read the ledger, `POST` a `CircuitOpened` event on that
//! transition, and patch the status when it changed. Also run for every Upstream each status interval.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use sluice_crds::Upstream;

use super::{Context, patch_status};
use crate::error::Error;
use crate::metrics::Kind;
use crate::observe::observe;
use crate::status::upstream::{UpstreamInputs, transition, upstream_status};
use crate::view::upstream_problems;

/// Reconciles one Upstream's status.
pub async fn reconcile(upstream: Arc<Upstream>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(Kind::Upstream);
    let namespace = upstream.namespace().ok_or_else(|| Error::NoNamespace(upstream.name_any()))?;
    let key = format!("{namespace}/{}", upstream.name_any());
    let mut keys = BTreeSet::new();
    for name in upstream.spec.secret_names() {
        keys.extend(secret_keys(&ctx, &namespace, name).await?.into_iter().map(|k| (name.to_string(), k)));
    }
    let lookup = |_: &str, name: &str, key: &str| keys.contains(&(name.to_string(), key.to_string()));
    let problems = upstream_problems(&upstream, &lookup);
    let now = ctx.now();
    let observations = match observe(&ctx.ledger, &[], std::slice::from_ref(&key), now).await {
        Ok(o) => Some(o),
        Err(e) => {
            ctx.metrics.ledger_error();
            tracing::warn!(upstream = %key, error = %e, "reading the ledger failed; the status keeps its figures");
            None
        }
    };
    let inputs = UpstreamInputs {
        key: &key,
        generation: upstream.metadata.generation,
        problems: &problems,
        observations: observations.as_ref(),
        now,
    };
    let prev = upstream.status.as_ref();
    let next = upstream_status(prev, &inputs);
    if let Some(t) = transition(prev, &next) {
        ctx.publish(upstream.as_ref(), &t).await;
    }
    if prev != Some(&next) {
        patch_status(&ctx, Kind::Upstream, upstream.as_ref(), &next).await?;
    }
    Ok(Action::await_change())
}

/// The keys of Secret `name`, empty when it does not exist.
async fn secret_keys(ctx: &Context, namespace: &str, name: &str) -> Result<BTreeSet<String>, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = api.get_opt(name).await?;
    Ok(secret
        .map(|s| {
            let data = s.data.unwrap_or_default().into_keys();
            data.chain(s.string_data.unwrap_or_default().into_keys()).collect()
        })
        .unwrap_or_default())
}
