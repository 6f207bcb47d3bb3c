//! kube-rs against the fake in process (`kube::Client::new(router, "default")`): CRUD,
//! watches, server-side apply, the status subresource, generation, kube-runtime's
//! finalizer helper, garbage collection, validation, 410 after compaction, a real
//! `Controller`, and the request log.
#![expect(clippy::expect_used, reason = "tests: a panic is how a test reports")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sluice_crds::{ModelRoute, Upstream};
use sluice_kube_fake::{FakeApiServer, Permission};
use sluice_ledger::testing::eventually;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

fn route(name: &str, model: &str) -> ModelRoute {
    serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": name},
        "spec": {"model": model, "candidates": [{"upstream": "a", "weight": 10}]},
    }))
    .expect("a ModelRoute")
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[tokio::test]
async fn create_get_list_and_a_watch_sees_added_modified_deleted() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let list = api.list(&ListParams::default()).await.unwrap();
    assert!(list.items.is_empty());
    let rv = list.metadata.resource_version.clone().expect("lists carry a resourceVersion");
    let mut events = api.watch(&WatchParams::default().timeout(20), &rv).await.unwrap().boxed();

    let created = api.create(&PostParams::default(), &cm("a", &[("k", "1")])).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let conflict = api.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert!(
        matches!(conflict, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{conflict:?}"
    );

    let mut changed = created.clone();
    changed.data = Some(BTreeMap::from([("k".into(), "2".into())]));
    let replaced = api.replace("a", &PostParams::default(), &changed).await.unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    // The old resourceVersion now conflicts.
    let stale = api.replace("a", &PostParams::default(), &changed).await.unwrap_err();
    assert!(matches!(stale, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"), "{stale:?}");

    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "2");
    api.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    let mut labelled = cm("c", &[]);
    labelled.metadata.labels = Some(BTreeMap::from([("app".into(), "x".into())]));
    api.create(&PostParams::default(), &labelled).await.unwrap();
    let names: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let selected = api.list(&ListParams::default().labels("app=x")).await.unwrap();
    assert_eq!(selected.items.len(), 1);
    let by_name = api.list(&ListParams::default().fields("metadata.name=b")).await.unwrap();
    assert_eq!(by_name.items[0].name_any(), "b");
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(matches!(api.get("a").await, Err(kube::Error::Api(s)) if s.code == 404));

    let mut seen = Vec::new();
    while seen.len() < 5 {
        let ev = within("watch events", events.try_next()).await.unwrap().expect("stream open");
        seen.push(match ev {
            WatchEvent::Added(o) => format!("ADDED {}", o.name_any()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.name_any()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.name_any()),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        });
    }
    assert_eq!(seen, ["ADDED a", "MODIFIED a", "ADDED b", "ADDED c", "DELETED a"]);
}

#[tokio::test]
async fn a_kube_runtime_watcher_sees_changes_and_relists_after_410() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(fake.client());
    api.create(&PostParams::default(), &cm("before", &[])).await.unwrap();
    // Watches end after 1 s (timeoutSeconds), so the watcher re-watches from its last resourceVersion.
    let mut stream = watcher(api.clone(), watcher::Config::default().timeout(1)).applied_objects().boxed();
    assert_eq!(within("initial list", stream.try_next()).await.unwrap().unwrap().name_any(), "before");
    api.create(&PostParams::default(), &cm("after", &[])).await.unwrap();
    assert_eq!(within("a watched create", stream.try_next()).await.unwrap().unwrap().name_any(), "after");

    // A watch from a compacted resourceVersion gets a 410 ERROR event.
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(fake.client());
    let mut s = k8s_openapi::api::core::v1::Secret::default();
    s.metadata.name = Some("bump".into());
    secrets.create(&PostParams::default(), &s).await.unwrap();
    fake.compact();
    let mut old = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match within("410", old.try_next()).await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // The running watcher hits the same 410 on its next re-watch, relists, and so
    // reports the existing objects again.
    let relisted = within("a relist after 410", async {
        let mut names = Vec::new();
        while names.len() < 2 {
            match stream.next().await {
                Some(Ok(o)) => names.push(o.name_any()),
                Some(Err(_)) => {} // the 410, surfaced as a watcher error
                None => break,
            }
        }
        names
    })
    .await;
    assert_eq!(relisted, ["after", "before"]);
    let watches = fake.requests().iter().filter(|r| r.verb == "watch").count();
    assert!(watches >= 3, "initial watch, the 410'd re-watch, and the watch after the relist: {watches}");
}

