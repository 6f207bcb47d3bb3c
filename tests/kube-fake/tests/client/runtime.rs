//! kube-runtime's finalizer helper, owner-reference garbage collection, a real
//! `Controller`, and the request log.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use sluice_crds::{ModelRoute, Upstream};
use sluice_kube_fake::{FakeApiServer, Permission};
use sluice_ledger::testing::eventually;

use super::{cm, route};

#[tokio::test]
async fn kube_runtime_finalizer_adds_and_removes_its_finalizer_with_json_patches() {
    let fake = FakeApiServer::with_sluice_crds();
    let api: Api<Upstream> = Api::default_namespaced(fake.client());
    let up: Upstream = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream", "metadata": {"name": "u"},
        "spec": {"protocol": "openai", "baseUrl": "http://127.0.0.1:1/v1"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &up).await.unwrap();
    const NAME: &str = "sluice.dev/test-cleanup";
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let run = |obj: Upstream| {
        let seen = seen.clone();
        let api = api.clone();
        async move {
            finalizer(&api, NAME, Arc::new(obj), |ev| async move {
                seen.lock().unwrap().push(match ev {
                    Finalizer::Apply(_) => "apply".into(),
                    Finalizer::Cleanup(_) => "cleanup".into(),
                });
                Ok::<_, std::convert::Infallible>(Action::await_change())
            })
            .await
        }
    };
    // First pass: `test /metadata/finalizers == null` on a missing path, then `add`.
    run(api.get("u").await.unwrap()).await.expect("finalizer added");
    assert_eq!(api.get("u").await.unwrap().finalizers(), [NAME]);
    run(api.get("u").await.unwrap()).await.expect("apply");
    api.delete("u", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("u").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // Cleanup, then `test /metadata/finalizers/0 == NAME` + `remove`: the object goes.
    run(deleting).await.expect("cleanup");
    assert!(matches!(api.get("u").await, Err(kube::Error::Api(s)) if s.code == 404));
    assert_eq!(*seen.lock().unwrap(), ["apply", "cleanup"]);
    let patches: Vec<String> =
        fake.requests().iter().filter(|r| r.verb == "patch").map(|r| r.content_type.clone()).collect();
    assert_eq!(patches, ["application/json-patch+json", "application/json-patch+json"]);
}

#[tokio::test]
async fn deleting_an_owner_with_a_finalizer_waits_then_collects_its_configmap() {
    let fake = FakeApiServer::with_sluice_crds();
    let routes: Api<ModelRoute> = Api::default_namespaced(fake.client());
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let mut r = route("owner", "m");
    r.metadata.finalizers = Some(vec!["sluice.dev/hold".into()]);
    let owner = routes.create(&PostParams::default(), &r).await.unwrap();
    let mut child = cm("owned", &[("k", "v")]);
    child.metadata.owner_references =
        Some(vec![owner.controller_owner_ref(&()).expect("owner ref (the fake sets uids)")]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    cms.create(&PostParams::default(), &cm("unowned", &[])).await.unwrap();

    routes.delete("owner", &DeleteParams::default()).await.unwrap();
    let marked = routes.get("owner").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.generation, Some(2), "marking for deletion bumps generation, as the real server does");
    assert!(cms.get("owned").await.is_ok(), "dependents stay while the owner is only being deleted");

    // Adding a finalizer now is forbidden; removing the last one completes the deletion.
    let add = routes
        .patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["sluice.dev/hold", "x/y"]}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(add, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("no new finalizers")),
        "{add:?}"
    );
    routes
        .patch("owner", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert!(matches!(routes.get("owner").await, Err(kube::Error::Api(s)) if s.code == 404));
    assert!(
        matches!(cms.get("owned").await, Err(kube::Error::Api(s)) if s.code == 404),
        "the owned ConfigMap is collected"
    );
    assert!(cms.get("unowned").await.is_ok());

    // With two owners, the dependent survives the first and loses the dangling reference.
    let a = routes.create(&PostParams::default(), &route("a", "m")).await.unwrap();
    let b = routes.create(&PostParams::default(), &route("b", "m")).await.unwrap();
    let mut shared = cm("shared", &[]);
    shared.metadata.owner_references = Some(vec![a.owner_ref(&()).unwrap(), b.owner_ref(&()).unwrap()]);
    cms.create(&PostParams::default(), &shared).await.unwrap();
    routes.delete("a", &DeleteParams::default()).await.unwrap();
    let left = cms.get("shared").await.unwrap();
    assert_eq!(left.owner_references().iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["b"]);
    routes.delete("b", &DeleteParams::default()).await.unwrap();
    assert!(matches!(cms.get("shared").await, Err(kube::Error::Api(s)) if s.code == 404));

    // Orphan propagation keeps dependents and strips the reference.
    let c = routes.create(&PostParams::default(), &route("c", "m")).await.unwrap();
    let mut kept = cm("kept", &[]);
    kept.metadata.owner_references = Some(vec![c.owner_ref(&()).unwrap()]);
    cms.create(&PostParams::default(), &kept).await.unwrap();
    routes.delete("c", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get("kept").await.unwrap().metadata.owner_references.is_none());
}

