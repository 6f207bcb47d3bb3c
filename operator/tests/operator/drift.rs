//! Drift repair: the operator with its real controllers against a real kube-apiserver
//! (`sluice_tests::controlplane`), authenticated as the chart's ServiceAccount with the chart's
//! RBAC. Every object it rendered for a route is deleted in turn, once the operator is
//! quiet (so that a reconcile already on its way cannot be what brings it back), and
//! comes back.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sluice_crds::{ModelRoute, Upstream};
use sluice_ledger::testing::eventually;
use sluice_operator::Config;
use sluice_tests::controlplane::ControlPlane;

const NS: &str = "default";
const GROUP_OBJECT: &str = "sluice-gateway-default";
/// Repairs take one debounce (500 ms) and a reconcile; this is ample on a busy machine.
const REPAIR: Duration = Duration::from_secs(20);
/// How long the operator may write nothing for it to count as quiet (two debounces).
const QUIET: Duration = Duration::from_secs(1);

/// The operator's writes (create, update, patch, delete) in the audit log since `offset`.
fn writes(cp: &ControlPlane, user: &str, offset: u64) -> Vec<Value> {
    cp.audit_events(offset)
        .into_iter()
        .filter(|e| e["user"]["username"] == user)
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete")))
        .collect()
}

/// Waits until the operator is quiet: its watches do not trigger on its own writes. The
/// apiserver's audit log shows every request it makes (kube-fake's request log did so
/// before).
async fn settled(cp: &ControlPlane, user: &str) {
    let mut last = Vec::new();
    let quiet = eventually(REPAIR, async || {
        let offset = cp.audit_offset();
        tokio::time::sleep(QUIET).await;
        last = writes(cp, user, offset);
        last.is_empty()
    })
    .await;
    let calls: Vec<String> =
        last.iter().map(|e| format!("{} {}", e["verb"], e["requestURI"].as_str().unwrap_or_default())).collect();
    assert!(quiet, "the operator kept writing: {calls:#?}");
}

async fn uid<K>(api: &Api<K>, name: &str) -> Option<String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name).await.unwrap().and_then(|o| o.meta().uid.clone())
}

/// Deletes `name` (as the admin) and waits until the operator has created it anew (a new uid).
async fn deleted_comes_back<K>(cp: &ControlPlane, user: &str, name: &str)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    settled(cp, user).await;
    let api: Api<K> = Api::namespaced(cp.client(), NS);
    let kind = K::kind(&());
    let before = uid(&api, name).await.unwrap_or_else(|| panic!("no {kind} {name} to delete"));
    api.delete(name, &DeleteParams::background()).await.unwrap();
    let back = eventually(REPAIR, async || uid(&api, name).await.is_some_and(|u| u != before)).await;
    assert!(back, "the deleted {kind} {name} was not re-created");
}

#[tokio::test]
async fn every_deleted_gateway_object_comes_back() {
    let Some(cp) = ControlPlane::start().await.unwrap() else { return };
    cp.install_sluice_crds().await.unwrap();
    let operator_identity = cp.chart_operator("sluice-system").await.unwrap();
    let admin: Client = cp.client();
    let upstream: Upstream = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream", "metadata": {"name": "east"},
        "spec": {"protocol": "openai", "baseUrl": "http://127.0.0.1:1/v1"},
    }))
    .unwrap();
    let route: ModelRoute = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "metadata": {"name": "chat"},
        "spec": {"model": "chat", "candidates": [{"upstream": "east"}]},
    }))
    .unwrap();
    Api::<Upstream>::namespaced(admin.clone(), NS).create(&PostParams::default(), &upstream).await.unwrap();
    Api::<ModelRoute>::namespaced(admin.clone(), NS).create(&PostParams::default(), &route).await.unwrap();

    let mut config = Config::new("sqlite::memory:");
    config.status_interval = Duration::from_secs(30);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(sluice_operator::run_until(operator_identity.client.clone(), config, async move {
        let _ = stopped.await;
    }));

    let rendered = eventually(REPAIR, async || {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), NS);
        pdbs.get_opt(GROUP_OBJECT).await.unwrap().is_some()
    })
    .await;
    assert!(rendered, "the route's gateway group was never rendered");

    let user = operator_identity.username.as_str();
    // The audit log records the operator (else `settled` would wait for nothing).
    assert!(!writes(&cp, user, 0).is_empty(), "no write of {user} in the audit log");
    deleted_comes_back::<Service>(&cp, user, GROUP_OBJECT).await;
    deleted_comes_back::<PodDisruptionBudget>(&cp, user, GROUP_OBJECT).await;
    deleted_comes_back::<ConfigMap>(&cp, user, GROUP_OBJECT).await;
    deleted_comes_back::<Deployment>(&cp, user, GROUP_OBJECT).await;
    deleted_comes_back::<Secret>(&cp, user, "sluice-ledger").await;

    // With exactly the chart's rules, the authorizer refused it nothing.
    let refused: Vec<Value> = cp
        .audit_events(0)
        .into_iter()
        .filter(|e| e["user"]["username"] == user && e["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .collect();
    assert!(refused.is_empty(), "the chart's RBAC refused the operator: {refused:#?}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), operator).await.expect("shutdown hung").unwrap().unwrap();
}
