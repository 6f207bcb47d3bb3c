//! Bedrock errors: HTTP errors classified by name before status, exception frames
//! before and after content, JSON bodies where frames were expected, cut streams.

use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sluice_providers::ErrorKind;
use sluice_providers::eventstream::{encode_event, encode_exception};

use crate::bedrock::{MODEL, encoded_stream, fixture, opts, target, transcode};

fn throttling_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    );
    h.insert("x-amzn-requestid", HeaderValue::from_static("b7ecb4a2-0000-4e3c-9a0b-EXAMPLE"));
    h
}

/// Regression (ThrottlingException documented as both 400 and 429): the name decides.
#[test]
fn throttling_as_400_is_retryable() {
    let body = br#"{"message":"Too many requests, please wait before trying again."}"#;
    for status in [400, 429] {
        let e = sluice_providers::classify(&target(MODEL), status, &throttling_headers(), body, 0);
        assert_eq!(e.kind, ErrorKind::RateLimited, "status {status}");
        assert!(e.kind.retryable());
        assert_eq!(e.status, status);
        assert_eq!(e.message, "Too many requests, please wait before trying again.");
    }
    // The name may also come in the body only.
    let body = br#"{"__type":"com.amazon.bedrock#ThrottlingException","message":"Rate exceeded"}"#;
    let e = sluice_providers::classify(&target(MODEL), 400, &HeaderMap::new(), body, 0);
    assert_eq!(e.kind, ErrorKind::RateLimited);
}

#[test]
fn errors_are_classified_by_name() {
    let cases: [(u16, &str, &str, ErrorKind); 9] = [
        (400, "ValidationException", "The provided model identifier is invalid.", ErrorKind::InvalidRequest),
        (400, "ValidationException", "Input is too long for requested model.", ErrorKind::ContextLength),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
            ErrorKind::Auth,
        ),
        (403, "ExpiredTokenException", "The security token included in the request is expired", ErrorKind::AuthExpired),
        (404, "ResourceNotFoundException", "Model not found", ErrorKind::NotFound),
        (408, "ModelTimeoutException", "Model timed out", ErrorKind::Timeout),
        (424, "ModelErrorException", "The model produced an error", ErrorKind::Server),
        (429, "ModelNotReadyException", "Model is not ready", ErrorKind::Unavailable),
        (503, "ServiceUnavailableException", "Service unavailable", ErrorKind::Unavailable),
    ];
    for (status, name, message, kind) in cases {
        let mut h = HeaderMap::new();
        h.insert(
            "x-amzn-errortype",
            HeaderValue::from_str(&format!("{name}:http://internal.amazon.com/coral/com.amazon.bedrock/")).unwrap(),
        );
        let body = json!({ "message": message }).to_string();
        let e = sluice_providers::classify(&target(MODEL), status, &h, body.as_bytes(), 0);
        assert_eq!((e.kind, e.status, e.message.as_str()), (kind, status, message), "{name}");
    }
    // A client error reaches the client in OpenAI's shape with Bedrock's message.
    let mut h = HeaderMap::new();
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    );
    let e = sluice_providers::classify(&target(MODEL), 400, &h, br#"{"message":"temperature: must be <= 1"}"#, 0);
    let body: Value = serde_json::from_slice(&e.openai_body).unwrap();
    assert_eq!(body["error"]["message"], "temperature: must be <= 1");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "ValidationException");
    assert!(!e.kind.retryable());
}

fn frames(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, payload) in events {
        let payload = payload.to_string();
        let frame = if name.ends_with("Exception") {
            encode_exception(name, payload.as_bytes())
        } else {
            encode_event(name, payload.as_bytes())
        };
        out.extend_from_slice(&frame.unwrap());
    }
    out
}

/// Regression (200 + exception frame not surfaced, no failover): an exception before
/// any content is a failed attempt that may fail over.
#[test]
fn exception_before_content_fails_over() {
    let bytes = frames(&[
        ("messageStart", json!({ "role": "assistant" })),
        ("throttlingException", json!({ "message": "Too many requests, please wait before trying again." })),
    ]);
    assert_eq!(transcode(&[&bytes]), vec![json!({ "error": "RateLimited", "status": 429, "before_content": true })]);
    let bytes = frames(&[("validationException", json!({ "message": "Could not process image" }))]);
    assert_eq!(transcode(&[&bytes]), vec![json!({ "error": "InvalidRequest", "status": 400, "before_content": true })]);
}

#[test]
fn exception_after_content_is_a_broken_stream() {
    let bytes = frames(&[
        ("messageStart", json!({ "role": "assistant" })),
        ("contentBlockDelta", json!({ "contentBlockIndex": 0, "delta": { "text": "Hel" } })),
        ("modelStreamErrorException", json!({ "message": "A streaming error occurred. Retry your request." })),
        ("contentBlockDelta", json!({ "contentBlockIndex": 0, "delta": { "text": "lo" } })),
    ]);
    let out = transcode(&[&bytes]);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0]["choices"][0]["delta"]["content"], "Hel");
    assert_eq!(out[1], json!({ "error": "Server", "status": 500, "before_content": false }));
}

/// Regression (a JSON error body decoded as frames: "ChecksumMismatch"): a body that is
/// JSON is classified as the error it is.
#[test]
fn a_json_body_is_not_decoded_as_frames() {
    let body = br#"{"__type":"ValidationException","message":"The provided model identifier is invalid."}"#;
    assert_eq!(
        transcode(&[&body[..10], &body[10..]]),
        vec![json!({ "error": "InvalidRequest", "status": 400, "before_content": true })]
    );
    let out = transcode(&[br#"{"message":"Internal error"}"#]);
    assert_eq!(out, vec![json!({ "error": "Server", "status": 500, "before_content": true })]);
}

#[test]
fn a_stream_cut_short_is_an_error() {
    let bytes = encoded_stream(&fixture("converse-stream-text", "stream.json"));
    let out = transcode(&[&bytes[..bytes.len() - 5]]);
    assert_eq!(out.last().unwrap()["before_content"], false);
    // Whole frames but no metadata event: the usage is missing, the stream is broken.
    let frames = fixture("converse-stream-text", "stream.json");
    let without_metadata = json!(frames.as_array().unwrap()[..5]);
    let out = transcode(&[&encoded_stream(&without_metadata)]);
    assert_eq!(out.last().unwrap()["error"], "Server");
}

#[test]
fn a_converse_answer_without_output_is_malformed() {
    let e = sluice_providers::parse(&target(MODEL), br#"{"stopReason":"end_turn"}"#, &opts()).unwrap_err();
    assert!(e.kind.retryable());
    let e =
        sluice_providers::parse(&target(MODEL), br#"{"__type":"ThrottlingException","message":"slow down"}"#, &opts())
            .unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited);
}
