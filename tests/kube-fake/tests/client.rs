//! kube-rs against the fake in process (`kube::Client::new(router, "default")`): CRUD,
//! watches, server-side apply, the status subresource, generation, kube-runtime's
//! finalizer helper, garbage collection, validation, 410 after compaction, a real
//! `Controller`, and the request log.
#![expect(clippy::expect_used, reason = "tests: a panic is how a test reports")]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use sluice_crds::ModelRoute;

#[path = "client/objects.rs"]
mod objects;
#[path = "client/runtime.rs"]
mod runtime;
#[path = "client/watch.rs"]
mod watch;

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
