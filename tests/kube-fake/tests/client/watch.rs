//! Watches: kube-runtime watchers (with the relist after 410), streaming lists and
//! metadata APIs, bookmarks and `timeoutSeconds`.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use sluice_kube_fake::FakeApiServer;

use super::{cm, within};

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
