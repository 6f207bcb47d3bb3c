//! docs/design.md §3 errors: OpenAI-shaped `{"error":{"message","type","code"}}` with the
//! documented status, type and code.

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_tests::{ChaosUpstream, GatewayOptions, Reply, TestGateway, refused_url, route, upstream_doc, yaml};

fn assert_error(r: &Reply, status: u16, kind: &str, code: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.error_kind(), (kind.to_string(), code.to_string()), "{}", r.text());
    assert!(!r.error_message().is_empty(), "a message: {}", r.text());
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/json")));
    assert!(r.header("x-request-id").is_some(), "x-request-id on errors too");
}

#[tokio::test]
async fn client_errors_have_their_documented_shape() -> anyhow::Result<()> {
    let only = ChaosUpstream::start("only").await?;
    let docs = [only.doc(), route("chat", "chat-model", &[("only", 100)])];
    let opts = GatewayOptions { max_body_bytes: 1024, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let client = gw.client()?;

    let r = client.post("/v1/chat/completions", "{", &[]).await?;
    assert_error(&r, 400, "invalid_request_error", "invalid_request");
    let r = client.post("/v1/chat/completions", json!({"model": "chat-model"}).to_string(), &[]).await?;
    assert_error(&r, 400, "invalid_request_error", "invalid_request");
    assert!(r.error_message().contains("messages"), "names the field: {}", r.error_message());

    let r = client.chat("no-such-model", json!({})).await?;
    assert_error(&r, 404, "invalid_request_error", "model_not_found");
    assert!(r.error_message().contains("no-such-model"));

    let big = json!({"model": "chat-model", "messages": [{"role": "user", "content": "x".repeat(2048)}]}).to_string();
    let r = client.post("/v1/chat/completions", big, &[]).await?;
    assert_error(&r, 413, "invalid_request_error", "request_too_large");
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "a small body passes the limit");

    // A client's request id is echoed.
    let r = client.post("/v1/chat/completions", "{", &[("x-request-id", "req-from-client")]).await?;
    assert_eq!(r.header("x-request-id"), Some("req-from-client"));
    assert_eq!(only.requests(), 1, "no client error reached the upstream");
    Ok(())
}

#[tokio::test]
async fn a_503_names_every_candidate_and_why() -> anyhow::Result<()> {
    let failing = ChaosUpstream::start("failing").await?;
    failing.script(json!({"status": 503}))?;
    let docs = [
        failing.doc(),
        upstream_doc("refusing", &refused_url().await?),
        route("chat", "chat-model", &[("failing", 100), ("refusing", 50)]).with("spec.backoff.maxAttempts", 1),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_error(&r, 503, "api_error", "upstreams_unavailable");
    let message = r.error_message();
    assert!(message.contains("failing: http_5xx"), "{message}");
    assert!(message.contains("503"), "{message}");
    assert!(message.contains("refusing: connect"), "{message}");
    assert_eq!(r.header("x-sluice-attempts"), Some("2"));
    assert_eq!(r.header("x-sluice-failover"), Some("http_5xx,connect"));
    Ok(())
}

#[tokio::test]
async fn keys_are_required_with_auth_keys() -> anyhow::Result<()> {
    let only = ChaosUpstream::start("only").await?;
    let price = json!({"input": "15.00", "output": "75.00"});
    let docs = [only.doc(), route("chat", "chat-model", &[("only", 100)]).candidate(0, "price", price)];
    let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let ledger = gw.state.billing.ledger.clone().ok_or_else(|| anyhow::anyhow!("no ledger"))?;

    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_error(&r, 401, "authentication_error", "invalid_api_key");
    let r = gw.client()?.with_key("sk-sluice-not-a-real-key").chat("chat-model", json!({})).await?;
    assert_error(&r, 401, "authentication_error", "invalid_api_key");

    ledger.create_account("rich", 10_000_000_000).await?;
    let rich = ledger.create_key("rich").await?;
    let r = gw.client()?.with_key(&rich).chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    // The model list needs a key too, as at OpenAI.
    let r = gw.client()?.get("/v1/models").await?;
    assert_error(&r, 401, "authentication_error", "invalid_api_key");
    let r = gw.client()?.with_key(&rich).get("/v1/models").await?;
    assert_eq!(r.status, 200, "{}", r.text());

    // A wallet that cannot cover the reservation.
    ledger.create_account("poor", 0).await?;
    let poor = ledger.create_key("poor").await?;
    let r = gw.client()?.with_key(&poor).chat("chat-model", json!({})).await?;
    assert_error(&r, 402, "insufficient_quota", "insufficient_quota");
    assert_eq!(only.requests(), 1, "only the paying request reached the upstream");
    Ok(())
}
