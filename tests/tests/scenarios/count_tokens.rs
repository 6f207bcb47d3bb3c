//! docs/gateway.md "Inbound APIs": `POST /v1/messages/count_tokens` is counted by the
//! route's candidates that speak Messages (`anthropic`, `vertex-anthropic`, Claude on
//! `bedrock`), each at its own count endpoint and authorised as its live calls are (API
//! key, Google token, SigV4), in the route's health order, failing over on what the
//! route's `retryOn` (or the provider's error name) says and never on a client error.
//! Every try is booked as an attempt; the chaos upstreams count as each provider does.

use serde_json::{Value, json};
use sluice_chaos::{AwsKeys, ChaosAuth, GoogleAuth, ServiceAccount};
use sluice_tests::{ChaosUpstream, Doc, GatewayOptions, Reply, TestGateway, route, yaml};

/// The test-only service-account key (it belongs to no Google project).
const SA_KEY: &str = include_str!("../../../providers/tests/fixtures/gcp/service-account.json");
const ANTHROPIC_KEY: &str = "sk-ant-test-key";
const AWS_KEY_ID: &str = "AKIDSLUICETEST";
const AWS_SECRET: &str = "sluice/test/secret+key";
/// A cross-region profile: CountTokens is asked for the foundation model it names.
const BEDROCK_CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

struct Claude {
    anthropic: ChaosUpstream,
    vertex: ChaosUpstream,
    bedrock: ChaosUpstream,
    gw: TestGateway,
}

/// Route `claude`: Anthropic (checks its key), Claude on Vertex AI (checks tokens from
/// its own token endpoint) and Claude on Bedrock (checks SigV4), in that order; route
/// `claude-bedrock`: Bedrock alone; route `gpt`: an `openai` upstream alone.
async fn claude() -> anyhow::Result<Claude> {
    let api_key = ChaosAuth { api_key: Some(ANTHROPIC_KEY.into()), ..ChaosAuth::default() };
    let anthropic = ChaosUpstream::start_with_auth("anthropic", Some(api_key)).await?;
    let vertex = ChaosUpstream::start("vertex").await?;
    let mut sa: Value = serde_json::from_str(SA_KEY)?;
    sa["token_uri"] = json!(format!("{}/token", vertex.base));
    let account = ServiceAccount::from_key_json(sa.to_string().as_bytes()).map_err(|e| anyhow::anyhow!(e))?;
    let google = GoogleAuth { service_account: Some(account), ..GoogleAuth::default() };
    vertex.state.set_auth(ChaosAuth { google: Some(google), ..ChaosAuth::default() });
    let aws = AwsKeys { access_key_id: AWS_KEY_ID.into(), secret_access_key: AWS_SECRET.into() };
    let bedrock =
        ChaosUpstream::start_with_auth("bedrock", Some(ChaosAuth { aws: Some(aws), ..ChaosAuth::default() })).await?;
    let openai = ChaosUpstream::start("openai").await?;
    let docs: Vec<Doc> = vec![
        anthropic.native_doc("anthropic").with("spec.auth.secretRef", json!({"name": "anthropic", "key": "apiKey"})),
        vertex.native_doc("vertex-anthropic").with(
            "spec.gcp",
            json!({"project": "sluice-test", "location": "us-east5", "credentials": {"secretRef": {"name": "vertex-sa", "key": "key.json"}}}),
        ),
        bedrock
            .native_doc("bedrock")
            .with("spec.aws", json!({"region": "us-east-1", "credentials": {"secretRef": {"name": "aws-keys"}}})),
        openai.doc(),
        route("claude", "claude-sonnet", &[("anthropic", 100), ("vertex", 50), ("bedrock", 25)])
            .candidate(0, "model", "claude-sonnet-4-5-20250929")
            .candidate(1, "model", "claude-sonnet-4-5@20250929")
            .candidate(2, "model", BEDROCK_CLAUDE),
        route("claude-bedrock", "claude-on-bedrock", &[("bedrock", 100)]).candidate(0, "model", BEDROCK_CLAUDE),
        route("gpt", "gpt", &[("openai", 100)]),
    ];
    let secrets = vec![
        ("anthropic".to_string(), "apiKey".to_string(), ANTHROPIC_KEY.to_string()),
        ("vertex-sa".to_string(), "key.json".to_string(), sa.to_string()),
        ("aws-keys".to_string(), "AWS_ACCESS_KEY_ID".to_string(), AWS_KEY_ID.to_string()),
        ("aws-keys".to_string(), "AWS_SECRET_ACCESS_KEY".to_string(), AWS_SECRET.to_string()),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions { secrets, ..GatewayOptions::default() }).await?;
    Ok(Claude { anthropic, vertex, bedrock, gw })
}

