//! Bedrock Converse: fixtures from AWS's documented Converse / ConverseStream examples
//! (`fixtures/bedrock/`, streams encoded as real event-stream frames), every-split
//! stream properties, and the request and usage regressions (errors: `bedrock_errors`).

use http::HeaderMap;
use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_providers::eventstream::{encode_event, encode_exception};
use sluice_providers::{AnswerOpts, ChatRequest, Out, Protocol, Target, TranslateError};

pub(crate) const MODEL: &str = "anthropic.claude-3-sonnet-20240229-v1:0";

pub(crate) fn target(model: &str) -> Target<'_> {
    Target::new(Protocol::Bedrock, model, 4096)
}

pub(crate) fn opts() -> AnswerOpts {
    AnswerOpts { id: "chatcmpl-test".to_owned(), created: 1_700_000_000 }
}

pub(crate) fn fixture(case: &str, file: &str) -> Value {
    let path = format!("{}/tests/fixtures/bedrock/{case}/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn request(v: Value) -> ChatRequest {
    serde_json::from_value(v).unwrap()
}

/// The fixture's `stream.json` (`[{event|exception, payload}]`) as event-stream bytes.
pub(crate) fn encoded_stream(frames: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames.as_array().unwrap() {
        let payload = f["payload"].to_string();
        let frame = match f["event"].as_str() {
            Some(event) => encode_event(event, payload.as_bytes()),
            None => encode_exception(f["exception"].as_str().unwrap(), payload.as_bytes()),
        };
        out.extend_from_slice(&frame.unwrap());
    }
    out
}

/// What a transcoder produced, as JSON: each chunk, `"[DONE]"`, `"<done>"`, or
/// `{"error": kind, "before_content": …}`.
pub(crate) fn outputs(outs: Vec<Out>) -> Vec<Value> {
    outs.into_iter()
        .map(|o| match o {
            Out::Event { bytes, .. } => {
                let text = std::str::from_utf8(&bytes).unwrap();
                let data = text.strip_prefix("data: ").unwrap().strip_suffix("\n\n").unwrap();
                serde_json::from_str(data).unwrap_or_else(|_| json!(data))
            }
            Out::Done => json!("<done>"),
            Out::Error { error, before_content } => {
                json!({ "error": format!("{:?}", error.kind), "status": error.status, "before_content": before_content })
            }
        })
        .collect()
}

/// Transcodes `bytes` fed in the given pieces.
pub(crate) fn transcode(pieces: &[&[u8]]) -> Vec<Value> {
    let mut t = sluice_providers::transcoder(&target(MODEL), opts());
    let mut outs = Vec::new();
    for piece in pieces {
        outs.extend(t.feed(piece));
    }
    outs.extend(t.finish());
    outputs(outs)
}

fn expected_stream(case: &str) -> Vec<Value> {
    let mut chunks: Vec<Value> = fixture(case, "expected-chunks.json").as_array().unwrap().clone();
    chunks.push(json!("<done>"));
    chunks
}

fn check_build(case: &str, stream: bool) {
    let native = sluice_providers::build(&target(MODEL), &request(fixture(case, "request.json")), stream).unwrap();
    let expected = fixture(case, "native-request.json");
    assert_eq!(native.path, expected["path"].as_str().unwrap(), "{case}: path");
    let body: Value = serde_json::from_slice(&native.body).unwrap();
    assert_eq!(body, expected["body"], "{case}: body");
    assert!(native.headers.is_empty(), "{case}: auth is the gateway's to add");
}

fn check_parse(case: &str) {
    let response = serde_json::to_vec(&fixture(case, "response.json")).unwrap();
    let completion = sluice_providers::parse(&target(MODEL), &response, &opts()).unwrap();
    let body: Value = serde_json::from_slice(&completion.body).unwrap();
    assert_eq!(body, fixture(case, "expected.json"), "{case}");
}

#[test]
fn converse_text_fixture() {
    check_build("converse-text", false);
    check_parse("converse-text");
}

#[test]
fn converse_tool_use_fixture() {
    check_build("converse-tool-use", false);
    check_parse("converse-tool-use");
}

#[test]
fn converse_stream_text_fixture() {
    check_build("converse-stream-text", true);
    let bytes = encoded_stream(&fixture("converse-stream-text", "stream.json"));
    assert_eq!(transcode(&[&bytes]), expected_stream("converse-stream-text"));
}

/// Regressions: parallel tool calls streamed with one index (a text block between two
/// calls must not take an index), streamed tool arguments never folded in, and a
/// no-argument call streamed as `""` instead of `"{}"`.
#[test]
fn converse_stream_tool_indexes_count_calls_not_blocks() {
    let bytes = encoded_stream(&fixture("converse-stream-tools", "stream.json"));
    assert_eq!(transcode(&[&bytes]), expected_stream("converse-stream-tools"));
}

/// Regression (Bedrock stream frames lost or misparsed across reads): every split of
/// the byte stream, and every byte fed alone, gives the same OpenAI output.
#[test]
fn every_split_of_the_event_stream_gives_the_same_output() {
    for case in ["converse-stream-text", "converse-stream-tools"] {
        let bytes = encoded_stream(&fixture(case, "stream.json"));
        let whole = expected_stream(case);
        for at in 0..=bytes.len() {
            assert_eq!(transcode(&[&bytes[..at], &bytes[at..]]), whole, "{case} split at {at}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(transcode(&singles), whole, "{case} byte by byte");
    }
}

proptest! {
    #[test]
    fn random_multi_splits_give_the_same_output(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20)) {
        let bytes = encoded_stream(&fixture("converse-stream-tools", "stream.json"));
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for cut in cuts {
            pieces.push(&bytes[from..cut]);
            from = cut;
        }
        pieces.push(&bytes[from..]);
        prop_assert_eq!(transcode(&pieces), expected_stream("converse-stream-tools"));
    }

    /// A malformed native stream is a failed attempt, never a panic.
    #[test]
    fn garbage_streams_end_in_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let out = transcode(&[&bytes]);
        prop_assert!(out.last().is_some_and(|o| o.get("error").is_some() || o == "<done>"));
    }

    #[test]
    fn garbage_answers_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = sluice_providers::parse(&target(MODEL), &bytes, &opts());
        let _ = sluice_providers::classify(&target(MODEL), 400, &HeaderMap::new(), &bytes, 0);
    }
}

