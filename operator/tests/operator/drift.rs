//! Drift repair: the operator with its real controllers against the stateful fake API
//! server. Every object it rendered for a route is deleted in turn, once the operator
//! is quiet (so that a reconcile already on its way cannot be what brings it back),
//! and comes back.

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
use serde_json::json;
use sluice_crds::{ModelRoute, Upstream};
use sluice_kube_fake::FakeApiServer;
use sluice_ledger::testing::eventually;
use sluice_operator::Config;

const NS: &str = "default";
const GROUP_OBJECT: &str = "sluice-gateway-default";
/// Repairs take one debounce (500 ms) and a reconcile; this is ample on a busy machine.
const REPAIR: Duration = Duration::from_secs(20);
/// How long no write may reach the API server for the operator to count as quiet (two
/// debounces).
const QUIET: Duration = Duration::from_secs(1);

/// Waits until the operator is quiet: its watches do not trigger on its own writes.
async fn settled(fake: &FakeApiServer) {
    let quiet = eventually(REPAIR, async || {
        fake.clear_requests();
        tokio::time::sleep(QUIET).await;
        !fake.requests().iter().any(|r| matches!(r.verb.as_str(), "create" | "patch" | "delete"))
    })
    .await;
    assert!(quiet, "the operator kept writing: {:#?}", fake.requests());
}

async fn uid<K>(api: &Api<K>, name: &str) -> Option<String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name).await.unwrap().and_then(|o| o.meta().uid.clone())
}

/// Deletes `name` and waits until the operator has created it anew (a new uid).
async fn deleted_comes_back<K>(fake: &FakeApiServer, client: &Client, name: &str)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    settled(fake).await;
    let api: Api<K> = Api::namespaced(client.clone(), NS);
    let kind = K::kind(&());
    let before = uid(&api, name).await.unwrap_or_else(|| panic!("no {kind} {name} to delete"));
    api.delete(name, &DeleteParams::background()).await.unwrap();
    let back = eventually(REPAIR, async || uid(&api, name).await.is_some_and(|u| u != before)).await;
    assert!(back, "the deleted {kind} {name} was not re-created");
}

#[tokio::test]
async fn every_deleted_gateway_object_comes_back() {
    let fake = FakeApiServer::with_sluice_crds();
    let client = fake.client();
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
    Api::<Upstream>::namespaced(client.clone(), NS).create(&PostParams::default(), &upstream).await.unwrap();
    Api::<ModelRoute>::namespaced(client.clone(), NS).create(&PostParams::default(), &route).await.unwrap();

    let mut config = Config::new("sqlite::memory:");
    config.status_interval = Duration::from_secs(30);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(sluice_operator::run_until(client.clone(), config, async move {
        let _ = stopped.await;
    }));

    let rendered = eventually(REPAIR, async || {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
        pdbs.get_opt(GROUP_OBJECT).await.unwrap().is_some()
    })
    .await;
    assert!(rendered, "the route's gateway group was never rendered");

    deleted_comes_back::<Service>(&fake, &client, GROUP_OBJECT).await;
    deleted_comes_back::<PodDisruptionBudget>(&fake, &client, GROUP_OBJECT).await;
    deleted_comes_back::<ConfigMap>(&fake, &client, GROUP_OBJECT).await;
    deleted_comes_back::<Deployment>(&fake, &client, GROUP_OBJECT).await;
    deleted_comes_back::<Secret>(&fake, &client, "sluice-ledger").await;

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), operator).await.expect("shutdown hung").unwrap().unwrap();
}
