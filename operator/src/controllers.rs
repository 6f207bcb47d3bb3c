//! The four controllers on kube-runtime, sharing one client and one [`Context`], and
//! the route status loop.
//!
//! | controller  | main stream (filter)                | also triggered by                                           |
//! |-------------|-------------------------------------|-------------------------------------------------------------|
//! | ModelRoute  | generation, finalizers, deletion    | Upstreams and ErrorBudgets (generation, deletes) mapped to the routes that name them; owned ConfigMaps (any change), Deployments (generation, availability), Services and PodDisruptionBudgets (spec, deletes) mapped to their owners; the managed ledger Secret (any change, deletes) mapped to the routes of its namespace |
//! | Upstream    | generation                          | Secrets (key set, deletes) mapped to the Upstreams using them; every status interval |
//! | ErrorBudget | generation                          | ModelRoutes (generation, deletion, deletes) mapped to the budgets naming them; every status interval |
//! | AccountLimit | generation, finalizers, deletion   | AccountLimits (generation, deletion, deletes) mapped to the others naming the same subject (a new owner takes over); every status interval |
//!
//! A list or watch the operator's RBAC does not allow is reported as such
//! ([`crate::forbidden`]) on every retry of the watcher's backoff.
//!
//! Each watch backs off on its own errors (the watcher's default backoff, 0.8 s doubling
//! up to 30 s); a controller never pauses all its watches for the error of one
//! ([`NoTriggerBackoff`]), so that after an apiserver restart or a cut connection every
//! watch resumes (or relists after a 410) within its own backoff.
//!
//! Every kind the operator renders is watched, so that drift is repaired within a
//! debounce: a deleted or edited gateway object triggers its routes, whose reconcile
//! applies it again. The filters keep status writes (a Deployment's replica counts
//! aside) from triggering anything.
//!
//! Route statuses are refreshed every status interval by [`route::refresh_statuses`],
//! which writes status without applying anything.
//!
//! Watches (all namespaces; with `--namespace ns`, `/namespaces/ns` is inserted before
//! the plural): each lists `GET <path>?&limit=500` then watches `GET <path>?&watch=true
//! &timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=<rv>`:
//! `/apis/sluice.dev/v1alpha1/modelroutes` (twice), `…/upstreams` (twice),
//! `…/errorbudgets` (twice), `…/accountlimits` (twice), `/api/v1/secrets`, and, with
//! `labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsluice-operator`, `/api/v1/configmaps`,
//! `/apis/apps/v1/deployments`, `/api/v1/services`,
//! `/apis/policy/v1/poddisruptionbudgets` and `/api/v1/secrets`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use sluice_crds::{AccountLimit, ErrorBudget, ModelRoute, Upstream};
use sluice_ledger::Ledger;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::forbidden::Forbidden;
use crate::metrics::{Kind, Metrics};
use crate::reconcile::{Context, Stores, budget, error_policy, limits, route, upstream};
use crate::render::MANAGED_SELECTOR;
use crate::triggers::{
    changes, deployment_availability, generation, resource_version, secret_keys, spec, spec_or_lifecycle,
};

/// Reconciles of one object closer together than this are merged.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// How long running reconciles may take to finish after a shutdown (well inside a pod's
/// default 30 s termination grace period).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The debounce for a status interval: a request arriving within the debounce restarts
/// it, so it must stay well below the interval or periodic reconciles would never run.
fn debounce(interval: Duration) -> Duration {
    DEBOUNCE.min(interval / 4)
}

/// The backoff of a controller's trigger streams: none (see the module docs).
///
/// kube-runtime's default pauses every trigger stream of a controller (its main watch and
/// every `watches`/`owns` watch, merged) after an error of any of them, for up to 30 s,
/// and resets only on an object coming through. The watches here already back off one by
/// one ([`events`]), and [`changes`] passes every error but drops the objects of a relist
/// that did not change, so that pause would grow with each watch's error and rarely reset:
/// after a kube-apiserver restart each watch's 410 paused all of a controller's watches
/// again, the watch caches the reconcilers and the status loop read (Deployments,
/// ConfigMaps) stayed stale for minutes and route statuses said `GatewayPending` for
/// Deployments that were running.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
}

