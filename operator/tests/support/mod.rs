//! A scripted API server (tower-test) that pins the exact calls of a reconcile, and
//! contexts built on it with an in-memory ledger and a fixed clock.

#![allow(dead_code, reason = "each test binary uses a part of the support module")]
#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Request, Response};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::client::Body;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{Value, json};
use sluice_crds::{ErrorBudget, ModelRoute, Upstream};
use sluice_ledger::Ledger;
use sluice_operator::reconcile::{Context, Stores};
use sluice_operator::{Config, metrics::Metrics};

/// Query of every server-side apply.
pub const SSA: &str = "?&force=true&fieldManager=sluice-operator";
/// Content type of server-side apply.
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";
/// Content type of the finalizer patches.
pub const JSON_PATCH: &str = "application/json-patch+json";
/// The ledger URL the operator copies into gateway namespaces.
pub const LEDGER_URL: &str = "postgres://sluice:secret@ledger.test:5432/sluice";

/// 2025-05-01T12:00:30Z.
pub fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_746_100_830)
}

/// The unix minute of [`now`].
pub const NOW_MINUTE: i64 = 29_101_680;

/// One request as the fake API server saw it.
#[derive(Debug, Clone)]
pub struct Call {
    /// `GET`, `PATCH`, …
    pub method: String,
    /// Path and query, e.g. `/api/v1/namespaces/a/configmaps/x?&force=true&fieldManager=…`.
    pub uri: String,
    /// `content-type` header.
    pub content_type: String,
    /// JSON body (`Null` when empty).
    pub body: Value,
}

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The scripted API server.
pub struct ApiServer(Handle);

/// A client whose every request goes to the returned [`ApiServer`].
pub fn mock_client() -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer(handle))
}

impl ApiServer {
    /// Takes the next call, asserts its method and exact URI, and answers
    /// `reply(&call)` (status, JSON body).
    pub async fn expect(&mut self, method: &str, uri: &str, reply: impl FnOnce(&Call) -> (u16, Value)) -> Call {
        let (req, send) =
            self.0.next_request().await.unwrap_or_else(|| panic!("expected {method} {uri}, but the client is gone"));
        let method_seen = req.method().to_string();
        let uri_seen = req.uri().to_string();
        let content_type =
            req.headers().get(http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
        let call = Call { method: method_seen, uri: uri_seen, content_type, body };
        assert_eq!((call.method.as_str(), call.uri.as_str()), (method, uri), "unexpected call; body: {}", call.body);
        let (status, reply) = reply(&call);
        let response =
            Response::builder().status(status).body(Body::from(serde_json::to_vec(&reply).unwrap())).unwrap();
        send.send_response(response);
        call
    }

    /// Asserts that no call is pending (call after the reconcile returned).
    pub async fn assert_no_more_calls(mut self) {
        match tokio::time::timeout(Duration::from_millis(50), self.0.next_request()).await {
            Err(_) | Ok(None) => {}
            Ok(Some((req, _))) => panic!("unexpected extra call {} {}", req.method(), req.uri()),
        }
    }
}

/// Answers with the applied object as the API server would store it.
pub fn echo(call: &Call) -> (u16, Value) {
    let mut obj = call.body.clone();
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("x").to_string();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), json!(format!("uid-{name}")));
        meta.insert("resourceVersion".into(), json!("2"));
        meta.insert("generation".into(), json!(1));
    }
    (200, obj)
}

/// Answers a status patch with a whole object of the patched kind (as the API server
/// does), built from the URI and carrying the patched status.
pub fn status_echo(call: &Call) -> (u16, Value) {
    let parts: Vec<&str> = call.uri.split('?').next().unwrap().split('/').collect();
    // /apis/sluice.dev/v1alpha1/namespaces/<ns>/<plural>/<name>/status
    let (namespace, name) = (parts[5], parts[7]);
    let spec = match call.body["kind"].as_str().unwrap() {
        "ModelRoute" => json!({"model": "m", "candidates": [{"upstream": "u"}]}),
        "Upstream" => json!({"baseUrl": "https://u.example"}),
        _ => json!({"routes": ["r"], "objective": "99.9", "window": "30d"}),
    };
    let obj = json!({
        "apiVersion": call.body["apiVersion"],
        "kind": call.body["kind"],
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "resourceVersion": "3", "generation": 1},
        "spec": spec,
        "status": call.body["status"],
    });
    (200, obj)
}

/// Answers a Deployment apply with `available` available replicas.
pub fn deployment_with(available: i32) -> impl FnOnce(&Call) -> (u16, Value) {
    move |call| {
        let (code, mut obj) = echo(call);
        obj["status"] = json!({"replicas": 2, "availableReplicas": available});
        (code, obj)
    }
}

/// A `Status` answer (deletes, 404s).
pub fn status(code: u16, reason: &str) -> impl FnOnce(&Call) -> (u16, Value) {
    let reason = reason.to_string();
    move |_| {
        let status = if code < 300 { "Success" } else { "Failure" };
        (
            code,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status, "reason": reason, "code": code}),
        )
    }
}

/// Answers with a fixed object.
pub fn object(value: Value) -> impl FnOnce(&Call) -> (u16, Value) {
    move |_| (200, value)
}

fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

/// Filled, ready caches.
pub fn stores(
    routes: Vec<ModelRoute>,
    upstreams: Vec<Upstream>,
    budgets: Vec<ErrorBudget>,
    configmaps: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
) -> Stores {
    Stores {
        routes: store(routes),
        upstreams: store(upstreams),
        budgets: store(budgets),
        limits: store(Vec::new()),
        configmaps: store(configmaps),
        deployments: store(deployments),
    }
}

/// A context on `client` with an in-memory ledger and the clock at [`now`].
pub async fn context(client: Client, stores: Stores) -> (Arc<Context>, Ledger) {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let mut config = Config::new(LEDGER_URL);
    config.identity = Some("sluice-operator-0".into());
    config.gateway.image = "ghcr.io/sluice-dev/sluice-gateway:0.0.0-test".into();
    let ctx = Context::new(client, config, ledger.clone(), stores, Arc::new(Metrics::new())).with_clock(Arc::new(now));
    (Arc::new(ctx), ledger)
}

/// A managed ConfigMap of group `group` owned by `owners` (uids), as cached.
pub fn rendered_configmap(namespace: &str, group: &str, owners: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("sluice-gateway-{group}"),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "sluice-operator",
                "app.kubernetes.io/name": "sluice-gateway",
                "sluice.dev/gateway": group,
            },
            "ownerReferences": owners.iter().map(|(name, uid)| json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "name": name, "uid": uid,
            })).collect::<Vec<_>>(),
        },
        "data": {"snapshot.json": "{}"},
    }))
    .unwrap()
}