#[tokio::test]
async fn a_controller_owning_configmaps_reconciles_against_the_fake() {
    let fake = FakeApiServer::with_sluice_crds();
    let client = fake.client();
    let routes: Api<ModelRoute> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());

    async fn reconcile(r: Arc<ModelRoute>, cms: Arc<Api<ConfigMap>>) -> Result<Action, kube::Error> {
        let mut cm = cm(&format!("{}-cfg", r.name_any()), &[("model", &r.spec.model)]);
        cm.metadata.owner_references = Some(vec![r.controller_owner_ref(&()).expect("uid")]);
        cms.patch(&cm.name_any(), &PatchParams::apply("test-operator").force(), &Patch::Apply(&cm)).await?;
        Ok(Action::await_change())
    }
    let controller = Controller::new(routes.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), Arc::new(cms.clone()))
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    routes.create(&PostParams::default(), &route("r1", "model-1")).await.unwrap();
    let made = eventually(Duration::from_secs(10), async || cms.get("r1-cfg").await.is_ok()).await;
    assert!(made, "the controller's ConfigMap was not made");
    let got = cms.get("r1-cfg").await.unwrap();
    assert_eq!(got.data.unwrap()["model"], "model-1");
    routes.patch("r1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"model": "model-2"}}))).await.unwrap();
    let updated = eventually(Duration::from_secs(10), async || {
        cms.get("r1-cfg").await.unwrap().data.unwrap()["model"] == "model-2"
    })
    .await;
    assert!(updated, "the controller did not update its ConfigMap");
    routes.delete("r1", &DeleteParams::default()).await.unwrap();
    assert!(matches!(cms.get("r1-cfg").await, Err(kube::Error::Api(s)) if s.code == 404), "collected with its owner");
    handle.abort();

    // What the controller needed, as RBAC rules.
    let perms = fake.permissions();
    let has = |g: &str, r: &str, v: &str| {
        perms.contains(&Permission { api_group: g.into(), resource: r.into(), verb: v.into() })
    };
    assert!(has("sluice.dev", "modelroutes", "list") && has("sluice.dev", "modelroutes", "watch"), "{perms:?}");
    assert!(
        has("", "configmaps", "list") && has("", "configmaps", "watch") && has("", "configmaps", "patch"),
        "{perms:?}"
    );
}

#[tokio::test]
async fn the_request_log_is_readable_over_http_and_in_rust() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "team-a");
    api.create(&PostParams::default(), &cm("x", &[])).await.unwrap();
    api.patch(
        "x",
        &PatchParams::apply("m"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}})),
    )
    .await
    .unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fake.client());
    assert!(ns.get("team-a").await.is_ok(), "namespaces are created on first use");

    let records = fake.requests();
    let create = records.iter().find(|r| r.verb == "create").expect("a create");
    assert_eq!(
        (
            create.method.as_str(),
            create.api_group.as_str(),
            create.resource.as_str(),
            create.namespace.as_str(),
            create.status
        ),
        ("POST", "", "configmaps", "team-a", 201)
    );
    let patch = records.iter().find(|r| r.verb == "patch").expect("a patch");
    assert_eq!((patch.name.as_str(), patch.field_manager.as_str()), ("x", "m"));
    assert_eq!(patch.content_type, "application/apply-patch+yaml");

    // The same log over HTTP, through the client.
    let req = http::Request::get("/_fake/requests").body(Vec::new()).unwrap();
    let over_http: Vec<sluice_kube_fake::RequestRecord> = fake.client().request(req).await.unwrap();
    assert_eq!(over_http.len(), records.len() + 1);
    let perms: Vec<String> = fake.permissions().iter().map(ToString::to_string).collect();
    assert_eq!(perms, ["\"\" configmaps create", "\"\" configmaps patch", "\"\" namespaces get"]);
}
