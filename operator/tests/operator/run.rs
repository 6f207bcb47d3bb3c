//! `run_until` end to end against a minimal in-process API server (an axum Router as
//! the client's service): the CRD check, every list and watch the controllers open,
//! one Upstream reconciled through the real kube-runtime Controller, a clean shutdown.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_ledger::testing::eventually;
use sluice_operator::Config;

type Seen = Arc<Mutex<Vec<String>>>;

fn list_kind(path: &str) -> (&'static str, &'static str) {
    let plural = path.rsplit('/').next().unwrap_or_default();
    match plural {
        "modelroutes" => ("sluice.dev/v1alpha1", "ModelRouteList"),
        "upstreams" => ("sluice.dev/v1alpha1", "UpstreamList"),
        "errorbudgets" => ("sluice.dev/v1alpha1", "ErrorBudgetList"),
        "accountlimits" => ("sluice.dev/v1alpha1", "AccountLimitList"),
        "secrets" => ("v1", "SecretList"),
        "configmaps" => ("v1", "ConfigMapList"),
        "deployments" => ("apps/v1", "DeploymentList"),
        "services" => ("v1", "ServiceList"),
        "poddisruptionbudgets" => ("policy/v1", "PodDisruptionBudgetList"),
        _ => ("v1", "List"),
    }
}

fn upstream() -> Value {
    json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream",
        "metadata": {"name": "east", "namespace": "team-a", "uid": "u1", "resourceVersion": "1", "generation": 1},
        "spec": {"baseUrl": "https://east.example/v1"},
    })
}

async fn fake(seen: Seen, req: Request) -> Response {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    seen.lock().unwrap().push(format!("{method} {uri}"));
    let path = uri.split('?').next().unwrap_or_default().to_string();
    if uri.contains("watch=true") {
        // A watch that never sends an event (until the client goes away).
        return Response::new(Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()));
    }
    let json = if method == "PATCH" && path.ends_with("/status") {
        let bytes = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        let mut obj = upstream();
        obj["status"] = patch["status"].clone();
        obj
    } else {
        let (api_version, kind) = list_kind(&path);
        let items = if kind == "UpstreamList" { vec![upstream()] } else { vec![] };
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
    };
    Response::new(Body::from(serde_json::to_vec(&json).unwrap()))
}

#[tokio::test]
async fn the_operator_lists_and_watches_everything_reconciles_and_stops_cleanly() {
    let seen: Seen = Arc::default();
    let app = Router::new().fallback({
        let seen = seen.clone();
        move |req: Request| fake(seen.clone(), req)
    });
    let client = kube::Client::new(app, "default");
    let mut config = Config::new("sqlite::memory:");
    config.status_interval = Duration::from_secs(30);
    config.listen = Some("127.0.0.1:0".parse().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(sluice_operator::run_until(client, config, async move {
        let _ = stopped.await;
    }));

    // Wait until the Upstream's status was written through the Controller.
    let patched = || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|c| c.starts_with("PATCH /apis/sluice.dev/v1alpha1/namespaces/team-a/upstreams/east/status"))
    };
    let written = eventually(Duration::from_secs(5), async || patched()).await;
    assert!(written, "no status patch; calls: {:#?}", seen.lock().unwrap());
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), operator).await.expect("shutdown hung").unwrap();
    result.unwrap();

    let calls = seen.lock().unwrap().clone();
    let has = |call: &str| calls.iter().any(|c| c == call);
    for crd in ["modelroutes", "upstreams", "errorbudgets", "accountlimits"] {
        assert!(has(&format!("GET /apis/sluice.dev/v1alpha1/{crd}?&limit=1")), "CRD check of {crd}: {calls:#?}");
        let lists = calls.iter().filter(|c| *c == &format!("GET /apis/sluice.dev/v1alpha1/{crd}?&limit=500")).count();
        assert_eq!(lists, 2, "{crd} is watched twice (own controller and a trigger): {calls:#?}");
    }
    let selector = "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsluice-operator";
    for owned in [
        "/api/v1/configmaps",
        "/apis/apps/v1/deployments",
        "/api/v1/services",
        "/apis/policy/v1/poddisruptionbudgets",
        "/api/v1/secrets",
    ] {
        assert!(has(&format!("GET {owned}?&{selector}&limit=500")), "{owned} is watched for drift: {calls:#?}");
    }
    assert!(has("GET /api/v1/secrets?&limit=500"), "{calls:#?}");
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("GET /api/v1/secrets?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true")),
        "{calls:#?}"
    );
}

