//! Resource builders for tests (this crate's and the end-to-end harness'). Objects look
//! as the API server returns them: namespace, uid, generation 1; routes already carry
//! the operator's finalizer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_crds::error_budget::{BudgetMethod, ErrorBudgetSpec};
use sluice_crds::model_route::{Candidate, ModelRouteSpec};
use sluice_crds::upstream::{Protocol, SecretKeyRef, UpstreamAuth, UpstreamSpec};
use sluice_crds::{ErrorBudget, ModelRoute, Upstream};

use crate::reconcile::route::FINALIZER;

fn meta(namespace: &str, name: &str, kind: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: Some(format!("uid-{kind}-{name}")),
        generation: Some(1),
        resource_version: Some("1".into()),
        ..ObjectMeta::default()
    }
}

/// Upstream `name` at `https://<name>.example/v1`, without auth.
pub fn upstream(namespace: &str, name: &str) -> Upstream {
    let spec = UpstreamSpec {
        protocol: Protocol::Openai,
        base_url: Some(format!("https://{name}.example/v1")),
        region: None,
        auth: None,
        timeouts: None,
        max_concurrent_requests: None,
        circuit_breaker: None,
        probe: None,
        assistant_prefill: None,
        gcp: None,
        aws: None,
        azure: None,
        anthropic: None,
    };
    Upstream { metadata: meta(namespace, name, "upstream"), spec, status: None }
}

/// Upstream `name` whose key is in Secret `secret`, key `key`.
pub fn upstream_with_auth(namespace: &str, name: &str, secret: &str, key: &str) -> Upstream {
    let mut u = upstream(namespace, name);
    u.spec.auth = Some(UpstreamAuth {
        secret_ref: SecretKeyRef { name: secret.into(), key: key.into() },
        header: None,
        scheme: None,
    });
    u
}

/// Route `name` serving `model` in gateway group `gateway` (`None`: default), with one
/// candidate per upstream name; uid `uid-modelroute-<name>`, with the finalizer.
pub fn route(namespace: &str, name: &str, model: &str, gateway: Option<&str>, upstreams: &[&str]) -> ModelRoute {
    let spec = ModelRouteSpec {
        model: model.into(),
        gateway: gateway.map(Into::into),
        deadline: None,
        selection: None,
        candidates: upstreams
            .iter()
            .map(|u| Candidate { upstream: (*u).into(), model: None, weight: None, price: None })
            .collect(),
        failover: None,
        backoff: None,
        default_max_tokens: None,
        synthetic: None,
        cache: None,
        hosted_tools: None,
    };
    let mut metadata = meta(namespace, name, "modelroute");
    metadata.finalizers = Some(vec![FINALIZER.into()]);
    ModelRoute { metadata, spec, status: None }
}

/// ErrorBudget `name` at 99.9% over 30d on `routes`.
pub fn budget(namespace: &str, name: &str, routes: &[&str]) -> ErrorBudget {
    let spec = ErrorBudgetSpec {
        routes: routes.iter().map(|r| (*r).to_string()).collect(),
        objective: "99.9".into(),
        window: "30d".into(),
        method: BudgetMethod::Occurrences,
        timeslice: None,
        latency: None,
        alerts: None,
    };
    ErrorBudget { metadata: meta(namespace, name, "errorbudget"), spec, status: None }
}
