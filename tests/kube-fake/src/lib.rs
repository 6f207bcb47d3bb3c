//! sluice-kube-fake: a small, stateful fake Kubernetes API server ("envtest-lite") for
//! tests that cannot have a real cluster.
//!
//! One [`FakeApiServer`] holds the state. It can be used
//! - in process: [`FakeApiServer::client`] returns a `kube::Client` whose transport is the
//!   axum [`Router`] itself (no sockets);
//! - on a socket: [`FakeApiServer::serve`] binds `127.0.0.1:0` and returns a [`Served`]
//!   whose [`Served::kubeconfig`] points the real `kubectl` (or the operator binary) at it.
//!   The `kube-fake` binary does this from the command line.
//!
//! What it implements: discovery (`/version`, `/api`, `/apis`, per group/version lists),
//! GET/LIST/WATCH (label and field selectors, resourceVersion replay, 410 when compacted,
//! bookmarks, `timeoutSeconds`), POST/PUT (409 on conflicts), PATCH (server-side apply
//! with minimal managedFields, JSON merge, strategic merge for built-ins, JSON patch),
//! the `/status` subresource, `generation`, finalizers, owner-reference garbage
//! collection, CRD registration with schema + CEL validation, `Table` output for
//! `kubectl get`, and a request log ([`FakeApiServer::requests`], `GET /_fake/requests`)
//! from which the RBAC permissions an operator used can be computed
//! ([`FakeApiServer::permissions`]).

pub mod error;
pub mod log;
pub mod merge;
pub mod proto;
pub mod resources;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
pub mod util;
pub mod validate;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde_json::Value;
use tokio::sync::watch;

pub use error::ApiError;
pub use log::{Permission, RequestRecord};
use server::{Shared, lock};
use store::{FieldValidation, WriteOpts};

/// A fake API server. Cheap to clone (clones share state).
#[derive(Clone, Default)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
}

impl FakeApiServer {
    /// An empty cluster: namespaces `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease`, the built-in kinds, no CRDs.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cluster with sluice's three CRDs installed.
    pub fn with_sluice_crds() -> Self {
        let fake = Self::new();
        for crd in sluice_crds::crds() {
            // The generated CRDs are valid by construction; a failure here is a bug that
            // the tests of this crate catch.
            if let Err(e) = fake.install_crd(&crd) {
                tracing::error!(error = ?e, "installing a sluice CRD failed");
            }
        }
        fake
    }

    /// Registers a CRD (as `kubectl apply -f crd.yaml` would).
    pub fn install_crd(
        &self,
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) -> Result<Value, ApiError> {
        let value = serde_json::to_value(crd).map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.put(value)
    }

    /// Creates or replaces any object (apiVersion, kind, metadata.name and, for namespaced
    /// kinds, metadata.namespace set) through the normal write path, validation included.
    /// Handy for seeding Secrets and the like.
    pub fn put(&self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let mut store = lock(&self.shared.store);
        let rt = store
            .find_kind(&api_version, &kind)
            .ok_or_else(|| ApiError::bad_request(format!("no resource type for {api_version} {kind}")))?;
        let ns = if rt.namespaced { util::meta_str(&obj, "namespace").to_string() } else { String::new() };
        let ns = if rt.namespaced && ns.is_empty() { "default".to_string() } else { ns };
        let name = util::meta_str(&obj, "name").to_string();
        let key = (rt.gvr(), ns.clone(), name);
        let old = store.get(&key).cloned();
        let mut obj = obj;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let opts = WriteOpts {
            scope: merge::Scope::Main { with_status: !rt.status_subresource },
            manager: "kube-fake".into(),
            apply: false,
            field_validation: FieldValidation::Strict,
            dry_run: false,
        };
        store.commit(&rt, &ns, old.as_ref(), obj, &opts).map(|w| w.object)
    }

    /// The axum router that is the API server.
    pub fn router(&self) -> Router {
        Router::new().fallback(server::handle).with_state(self.shared.clone())
    }

    /// A `kube::Client` talking to this fake in process (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// Serves on `addr` (use `127.0.0.1:0`) until [`Served::shutdown`] or drop.
    pub async fn serve(&self, addr: &str) -> std::io::Result<Served> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        *lock(&self.shared.address) = Some(local.to_string());
        let (stop, mut stopped) = watch::channel(false);
        let router = self.router();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
                tracing::error!(error = %e, "kube-fake server failed");
            }
        });
        Ok(Served { addr: local, stop, shared: self.shared.clone(), task: Some(task) })
    }

    /// Every request served so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// The distinct RBAC permissions `(apiGroup, resource[/subresource], verb)` that the
    /// logged resource requests needed.
    pub fn permissions(&self) -> BTreeSet<Permission> {
        log::permissions(lock(&self.shared.log).iter())
    }

    /// Like [`Self::permissions`], for the requests `keep` selects (e.g. by user agent, to
    /// leave out kubectl's own requests: `|r| !r.user_agent.starts_with("kubectl")`; kube-rs
    /// sends no User-Agent unless configured to).
    pub fn permissions_where(&self, keep: impl Fn(&RequestRecord) -> bool) -> BTreeSet<Permission> {
        log::permissions(lock(&self.shared.log).iter().filter(|r| keep(r)))
    }

    /// One stored object (`api_version` as in manifests, e.g. `v1`, `sluice.dev/v1alpha1`).
    pub fn object(&self, api_version: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let (group, version) = split_api_version(api_version);
        let store = lock(&self.shared.store);
        let rt = store.find_type(group, version, plural)?;
        let ns = if rt.namespaced { namespace } else { "" };
        store.get(&(rt.gvr(), ns.to_string(), name.to_string())).cloned()
    }

    /// Stored objects of one resource, optionally in one namespace.
    pub fn objects(&self, api_version: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let (group, version) = split_api_version(api_version);
        let store = lock(&self.shared.store);
        let Some(rt) = store.find_type(group, version, plural) else { return Vec::new() };
        store.list(&rt.gvr(), namespace).into_iter().cloned().collect()
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    /// Drops the watch history, so that a watch from any older resourceVersion gets
    /// `410 Gone` (as after etcd compaction) and clients must relist.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// How many changes the watch history keeps (default 10 000).
    pub fn set_history_limit(&self, n: usize) {
        lock(&self.shared.store).history_limit = n.max(1);
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default 30 s).
    pub fn set_bookmark_interval(&self, d: Duration) {
        lock(&self.shared.options).bookmark_interval = d;
    }
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// A kubeconfig for a fake served at `url` (plain HTTP, a dummy token, namespace `default`).
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-fake
  cluster:
    server: {url}
    insecure-skip-tls-verify: true
contexts:
- name: kube-fake
  context:
    cluster: kube-fake
    user: kube-fake
    namespace: default
current-context: kube-fake
users:
- name: kube-fake
  user:
    token: kube-fake-token
"
    )
}

/// A fake served on a socket.
pub struct Served {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server.
    pub fn kubeconfig(&self) -> String {
        kubeconfig(&self.url())
    }

    /// Writes [`Self::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// Ends the watches open now (in-process ones too: their clients re-watch), stops
    /// accepting, and waits (at most 5 s) for the server task.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.send_modify(|epoch| *epoch += 1);
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