#[tokio::test]
async fn server_side_apply_creates_merges_removes_and_detects_conflicts() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let apply =
        |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data});

    // Create if missing.
    let a =
        api.patch("cfg", &PatchParams::apply("op-a"), &Patch::Apply(apply(json!({"x": "1", "y": "2"})))).await.unwrap();
    assert_eq!(a.metadata.generation, Some(1));
    let managers: Vec<String> = a.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert_eq!(managers, ["op-a"]);
    // A second manager's fields merge in.
    let b = api.patch("cfg", &PatchParams::apply("op-b"), &Patch::Apply(apply(json!({"z": "3"})))).await.unwrap();
    assert_eq!(
        b.data.unwrap(),
        BTreeMap::from([("x".into(), "1".into()), ("y".into(), "2".into()), ("z".into(), "3".into())])
    );
    // Re-applying without `y` removes it (op-a owned it alone); op-b's `z` stays.
    let c = api.patch("cfg", &PatchParams::apply("op-a"), &Patch::Apply(apply(json!({"x": "1"})))).await.unwrap();
    assert_eq!(c.data.clone().unwrap(), BTreeMap::from([("x".into(), "1".into()), ("z".into(), "3".into())]));
    // An identical apply is a no-op: same resourceVersion.
    let same = api.patch("cfg", &PatchParams::apply("op-a"), &Patch::Apply(apply(json!({"x": "1"})))).await.unwrap();
    assert_eq!(same.metadata.resource_version, c.metadata.resource_version);
    // Changing another manager's field conflicts, unless forced.
    let err = api.patch("cfg", &PatchParams::apply("op-b"), &Patch::Apply(apply(json!({"x": "9"})))).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(s.message.contains("conflict with \"op-a\"") && s.message.contains(".data.x"), "{}", s.message);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced =
        api.patch("cfg", &PatchParams::apply("op-b").force(), &Patch::Apply(apply(json!({"x": "9"})))).await.unwrap();
    assert_eq!(forced.data.unwrap()["x"], "9");
    // Apply needs a field manager, apiVersion and kind.
    let missing = api.patch("cfg", &PatchParams::default(), &Patch::Apply(apply(json!({})))).await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 400), "{missing:?}");

    // Merge and strategic-merge patches work too.
    let merged =
        api.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"z": null, "m": "1"}}))).await.unwrap();
    assert_eq!(merged.data.unwrap(), BTreeMap::from([("x".into(), "9".into()), ("m".into(), "1".into())]));
    let smp = api.patch("cfg", &PatchParams::default(), &Patch::Strategic(json!({"data": {"s": "1"}}))).await.unwrap();
    assert_eq!(smp.data.unwrap()["s"], "1");
}

#[tokio::test]
async fn status_subresource_is_isolated_and_generation_tracks_spec_only() {
    let fake = FakeApiServer::with_sluice_crds();
    let api: Api<ModelRoute> = Api::default_namespaced(fake.client());
    let mut r = route("r", "m1");
    r.status = Some(serde_json::from_value(json!({"candidateCount": 5})).unwrap());
    let created = api.create(&PostParams::default(), &r).await.unwrap();
    assert_eq!(created.status, None, "status is dropped on create");
    assert_eq!(created.metadata.generation, Some(1));

    // Status through /status: spec untouched, generation unchanged.
    let status = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute",
                        "status": {"candidateCount": 1, "observedGeneration": 1,
                                   "conditions": [{"type": "Ready", "status": "True", "reason": "Ok", "message": "",
                                                   "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
                        "spec": {"model": "ignored", "candidates": [{"upstream": "zzz"}]}});
    let s = api.patch_status("r", &PatchParams::apply("status-writer").force(), &Patch::Apply(&status)).await.unwrap();
    assert_eq!(s.spec.model, "m1");
    assert_eq!(s.status.as_ref().and_then(|s| s.candidate_count), Some(1));
    assert_eq!(s.metadata.generation, Some(1));

    // The main resource ignores .status.
    let mut main = s.clone();
    main.status.as_mut().unwrap().candidate_count = Some(99);
    main.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
    let m = api.replace("r", &PostParams::default(), &main).await.unwrap();
    assert_eq!(m.status.as_ref().and_then(|s| s.candidate_count), Some(1));
    assert_eq!(m.metadata.generation, Some(1), "metadata changes do not bump generation");

    // A spec change bumps generation; an identical spec does not.
    let p = api.patch("r", &PatchParams::default(), &Patch::Merge(json!({"spec": {"model": "m2"}}))).await.unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    let p = api.patch("r", &PatchParams::default(), &Patch::Merge(json!({"spec": {"model": "m2"}}))).await.unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    // A status merge patch through /status does not bump it either.
    let p = api
        .patch_status("r", &PatchParams::default(), &Patch::Merge(json!({"status": {"failovers5m": 3}})))
        .await
        .unwrap();
    assert_eq!((p.metadata.generation, p.status.unwrap().failovers5m), (Some(2), Some(3)));
    // Strategic merge is refused for custom resources, as by the real server.
    let smp =
        api.patch("r", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"model": "m3"}}))).await.unwrap_err();
    assert!(matches!(smp, kube::Error::Api(ref s) if s.code == 415), "{smp:?}");
}