/// An `Api` over all namespaces, or over the watched one.
fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch with the watcher's backoff; a list or watch refused for want of RBAC is
/// reported ([`Forbidden::report`]) each time it is retried.
fn events<K>(
    api: Api<K>,
    config: watcher::Config,
    metrics: &Arc<Metrics>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let metrics = metrics.clone();
    watcher(api, config).default_backoff().inspect(move |event| {
        if let Err(e) = event
            && let Some(f) = Forbidden::from_watch(e)
        {
            f.report(&metrics);
        }
    })
}

/// A future for `graceful_shutdown_on` (which needs it `Sync`).
fn stopped(token: &CancellationToken) -> impl Future<Output = ()> + Send + Sync + 'static {
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let token = token.clone();
    tokio::spawn(async move {
        token.cancelled().await;
        let _ = tx.send(true);
    });
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// Every `interval`, from the first tick on.
fn ticks(interval: Duration) -> impl Stream<Item = ()> + Send {
    let mut timer = tokio::time::interval(interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    stream::unfold(timer, |mut t| async move {
        t.tick().await;
        Some(((), t))
    })
}

/// Runs the controllers and the route status loop until `token` is cancelled.
pub async fn run(client: Client, config: Config, ledger: Ledger, metrics: Arc<Metrics>, token: CancellationToken) {
    let ns = config.namespace.clone();
    let ns = ns.as_deref();
    let managed = || watcher::Config::default().labels(MANAGED_SELECTOR);
    let all = watcher::Config::default;

    let (routes, routes_w) = reflector::store::<ModelRoute>();
    let (upstreams, upstreams_w) = reflector::store::<Upstream>();
    let (budgets, budgets_w) = reflector::store::<ErrorBudget>();
    let (limit_store, limits_w) = reflector::store::<AccountLimit>();
    let (configmaps, configmaps_w) = reflector::store::<ConfigMap>();
    let (deployments, deployments_w) = reflector::store::<Deployment>();
    let stores = Stores {
        routes: routes.clone(),
        upstreams: upstreams.clone(),
        budgets: budgets.clone(),
        limits: limit_store.clone(),
        configmaps,
        deployments,
    };
    let interval = config.status_interval;
    let ctx =
        Arc::new(Context::new(client.clone(), config, ledger, stores, metrics.clone()).with_shutdown(token.clone()));
    let controller_config = controller::Config::default().debounce(debounce(interval));

    let route_controller = Controller::for_stream(
        changes(events(api::<ModelRoute>(&client, ns), all(), &metrics).reflect(routes_w), spec_or_lifecycle, false),
        routes.clone(),
    )
    .watches_stream(changes(events(api::<Upstream>(&client, ns), all(), &metrics), generation, true), {
        let routes = routes.clone();
        move |u: Upstream| routes_naming_upstream(&routes, &u)
    })
    .watches_stream(changes(events(api::<ErrorBudget>(&client, ns), all(), &metrics), generation, true), {
        let routes = routes.clone();
        move |b: ErrorBudget| routes_named_by_budget(&routes, &b)
    })
    .owns_stream(changes(
        events(api::<ConfigMap>(&client, ns), managed(), &metrics).reflect(configmaps_w),
        resource_version,
        true,
    ))
    .owns_stream(changes(
        events(api::<Deployment>(&client, ns), managed(), &metrics).reflect(deployments_w),
        deployment_availability,
        true,
    ))
    .owns_stream(changes(events(api::<Service>(&client, ns), managed(), &metrics), spec::<Service>, true))
    .owns_stream(changes(
        events(api::<PodDisruptionBudget>(&client, ns), managed(), &metrics),
        spec::<PodDisruptionBudget>,
        true,
    ))
    // The ledger Secret has no owner (every group of the namespace shares it).
    .watches_stream(changes(events(api::<Secret>(&client, ns), managed(), &metrics), resource_version, true), {
        let routes = routes.clone();
        move |s: Secret| routes_in_namespace_of(&routes, &s)
    })
    .trigger_backoff(NoTriggerBackoff)
    .with_config(controller_config.clone())
    .graceful_shutdown_on(stopped(&token))
    .run(route::reconcile, error_policy(Kind::ModelRoute), ctx.clone())
    .for_each(|r| log_result(Kind::ModelRoute, r));

    let upstream_controller = Controller::for_stream(
        changes(events(api::<Upstream>(&client, ns), all(), &metrics).reflect(upstreams_w), generation, false),
        upstreams.clone(),
    )
    .watches_stream(changes(events(api::<Secret>(&client, ns), all(), &metrics), secret_keys, true), {
        let upstreams = upstreams.clone();
        move |s: Secret| upstreams_using_secret(&upstreams, &s)
    })
    .reconcile_all_on(ticks(interval))
    .trigger_backoff(NoTriggerBackoff)
    .with_config(controller_config.clone())
    .graceful_shutdown_on(stopped(&token))
    .run(upstream::reconcile, error_policy(Kind::Upstream), ctx.clone())
    .for_each(|r| log_result(Kind::Upstream, r));

    let budget_controller = Controller::for_stream(
        changes(events(api::<ErrorBudget>(&client, ns), all(), &metrics).reflect(budgets_w), generation, false),
        budgets.clone(),
    )
    .watches_stream(changes(events(api::<ModelRoute>(&client, ns), all(), &metrics), spec_or_lifecycle, true), {
        let budgets = budgets.clone();
        move |r: ModelRoute| budgets_naming_route(&budgets, &r)
    })
    .reconcile_all_on(ticks(interval))
    .trigger_backoff(NoTriggerBackoff)
    .with_config(controller_config.clone())
    .graceful_shutdown_on(stopped(&token))
    .run(budget::reconcile, error_policy(Kind::ErrorBudget), ctx.clone())
    .for_each(|r| log_result(Kind::ErrorBudget, r));

    let limit_controller = Controller::for_stream(
        changes(events(api::<AccountLimit>(&client, ns), all(), &metrics).reflect(limits_w), spec_or_lifecycle, false),
        limit_store.clone(),
    )
    .watches_stream(changes(events(api::<AccountLimit>(&client, ns), all(), &metrics), spec_or_lifecycle, true), {
        let limit_store = limit_store.clone();
        move |l: AccountLimit| limits::peers(&limit_store, &l)
    })
    .reconcile_all_on(ticks(interval))
    .trigger_backoff(NoTriggerBackoff)
    .with_config(controller_config)
    .graceful_shutdown_on(stopped(&token))
    .run(limits::reconcile, error_policy(Kind::AccountLimit), ctx.clone())
    .for_each(|r| log_result(Kind::AccountLimit, r));

    let status_loop = route_status_loop(ctx, interval, token.clone());
    tracing::info!(namespace = ns.unwrap_or("(all)"), "controllers started");
    let all =
        async { tokio::join!(route_controller, upstream_controller, budget_controller, limit_controller, status_loop) };
    // kube-runtime holds a controller's runner until its own watch cache has filled; a
    // SIGTERM before that (in the first moments, or while that list hangs) would make
    // its graceful shutdown wait for a cache that, the watches stopped, never fills.
    // Running reconciles get SHUTDOWN_GRACE to finish; then they are dropped.
    let grace = async {
        token.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        _ = all => tracing::info!("controllers stopped"),
        () = grace => tracing::warn!("controllers not stopped {}s after the shutdown; dropping them", SHUTDOWN_GRACE.as_secs()),
    }
}

async fn log_result<K: Resource, E: std::fmt::Display>(
    kind: Kind,
    result: Result<(ObjectRef<K>, controller::Action), E>,
) {
    match result {
        Ok((obj, _)) => tracing::debug!(kind = kind.as_str(), object = %obj, "reconciled"),
        // Reconcile errors were logged by the error policy; these are watch and queue errors.
        Err(e) => tracing::debug!(kind = kind.as_str(), error = %e, "controller"),
    }
}

async fn route_status_loop(ctx: Arc<Context>, interval: Duration, token: CancellationToken) {
    let mut ticks = std::pin::pin!(ticks(interval));
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            Some(()) = ticks.next() => {
                match route::refresh_statuses(&ctx).await {
                    Ok(n) => tracing::debug!(written = n, "route statuses refreshed"),
                    Err(e) => match e.forbidden() {
                        Some(f) => f.report(&ctx.metrics),
                        None => tracing::warn!(error = %e, "refreshing route statuses failed"),
                    },
                }
            }
        }
    }
}

