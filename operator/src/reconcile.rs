//! The reconcilers and what they share: [`Context`] (one client, the ledger, the watch
//! caches, the event recorder, metrics) and the API helpers they call.
//!
//! - [`route`]: a ModelRoute → its (namespace, gateway group): render, apply with
//!   server-side apply, delete orphaned groups, write the group's route statuses.
//! - [`upstream`]: an Upstream → its status (and `CircuitOpened` events).
//! - [`budget`]: an ErrorBudget → its status (and `BudgetBurning`/`BudgetExhausted`).
//! - [`limits`]: an AccountLimit → its subject's limits in the ledger, and its status.
//!
//! Every write is a server-side apply with field manager `sluice-operator` and force;
//! status goes through the status subresource, so it never bumps `generation` and the
//! generation-filtered watches never see it. Reads come from the watch caches.
//!
//! # API calls (`SSA` = `?&force=true&fieldManager=sluice-operator`, content type
//! `application/apply-patch+yaml`, JSON body with apiVersion and kind)
//!
//! ModelRoute `r` in namespace `ns`, group `G` (objects named `sluice-gateway-G`):
//! 1. without the finalizer: `PATCH /apis/sluice.dev/v1alpha1/namespaces/ns/modelroutes/r?`
//!    (`application/json-patch+json`: test `/metadata/finalizers` null, add
//!    `["sluice.dev/gateway-config"]`; or test the list, add `/-`), and nothing else;
//! 2. `PATCH /api/v1/namespaces/ns/secrets/sluice-ledger` SSA;
//! 3. `PATCH /api/v1/namespaces/ns/configmaps/sluice-gateway-G` SSA,
//!    `PATCH /apis/apps/v1/namespaces/ns/deployments/sluice-gateway-G` SSA (its answer's
//!    `status.availableReplicas` feeds `Ready`),
//!    `PATCH /api/v1/namespaces/ns/services/sluice-gateway-G` SSA,
//!    `PATCH /apis/policy/v1/namespaces/ns/poddisruptionbudgets/sluice-gateway-G` SSA;
//!    or, when G serves no route, `DELETE …/deployments/…?`, `…/services/…?`,
//!    `…/poddisruptionbudgets/…?`, `…/configmaps/…?` (body `propagationPolicy:
//!    Background`; 404 is fine); step 3 again for every other group of `ns` whose
//!    managed ConfigMap is stale (owners ≠ its live routes) or orphaned;
//! 4. `DELETE /api/v1/namespaces/ns/secrets/sluice-ledger?` when a group was deleted and
//!    no live route is left in `ns`;
//! 5. `PATCH /apis/sluice.dev/v1alpha1/namespaces/ns/modelroutes/X/status` SSA for every
//!    route `X` of the groups of step 3 whose status changed;
//! 6. being deleted: 2–5 without `r`, then `PATCH …/modelroutes/r?` (json-patch: test
//!    `/metadata/finalizers/i`, remove it).
//!
//! Upstream `u`: `GET /api/v1/namespaces/ns/secrets/<spec.auth.secretRef.name>` (only
//! with `spec.auth`; 404 means missing), `POST /apis/events.k8s.io/v1/namespaces/ns/events?`
//! on `CircuitOpened` (a repeat within 6 minutes is a merge `PATCH …/events/<name>?`),
//! `PATCH …/upstreams/u/status` SSA when the status changed.
//!
//! ErrorBudget `b`: events as above (`BudgetBurning`, `BudgetExhausted`), then
//! `PATCH …/errorbudgets/b/status` SSA (every time: `lastEvaluated` moves).
//!
//! AccountLimit `l`: without the finalizer, a JSON `PATCH …/accountlimits/l?` adding
//! `sluice.dev/limits` (as for routes), and nothing else; then the ledger (no API call),
//! `POST …/events?` on `LimitsApplied`, `Conflict`, `UnknownAccount`, `UnknownKey`, and
//! `PATCH …/accountlimits/l/status` SSA when the status changed; being deleted, the
//! ledger, then the JSON `PATCH …/accountlimits/l?` removing the finalizer.
//!
//! Watches and start-up calls are listed in [`crate::controllers`] and [`crate::run`].

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_crds::{AccountLimit, ErrorBudget, ModelRoute, Upstream};
use sluice_ledger::Ledger;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::Error;
use crate::forbidden::Forbidden;
use crate::metrics::{Kind, Metrics};
use crate::render::FIELD_MANAGER;
use crate::status::Transition;

pub mod budget;
pub mod group;
pub mod limits;
pub mod route;
pub mod upstream;

/// How long a reconcile waits for the watch caches to fill.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// A clock, injectable so that tests get fixed timestamps.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The watch caches the reconcilers read (filled by the controllers' watchers).
#[derive(Clone)]
pub struct Stores {
    /// ModelRoutes.
    pub routes: Store<ModelRoute>,
    /// Upstreams.
    pub upstreams: Store<Upstream>,
    /// ErrorBudgets.
    pub budgets: Store<ErrorBudget>,
    /// AccountLimits.
    pub limits: Store<AccountLimit>,
    /// ConfigMaps labelled `app.kubernetes.io/managed-by=sluice-operator`.
    pub configmaps: Store<ConfigMap>,
    /// Deployments labelled `app.kubernetes.io/managed-by=sluice-operator`.
    pub deployments: Store<Deployment>,
}

