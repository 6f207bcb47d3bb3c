//! The exact API calls of the Upstream and ErrorBudget reconcilers (status from the
//! ledger, events on transitions), and the start-up CRD check.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a panic is how a test reports"
)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};
use sluice_ledger::{Heartbeat, RouteMinute, UpstreamHeartbeat, UpstreamMinute};
use sluice_operator::reconcile::{budget as budget_rc, upstream as upstream_rc};
use sluice_operator::testing::{budget, route, upstream, upstream_with_auth};

const UPSTREAMS: &str = "/apis/sluice.dev/v1alpha1/namespaces/team-a/upstreams";
const BUDGETS: &str = "/apis/sluice.dev/v1alpha1/namespaces/team-a/errorbudgets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team-a/events?";

fn condition<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {status}"))
}

async fn finish(server: tokio::task::JoinHandle<ApiServer>, ctx: Arc<sluice_operator::Context>) {
    let api = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("fewer calls than scripted")
        .expect("verifier panicked");
    drop(ctx);
    api.assert_no_more_calls().await;
}

#[tokio::test]
async fn an_upstream_without_its_secret_is_not_ready() {
    let u = upstream_with_auth("team-a", "east", "openai", "apiKey");
    let (client, mut api) = mock_client();
    let (ctx, _) = context(client, stores(vec![], vec![u.clone()], vec![], vec![], vec![])).await;
    let server = tokio::spawn(async move {
        api.expect("GET", "/api/v1/namespaces/team-a/secrets/openai", status(404, "NotFound")).await;
        let st = api.expect("PATCH", &format!("{UPSTREAMS}/east/status{SSA}"), status_echo).await;
        assert_eq!(st.content_type, APPLY_PATCH);
        assert_eq!(st.body["kind"], "Upstream");
        let ready = condition(&st.body["status"], "Ready");
        assert_eq!((&ready["status"], &ready["reason"]), (&json!("False"), &json!("SecretMissing")));
        assert_eq!(st.body["status"]["requests5m"], 0);
        api
    });
    upstream_rc::reconcile(Arc::new(u), ctx.clone()).await.unwrap();
    finish(server, ctx).await;
}

#[tokio::test]
async fn an_opened_circuit_is_an_event_and_the_figures_come_from_the_ledger() {
    let u = upstream_with_auth("team-a", "east", "openai", "apiKey");
    let (client, mut api) = mock_client();
    let (ctx, ledger) = context(client, stores(vec![], vec![u.clone()], vec![], vec![], vec![])).await;
    let mut m = UpstreamMinute::new("team-a/east", NOW_MINUTE);
    for _ in 0..3 {
        m.record("ok", Some(120));
    }
    m.record("http_5xx", None);
    ledger.write_rollups(&[], &[m]).await.unwrap();
    ledger
        .heartbeat(Heartbeat {
            gateway_id: "gw-0".into(),
            at: now(),
            upstreams: vec![UpstreamHeartbeat {
                upstream: "team-a/east".into(),
                circuit: "Open".into(),
                effective_weight: 0.0,
                successes: 0,
                failures: 20,
            }],
        })
        .await
        .unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai", "namespace": "team-a"}, "data": {"apiKey": "c2stdGVzdA=="}});
    let server = tokio::spawn(async move {
        api.expect("GET", "/api/v1/namespaces/team-a/secrets/openai", object(secret)).await;
        let ev = api.expect("POST", EVENTS, echo).await;
        assert_eq!(ev.body["kind"], "Event");
        assert_eq!((&ev.body["type"], &ev.body["reason"]), (&json!("Warning"), &json!("CircuitOpened")));
        assert_eq!(ev.body["note"], "circuit opened; success rate 75.00% over 5m");
        assert_eq!(
            (&ev.body["regarding"]["kind"], &ev.body["regarding"]["name"]),
            (&json!("Upstream"), &json!("east"))
        );
        assert_eq!(ev.body["reportingController"], "sluice-operator");
        assert_eq!(ev.body["reportingInstance"], "sluice-operator-0");
        let st = api.expect("PATCH", &format!("{UPSTREAMS}/east/status{SSA}"), status_echo).await;
        let s = &st.body["status"];
        assert_eq!((&s["successRate"], &s["requests5m"], &s["circuit"]), (&json!("75.00"), &json!(4), &json!("Open")));
        assert_eq!((&s["ttfbP50"], &s["ttfbP99"]), (&json!("125ms"), &json!("150ms")));
        assert_eq!(s["lastFailure"], json!({"reason": "http_5xx", "time": "2025-05-01T12:00:00Z"}));
        assert_eq!(condition(s, "Ready")["reason"], "CircuitOpen");
        api
    });
    upstream_rc::reconcile(Arc::new(u), ctx.clone()).await.unwrap();
    finish(server, ctx).await;
}

