//! docs/design.md §9 end to end: clients speak OpenAI to the gateway, which speaks each
//! candidate's native protocol to chaos upstreams that check credentials as the real
//! providers do (API-key headers, Google tokens from their own token endpoint, SigV4).
//!
//! The founding route: `claude-opus-4` served by Anthropic directly with Claude on
//! Vertex AI as its backup.

use serde_json::{Value, json};
use sluice_chaos::{AwsKeys, ChaosAuth, GoogleAuth, ServiceAccount};
use sluice_gateway::server::AuthMode;
use sluice_tests::{ChaosUpstream, Doc, GatewayOptions, SseReply, TestGateway, route, yaml};

/// The test-only service-account key (it belongs to no Google project).
const SA_KEY: &str = include_str!("../../../providers/tests/fixtures/gcp/service-account.json");
const ANTHROPIC_KEY: &str = "sk-ant-test-key";
const AWS_KEY_ID: &str = "AKIDSLUICETEST";
const AWS_SECRET: &str = "sluice/test/secret+key";

/// The service-account key with its `token_uri` at `chaos`'s token endpoint.
fn sa_key_for(chaos_base: &str) -> String {
    let mut key: Value = serde_json::from_str(SA_KEY).unwrap_or_default();
    key["token_uri"] = json!(format!("{chaos_base}/token"));
    key.to_string()
}

fn google_auth(key_json: &str) -> anyhow::Result<ChaosAuth> {
    let account = ServiceAccount::from_key_json(key_json.as_bytes()).map_err(|e| anyhow::anyhow!(e))?;
    Ok(ChaosAuth {
        google: Some(GoogleAuth { service_account: Some(account), ..GoogleAuth::default() }),
        ..ChaosAuth::default()
    })
}

fn api_key_auth(key: &str) -> ChaosAuth {
    ChaosAuth { api_key: Some(key.to_string()), ..ChaosAuth::default() }
}

/// Anthropic (checks `x-api-key`) and Vertex AI (checks tokens it issued for the
/// service account), and a gateway with both secrets mounted.
struct Founding {
    anthropic: ChaosUpstream,
    vertex: ChaosUpstream,
    gw: TestGateway,
}

async fn founding_route(extra: &[Doc]) -> anyhow::Result<Founding> {
    let anthropic = ChaosUpstream::start_with_auth("anthropic-direct", Some(api_key_auth(ANTHROPIC_KEY))).await?;
    // The key names the token endpoint, which is the Vertex upstream's own: start it
    // first on a port, then give it the key's public half.
    let vertex = ChaosUpstream::start("vertex-us-east5").await?;
    let key = sa_key_for(&vertex.base);
    vertex.state.set_auth(google_auth(&key)?);
    let mut docs = vec![
        anthropic.native_doc("anthropic").with("spec.auth.secretRef", json!({"name": "anthropic", "key": "apiKey"})),
        vertex.native_doc("vertex-anthropic").with(
            "spec.gcp",
            json!({"project": "sluice-test", "location": "us-east5", "credentials": {"secretRef": {"name": "vertex-sa", "key": "key.json"}}}),
        ),
        route("claude-opus", "claude-opus-4", &[("anthropic-direct", 100), ("vertex-us-east5", 50)])
            .candidate(0, "model", "claude-opus-4-20250514")
            .candidate(1, "model", "claude-opus-4@20250514"),
    ];
    docs.extend_from_slice(extra);
    let secrets = vec![
        ("anthropic".to_string(), "apiKey".to_string(), ANTHROPIC_KEY.to_string()),
        ("vertex-sa".to_string(), "key.json".to_string(), key),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions { secrets, ..GatewayOptions::default() }).await?;
    Ok(Founding { anthropic, vertex, gw })
}

/// The text of a stream's content deltas, in order.
fn streamed_text(r: &SseReply) -> String {
    r.events.iter().filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_string)).collect()
}

