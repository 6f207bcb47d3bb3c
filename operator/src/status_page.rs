//! The status page of docs/design.md §10 on the operator's web port (chart
//! `statusPage.enabled`): `sluice-status` fed with every resource the operator can see
//! and the ledger.
//!
//! Every replica serves it, leader or not, so it keeps its own watch caches of the
//! three kinds and its own ledger connection instead of borrowing the controllers'
//! (which only the leader runs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use kube::Client;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use sluice_crds::manifests::Manifests;
use sluice_crds::resolve::resolve;
use sluice_crds::{ErrorBudget, ModelRoute, Upstream};
use sluice_ledger::Ledger;
use sluice_status::{Catalog, Source};
use tokio_util::sync::CancellationToken;

use crate::forbidden::Forbidden;
use crate::metrics::Metrics;
use crate::view::is_live;

/// The resources and the ledger, as the status page reads them.
pub struct OperatorSource {
    routes: Store<ModelRoute>,
    upstreams: Store<Upstream>,
    budgets: Store<ErrorBudget>,
    ledger: OnceLock<Ledger>,
    /// Set once every kind has been listed.
    ready: AtomicBool,
}

impl Source for OperatorSource {
    fn catalog(&self) -> Option<Catalog> {
        // Nothing to show until the first list of every kind has arrived.
        if !self.ready.load(Ordering::Relaxed) {
            return None;
        }
        let manifests = Manifests {
            upstreams: live(&self.upstreams),
            routes: live(&self.routes),
            budgets: live(&self.budgets),
            problems: Vec::new(),
        };
        // As for the gateways: a Secret's presence does not change what is served.
        let resolved = resolve(&manifests, &|_: &str, _: &str, _: &str| true);
        Some(Catalog::from_snapshot(&resolved.snapshot))
    }

    fn ledger(&self) -> Option<Ledger> {
        self.ledger.get().cloned()
    }
}

/// Starts the watches and the ledger connection the page reads, until `token` is
/// cancelled.
pub fn spawn(
    client: Client,
    namespace: Option<String>,
    ledger_url: String,
    token: CancellationToken,
    metrics: Arc<Metrics>,
) -> Arc<OperatorSource> {
    let (routes, routes_w) = reflector::store::<ModelRoute>();
    let (upstreams, upstreams_w) = reflector::store::<Upstream>();
    let (budgets, budgets_w) = reflector::store::<ErrorBudget>();
    let source =
        Arc::new(OperatorSource { routes, upstreams, budgets, ledger: OnceLock::new(), ready: AtomicBool::new(false) });
    let ns = namespace.as_deref();
    mirror(api(&client, ns), routes_w, token.clone(), metrics.clone());
    mirror(api(&client, ns), upstreams_w, token.clone(), metrics.clone());
    mirror(api(&client, ns), budgets_w, token.clone(), metrics);
    let listed = source.clone();
    tokio::spawn(async move {
        let all = async {
            listed.routes.wait_until_ready().await.is_ok()
                && listed.upstreams.wait_until_ready().await.is_ok()
                && listed.budgets.wait_until_ready().await.is_ok()
        };
        if all.await {
            listed.ready.store(true, Ordering::Relaxed);
        }
    });
    let connected = source.clone();
    tokio::spawn(async move {
        loop {
            match Ledger::connect(&ledger_url).await {
                Ok(ledger) => {
                    let _ = connected.ledger.set(ledger);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "status page: cannot reach the ledger; retrying in 5s")
                }
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
            }
        }
    });
    source
}

/// The cached objects of `store` that are not being deleted.
fn live<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + kube::ResourceExt + Clone + 'static,
{
    store.state().into_iter().filter(|o| is_live(o.as_ref())).map(|o| (*o).clone()).collect()
}

/// An `Api` over all namespaces, or over the watched one.
/// Keeps `writer`'s store in step with the resources `api` sees, until `token` is
/// cancelled; a list or watch refused for want of RBAC is reported.
fn mirror<K>(api: kube::Api<K>, writer: reflector::store::Writer<K>, token: CancellationToken, metrics: Arc<Metrics>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let stream = watcher(api, watcher::Config::default()).default_backoff().reflect(writer).inspect(move |event| {
        if let Err(e) = event
            && let Some(f) = Forbidden::from_watch(e)
        {
            f.report(&metrics);
        }
    });
    tokio::spawn(async move {
        tokio::select! {
            () = token.cancelled() => {}
            () = stream.for_each(|_| async {}) => {}
        }
    });
}

fn api<K>(client: &Client, namespace: Option<&str>) -> kube::Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    }
}