/// Live routes in the Upstream's namespace with a candidate naming it.
pub fn routes_naming_upstream(routes: &Store<ModelRoute>, upstream: &Upstream) -> Vec<ObjectRef<ModelRoute>> {
    let (ns, name) = (upstream.namespace(), upstream.name_any());
    routes
        .state()
        .iter()
        .filter(|r| r.namespace() == ns && r.spec.candidates.iter().any(|c| c.upstream == name))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// Routes (cached) in the object's namespace.
pub fn routes_in_namespace_of<K: Resource>(routes: &Store<ModelRoute>, obj: &K) -> Vec<ObjectRef<ModelRoute>> {
    let ns = obj.namespace();
    routes.state().iter().filter(|r| r.namespace() == ns).map(|r| ObjectRef::from_obj(&**r)).collect()
}

/// Routes (cached) that the ErrorBudget names.
pub fn routes_named_by_budget(routes: &Store<ModelRoute>, budget: &ErrorBudget) -> Vec<ObjectRef<ModelRoute>> {
    let ns = budget.namespace();
    routes
        .state()
        .iter()
        .filter(|r| r.namespace() == ns && budget.spec.routes.contains(&r.name_any()))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// Budgets (cached) that name the route.
pub fn budgets_naming_route(budgets: &Store<ErrorBudget>, route: &ModelRoute) -> Vec<ObjectRef<ErrorBudget>> {
    let (ns, name) = (route.namespace(), route.name_any());
    budgets
        .state()
        .iter()
        .filter(|b| b.namespace() == ns && b.spec.routes.contains(&name))
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

/// Upstreams (cached) that read the Secret (auth, gcp or aws credentials).
pub fn upstreams_using_secret(upstreams: &Store<Upstream>, secret: &Secret) -> Vec<ObjectRef<Upstream>> {
    let (ns, name) = (secret.namespace(), secret.name_any());
    upstreams
        .state()
        .iter()
        .filter(|u| u.namespace() == ns && u.spec.secret_names().contains(&name.as_str()))
        .map(|u| ObjectRef::from_obj(&**u))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::{StreamExt, stream};
    use kube::runtime::utils::StreamBackoff;

    use super::NoTriggerBackoff;

    /// As a controller wraps its merged trigger streams: errors pass at once, nothing
    /// waits (kube-runtime's default would wait 0.8 s, then 1.6 s, then 3.2 s here).
    #[tokio::test]
    async fn errors_of_trigger_streams_never_pause_the_controller() {
        let items = stream::iter(vec![Err::<u32, u32>(1), Err(2), Err(3), Ok(4), Err(5), Ok(6)]);
        let got = tokio::time::timeout(
            Duration::from_secs(1),
            StreamBackoff::new(items, NoTriggerBackoff).collect::<Vec<_>>(),
        )
        .await
        .expect("the errors paused the stream");
        assert_eq!(got, vec![Err(1), Err(2), Err(3), Ok(4), Err(5), Ok(6)]);
    }
}