#[tokio::test]
async fn an_upstream_whose_status_did_not_change_is_left_alone() {
    let (client, mut api) = mock_client();
    let u = upstream("team-a", "east");
    let (ctx, _) = context(client, stores(vec![], vec![u.clone()], vec![], vec![], vec![])).await;
    let server = tokio::spawn(async move {
        let st = api.expect("PATCH", &format!("{UPSTREAMS}/east/status{SSA}"), status_echo).await;
        (api, st.body["status"].clone())
    });
    upstream_rc::reconcile(Arc::new(u.clone()), ctx.clone()).await.unwrap();
    let (api, written) = server.await.unwrap();
    api.assert_no_more_calls().await;
    let mut stored = u;
    stored.status = Some(serde_json::from_value(written).unwrap());
    // Same inputs, the status already written: no call at all (no Secret to look at).
    upstream_rc::reconcile(Arc::new(stored), ctx).await.unwrap();
}

#[tokio::test]
async fn an_exhausted_budget_is_an_event_and_its_status_shows_the_burn() {
    let b = budget("team-a", "slo", &["chat", "missing"]);
    let r = route("team-a", "chat", "gpt-4o", None, &["east"]);
    let (client, mut api) = mock_client();
    let (ctx, ledger) =
        context(client, stores(vec![r], vec![upstream("team-a", "east")], vec![b.clone()], vec![], vec![])).await;
    let minutes: Vec<RouteMinute> = (0..10)
        .map(|i| {
            let mut m = RouteMinute::new("team-a/chat", "chat", NOW_MINUTE - i);
            m.total = 100;
            m.bad = 5;
            m
        })
        .collect();
    ledger.write_rollups(&minutes, &[]).await.unwrap();
    let server = tokio::spawn(async move {
        let ev = api.expect("POST", EVENTS, echo).await;
        assert_eq!((&ev.body["type"], &ev.body["reason"]), (&json!("Warning"), &json!("BudgetExhausted")));
        assert_eq!(
            (&ev.body["regarding"]["kind"], &ev.body["regarding"]["name"]),
            (&json!("ErrorBudget"), &json!("slo"))
        );
        let st = api.expect("PATCH", &format!("{BUDGETS}/slo/status{SSA}"), status_echo).await;
        let s = &st.body["status"];
        assert_eq!(s["state"], "Exhausted");
        assert_eq!((&s["budget"], &s["consumed"]), (&json!("1"), &json!("50")));
        assert_eq!((&s["goodEvents"], &s["totalEvents"]), (&json!(950), &json!(1000)));
        assert_eq!(s["burnRates"]["1h"], "50.0");
        assert_eq!(s["firingAlerts"], json!(["page", "ticket"]));
        assert_eq!(s["lastEvaluated"], "2025-05-01T12:00:30Z");
        let ready = condition(s, "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(
            ready["message"],
            "1 routes counted; spec.routes[1]: ModelRoute \"missing\" is not served in namespace \"team-a\"; it is not counted"
        );
        assert_eq!(condition(s, "Burning")["status"], "True");
        assert_eq!(condition(s, "Exhausted")["status"], "True");
        api
    });
    budget_rc::reconcile(Arc::new(b), ctx.clone()).await.unwrap();
    finish(server, ctx).await;
}

#[tokio::test]
async fn missing_crds_fail_fast_with_a_hint() {
    let (client, mut api) = mock_client();
    let server = tokio::spawn(async move {
        api.expect("GET", "/apis/sluice.dev/v1alpha1/modelroutes?&limit=1", status(404, "NotFound")).await;
        api
    });
    let err = sluice_operator::check_crds(&client, None).await.unwrap_err().to_string();
    assert!(err.starts_with("the ModelRoute CRD is not installed"), "{err}");
    assert!(err.contains("kubectl apply -f charts/sluice/crds/"), "{err}");
    drop(client);
    server.await.unwrap().assert_no_more_calls().await;
}

#[tokio::test]
async fn installed_crds_are_checked_in_the_watched_namespace() {
    let (client, mut api) = mock_client();
    let list = |kind: &str| json!({"apiVersion": "sluice.dev/v1alpha1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": []});
    let (a, b, c, d) = (list("ModelRoute"), list("Upstream"), list("ErrorBudget"), list("AccountLimit"));
    let server = tokio::spawn(async move {
        api.expect("GET", "/apis/sluice.dev/v1alpha1/namespaces/team-a/modelroutes?&limit=1", object(a)).await;
        api.expect("GET", "/apis/sluice.dev/v1alpha1/namespaces/team-a/upstreams?&limit=1", object(b)).await;
        api.expect("GET", "/apis/sluice.dev/v1alpha1/namespaces/team-a/errorbudgets?&limit=1", object(c)).await;
        api.expect("GET", "/apis/sluice.dev/v1alpha1/namespaces/team-a/accountlimits?&limit=1", object(d)).await;
        api
    });
    sluice_operator::check_crds(&client, Some("team-a")).await.unwrap();
    drop(client);
    server.await.unwrap().assert_no_more_calls().await;
}