/// What Claude Code counts: a system prompt, tools, a conversation, its betas.
fn conversation(model: &str) -> String {
    json!({"model": model, "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [{"name": "Read", "description": "Reads a file", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "how many tokens is this conversation?"}]})
    .to_string()
}

const HEADERS: [(&str, &str); 2] =
    [("anthropic-version", "2023-06-01"), ("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14")];

async fn count(gw: &TestGateway, model: &str) -> anyhow::Result<Reply> {
    gw.client()?.post("/v1/messages/count_tokens", conversation(model), &HEADERS).await
}

fn attempts(gw: &TestGateway, upstream: &str, outcome: &str) -> f64 {
    gw.count("sluice_upstream_attempts_total", &[("upstream", upstream), ("outcome", outcome)])
}

#[tokio::test]
async fn an_overloaded_anthropic_is_counted_for_by_vertex() -> anyhow::Result<()> {
    let c = claude().await?;
    let r = count(&c.gw, "claude-sonnet").await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("anthropic")), "{}", r.text());
    let tokens = r.json()["input_tokens"].as_u64().unwrap_or_default();
    assert!(tokens > 10, "{}", r.text());

    for status in [529, 503] {
        c.anthropic.script(json!({"status": status}))?;
        let r = count(&c.gw, "claude-sonnet").await?;
        assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("vertex")), "{status}: {}", r.text());
        assert_eq!(r.json(), json!({"input_tokens": tokens}), "the same count, Vertex's");
        assert_eq!((r.header("x-sluice-attempts"), r.header("x-sluice-failover")), (Some("2"), Some("http_5xx")));
    }
    assert_eq!((attempts(&c.gw, "anthropic", "http_5xx"), attempts(&c.gw, "anthropic", "ok")), (2.0, 1.0));
    assert_eq!(attempts(&c.gw, "vertex", "ok"), 2.0);
    assert_eq!(c.bedrock.counters().requests, 0);
    assert_eq!(c.vertex.counters().tokens_issued, 1, "Vertex was asked with a token from its own endpoint");
    Ok(())
}

#[tokio::test]
async fn claude_on_bedrock_counts_signed_and_in_anthropics_shape() -> anyhow::Result<()> {
    let c = claude().await?;
    let expected = count(&c.gw, "claude-sonnet").await?.json();
    let r = count(&c.gw, "claude-on-bedrock").await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("bedrock")), "{}", r.text());
    assert_eq!(r.json(), expected, "Bedrock's inputTokens as Anthropic's input_tokens");
    assert_eq!(r.header("content-type"), Some("application/json"));

    // The last of three: Anthropic and Vertex both failing over.
    c.anthropic.script(json!({"status": 500}))?;
    c.vertex.script(json!({"status": 503}))?;
    let r = count(&c.gw, "claude-sonnet").await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("bedrock")), "{}", r.text());
    assert_eq!(r.json(), expected);
    assert_eq!((r.header("x-sluice-attempts"), r.header("x-sluice-failover")), (Some("3"), Some("http_5xx,http_5xx")));
    assert_eq!(attempts(&c.gw, "bedrock", "ok"), 2.0);

    // All three overloaded or throttling: Anthropic's 529, with when to come back.
    c.vertex.script(json!({"status": 429}))?;
    c.bedrock.script(json!({"status": 400, "error_code": "ThrottlingException"}))?;
    c.anthropic.script(json!({"status": 529}))?;
    let r = count(&c.gw, "claude-sonnet").await?;
    assert_eq!(r.status, 529, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert!(r.header("retry-after").is_some());
    Ok(())
}

#[tokio::test]
async fn a_client_error_is_answered_as_the_upstream_gave_it_and_not_failed_over() -> anyhow::Result<()> {
    let c = claude().await?;
    // A member the count endpoint refuses: Anthropic's own 400, body unchanged.
    let mut body: Value = serde_json::from_str(&conversation("claude-sonnet"))?;
    body["max_tokens"] = json!(1024);
    let r = c.gw.client()?.post("/v1/messages/count_tokens", body.to_string(), &HEADERS).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    let error = r.json();
    assert_eq!(error["error"]["message"], "max_tokens: Extra inputs are not permitted");
    assert_eq!(error["request_id"], "req_chaos", "Anthropic's body as it came: {error}");
    assert_eq!((attempts(&c.gw, "anthropic", "http_4xx"), attempts(&c.gw, "vertex", "ok")), (1.0, 0.0));

    // Bedrock's 400 reaches the client in Anthropic's shape, as a Messages call's does.
    c.bedrock.script(json!({"status": 400, "error_code": "ValidationException"}))?;
    let r = count(&c.gw, "claude-on-bedrock").await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!((&r.json()["type"], &r.json()["error"]["type"]), (&json!("error"), &json!("invalid_request_error")));
    assert_eq!(c.vertex.counters().tokens_issued, 0, "Vertex was never asked");
    Ok(())
}

#[tokio::test]
async fn an_upstream_the_health_order_skips_is_not_asked_to_count() -> anyhow::Result<()> {
    let c = claude().await?;
    c.anthropic.script(json!({"status": 503}))?;
    let r = count(&c.gw, "claude-sonnet").await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("vertex")), "{}", r.text());
    assert_eq!(r.header("x-sluice-attempts"), Some("2"));
    // The failed count demoted Anthropic (docs/design.md §4.1): the next ones go to
    // Vertex at once, as a Messages request would.
    for _ in 0..2 {
        let r = count(&c.gw, "claude-sonnet").await?;
        assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("vertex")), "{}", r.text());
        assert_eq!((r.header("x-sluice-attempts"), r.header("x-sluice-failover")), (Some("1"), None));
    }
    assert_eq!(attempts(&c.gw, "anthropic", "http_5xx"), 1.0);
    let r = c.gw.client()?.chat("claude-sonnet", json!({"max_tokens": 8})).await?;
    assert_eq!(r.header("x-sluice-upstream"), Some("vertex"), "the same order as the walk's");
    Ok(())
}

#[tokio::test]
async fn a_route_without_a_claude_candidate_does_not_count() -> anyhow::Result<()> {
    let c = claude().await?;
    let r = count(&c.gw, "gpt").await?;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("has none")), "{}", r.text());
    Ok(())
}
