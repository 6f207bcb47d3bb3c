//! Watch streams filtered down to the changes that matter, so that status writes never
//! trigger reconciles.
//!
//! kube's `predicate_filter` also drops deletions whose predicate value did not change
//! (a deleted Upstream keeps its generation), and a deleted Upstream or Secret must
//! reach the routes that referenced it. [`changes`] therefore passes an applied object
//! only when its predicate value changed, and a deleted one always (when asked to).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::watcher;
use serde::Serialize;
use serde_json::Value;

/// Objects from `events` whose `predicate` value changed since last seen, and (with
/// `deletes`) deleted objects.
pub fn changes<K, S, P>(events: S, predicate: P, deletes: bool) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    P: Fn(&K) -> u64 + Send + 'static,
{
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    events.filter_map(move |event| {
        let out = match event {
            Err(e) => Some(Err(e)),
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let value = predicate(&obj);
                let key = (obj.meta().namespace.clone(), obj.meta().name.clone().unwrap_or_default());
                (seen.insert(key, value) != Some(value)).then_some(Ok(obj))
            }
            Ok(watcher::Event::Delete(obj)) => {
                seen.remove(&(obj.meta().namespace.clone(), obj.meta().name.clone().unwrap_or_default()));
                deletes.then_some(Ok(obj))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
        };
        future::ready(out)
    })
}

fn hash<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// The spec (generation), and the lifecycle: deletion started, finalizers changed
/// (so that the finalizer added by the first reconcile triggers the second).
pub fn spec_or_lifecycle<K: Resource>(obj: &K) -> u64 {
    let meta = obj.meta();
    hash(&(meta.generation, meta.deletion_timestamp.is_some(), &meta.finalizers))
}

/// The spec only.
pub fn generation<K: Resource>(obj: &K) -> u64 {
    hash(&obj.meta().generation)
}

/// Any change (owned ConfigMaps: someone edited or replaced what we rendered).
pub fn resource_version<K: Resource>(obj: &K) -> u64 {
    hash(&obj.meta().resource_version)
}

/// The spec as stored (owned Services and PodDisruptionBudgets: someone edited it).
/// Services carry no `generation`, so the spec itself is hashed; status writes (a load
/// balancer's address, a budget's allowed disruptions) leave it alone.
pub fn spec<K: Serialize>(obj: &K) -> u64 {
    hash(&serde_json::to_value(obj).ok().and_then(|v| v.get("spec").map(Value::to_string)))
}

/// Which keys a Secret has (values do not matter: the kubelet projects them).
pub fn secret_keys(secret: &Secret) -> u64 {
    hash(&secret.data.as_ref().map(|d| d.keys().collect::<Vec<_>>()))
}

/// A Deployment's spec and availability (routes' `Ready` follows it).
pub fn deployment_availability(d: &Deployment) -> u64 {
    hash(&(d.metadata.generation, d.status.as_ref().and_then(|s| s.available_replicas)))
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(name: &str, generation: i64, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                generation: Some(generation),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    async fn names(events: Vec<watcher::Event<ConfigMap>>, deletes: bool) -> Vec<String> {
        changes(stream::iter(events.into_iter().map(Ok)), generation::<ConfigMap>, deletes)
            .map(|r| r.unwrap().metadata.name.unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn unchanged_generations_are_dropped_but_deletions_pass() {
        use watcher::Event::*;
        let events = vec![
            Init,
            InitApply(cm("a", 1, "1")),
            InitDone,
            Apply(cm("a", 1, "2")), // status write: same generation
            Apply(cm("a", 2, "3")), // spec change
            Delete(cm("a", 2, "4")),
            Apply(cm("a", 1, "5")), // recreated: seen anew
        ];
        assert_eq!(names(events.clone(), true).await, ["a", "a", "a", "a"]);
        assert_eq!(names(events, false).await, ["a", "a", "a"]);
    }

    #[test]
    fn spec_predicate_ignores_status_and_metadata() {
        use k8s_openapi::api::core::v1::{Service, ServiceSpec, ServiceStatus};
        let mut svc = Service {
            spec: Some(ServiceSpec { type_: Some("ClusterIP".into()), ..ServiceSpec::default() }),
            ..Service::default()
        };
        let before = spec(&svc);
        svc.metadata.resource_version = Some("7".into());
        svc.status = Some(ServiceStatus::default());
        assert_eq!(spec(&svc), before);
        svc.spec = Some(ServiceSpec { type_: Some("NodePort".into()), ..ServiceSpec::default() });
        assert_ne!(spec(&svc), before);
    }

    #[test]
    fn lifecycle_predicate_sees_finalizers_and_deletion() {
        let mut a = cm("a", 1, "1");
        let before = spec_or_lifecycle(&a);
        a.metadata.finalizers = Some(vec!["sluice.dev/gateway-config".into()]);
        let with_finalizer = spec_or_lifecycle(&a);
        assert_ne!(before, with_finalizer);
        a.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_ne!(with_finalizer, spec_or_lifecycle(&a));
        a.metadata.resource_version = Some("9".into());
        assert_eq!(spec_or_lifecycle(&a), spec_or_lifecycle(&{ a.clone() }));
    }
}