#[tokio::test]
async fn invalid_custom_resources_are_refused_with_the_real_servers_words() {
    let fake = FakeApiServer::with_sluice_crds();
    let dynamic: Api<kube::api::DynamicObject> = Api::default_namespaced_with(
        fake.client(),
        &kube::discovery::ApiResource {
            group: "sluice.dev".into(),
            version: "v1alpha1".into(),
            api_version: "sluice.dev/v1alpha1".into(),
            kind: "ModelRoute".into(),
            plural: "modelroutes".into(),
        },
    );
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "metadata": {"name": "bad"},
        "spec": {"model": "m", "candidates": [{"upstream": "a", "weight": 0}, {"upstream": "a"}],
                 "failover": {"retryOn": [404]}},
    }))
    .unwrap();
    let err = dynamic.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(s) = err else { panic!("expected a Status, got {err:?}") };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    for part in [
        "ModelRoute.sluice.dev \"bad\" is invalid: [",
        "spec.candidates[0].weight: Invalid value: 0: spec.candidates[0].weight in body should be greater than or equal to 1",
        "spec.failover.retryOn: Invalid value: \"array\": retryOn may only list 408, 429 and 5xx statuses: other 4xx are client errors and are passed through",
        "spec.candidates: Invalid value: \"array\": candidates must name each upstream at most once",
    ] {
        assert!(s.message.contains(part), "missing {part:?} in {}", s.message);
    }
    // Unknown fields: pruned with a warning by default, refused under Strict.
    let mut extra = bad.clone();
    extra.data = json!({"spec": {"model": "m", "candidates": [{"upstream": "a"}], "bogus": 1}});
    let strict = PatchParams::apply("t").validation_strict();
    let err = dynamic.patch("bad", &strict, &Patch::Apply(&extra)).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("unknown field \"spec.bogus\"")),
        "{err:?}"
    );
    let pruned = dynamic.create(&PostParams::default(), &extra).await.unwrap();
    assert!(pruned.data["spec"].get("bogus").is_none());
}

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
    let updated = eventually(Duration::from_secs(10), async || cms.get("r1-cfg").await.unwrap().data.unwrap()["model"] == "model-2").await;
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

#[tokio::test]
async fn streaming_list_watchers_and_metadata_apis_work() {
    let fake = FakeApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(fake.client());
    api.create(&PostParams::default(), &cm("one", &[])).await.unwrap();
    // `sendInitialEvents=true`: ADDED for each object, then a BOOKMARK marking the end.
    let cfg = watcher::Config::default().streaming_lists();
    let mut stream = watcher(api.clone(), cfg).default_backoff().boxed();
    let mut kinds = Vec::new();
    while !matches!(kinds.last(), Some(&"InitDone")) {
        let ev = within("streaming list", stream.try_next()).await.unwrap().expect("open");
        kinds.push(match ev {
            watcher::Event::Init => "Init",
            watcher::Event::InitApply(_) => "InitApply",
            watcher::Event::InitDone => "InitDone",
            watcher::Event::Apply(_) => "Apply",
            watcher::Event::Delete(_) => "Delete",
        });
    }
    assert_eq!(kinds, ["Init", "InitApply", "InitDone"]);
    api.create(&PostParams::default(), &cm("two", &[])).await.unwrap();
    let ev = within("a later create", stream.try_next()).await.unwrap().expect("open");
    assert!(matches!(ev, watcher::Event::Apply(ref o) if o.name_any() == "two"), "{ev:?}");
    let streaming = fake.requests().into_iter().find(|r| r.verb == "watch").expect("a watch");
    assert!(streaming.query.contains("sendInitialEvents=true"), "{}", streaming.query);

    // PartialObjectMetadata lists and watches.
    let meta = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(meta.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>(), ["one", "two"]);
    let metas: Api<kube::core::PartialObjectMeta<ConfigMap>> = Api::default_namespaced(fake.client());
    let mut mstream = watcher(metas, watcher::Config::default()).applied_objects().boxed();
    let first = within("metadata watcher", mstream.try_next()).await.unwrap().expect("open");
    assert_eq!(first.name_any(), "one");
    assert!(api.get_metadata("two").await.unwrap().metadata.uid.is_some());
}

#[tokio::test]
async fn watches_send_bookmarks_and_honour_timeout_seconds() {
    let fake = FakeApiServer::new();
    fake.set_bookmark_interval(Duration::from_millis(100));
    let api: Api<ConfigMap> = Api::default_namespaced(fake.client());
    api.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let rv = fake.resource_version().to_string();
    let started = std::time::Instant::now();
    let events: Vec<WatchEvent<ConfigMap>> =
        within("a 1 s watch", api.watch(&WatchParams::default().timeout(1), &rv).await.unwrap().try_collect())
            .await
            .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900), "ended early: {:?}", started.elapsed());
    let bookmarks: Vec<&WatchEvent<ConfigMap>> =
        events.iter().filter(|e| matches!(e, WatchEvent::Bookmark(_))).collect();
    assert!(bookmarks.len() >= 5, "{events:?}");
    let WatchEvent::Bookmark(b) = bookmarks[0] else { unreachable!() };
    assert_eq!(b.metadata.resource_version, rv);
    // A watch from resourceVersion "" starts with the current state.
    let first = api.watch(&WatchParams::default().timeout(1), "").await.unwrap().boxed().try_next().await.unwrap();
    assert!(matches!(first, Some(WatchEvent::Added(ref o)) if o.name_any() == "a"), "{first:?}");
}