#[tokio::test]
async fn the_founding_route_answers_from_anthropic_in_the_openai_shape() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    let client = f.gw.client()?;
    let r = client.chat("claude-opus-4", json!({"max_tokens": 64})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("anthropic-direct"));
    let body = r.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "claude-opus-4-20250514", "the model the upstream reports");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert!(body["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["prompt_tokens"].as_u64().is_some_and(|n| n > 0), "{body}");

    // Streamed: the same text as chunks, a finish reason, [DONE].
    let s = client.chat_stream("claude-opus-4", json!({"max_tokens": 64})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(streamed_text(&s), body["choices"][0]["message"]["content"].as_str().unwrap_or_default());
    assert!(s.events.iter().any(|e| e.json()["choices"][0]["finish_reason"] == "stop"));
    assert!(s.events.last().is_some_and(|e| e.is_done()), "{}", s.body);
    assert!(!s.events.iter().any(|e| e.has_usage()), "no usage chunk unless the client asked");
    assert_eq!(f.vertex.requests(), 0);
    Ok(())
}

#[tokio::test]
async fn an_overloaded_anthropic_fails_over_to_vertex() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    f.anthropic.script(json!({"status": 529}))?;
    let r = f.gw.client()?.chat("claude-opus-4", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("vertex-us-east5"));
    assert_eq!(r.header("x-sluice-failover"), Some("http_5xx"));
    assert_eq!(r.json()["model"], "claude-opus-4@20250514");
    assert_eq!((f.anthropic.requests(), f.vertex.requests()), (1, 1));
    Ok(())
}

#[tokio::test]
async fn an_error_event_before_content_fails_over_and_the_client_sees_one_clean_stream() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    f.anthropic.script(json!({"error_after_chunks": 0}))?;
    let s = f.gw.client()?.chat_stream("claude-opus-4", json!({"stream_options": {"include_usage": true}})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.headers.get("x-sluice-upstream").and_then(|v| v.to_str().ok()), Some("vertex-us-east5"));
    assert!(!s.events.iter().any(|e| e.json().get("error").is_some()), "{}", s.body);
    assert!(!streamed_text(&s).is_empty());
    assert!(s.events.iter().any(|e| e.has_usage()), "the client asked for usage");
    assert!(s.events.last().is_some_and(|e| e.is_done()), "{}", s.body);
    Ok(())
}

#[tokio::test]
async fn an_error_event_after_content_ends_the_stream_as_broken() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    f.anthropic.script(json!({"error_after_chunks": 2}))?;
    let s = f.gw.client()?.chat_stream("claude-opus-4", json!({})).await?;
    assert_eq!(s.status, 200);
    assert!(s.events.iter().filter(|e| e.is_content()).count() >= 2, "{}", s.body);
    assert_eq!(s.events.last().and_then(|e| e.error_code()), Some("upstream_stream_broken".to_string()), "{}", s.body);
    assert!(!s.events.iter().any(|e| e.is_done()), "never a [DONE] after a break");
    assert_eq!(f.vertex.requests(), 0, "no failover once content reached the client");
    Ok(())
}

#[tokio::test]
async fn an_expired_vertex_token_is_refreshed_and_the_same_candidate_asked_again() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    f.anthropic.script(json!({"status": 503}))?;
    let client = f.gw.client()?;
    assert_eq!(client.chat("claude-opus-4", json!({})).await?.header("x-sluice-upstream"), Some("vertex-us-east5"));
    // Vertex now refuses every token it issued so far with its expired-token 401.
    let expired = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .post(format!("{}/_chaos/expire-tokens", f.vertex.base))
        .send()
        .await?;
    assert!(expired.status().is_success());
    let r = client.chat("claude-opus-4", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("vertex-us-east5"));
    // The refresh is no failover: at most the primary's 503 (if it was still tried first).
    assert!(r.header("x-sluice-failover").is_none_or(|f| f == "http_5xx"), "{:?}", r.header("x-sluice-failover"));
    assert_eq!(f.vertex.requests(), 3, "the first answer, the refused call and the retry with a fresh token");
    Ok(())
}

#[tokio::test]
async fn a_wrong_anthropic_key_is_refused_by_the_upstream_and_passed_through() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    f.anthropic.state.set_auth(api_key_auth("a-rotated-key"));
    let r = f.gw.client()?.chat("claude-opus-4", json!({})).await?;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "authentication_error", "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn a_request_anthropic_cannot_express_is_a_400_naming_the_field() -> anyhow::Result<()> {
    let f = founding_route(&[]).await?;
    let r = f.gw.client()?.chat("claude-opus-4", json!({"n": 2})).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error_message().contains('n'), "{}", r.text());
    assert_eq!((f.anthropic.requests(), f.vertex.requests()), (0, 0), "nothing was sent");
    Ok(())
}

