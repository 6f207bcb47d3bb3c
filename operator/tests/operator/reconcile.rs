//! The exact API calls of the ModelRoute reconciler, pinned with a scripted API server:
//! SSA of the ledger Secret, ConfigMap, Deployment, Service and PodDisruptionBudget,
//! status patches, finalizer patches, and deletion of a group whose last route went.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a panic is how a test reports"
)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use sluice_crds::{ModelRoute, Snapshot};
use sluice_ledger::RouteMinute;
use sluice_operator::reconcile::route::{self, FINALIZER};
use sluice_operator::testing::{budget, route as mk_route, upstream, upstream_with_auth};

const NS: &str = "/api/v1/namespaces/team-a";
const APPS: &str = "/apis/apps/v1/namespaces/team-a";
const POLICY: &str = "/apis/policy/v1/namespaces/team-a";
const ROUTES: &str = "/apis/sluice.dev/v1alpha1/namespaces/team-a/modelroutes";

fn deleting(mut r: ModelRoute) -> ModelRoute {
    r.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    r.metadata.generation = Some(2);
    r
}

async fn run(
    route: ModelRoute,
    ctx: Arc<sluice_operator::Context>,
    server: tokio::task::JoinHandle<ApiServer>,
) -> Action {
    let result = tokio::time::timeout(Duration::from_secs(5), route::reconcile(Arc::new(route), ctx.clone())).await;
    let server = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the reconcile made fewer calls than scripted")
        .expect("the scripted API server panicked (see above)");
    let action = result.expect("reconcile hung").expect("reconcile failed");
    drop(ctx);
    server.assert_no_more_calls().await;
    action
}

fn condition<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {status}"))
}

/// Asserts a server-side apply of `kind` and returns its body.
fn is_apply(call: &Call, kind: &str) -> Value {
    assert_eq!(call.content_type, APPLY_PATCH);
    assert_eq!(call.body["kind"], kind, "{}", call.body);
    call.body.clone()
}

#[tokio::test]
async fn a_new_route_first_gets_the_finalizer() {
    let mut r = mk_route("team-a", "chat", "gpt-4o", None, &["east"]);
    r.metadata.finalizers = None;
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r.clone()], vec![upstream("team-a", "east")], vec![], vec![], vec![])).await;
    let reply = serde_json::to_value(mk_route("team-a", "chat", "gpt-4o", None, &["east"])).unwrap();
    let server = tokio::spawn(async move {
        let call = api.expect("PATCH", &format!("{ROUTES}/chat?"), object(reply)).await;
        assert_eq!(call.content_type, JSON_PATCH);
        assert_eq!(
            call.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        );
        api
    });
    assert_eq!(run(r, ctx, server).await, Action::await_change());
}

