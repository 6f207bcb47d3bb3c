//! docs/gateway.md "Messages on Bedrock": a Messages request to a Claude model on
//! `bedrock` goes natively through InvokeModel — the client's body with Bedrock's
//! `anthropic_version`, its betas as `anthropic_beta`, no `model` or `stream` (the chaos
//! fake refuses either, as Bedrock does), signed with SigV4 — and its answer comes back
//! as Anthropic's own message or events, unwrapped from Bedrock's event-stream frames.
//! Other Bedrock models are sent a translation through Converse.

use serde_json::{Value, json};
use sluice_chaos::{AwsKeys, ChaosAuth};
use sluice_tests::{ChaosUpstream, GatewayOptions, SseReply, TestGateway, route, yaml};

const AWS_KEY_ID: &str = "AKIDSLUICETEST";
const AWS_SECRET: &str = "sluice/test/secret+key";
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

/// An `anthropic` upstream and a signed `bedrock` one; route `claude` tries Anthropic
/// first and Claude on Bedrock second, `llama` is a non-Claude Bedrock model.
async fn gateway(mid_stream: &str) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let auth = ChaosAuth {
        aws: Some(AwsKeys { access_key_id: AWS_KEY_ID.into(), secret_access_key: AWS_SECRET.into() }),
        ..ChaosAuth::default()
    };
    let anthropic = ChaosUpstream::start("anthropic").await?;
    let bedrock = ChaosUpstream::start_with_auth("bedrock", Some(auth)).await?;
    let docs = [
        anthropic.native_doc("anthropic"),
        bedrock
            .native_doc("bedrock")
            .with("spec.aws", json!({"region": "us-east-1", "credentials": {"secretRef": {"name": "aws-keys"}}}))
            .with("spec.assistantPrefill", true),
        route("claude", "claude-sonnet", &[("anthropic", 100), ("bedrock", 50)])
            .candidate(1, "model", CLAUDE)
            .with("spec.failover.midStream", mid_stream),
        route("llama", "llama", &[("bedrock", 100)]).candidate(0, "model", "meta.llama3-70b-instruct-v1:0"),
    ];
    let secrets = vec![
        ("aws-keys".to_string(), "AWS_ACCESS_KEY_ID".to_string(), AWS_KEY_ID.to_string()),
        ("aws-keys".to_string(), "AWS_SECRET_ACCESS_KEY".to_string(), AWS_SECRET.to_string()),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions { secrets, ..GatewayOptions::default() }).await?;
    Ok((anthropic, bedrock, gw))
}

/// A Claude Code turn: thinking from an earlier turn with its signature, a system
/// message inside `messages`, and betas Bedrock takes and one it does not.
fn turn(model: &str, stream: bool) -> Value {
    json!({
        "model": model, "max_tokens": 64, "stream": stream,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCgIYAhIM+sig/=="},
                {"type": "text", "text": "Hello!"}]},
            {"role": "user", "content": [{"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}]},
        ],
    })
}

const BETAS: &str = "interleaved-thinking-2025-05-14,claude-code-20250219";

fn types(s: &SseReply) -> Vec<String> {
    s.events.iter().map(|e| e.json()["type"].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test]
async fn claude_on_bedrock_answers_a_messages_request_natively_whole_and_streamed() -> anyhow::Result<()> {
    let (anthropic, _bedrock, gw) = gateway("error").await?;
    anthropic.script(json!({"status": 529}))?;
    let client = gw.client()?;
    let headers = [("anthropic-beta", BETAS), ("anthropic-version", "2023-06-01")];
    let r = client.post("/v1/messages", turn("claude-sonnet", false).to_string(), &headers).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("bedrock")), "{}", r.text());
    let message = r.json();
    assert!(message["id"].as_str().is_some_and(|id| id.starts_with("msg_bdrk_chaos_")), "Bedrock's own: {message}");
    assert_eq!((&message["type"], &message["content"][0]["type"]), (&json!("message"), &json!("text")));
    assert_eq!(r.header("x-sluice-dropped"), None, "nothing is left out of a native request");

    let s = client.stream("/v1/messages", &turn("claude-sonnet", true)).await?;
    assert_eq!((s.status, s.header("x-sluice-upstream")), (200, Some("bedrock")), "{}", s.body);
    let kinds = types(&s);
    assert_eq!(kinds.first().map(String::as_str), Some("message_start"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("message_stop"), "{kinds:?}");
    let start = s.events.first().map(|e| e.json()).unwrap_or_default();
    assert!(start["message"]["id"].as_str().is_some_and(|id| id.starts_with("msg_bdrk_chaos_")), "{start}");
    let text: String = s.events.iter().filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string)).collect();
    assert!(text.starts_with("The upstream said"), "{text:?}");
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "bedrock"), ("outcome", "ok")]), 2.0);
    Ok(())
}