#[tokio::test]
async fn a_candidate_that_cannot_take_the_request_is_passed_over_not_answered_with_a_400() -> anyhow::Result<()> {
    // Gemini has no hosted web search; Anthropic has: a searching request passes Gemini
    // over (nothing sent, its health untouched) and is served by Anthropic.
    let gemini = ChaosUpstream::start("gemini").await?;
    let route_doc = route("searching", "searching", &[("gemini", 100), ("anthropic-direct", 50)]).candidate(
        1,
        "model",
        "claude-opus-4-20250514",
    );
    let only_gemini = route("gemini-only", "gemini-only", &[("gemini", 100)]);
    let f = founding_route(&[gemini.native_doc("gemini"), route_doc, only_gemini]).await?;
    let client = f.gw.client()?;
    let search = json!({"web_search_options": {}});
    let r = client.chat("searching", search.clone()).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("anthropic-direct"));
    assert_eq!(r.header("x-sluice-failover"), None, "a candidate passed over is no failover");
    assert_eq!(r.json()["choices"][0]["message"]["annotations"][0]["type"], "url_citation", "{}", r.text());
    assert_eq!((gemini.requests(), f.anthropic.requests()), (0, 1));
    assert_eq!(f.gw.count("sluice_upstream_attempts_total", &[("upstream", "gemini")]), 0.0);

    // The candidate that could take it fails: the answer is that failure's, naming both.
    f.anthropic.script(json!({"status": 503}))?;
    let r = client.chat("searching", search.clone()).await?;
    assert_eq!(r.status, 503, "{}", r.text());
    let message = r.error_message();
    assert!(message.contains("gemini: cannot take the request") && message.contains("web_search_options"), "{message}");
    assert!(message.contains("anthropic-direct: http_5xx"), "{message}");

    // No candidate can take it: the 400 naming the member, as before.
    let r = client.chat("gemini-only", search).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error_message().contains("web_search_options"), "{}", r.text());
    assert_eq!(gemini.requests(), 0, "nothing was sent");
    Ok(())
}

#[tokio::test]
async fn bedrock_requests_are_signed_and_throttling_fails_over() -> anyhow::Result<()> {
    let auth = ChaosAuth {
        aws: Some(AwsKeys { access_key_id: AWS_KEY_ID.into(), secret_access_key: AWS_SECRET.into() }),
        ..ChaosAuth::default()
    };
    let bedrock = ChaosUpstream::start_with_auth("bedrock-us-east-1", Some(auth)).await?;
    let backup = ChaosUpstream::start("openai-backup").await?;
    // An inference-profile ARN: `:` and `/` must travel as one percent-encoded segment.
    let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20240620-v1:0";
    let docs = [
        bedrock
            .native_doc("bedrock")
            .with("spec.aws", json!({"region": "us-east-1", "credentials": {"secretRef": {"name": "aws-keys"}}})),
        backup.doc(),
        route("claude", "claude-sonnet", &[("bedrock-us-east-1", 100), ("openai-backup", 50)])
            .candidate(0, "model", arn),
    ];
    let secrets = vec![
        ("aws-keys".to_string(), "AWS_ACCESS_KEY_ID".to_string(), AWS_KEY_ID.to_string()),
        ("aws-keys".to_string(), "AWS_SECRET_ACCESS_KEY".to_string(), AWS_SECRET.to_string()),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions { secrets, ..GatewayOptions::default() }).await?;
    let client = gw.client()?;

    let r = client.chat("claude-sonnet", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("bedrock-us-east-1")), "{}", r.text());
    assert_eq!(r.json()["object"], "chat.completion");
    let s = client.chat_stream("claude-sonnet", json!({})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert!(!streamed_text(&s).is_empty() && s.events.last().is_some_and(|e| e.is_done()), "{}", s.body);

    // A ValidationException is the client's: passed through, never failed over.
    bedrock.script(json!({"status": 400, "error_code": "ValidationException"}))?;
    let r = client.chat("claude-sonnet", json!({})).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(backup.requests(), 0);
    // AWS documents ThrottlingException as a 400 too: its name, not its status, decides.
    bedrock.script(json!({"status": 400, "error_code": "ThrottlingException"}))?;
    let r = client.chat("claude-sonnet", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("openai-backup")), "{}", r.text());
    assert_eq!(r.header("x-sluice-failover"), Some("http_429"));
    Ok(())
}