#[tokio::test]
async fn a_route_applies_its_group_and_writes_its_status() {
    let r = mk_route("team-a", "chat", "gpt-4o", None, &["east", "west"]);
    let ups = vec![upstream_with_auth("team-a", "east", "openai", "apiKey"), upstream("team-a", "west")];
    let (client, mut api) = mock_client();
    let (ctx, ledger) =
        context(client, stores(vec![r.clone()], ups, vec![budget("team-a", "slo", &["chat"])], vec![], vec![])).await;
    let mut m = RouteMinute::new("team-a/chat", "chat", NOW_MINUTE - 1);
    m.total = 200;
    m.bad = 2;
    m.failovers = 5;
    ledger.write_rollups(&[m], &[]).await.unwrap();

    let server = tokio::spawn(async move {
        let secret = is_apply(&api.expect("PATCH", &format!("{NS}/secrets/sluice-ledger{SSA}"), echo).await, "Secret");
        assert_eq!(secret["data"]["url"], "cG9zdGdyZXM6Ly9zbHVpY2U6c2VjcmV0QGxlZGdlci50ZXN0OjU0MzIvc2x1aWNl");
        let cm = is_apply(
            &api.expect("PATCH", &format!("{NS}/configmaps/sluice-gateway-default{SSA}"), echo).await,
            "ConfigMap",
        );
        assert_eq!(
            cm["metadata"]["ownerReferences"],
            json!([{"apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "name": "chat", "uid": "uid-modelroute-chat"}])
        );
        let snapshot: Snapshot = serde_json::from_str(cm["data"]["snapshot.json"].as_str().unwrap()).unwrap();
        assert_eq!(snapshot.routes[0].key, "team-a/chat");
        assert_eq!(snapshot.budgets[0].routes, ["team-a/chat"]);
        let d = is_apply(
            &api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-default{SSA}"), deployment_with(2)).await,
            "Deployment",
        );
        assert_eq!(d["spec"]["template"]["spec"]["volumes"][1]["projected"]["sources"][0]["secret"]["name"], "openai");
        is_apply(&api.expect("PATCH", &format!("{NS}/services/sluice-gateway-default{SSA}"), echo).await, "Service");
        is_apply(
            &api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default{SSA}"), echo).await,
            "PodDisruptionBudget",
        );
        let st = api.expect("PATCH", &format!("{ROUTES}/chat/status{SSA}"), status_echo).await;
        assert_eq!(st.content_type, APPLY_PATCH);
        assert_eq!((&st.body["apiVersion"], &st.body["kind"]), (&json!("sluice.dev/v1alpha1"), &json!("ModelRoute")));
        let status = &st.body["status"];
        assert_eq!(status["observedGeneration"], 1);
        assert_eq!(status["candidateCount"], 2);
        assert_eq!(
            (&status["requests5m"], &status["failovers5m"], &status["availability5m"]),
            (&json!(200), &json!(5), &json!("99.00"))
        );
        assert_eq!(status["candidates"][0], json!({"upstream": "east", "effectiveWeight": "100.0"}));
        assert_eq!(condition(status, "ResolvedRefs")["status"], "True");
        assert_eq!(condition(status, "Degraded")["status"], "False");
        let ready = condition(status, "Ready");
        assert_eq!((&ready["status"], &ready["reason"]), (&json!("True"), &json!("Serving")));
        assert_eq!(ready["lastTransitionTime"], "2025-05-01T12:00:30Z");
        api
    });
    assert_eq!(run(r, ctx, server).await, Action::requeue(route::RESYNC));
}

#[tokio::test]
async fn one_bad_route_does_not_block_the_others() {
    let good = mk_route("team-a", "good", "gpt-4o", None, &["east"]);
    let bad = mk_route("team-a", "bad", "claude", None, &["nowhere"]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![good, bad.clone()], vec![upstream("team-a", "east")], vec![], vec![], vec![]))
            .await;
    let server = tokio::spawn(async move {
        api.expect("PATCH", &format!("{NS}/secrets/sluice-ledger{SSA}"), echo).await;
        let cm = api.expect("PATCH", &format!("{NS}/configmaps/sluice-gateway-default{SSA}"), echo).await;
        let snapshot: Snapshot = serde_json::from_str(cm.body["data"]["snapshot.json"].as_str().unwrap()).unwrap();
        let served: Vec<&str> = snapshot.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(served, ["good"]);
        let owners: Vec<&str> = cm.body["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert_eq!(owners, ["bad", "good"], "every route of the group owns it");
        api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-default{SSA}"), deployment_with(1)).await;
        api.expect("PATCH", &format!("{NS}/services/sluice-gateway-default{SSA}"), echo).await;
        api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default{SSA}"), echo).await;
        let b = api.expect("PATCH", &format!("{ROUTES}/bad/status{SSA}"), status_echo).await;
        let refs = condition(&b.body["status"], "ResolvedRefs");
        assert_eq!((&refs["status"], &refs["reason"]), (&json!("False"), &json!("NoCandidateResolved")));
        assert_eq!(
            refs["message"],
            "no candidate resolved to an Upstream; not found: \"nowhere\"; runbook: docs/operate.md#config-rejected"
        );
        assert_eq!(condition(&b.body["status"], "Ready")["status"], "False");
        let g = api.expect("PATCH", &format!("{ROUTES}/good/status{SSA}"), status_echo).await;
        assert_eq!(condition(&g.body["status"], "Ready")["status"], "True");
        api
    });
    run(bad, ctx, server).await;
}

#[tokio::test]
async fn the_group_is_deleted_when_its_last_route_goes() {
    let r = deleting(mk_route("team-a", "chat", "gpt-4o", None, &["east"]));
    let cm = rendered_configmap("team-a", "default", &[("chat", "uid-modelroute-chat")]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r.clone()], vec![upstream("team-a", "east")], vec![], vec![cm], vec![])).await;
    let mut gone = r.clone();
    gone.metadata.finalizers = Some(vec![]);
    let reply = serde_json::to_value(gone).unwrap();
    let server = tokio::spawn(async move {
        for path in [
            format!("{APPS}/deployments/sluice-gateway-default?"),
            format!("{NS}/services/sluice-gateway-default?"),
            format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default?"),
            format!("{NS}/configmaps/sluice-gateway-default?"),
            format!("{NS}/secrets/sluice-ledger?"),
        ] {
            let call = api.expect("DELETE", &path, status(200, "")).await;
            assert_eq!(call.body["propagationPolicy"], "Background", "{path}");
        }
        let call = api.expect("PATCH", &format!("{ROUTES}/chat?"), object(reply)).await;
        assert_eq!(call.content_type, JSON_PATCH);
        assert_eq!(
            call.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
        api
    });
    assert_eq!(run(r, ctx, server).await, Action::await_change());
}

#[tokio::test]
async fn an_already_deleted_object_is_not_an_error() {
    let r = deleting(mk_route("team-a", "chat", "gpt-4o", None, &["east"]));
    let keep = mk_route("team-a", "other", "other", Some("batch"), &["east"]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r.clone(), keep], vec![upstream("team-a", "east")], vec![], vec![], vec![])).await;
    let reply = serde_json::to_value(&r).unwrap();
    let server = tokio::spawn(async move {
        api.expect("DELETE", &format!("{APPS}/deployments/sluice-gateway-default?"), status(404, "NotFound")).await;
        api.expect("DELETE", &format!("{NS}/services/sluice-gateway-default?"), status(404, "NotFound")).await;
        api.expect(
            "DELETE",
            &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default?"),
            status(404, "NotFound"),
        )
        .await;
        api.expect("DELETE", &format!("{NS}/configmaps/sluice-gateway-default?"), status(404, "NotFound")).await;
        // Another group still has a route: the ledger Secret stays.
        api.expect("PATCH", &format!("{ROUTES}/chat?"), object(reply)).await;
        api
    });
    run(r, ctx, server).await;
}

