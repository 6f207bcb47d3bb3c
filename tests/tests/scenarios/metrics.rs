//! docs/design.md §3 metrics: every contract metric name is exposed on `/metrics` with its
//! labels after traffic, and label values come from config, never from requests.

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::eventually;
use sluice_tests::metrics::{has_labels, samples};
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, yaml};

const PRICE: fn() -> serde_json::Value = || json!({"input": "15.00", "output": "75.00"});

#[tokio::test]
async fn every_contract_metric_is_exposed_with_its_labels() -> anyhow::Result<()> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        primary.doc(),
        backup.doc(),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]).candidate(0, "price", PRICE()).candidate(
            1,
            "price",
            PRICE(),
        ),
    ];
    let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let ledger = gw.state.billing.ledger.clone().ok_or_else(|| anyhow::anyhow!("no ledger"))?;
    ledger.create_account("acme", 100_000_000_000).await?;
    let key = ledger.create_key("acme").await?;
    let client = gw.client()?.with_key(&key);

    // Traffic: plain and streamed answers, a failover (503 → backup), and a request
    // for a model nobody serves.
    assert_eq!(client.chat("chat-model", json!({})).await?.status, 200);
    let s = client.chat_stream("chat-model", json!({})).await?;
    assert!(s.done());
    primary.script(json!({"status": 503}))?;
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("backup")));
    assert_eq!(client.chat("not-a-route-model", json!({})).await?.status, 404);

    let r = client.get("/metrics").await?;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")));
    let text = r.text();
    assert!(text.trim_end().ends_with("# EOF"));
    let all = samples(&text);
    let has = |name: &str, labels: &[(&str, &str)]| all.iter().any(|s| s.name == name && has_labels(s, labels));
    let value = |name: &str, labels: &[(&str, &str)]| {
        all.iter().find(|s| s.name == name && has_labels(s, labels)).map_or(0.0, |s| s.value)
    };

    // The contract names with their labels (docs/design.md §3).
    assert_eq!(value("sluice_requests_total", &[("route", "chat"), ("code", "200")]), 3.0);
    assert!(has("sluice_request_duration_seconds_count", &[("route", "chat")]));
    assert!(has("sluice_request_duration_seconds_bucket", &[("route", "chat"), ("le", "0.1")]));
    assert_eq!(value("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "http_5xx")]), 1.0);
    assert_eq!(value("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "ok")]), 2.0);
    assert_eq!(value("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", "ok")]), 1.0);
    for outcome in
        ["ok", "http_4xx", "http_429", "http_5xx", "connect", "first_byte_timeout", "idle_timeout", "reset", "budget"]
    {
        assert!(
            has("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", outcome)]),
            "outcome {outcome}"
        );
    }
    assert_eq!(value("sluice_upstream_first_byte_seconds_count", &[("upstream", "primary")]), 2.0);
    assert_eq!(value("sluice_upstream_first_byte_seconds_count", &[("upstream", "backup")]), 1.0);
    assert_eq!(value("sluice_failovers_total", &[("route", "chat"), ("reason", "http_5xx")]), 1.0);
    assert!(has("sluice_upstream_effective_weight", &[("upstream", "primary")]));
    assert_eq!(value("sluice_upstream_effective_weight", &[("upstream", "backup")]), 50.0);
    assert_eq!(value("sluice_circuit_state", &[("upstream", "primary")]), 0.0);
    assert!(has("sluice_circuit_state", &[("upstream", "backup")]));
    assert!(value("sluice_tokens_total", &[("route", "chat"), ("kind", "input")]) > 0.0);
    // 5 completion tokens per chaos answer.
    assert_eq!(value("sluice_tokens_total", &[("route", "chat"), ("kind", "output")]), 15.0);
    assert!(has("sluice_reservations_open", &[]));
    assert_eq!(value("sluice_config_reloads_total", &[("result", "ok")]), 1.0);
    assert!(has("sluice_config_reloads_total", &[("result", "rejected")]));

    // The stream settles in the background; spend is what the wallet was charged.
    let settled =
        eventually(std::time::Duration::from_secs(5), async || gw.metric("sluice_reservations_open", &[]) == Some(0.0))
            .await;
    assert!(settled, "reservations still open");
    let spend = gw.metric("sluice_spend_nanodollars_total", &[("route", "chat")]).unwrap_or(0.0);
    gw.return_grants().await;
    let account = ledger.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert!(spend > 0.0);
    assert_eq!(spend, (100_000_000_000 - account.balance_nanos) as f64, "spend metric = what the wallet paid");
    assert_eq!(account.reserved_nanos, 0);

    // Bounded labels: nothing from the request shows up.
    assert!(!text.contains("not-a-route-model"), "a requested model name became a label");
    assert!(!text.contains("chat-model"), "only route and upstream names are labels");
    Ok(())
}

#[tokio::test]
async fn a_client_that_gives_up_leaves_no_reservation_open() -> anyhow::Result<()> {
    let hung = ChaosUpstream::start("hung").await?;
    hung.script(json!({"hang": true}))?;
    let docs = [hung.doc(), route("chat", "chat-model", &[("hung", 100)]).candidate(0, "price", PRICE())];
    let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let ledger = gw.state.billing.ledger.clone().ok_or_else(|| anyhow::anyhow!("no ledger"))?;
    ledger.create_account("acme", 100_000_000_000).await?;
    let key = ledger.create_key("acme").await?;

    let http = reqwest::Client::builder().no_proxy().build()?;
    let body = sluice_tests::client::chat_body("chat-model", false, json!({}));
    let sent = http
        .post(format!("{}/v1/chat/completions", gw.base))
        .bearer_auth(&key)
        .json(&body)
        .timeout(std::time::Duration::from_millis(300))
        .send()
        .await;
    assert!(sent.is_err_and(|e| e.is_timeout()));
    assert_eq!(hung.requests(), 1);
    let wait = std::time::Duration::from_secs(3);
    assert!(eventually(wait, async || hung.state.in_flight() == 0).await, "the attempt was not cancelled");
    let released = eventually(wait, async || {
        gw.return_grants().await;
        ledger.account("acme").await.is_ok_and(|a| a.is_some_and(|a| a.reserved_nanos == 0))
    })
    .await;
    assert!(released, "the wallet still has money reserved for a request nobody waits for");
    assert!(
        eventually(wait, async || gw.metric("sluice_reservations_open", &[]) == Some(0.0)).await,
        "sluice_reservations_open = {:?}",
        gw.metric("sluice_reservations_open", &[])
    );
    Ok(())
}