/// The API server's answer to a call the authorizer refused.
fn forbidden(resource: &str, verb: &str) -> Response {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": format!("{resource} is forbidden: User \"system:serviceaccount:ops:sluice-operator\" cannot {verb} resource \"{resource}\" in API group \"sluice.dev\" at the cluster scope"),
        "details": {"group": "sluice.dev", "kind": resource},
    });
    let mut resp = Response::new(Body::from(serde_json::to_vec(&status).unwrap()));
    *resp.status_mut() = http::StatusCode::FORBIDDEN;
    resp
}

/// What the fake API server does with one call instead of answering it.
#[derive(Clone, Copy)]
enum Instead {
    /// Refuses it as the authorizer would (`forbidden`), recorded as `refused`.
    Refuse,
    /// Never answers it, recorded as `held`.
    Hold,
}

/// The operator against the fake API server, which treats a call to `uri` as `instead`
/// says; returns the channel that stops it and its task.
fn operator_with(
    seen: &Seen,
    uri: &'static str,
    instead: Instead,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), sluice_operator::Error>>) {
    let app = Router::new().fallback({
        let seen = seen.clone();
        move |req: Request| {
            let seen = seen.clone();
            async move {
                if *req.uri() == uri {
                    match instead {
                        Instead::Refuse => {
                            seen.lock().unwrap().push("refused".into());
                            return forbidden("modelroutes", "list");
                        }
                        Instead::Hold => {
                            seen.lock().unwrap().push("held".into());
                            std::future::pending::<()>().await;
                        }
                    }
                }
                fake(seen, req).await
            }
        }
    });
    let client = kube::Client::new(app, "default");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(sluice_operator::run_until(client, Config::new("sqlite::memory:"), async move {
        let _ = stopped.await;
    }));
    (stop, operator)
}

#[tokio::test]
async fn a_start_up_call_refused_for_want_of_rbac_is_retried_not_fatal() {
    let seen: Seen = Arc::default();
    let (stop, operator) = operator_with(&seen, "/apis/sluice.dev/v1alpha1/modelroutes?&limit=1", Instead::Refuse);
    // Refused, then retried (every 5 s): the operator neither exits nor goes on without it.
    let refusals = || seen.lock().unwrap().iter().filter(|c| *c == "refused").count();
    assert!(
        eventually(Duration::from_secs(10), async || refusals() >= 2).await,
        "not retried: {:#?}",
        seen.lock().unwrap()
    );
    assert!(!operator.is_finished(), "the operator exited on a refused start-up call");
    assert!(
        !seen.lock().unwrap().iter().any(|c| c.contains("limit=500")),
        "the controllers started without the CRD check"
    );
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), operator).await.expect("shutdown hung").unwrap();
    result.unwrap();
}

#[tokio::test]
async fn a_shutdown_before_the_watch_caches_filled_does_not_hang() {
    // The ModelRoute list never answers: that controller's runner waits for its cache,
    // which after the shutdown never fills; the operator still stops, after its grace.
    let seen: Seen = Arc::default();
    let (stop, operator) = operator_with(&seen, "/apis/sluice.dev/v1alpha1/modelroutes?&limit=500", Instead::Hold);
    let held = || seen.lock().unwrap().iter().any(|c| c == "held");
    assert!(eventually(Duration::from_secs(5), async || held()).await, "the controllers never listed ModelRoutes");
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(15), operator).await.expect("shutdown hung").unwrap();
    result.unwrap();
}
