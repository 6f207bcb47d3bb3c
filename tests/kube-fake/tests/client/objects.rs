//! Objects: CRUD, server-side apply, the status subresource and generation, and
//! validation of custom resources.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use sluice_crds::ModelRoute;
use sluice_kube_fake::FakeApiServer;

use super::{cm, route, within};

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