#[tokio::test]
async fn bedrocks_errors_reach_a_messages_client_in_anthropics_shape() -> anyhow::Result<()> {
    let (anthropic, bedrock, gw) = gateway("error").await?;
    anthropic.script(json!({"status": 529}))?;
    bedrock.script(json!({"status": 400, "error_code": "ValidationException"}))?;
    let r = gw.client()?.post("/v1/messages", turn("claude-sonnet", false).to_string(), &[]).await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!((&r.json()["type"], &r.json()["error"]["type"]), (&json!("error"), &json!("invalid_request_error")));

    // Throttled in its stream before any content, while Anthropic is overloaded: 529,
    // with when to come back.
    bedrock.script(json!({"error_after_chunks": 0, "error_code": "ThrottlingException"}))?;
    let r = gw.client()?.post("/v1/messages", turn("claude-sonnet", true).to_string(), &[]).await?;
    assert_eq!(r.status, 529, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert!(r.header("retry-after").is_some_and(|s| (1..=60).contains(&s.parse::<u64>().unwrap_or(0))));
    // A chat client is told the same in OpenAI's terms: 503, with when to come back.
    let s = gw.client()?.chat_stream("claude-sonnet", json!({})).await?;
    assert_eq!(s.status, 503, "{}", s.body);
    assert!(s.body.contains("upstreams_unavailable") && s.header("retry-after").is_some(), "{}", s.body);
    Ok(())
}

#[tokio::test]
async fn a_cut_anthropic_stream_is_continued_on_bedrock_as_a_prefill() -> anyhow::Result<()> {
    let (anthropic, bedrock, gw) = gateway("resume").await?;
    anthropic.script(json!({"chunks": 8}))?;
    let body = json!({"model": "claude-sonnet", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hello there"}]});
    let whole = gw.client()?.stream("/v1/messages", &body).await?;
    anthropic.script(json!({"chunks": 8, "reset_after_chunks": 3}))?;
    bedrock.script(json!({"chunks": 8}))?;
    let s = gw.client()?.stream("/v1/messages", &body).await?;
    let text = |s: &SseReply| -> String {
        s.events.iter().filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string)).collect()
    };
    assert_eq!(types(&s).last().map(String::as_str), Some("message_stop"), "{:?}", s.datas());
    assert_eq!(text(&s), text(&whole));
    assert_eq!(bedrock.requests(), 1, "one prefill");
    let usage = s.events.iter().map(|e| e.json()).find(|e| e["type"] == "message_delta").unwrap_or_default();
    assert_eq!(usage["usage"]["output_tokens"], 8, "3 words of the first attempt, 5 continued: {usage}");
    Ok(())
}

#[tokio::test]
async fn another_bedrock_model_is_sent_a_translation_through_converse() -> anyhow::Result<()> {
    let (_, bedrock, gw) = gateway("error").await?;
    let r = gw.client()?.post("/v1/messages", turn("llama", false).to_string(), &[]).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("bedrock")), "{}", r.text());
    let message = r.json();
    assert_eq!(message["type"], "message");
    assert!(!message["id"].as_str().unwrap_or_default().starts_with("msg_bdrk_"), "the gateway's: {message}");
    assert!(r.header("x-sluice-dropped").is_some_and(|d| d.contains("thinking")), "{:?}", r.header("x-sluice-dropped"));
    assert_eq!(bedrock.requests(), 1);
    Ok(())
}
