//! Request-side regressions: what must never be sent to a native target, and what
//! must always be (each test names the bug other gateways shipped).

use serde_json::{Value, json};
use sluice_providers::{ChatRequest, Protocol, TranslateError, WEB_SEARCH_MAX_USES, build};

use crate::fixture::{read, target};

#[test]
fn stream_options_are_never_sent_to_native_targets() {
    // BerriAI/litellm#9916: Bedrock rejects the forwarded `include_usage`.
    let req: ChatRequest = serde_json::from_slice(&read(Protocol::Anthropic, "text_stream", "request.json")).unwrap();
    assert!(req.stream_options.is_some());
    for protocol in [Protocol::Anthropic, Protocol::VertexAnthropic, Protocol::Gemini, Protocol::VertexGemini] {
        let native = build(&target(protocol), &req, true).unwrap();
        let body = std::str::from_utf8(&native.body).unwrap();
        assert!(!body.contains("stream_options") && !body.contains("include_usage"), "{protocol:?}: {body}");
    }
}

#[test]
fn anthropic_max_tokens_is_always_set() {
    // Envoy AI Gateway sent 0 and let the API reject it; the field is required.
    for max in [json!(null), json!(0)] {
        let req: ChatRequest =
            serde_json::from_value(json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": max }))
                .unwrap();
        for protocol in [Protocol::Anthropic, Protocol::VertexAnthropic] {
            let body: Value = serde_json::from_slice(&build(&target(protocol), &req, false).unwrap().body).unwrap();
            assert_eq!(body["max_tokens"], 1024, "{protocol:?} {max}");
        }
    }
}

#[test]
fn fields_a_target_cannot_express_are_refused_by_name() {
    let natives = [Protocol::Anthropic, Protocol::VertexAnthropic, Protocol::Gemini, Protocol::VertexGemini];
    let cases = [
        (json!({ "n": 2 }), "n", &natives[..]),
        (json!({ "logprobs": true }), "logprobs", &natives[..]),
        (json!({ "logit_bias": { "50256": -100 } }), "logit_bias", &natives[..]),
        (json!({ "tools": [{ "type": "custom", "function": { "name": "x" } }] }), "tools[0].type", &natives[..]),
        (json!({ "presence_penalty": 0.5 }), "presence_penalty", &natives[..2]),
        (json!({ "temperature": 1.5 }), "temperature", &natives[..2]),
    ];
    for (extra, field, protocols) in cases {
        let mut req = json!({ "messages": [{ "role": "user", "content": "hi" }] });
        req.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let req: ChatRequest = serde_json::from_value(req).unwrap();
        for &protocol in protocols {
            let e = build(&target(protocol), &req, false).unwrap_err();
            assert!(matches!(&e, TranslateError::Unsupported { field: f, .. } if f == field), "{protocol:?}: {e}");
        }
    }
    // What a target can express is sent, and unset or zero values pass everywhere.
    let req: ChatRequest = serde_json::from_value(json!({
        "messages": [{ "role": "user", "content": "hi" }],
        "n": 1, "logprobs": false, "presence_penalty": 0, "frequency_penalty": 0.25, "logit_bias": {}
    }))
    .unwrap();
    let body: Value = serde_json::from_slice(&build(&target(Protocol::Gemini), &req, false).unwrap().body).unwrap();
    assert_eq!(body["generationConfig"]["frequencyPenalty"], 0.25);
    assert!(build(&target(Protocol::Anthropic), &req, false).is_err(), "frequency_penalty 0.25");
}

#[test]
fn a_hosted_web_search_goes_to_anthropics_search_and_is_refused_where_there_is_none() {
    // A search never silently dropped (maximhq/bifrost#3596 dropped hosted tools).
    let req: ChatRequest = serde_json::from_value(json!({
        "messages": [{ "role": "user", "content": "news?" }], "web_search_options": {}
    }))
    .unwrap();
    for protocol in [Protocol::Anthropic, Protocol::VertexAnthropic] {
        let body: Value = serde_json::from_slice(&build(&target(protocol), &req, false).unwrap().body).unwrap();
        let search = json!({ "type": "web_search_20250305", "name": "web_search", "max_uses": WEB_SEARCH_MAX_USES });
        assert_eq!(body["tools"], json!([search]), "{protocol:?}");
    }
    for protocol in [Protocol::Gemini, Protocol::VertexGemini, Protocol::Bedrock] {
        let e = build(&target(protocol), &req, false).unwrap_err();
        assert!(
            matches!(&e, TranslateError::Unsupported { field, .. } if field == "web_search_options"),
            "{protocol:?}: {e}"
        );
        // A route that omits hosted tools sends them the request without it.
        let omitting = sluice_providers::Target { omit_hosted_tools: true, ..target(protocol) };
        let body = String::from_utf8(build(&omitting, &req, false).unwrap().body.to_vec()).unwrap();
        assert!(!body.contains("search"), "{protocol:?}: {body}");
    }
}
