//! `count_tokens` on every Messages protocol: each one's count endpoint, the envelope
//! its count request is sent in, and Bedrock's answer in Anthropic's shape.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use super::header;
use crate::messages::{BEDROCK_VERSION, native, token_count_of_bedrock};
use crate::{ErrorKind, Protocol, Target};

/// What Claude Code counts: a system message inside `messages`, tools, thinking.
const COUNT: &[u8] = br#"{"model":"claude-sonnet","thinking":{"type":"enabled","budget_tokens":2048},
    "context_management":{"edits":[]},
    "tools":[{"name":"Read","input_schema":{"type":"object"}}],
    "messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#;

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_default()
}

#[test]
fn vertex_counts_at_its_count_endpoint_with_the_model_in_the_body() {
    let target = Target {
        gcp_project: Some("p"),
        gcp_location: Some("us-east5"),
        ..Target::new(Protocol::VertexAnthropic, "claude-sonnet-4-5@20250929", 1024)
    };
    let headers = [header("anthropic-version", "2023-06-01"), header("anthropic-beta", "claude-code-20250219")];
    let n = native(&target, &bytes::Bytes::from_static(COUNT), &headers, false, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.path, "/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict");
    let v = json_of(&n.body);
    assert_eq!(v["model"], "claude-sonnet-4-5@20250929", "the candidate's model, not the client's: {v}");
    assert_eq!(v["anthropic_version"], "vertex-2023-10-16");
    assert!(v.get("context_management").is_none(), "what Vertex refuses is left out: {v}");
    assert_eq!(v["system"], json!([{"type": "text", "text": "be brief"}]), "the system entry left messages");
    assert_eq!(v["tools"][0]["name"], "Read");
    assert!(n.headers.is_empty(), "no beta Vertex does not know, no version header: {:?}", n.headers);
    // Streaming says nothing about a count.
    let streamed =
        native(&target, &bytes::Bytes::from_static(COUNT), &headers, true, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(streamed.path, n.path);
}

#[test]
fn bedrock_counts_the_invoke_model_body_it_would_send_base64() {
    let target = Target::new(Protocol::Bedrock, "us.anthropic.claude-sonnet-4-5-20250929-v1:0", 1024);
    let headers = [header("anthropic-beta", "interleaved-thinking-2025-05-14,claude-code-20250219")];
    let n = native(&target, &bytes::Bytes::from_static(COUNT), &headers, false, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.path, "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens", "the foundation model");
    assert!(n.headers.is_empty());
    let v = json_of(&n.body);
    let Some(encoded) = v["input"]["invokeModel"]["body"].as_str() else { panic!("no invokeModel body: {v}") };
    assert_eq!(v["input"].as_object().map(|o| o.len()), Some(1), "invokeModel only: {v}");
    let invoke = json_of(&B64.decode(encoded).unwrap_or_default());
    assert_eq!(invoke["anthropic_version"], BEDROCK_VERSION);
    assert_eq!(invoke["anthropic_beta"], json!(["interleaved-thinking-2025-05-14"]));
    assert_eq!(invoke["max_tokens"], 2049, "InvokeModel requires one above the thinking budget: {invoke}");
    for gone in ["model", "context_management"] {
        assert!(invoke.get(gone).is_none(), "{gone}: {invoke}");
    }
    assert_eq!(invoke["system"], json!([{"type": "text", "text": "be brief"}]));
    // Exactly the body invoke would send, but for the bound it lacked.
    let invoked =
        native(&target, &bytes::Bytes::from_static(COUNT), &headers, false, false).unwrap_or_else(|e| panic!("{e}"));
    let mut sent = json_of(&invoked.body);
    sent["max_tokens"] = json!(2049);
    assert_eq!(invoke, sent);

    let own = native(&target, &bytes::Bytes::from_static(br#"{"max_tokens":7,"messages":[]}"#), &[], false, true)
        .unwrap_or_else(|e| panic!("{e}"));
    let v = json_of(&own.body);
    let invoke = json_of(&B64.decode(v["input"]["invokeModel"]["body"].as_str().unwrap_or("")).unwrap_or_default());
    assert_eq!(invoke["max_tokens"], 7, "the client's own bound is kept");
    let none = native(&target, &bytes::Bytes::from_static(br#"{"messages":[]}"#), &[], false, true)
        .unwrap_or_else(|e| panic!("{e}"));
    let v = json_of(&none.body);
    let invoke = json_of(&B64.decode(v["input"]["invokeModel"]["body"].as_str().unwrap_or("")).unwrap_or_default());
    assert_eq!(invoke["max_tokens"], 1);
}

#[test]
fn bedrock_counts_a_profile_by_the_foundation_model_it_names() {
    let path = |model: &str| {
        let target = Target::new(Protocol::Bedrock, model, 1024);
        native(&target, &bytes::Bytes::from_static(br#"{"messages":[]}"#), &[], false, true)
            .map(|n| n.path)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let foundation = "/model/anthropic.claude-x-v1%3A0/count-tokens";
    assert_eq!(path("anthropic.claude-x-v1:0"), foundation);
    assert_eq!(path("global.anthropic.claude-x-v1:0"), foundation);
    assert_eq!(path("arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-x-v1:0"), foundation);
    assert_eq!(path("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-x-v1:0"), foundation);
}

#[test]
fn bedrocks_count_becomes_anthropics() {
    let count = token_count_of_bedrock(br#"{"inputTokens":42}"#).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json_of(&count), json!({"input_tokens": 42}));
    for malformed in [&b"{\"input_tokens\":42}"[..], b"{\"inputTokens\":-1}", b"not json"] {
        let e = token_count_of_bedrock(malformed).err().unwrap_or_else(|| panic!("accepted {malformed:?}"));
        assert_eq!(e.kind, ErrorKind::Server, "a malformed answer fails over");
    }
}