impl Stores {
    /// Waits until every cache has been filled once (so that nothing is judged missing
    /// just because its watcher has not listed yet); gives up after 30 s (a watch that
    /// cannot list, e.g. for want of RBAC, fails the reconcile instead of hanging it).
    pub async fn ready(&self) -> Result<(), Error> {
        let all = async {
            self.routes.wait_until_ready().await?;
            self.upstreams.wait_until_ready().await?;
            self.budgets.wait_until_ready().await?;
            self.limits.wait_until_ready().await?;
            self.configmaps.wait_until_ready().await?;
            self.deployments.wait_until_ready().await
        };
        match tokio::time::timeout(CACHE_WAIT, all).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Error::StoreClosed),
            Err(_) => Err(Error::CachesNotReady),
        }
    }

    /// Cached routes, cloned.
    pub fn routes(&self) -> Vec<ModelRoute> {
        self.routes.state().iter().map(|r| (**r).clone()).collect()
    }

    /// Cached upstreams, cloned.
    pub fn upstreams(&self) -> Vec<Upstream> {
        self.upstreams.state().iter().map(|u| (**u).clone()).collect()
    }

    /// Cached budgets, cloned.
    pub fn budgets(&self) -> Vec<ErrorBudget> {
        self.budgets.state().iter().map(|b| (**b).clone()).collect()
    }
}

/// Everything the reconcilers share.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Operator settings.
    pub config: Config,
    /// The ledger (rollups, heartbeats).
    pub ledger: Ledger,
    /// Watch caches.
    pub stores: Stores,
    /// Event publisher (events.k8s.io/v1).
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Now.
    pub clock: Clock,
    /// Cancelled when the operator shuts down: a reconcile waiting for the caches gives up.
    pub shutdown: CancellationToken,
}

impl Context {
    /// A context with the system clock; events are reported as `sluice-operator`
    /// (instance: the pod name when leader election knows it).
    pub fn new(client: Client, config: Config, ledger: Ledger, stores: Stores, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: config.identity.clone() };
        let recorder = Recorder::new(client.clone(), reporter);
        Context {
            client,
            config,
            ledger,
            stores,
            recorder,
            metrics,
            clock: Arc::new(SystemTime::now),
            shutdown: CancellationToken::new(),
        }
    }

    /// Sets the token cancelled on shutdown.
    pub fn with_shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// [`Stores::ready`], given up at once on shutdown ([`Error::StoreClosed`]): a
    /// watch that cannot list (for want of RBAC) must not hold a SIGTERM up for 30 s
    /// while the controllers wait for their running reconciles.
    pub async fn caches_ready(&self) -> Result<(), Error> {
        tokio::select! {
            () = self.shutdown.cancelled() => Err(Error::StoreClosed),
            r = self.stores.ready() => r,
        }
    }

    /// Replaces the clock.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Now, by the context's clock.
    pub fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// Publishes an event about `obj`; a failure is logged, not returned (events are
    /// best effort and must not fail a reconcile).
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, transition: &Transition) {
        let event = Event {
            type_: if transition.warning { EventType::Warning } else { EventType::Normal },
            reason: transition.reason.into(),
            note: Some(transition.note.clone()),
            action: "StatusChanged".into(),
            secondary: None,
        };
        match self.recorder.publish(&event, &obj.object_ref(&())).await {
            Ok(()) => self.metrics.event(transition.reason),
            Err(e) => match Forbidden::from_kube(&e) {
                Some(f) => f.report(&self.metrics),
                None => tracing::warn!(error = %e, reason = transition.reason, "publishing an event failed"),
            },
        }
    }
}

/// Server-side applies `obj` (force, field manager `sluice-operator`); returns what the
/// API server answered.
pub async fn apply<K>(client: &Client, namespace: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = obj.meta().name.clone().unwrap_or_default();
    Ok(api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await?)
}

/// Deletes `name` (background propagation); a missing object is not an error.
pub async fn delete<K>(client: &Client, namespace: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Server-side applies `status` to `obj`'s status subresource.
pub async fn patch_status<K, S>(ctx: &Context, kind: Kind, obj: &K, status: &S) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let namespace = obj.namespace().ok_or_else(|| Error::NoNamespace(obj.name_any()))?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(&obj.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await?;
    ctx.metrics.status_write(kind);
    Ok(())
}

/// What every controller does on a failed reconcile: count it, log it (a refusal for
/// want of RBAC is reported as such: [`Forbidden::report`]), retry in 15 s.
pub fn error_policy<K: ResourceExt>(kind: Kind) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |obj, error, ctx| {
        ctx.metrics.failure(kind, error.kind());
        match error.forbidden() {
            Some(f) => {
                f.report(&ctx.metrics);
                tracing::warn!(kind = kind.as_str(), name = %obj.name_any(), namespace = ?obj.namespace(), verb = %f.verb, resource = %f.qualified_resource(), "reconcile refused for want of RBAC; retrying in 15s");
            }
            None => {
                tracing::warn!(kind = kind.as_str(), name = %obj.name_any(), namespace = ?obj.namespace(), %error, "reconcile failed; retrying in 15s");
            }
        }
        Action::requeue(Duration::from_secs(15))
    }
}