#[tokio::test]
async fn a_gemini_tool_call_streams_with_an_index_an_id_and_finish_reason_tool_calls() -> anyhow::Result<()> {
    let gemini = ChaosUpstream::start_with_auth("gemini", Some(api_key_auth("gemini-key"))).await?;
    let docs = [
        gemini.native_doc("gemini").with("spec.auth.secretRef", json!({"name": "gemini", "key": "apiKey"})),
        route("gemini", "gemini-2.5-pro", &[("gemini", 100)]),
    ];
    let secrets = vec![("gemini".to_string(), "apiKey".to_string(), "gemini-key".to_string())];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions { secrets, ..GatewayOptions::default() }).await?;
    gemini.script(json!({"tool_call": "lookup"}))?;
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]);
    let s = gw.client()?.chat_stream("gemini-2.5-pro", json!({"tools": tools})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    let calls: Vec<Value> = s
        .events
        .iter()
        .filter_map(|e| e.json()["choices"][0]["delta"]["tool_calls"].as_array().cloned())
        .flatten()
        .collect();
    let first = calls.first().cloned().unwrap_or_default();
    assert_eq!(first["index"], 0, "{}", s.body);
    assert_eq!(first["function"]["name"], "lookup");
    assert!(first["id"].as_str().is_some_and(|id| !id.is_empty()), "Gemini gives no id; the gateway makes one");
    let args: String = calls.iter().filter_map(|c| c["function"]["arguments"].as_str()).collect();
    assert!(
        serde_json::from_str::<Value>(&args).is_ok_and(|v| v.is_object()),
        "arguments reassemble to JSON: {args:?}"
    );
    assert!(s.events.iter().any(|e| e.json()["choices"][0]["finish_reason"] == "tool_calls"), "{}", s.body);
    Ok(())
}

#[tokio::test]
async fn azure_deployments_are_called_with_their_api_version_and_key() -> anyhow::Result<()> {
    let azure = ChaosUpstream::start_with_auth("azure-eastus", Some(api_key_auth("azure-key"))).await?;
    let docs = [
        azure
            .native_doc("azure-openai")
            .with("spec.azure", json!({"apiVersion": "2024-10-21"}))
            .with("spec.auth.secretRef", json!({"name": "azure", "key": "apiKey"})),
        route("gpt", "gpt-4o", &[("azure-eastus", 100)]).candidate(0, "model", "gpt-4o-prod"),
    ];
    let secrets = vec![("azure".to_string(), "apiKey".to_string(), "azure-key".to_string())];
    let gw = TestGateway::start_with(
        &yaml(&docs),
        GatewayOptions { secrets, auth: AuthMode::None, ..GatewayOptions::default() },
    )
    .await?;
    let r = gw.client()?.chat("gpt-4o", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("azure-eastus")), "{}", r.text());
    let s = gw.client()?.chat_stream("gpt-4o", json!({})).await?;
    assert!(s.events.last().is_some_and(|e| e.is_done()), "{}", s.body);
    Ok(())
}

#[tokio::test]
async fn cache_reads_and_writes_are_counted_in_the_prompt_and_billed_at_their_own_prices() -> anyhow::Result<()> {
    let anthropic = ChaosUpstream::start("anthropic-direct").await?;
    // USD per 1M tokens; in nanodollars per token: 3.00 → 3000, 0.30 → 300, 3.75 → 3750, 15.00 → 15000.
    let price = json!({"input": "3.00", "output": "15.00", "cachedInput": "0.30", "cacheWrite": "3.75"});
    let docs = [
        anthropic.native_doc("anthropic"),
        route("claude", "claude-sonnet-4", &[("anthropic-direct", 100)]).candidate(0, "price", price),
    ];
    let gw =
        TestGateway::start_with(&yaml(&docs), GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() })
            .await?;
    let opening = 100_000_000_000;
    let key = gw.account("acme", opening).await?;
    let client = gw.client()?.with_key(&key);
    anthropic.script(json!({"cache_read_tokens": 1000, "cache_write_tokens": 200}))?;

    let r = client.chat("claude-sonnet-4", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = r.json()["usage"].clone();
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let (prompt, completion) = (n(&usage["prompt_tokens"]), n(&usage["completion_tokens"]));
    assert_eq!(n(&usage["prompt_tokens_details"]["cached_tokens"]), 1000, "{usage}");
    assert_eq!(n(&usage["prompt_tokens_details"]["cache_write_tokens"]), 200, "{usage}");
    assert!(prompt > 1200, "prompt_tokens includes the cache reads and writes: {usage}");
    let uncached = prompt - 1200;
    let cost = i64::try_from(uncached * 3000 + 1000 * 300 + 200 * 3750 + completion * 15000)?;
    gw.return_grants().await;
    let account = gw.ledger()?.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert_eq!(
        (account.balance_nanos, account.reserved_nanos),
        (opening - cost, 0),
        "billed {cost} nanodollars for {usage}"
    );
    Ok(())
}
