//! The `desired_*` builders against golden YAML under `tests/golden/` (regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p sluice-operator --test operator render`, then review the diff),
//! and the roll/no-roll rules of the pod template.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use sluice_crds::{ErrorBudget, ModelRoute, Snapshot, Upstream};
use sluice_operator::render::{
    GatewaySettings, SECRETS_HASH_ANNOTATION, desired_configmap, desired_deployment, desired_pdb, desired_secret,
    desired_service,
};
use sluice_operator::testing::{budget, route, upstream, upstream_with_auth};
use sluice_operator::view::{GroupView, group_view};

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; create it with UPDATE_GOLDEN=1", path.display()));
    assert!(
        actual == expected,
        "{name} differs from its golden file; if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff\n--- actual ---\n{actual}"
    );
}

fn yaml<T: serde::Serialize>(obj: &T) -> String {
    serde_yaml::to_string(obj).unwrap()
}

fn settings() -> GatewaySettings {
    GatewaySettings { image: "ghcr.io/sluice-dev/sluice-gateway:0.0.0-test".into(), ..GatewaySettings::defaults() }
}

fn upstreams() -> Vec<Upstream> {
    vec![
        upstream_with_auth("team-a", "anthropic-us-east-1", "anthropic", "apiKey"),
        upstream_with_auth("team-a", "anthropic-eu-west-1", "anthropic", "apiKey"),
        upstream_with_auth("team-a", "openai", "openai", "token"),
        upstream("team-a", "local"),
        upstream_with_auth("team-a", "unused", "unused-secret", "key"),
    ]
}

fn routes() -> Vec<ModelRoute> {
    vec![
        route("team-a", "claude-opus", "claude-opus-4", None, &["anthropic-us-east-1", "anthropic-eu-west-1"]),
        route("team-a", "gpt-4o", "gpt-4o", None, &["openai", "local"]),
        route("team-a", "batch", "batch-model", Some("batch"), &["local"]),
    ]
}

fn budgets() -> Vec<ErrorBudget> {
    vec![budget("team-a", "chat-slo", &["claude-opus", "gpt-4o"])]
}

fn view_of(upstreams: &[Upstream], routes: &[ModelRoute]) -> GroupView {
    group_view("team-a", "default", upstreams, routes, &budgets())
}

fn deployment(v: &GroupView) -> Deployment {
    let owners = v.owners();
    desired_deployment(&v.group(&owners), &settings()).unwrap()
}

#[test]
fn configmap_matches_golden_and_holds_the_group_snapshot() {
    let v = view_of(&upstreams(), &routes());
    let owners = v.owners();
    let cm = desired_configmap(&v.group(&owners)).unwrap();
    golden("configmap.yaml", &yaml(&cm));
    let snapshot: Snapshot = serde_json::from_str(&cm.data.as_ref().unwrap()["snapshot.json"]).unwrap();
    assert_eq!(snapshot, v.resolved.snapshot);
    let served: Vec<&str> = snapshot.routes.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(served, ["team-a/claude-opus", "team-a/gpt-4o"], "the batch group's route is not here");
    assert!(!snapshot.upstreams.contains_key("team-a/unused"));
    assert_eq!(snapshot.budgets[0].routes, ["team-a/claude-opus", "team-a/gpt-4o"]);
}

#[test]
fn deployment_matches_golden() {
    let d = deployment(&view_of(&upstreams(), &routes()));
    golden("deployment.yaml", &yaml(&d));
    let pod = d.spec.template.spec.as_ref().unwrap();
    assert_eq!(
        pod.containers[0].args.as_deref().unwrap(),
        [
            "serve",
            "--snapshot",
            "/etc/sluice/snapshot/snapshot.json",
            "--secrets-dir",
            "/etc/sluice/secrets",
            "--listen",
            "0.0.0.0:8080",
            "--auth",
            "keys",
            "--shutdown-delay",
            "5s"
        ]
    );
    // Long enough for the drain delay and for streams in flight at a rollout.
    assert_eq!(pod.termination_grace_period_seconds, Some(300));
}

#[test]
fn extra_gateway_env_comes_after_the_operators_own() {
    let v = view_of(&upstreams(), &routes());
    let owners = v.owners();
    let proxy = k8s_openapi::api::core::v1::EnvVar {
        name: "HTTPS_PROXY".into(),
        value: Some("http://proxy.internal:3128".into()),
        ..Default::default()
    };
    let with_env = GatewaySettings { env: vec![proxy.clone()], ..settings() };
    let d = desired_deployment(&v.group(&owners), &with_env).unwrap();
    let env = d.spec.template.spec.unwrap().containers[0].env.clone().unwrap();
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["SLUICE_LEDGER_URL", "POD_NAME", "HTTPS_PROXY"]);
    assert_eq!(env[2], proxy);
}

#[test]
fn service_pdb_and_secret_match_golden() {
    let v = view_of(&upstreams(), &routes());
    let owners = v.owners();
    let g = v.group(&owners);
    golden("service.yaml", &yaml(&desired_service(&g).unwrap()));
    golden("pdb.yaml", &yaml(&desired_pdb(&g).unwrap()));
    golden("secret.yaml", &yaml(&desired_secret("team-a", "postgres://sluice:secret@ledger.test:5432/sluice")));
}