/// Regression (model ids and ARNs not encoded: "model identifier is invalid", or the
/// JSON error body fed to the frame decoder): the id is ONE percent-encoded segment.
#[test]
fn percent_encoded_model_ids_and_arns() {
    let req = request(json!({ "messages": [{ "role": "user", "content": "hi" }] }));
    let arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123";
    let native = sluice_providers::build(&target(arn), &req, true).unwrap();
    assert_eq!(
        native.path,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fabc123/converse-stream"
    );
    let profile =
        sluice_providers::build(&target("us.anthropic.claude-3-5-sonnet-20241022-v2:0"), &req, false).unwrap();
    assert_eq!(profile.path, "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse");
}

/// Regression (`stream_options` forwarded to Bedrock: "extraneous key
/// [include_usage] is not permitted").
#[test]
fn stream_options_are_never_sent() {
    let native =
        sluice_providers::build(&target(MODEL), &request(fixture("converse-stream-text", "request.json")), true)
            .unwrap();
    let body = std::str::from_utf8(&native.body).unwrap();
    assert!(!body.contains("stream_options") && !body.contains("include_usage") && !body.contains("\"stream\""));
}
/// Regression (Bedrock prompt_tokens excluding cache reads and writes: wrong or
/// negative cost): prompt_tokens = inputTokens + cacheRead + cacheWrite.
#[test]
fn cache_tokens_are_inside_prompt_tokens() {
    let mut response = fixture("converse-text", "response.json");
    response["usage"] = json!({ "inputTokens": 3, "outputTokens": 60, "totalTokens": 1563,
        "cacheReadInputTokens": 1200, "cacheWriteInputTokens": 300 });
    let completion = sluice_providers::parse(&target(MODEL), response.to_string().as_bytes(), &opts()).unwrap();
    assert_eq!(
        (completion.usage.prompt_tokens, completion.usage.cached_tokens, completion.usage.cache_write_tokens),
        (1503, 1200, 300)
    );
    let body: Value = serde_json::from_slice(&completion.body).unwrap();
    assert_eq!(body["usage"]["prompt_tokens"], 1503);
    assert_eq!(body["usage"]["total_tokens"], 1563);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 1200);
}