#[tokio::test]
async fn a_route_moving_to_another_group_empties_the_old_one() {
    let r = mk_route("team-a", "chat", "gpt-4o", Some("batch"), &["east"]);
    let stale_owner = rendered_configmap("team-a", "default", &[("chat", "uid-modelroute-chat")]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r.clone()], vec![upstream("team-a", "east")], vec![], vec![stale_owner], vec![]))
            .await;
    let server = tokio::spawn(async move {
        api.expect("PATCH", &format!("{NS}/secrets/sluice-ledger{SSA}"), echo).await;
        api.expect("PATCH", &format!("{NS}/configmaps/sluice-gateway-batch{SSA}"), echo).await;
        api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-batch{SSA}"), deployment_with(0)).await;
        api.expect("PATCH", &format!("{NS}/services/sluice-gateway-batch{SSA}"), echo).await;
        api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-batch{SSA}"), echo).await;
        api.expect("DELETE", &format!("{APPS}/deployments/sluice-gateway-default?"), status(200, "")).await;
        api.expect("DELETE", &format!("{NS}/services/sluice-gateway-default?"), status(200, "")).await;
        api.expect("DELETE", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default?"), status(200, "")).await;
        api.expect("DELETE", &format!("{NS}/configmaps/sluice-gateway-default?"), status(200, "")).await;
        let st = api.expect("PATCH", &format!("{ROUTES}/chat/status{SSA}"), status_echo).await;
        let ready = condition(&st.body["status"], "Ready");
        assert_eq!((&ready["status"], &ready["reason"]), (&json!("False"), &json!("GatewayUnavailable")));
        api
    });
    run(r, ctx, server).await;
}