#[test]
fn a_changed_secret_set_changes_the_template_hash() {
    let before = deployment(&view_of(&upstreams(), &routes()));
    let mut ups = upstreams();
    // `local` now needs a key: a new (secret, key) in the set.
    ups[3] = upstream_with_auth("team-a", "local", "local-key", "apiKey");
    let added = deployment(&view_of(&ups, &routes()));
    let hash = |d: &Deployment| {
        d.spec.template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()[SECRETS_HASH_ANNOTATION].clone()
    };
    assert_ne!(hash(&before), hash(&added));
    // Same secret, another key: also a change.
    ups[3] = upstream_with_auth("team-a", "local", "local-key", "otherKey");
    assert_ne!(hash(&added), hash(&deployment(&view_of(&ups, &routes()))));
    // A route dropping the only user of a secret removes it from the set.
    let mut rs = routes();
    rs[1] = route("team-a", "gpt-4o", "gpt-4o", None, &["local"]);
    let dropped = deployment(&view_of(&upstreams(), &rs));
    assert_ne!(hash(&before), hash(&dropped));
    let sources = dropped.spec.template.spec.as_ref().unwrap().volumes.as_ref().unwrap()[1]
        .projected
        .as_ref()
        .unwrap()
        .sources
        .clone();
    let names: Vec<String> = sources.unwrap().into_iter().map(|s| s.secret.unwrap().name).collect();
    assert_eq!(names, ["anthropic"]);
}

#[test]
fn cloud_credential_secrets_are_mounted_like_api_keys() {
    let mut vertex = upstream("team-a", "vertex");
    vertex.spec = serde_json::from_value(serde_json::json!({
        "protocol": "vertex-anthropic",
        "gcp": {"project": "p-1", "location": "us-east5", "credentials": {"secretRef": {"name": "vertex-sa", "key": "key.json"}}}
    }))
    .unwrap();
    let mut bedrock = upstream("team-a", "bedrock");
    bedrock.spec = serde_json::from_value(serde_json::json!({
        "protocol": "bedrock",
        "aws": {"region": "us-east-1", "credentials": {"secretRef": {"name": "aws-keys"}}}
    }))
    .unwrap();
    let rs = vec![route("team-a", "claude-opus", "claude-opus-4", None, &["vertex", "bedrock"])];
    let d = deployment(&view_of(&[vertex, bedrock], &rs));
    let sources =
        d.spec.template.spec.as_ref().unwrap().volumes.as_ref().unwrap()[1].projected.as_ref().unwrap().sources.clone();
    let files: Vec<String> = sources
        .unwrap()
        .into_iter()
        .flat_map(|s| {
            let secret = s.secret.unwrap();
            assert_eq!(secret.optional, Some(true), "a missing key (the session token) must not block the pod");
            secret.items.unwrap().into_iter().map(|i| i.path)
        })
        .collect();
    assert_eq!(
        files,
        [
            "aws-keys/AWS_ACCESS_KEY_ID",
            "aws-keys/AWS_SECRET_ACCESS_KEY",
            "aws-keys/AWS_SESSION_TOKEN",
            "vertex-sa/key.json"
        ]
    );
}

#[test]
fn a_config_change_does_not_touch_the_deployment() {
    let v = view_of(&upstreams(), &routes());
    let before_cm = desired_configmap(&v.group(&v.owners())).unwrap();
    let before = deployment(&v);
    let mut rs = routes();
    rs[0].spec.deadline = Some("120s".into());
    rs[0].spec.candidates[0].weight = Some(500);
    rs[1].spec.model = "gpt-4o-2024-08-06".into();
    let mut ups = upstreams();
    ups[0].spec.base_url = Some("https://east.example/v2".into());
    let changed = view_of(&ups, &rs);
    let after_cm = desired_configmap(&changed.group(&changed.owners())).unwrap();
    assert_ne!(before_cm.data, after_cm.data, "the config did change");
    assert_eq!(before, deployment(&changed), "but the Deployment (and so the pods) did not");
}

#[test]
fn a_group_without_served_routes_renders_nothing() {
    let rs = vec![route("team-a", "orphan", "m", None, &["does-not-exist"])];
    let v = view_of(&upstreams(), &rs);
    assert!(v.resolved.snapshot.routes.is_empty());
    let owners = v.owners();
    let g = v.group(&owners);
    assert!(desired_configmap(&g).is_none());
    assert!(desired_deployment(&g, &settings()).is_none());
    assert!(desired_service(&g).is_none());
    assert!(desired_pdb(&g).is_none());
    let empty = group_view("team-a", "nobody", &upstreams(), &routes(), &[]);
    assert!(desired_configmap(&empty.group(&[])).is_none());
}

#[test]
fn every_group_object_is_labelled_and_owned_by_every_route() {
    let rs = routes();
    let v = view_of(&upstreams(), &rs);
    let owners = v.owners();
    let g = v.group(&owners);
    let metas = [
        desired_configmap(&g).unwrap().metadata,
        desired_deployment(&g, &settings()).unwrap().metadata,
        desired_service(&g).unwrap().metadata,
        desired_pdb(&g).unwrap().metadata,
    ];
    for m in metas {
        assert_eq!(m.name.as_deref(), Some("sluice-gateway-default"));
        let labels = m.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "sluice-operator");
        assert_eq!(labels["app.kubernetes.io/name"], "sluice-gateway");
        assert_eq!(labels["sluice.dev/gateway"], "default");
        let owners: Vec<(String, Option<bool>)> =
            m.owner_references.unwrap().into_iter().map(|o| (o.name, o.controller)).collect();
        assert_eq!(owners, [("claude-opus".to_string(), None), ("gpt-4o".to_string(), None)]);
    }
}