/// Regression (Bedrock demands toolConfig when the history has toolUse/toolResult
/// blocks): a follow-up turn without tools declares the tools its history names, and
/// `tool_choice: none`, which Converse cannot express there, is refused by name.
#[test]
fn tool_history_without_tools_still_sends_tool_config() {
    let mut req = fixture("converse-stream-text", "request.json");
    req.as_object_mut().unwrap().remove("tools");
    let native = sluice_providers::build(&target(MODEL), &request(req.clone()), false).unwrap();
    let body: Value = serde_json::from_slice(&native.body).unwrap();
    assert_eq!(body["toolConfig"]["tools"][0]["toolSpec"]["name"], "top_song");

    req["tools"] = fixture("converse-stream-text", "request.json")["tools"].clone();
    req["tool_choice"] = json!("none");
    let err = sluice_providers::build(&target(MODEL), &request(req), false).unwrap_err();
    assert_eq!(err.field(), "tool_choice");

    // Without tool history, `none` simply leaves the tools out.
    let mut req = fixture("converse-tool-use", "request.json");
    req["tool_choice"] = json!("none");
    let native = sluice_providers::build(&target(MODEL), &request(req), false).unwrap();
    let body: Value = serde_json::from_slice(&native.body).unwrap();
    assert!(body.get("toolConfig").is_none());
}

#[test]
fn tool_choice_required_and_named() {
    let mut req = fixture("converse-tool-use", "request.json");
    req["tool_choice"] = json!("required");
    let body: Value =
        serde_json::from_slice(&sluice_providers::build(&target(MODEL), &request(req.clone()), false).unwrap().body)
            .unwrap();
    assert_eq!(body["toolConfig"]["toolChoice"], json!({ "any": {} }));
    req["tool_choice"] = json!({ "type": "function", "function": { "name": "top_song" } });
    let body: Value =
        serde_json::from_slice(&sluice_providers::build(&target(MODEL), &request(req), false).unwrap().body).unwrap();
    assert_eq!(body["toolConfig"]["toolChoice"], json!({ "tool": { "name": "top_song" } }));
}

#[test]
fn images_are_sent_as_bytes_and_fields_bedrock_cannot_express_are_refused() {
    let req = request(json!({ "messages": [{ "role": "user", "content": [
        { "type": "text", "text": "What is in this image?" },
        { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } },
    ]}]}));
    let body: Value =
        serde_json::from_slice(&sluice_providers::build(&target(MODEL), &req, false).unwrap().body).unwrap();
    assert_eq!(
        body["messages"][0]["content"][1],
        json!({ "image": { "format": "png", "source": { "bytes": "iVBORw0KGgo=" } } })
    );

    let url_image = request(json!({ "messages": [{ "role": "user", "content": [
        { "type": "image_url", "image_url": { "url": "https://example.com/cat.png" } },
    ]}]}));
    let err = sluice_providers::build(&target(MODEL), &url_image, false).unwrap_err();
    assert!(
        matches!(err, TranslateError::Unsupported { ref field, .. } if field == "messages[0].content[0].image_url")
    );

    let n2 = request(json!({ "n": 2, "messages": [{ "role": "user", "content": "hi" }] }));
    assert_eq!(sluice_providers::build(&target(MODEL), &n2, false).unwrap_err().field(), "n");
}

#[test]
fn max_tokens_prefers_max_completion_tokens_then_the_default() {
    let build = |v: Value| -> Value {
        serde_json::from_slice(&sluice_providers::build(&target(MODEL), &request(v), false).unwrap().body).unwrap()
    };
    let msgs = json!([{ "role": "user", "content": "hi" }]);
    assert_eq!(
        build(json!({ "messages": msgs, "max_tokens": 10, "max_completion_tokens": 20 }))["inferenceConfig"]["maxTokens"],
        20
    );
    assert_eq!(build(json!({ "messages": msgs }))["inferenceConfig"]["maxTokens"], 4096);
}