#[tokio::test]
async fn a_route_leaving_a_shared_group_re_renders_it_for_the_others() {
    let moved = mk_route("team-a", "chat", "gpt-4o", Some("batch"), &["east"]);
    let stays = mk_route("team-a", "embed", "embed", None, &["east"]);
    let cm =
        rendered_configmap("team-a", "default", &[("chat", "uid-modelroute-chat"), ("embed", "uid-modelroute-embed")]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![moved.clone(), stays], vec![upstream("team-a", "east")], vec![], vec![cm], vec![]))
            .await;
    let server = tokio::spawn(async move {
        api.expect("PATCH", &format!("{NS}/secrets/sluice-ledger{SSA}"), echo).await;
        for group in ["batch", "default"] {
            let cm = api.expect("PATCH", &format!("{NS}/configmaps/sluice-gateway-{group}{SSA}"), echo).await;
            assert_eq!(cm.body["metadata"]["ownerReferences"].as_array().unwrap().len(), 1, "{group}");
            api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-{group}{SSA}"), deployment_with(2)).await;
            api.expect("PATCH", &format!("{NS}/services/sluice-gateway-{group}{SSA}"), echo).await;
            api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-{group}{SSA}"), echo).await;
        }
        api.expect("PATCH", &format!("{ROUTES}/chat/status{SSA}"), status_echo).await;
        api.expect("PATCH", &format!("{ROUTES}/embed/status{SSA}"), status_echo).await;
        api
    });
    run(moved, ctx, server).await;
}

#[tokio::test]
async fn an_unchanged_status_is_not_patched_again() {
    // First pass: capture the status the operator writes.
    let r = mk_route("team-a", "chat", "gpt-4o", None, &["east"]);
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r.clone()], vec![upstream("team-a", "east")], vec![], vec![], vec![])).await;
    let server = tokio::spawn(async move {
        for path in [format!("{NS}/secrets/sluice-ledger{SSA}"), format!("{NS}/configmaps/sluice-gateway-default{SSA}")]
        {
            api.expect("PATCH", &path, echo).await;
        }
        api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-default{SSA}"), deployment_with(2)).await;
        api.expect("PATCH", &format!("{NS}/services/sluice-gateway-default{SSA}"), echo).await;
        api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default{SSA}"), echo).await;
        let st = api.expect("PATCH", &format!("{ROUTES}/chat/status{SSA}"), status_echo).await;
        (api, st.body["status"].clone())
    });
    let result = route::reconcile(Arc::new(r.clone()), ctx.clone()).await;
    let (api, written) = server.await.unwrap();
    result.unwrap();
    drop(ctx);
    api.assert_no_more_calls().await;

    // Second pass with that status stored: objects are applied again (level-driven), no status patch.
    let mut stored = r.clone();
    stored.status = Some(serde_json::from_value(written).unwrap());
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![stored.clone()], vec![upstream("team-a", "east")], vec![], vec![], vec![])).await;
    let server = tokio::spawn(async move {
        api.expect("PATCH", &format!("{NS}/secrets/sluice-ledger{SSA}"), echo).await;
        api.expect("PATCH", &format!("{NS}/configmaps/sluice-gateway-default{SSA}"), echo).await;
        api.expect("PATCH", &format!("{APPS}/deployments/sluice-gateway-default{SSA}"), deployment_with(2)).await;
        api.expect("PATCH", &format!("{NS}/services/sluice-gateway-default{SSA}"), echo).await;
        api.expect("PATCH", &format!("{POLICY}/poddisruptionbudgets/sluice-gateway-default{SSA}"), echo).await;
        api
    });
    run(stored, ctx, server).await;
}

#[tokio::test]
async fn the_status_loop_writes_route_status_without_applying() {
    let r = mk_route("team-a", "chat", "gpt-4o", None, &["east"]);
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "sluice-gateway-default", "namespace": "team-a"},
        "spec": {"replicas": 2, "selector": {}, "template": {}},
        "status": {"availableReplicas": 1},
    }))
    .unwrap();
    let (client, mut api) = mock_client();
    let (ctx, _) =
        context(client, stores(vec![r], vec![upstream("team-a", "east")], vec![], vec![], vec![deployment])).await;
    let server = tokio::spawn(async move {
        let st = api.expect("PATCH", &format!("{ROUTES}/chat/status{SSA}"), status_echo).await;
        assert_eq!(
            condition(&st.body["status"], "Ready")["message"],
            "served by gateway default (1/2 replicas available)"
        );
        api
    });
    let written = route::refresh_statuses(&ctx).await.unwrap();
    assert_eq!(written, 1);
    let api = server.await.unwrap();
    drop(ctx);
    api.assert_no_more_calls().await;
}
