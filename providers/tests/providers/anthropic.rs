//! Anthropic Messages, direct and on Vertex AI: fixtures and error classification.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use sluice_providers::{ErrorKind, Protocol, UpstreamError, classify};

use crate::fixture::{check_all, read, target};

#[test]
fn anthropic_fixtures_translate() {
    assert_eq!(check_all(Protocol::Anthropic), 14);
}

#[test]
fn vertex_anthropic_fixtures_translate() {
    assert_eq!(check_all(Protocol::VertexAnthropic), 4);
}

fn classified(protocol: Protocol, file: &str, status: u16, headers: &HeaderMap) -> UpstreamError {
    classify(&target(protocol), status, headers, &read(protocol, "errors", file), 0)
}

#[test]
fn anthropic_errors_are_classified_by_name() {
    let none = HeaderMap::new();
    let cases = [
        ("overloaded_529.json", 529, ErrorKind::Overloaded),
        ("rate_limit_429.json", 429, ErrorKind::RateLimited),
        ("prompt_too_long_400.json", 400, ErrorKind::ContextLength),
        ("token_expired_401.json", 401, ErrorKind::AuthExpired),
        ("invalid_key_401.json", 401, ErrorKind::Auth),
        ("not_found_404.json", 404, ErrorKind::NotFound),
        ("invalid_400.json", 400, ErrorKind::InvalidRequest),
    ];
    for (file, status, kind) in cases {
        let e = classified(Protocol::Anthropic, file, status, &none);
        assert_eq!((e.kind, e.status), (kind, status), "{file}");
        assert!(!e.message.is_empty(), "{file}");
        let body: serde_json::Value = serde_json::from_slice(&e.openai_body).unwrap();
        assert_eq!(body["error"]["message"], e.message.as_str(), "{file}");
    }
    assert!(classified(Protocol::Anthropic, "overloaded_529.json", 529, &none).kind.retryable());
    let e = classified(Protocol::Anthropic, "prompt_too_long_400.json", 400, &none);
    let body: serde_json::Value = serde_json::from_slice(&e.openai_body).unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[test]
fn anthropic_retry_hints_come_from_retry_after_or_the_reset_headers() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_static("17"));
    let e = classified(Protocol::Anthropic, "rate_limit_429.json", 429, &h);
    assert_eq!(e.retry_after, Some(Duration::from_secs(17)));

    let mut h = HeaderMap::new();
    h.insert("anthropic-ratelimit-tokens-reset", HeaderValue::from_static("2026-12-01T06:00:30Z"));
    let now = sluice_providers::retry::rfc3339_unix_ms("2026-12-01T06:00:00Z").unwrap();
    let e = classify(
        &target(Protocol::Anthropic),
        429,
        &h,
        &read(Protocol::Anthropic, "errors", "rate_limit_429.json"),
        now,
    );
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));
}

#[test]
fn vertex_anthropic_reads_both_error_envelopes() {
    let none = HeaderMap::new();
    let e = classified(Protocol::VertexAnthropic, "resource_exhausted_429.json", 429, &none);
    assert_eq!((e.kind, e.retry_after), (ErrorKind::RateLimited, Some(Duration::from_secs(22))));
    assert!(e.kind.retryable());
    let e = classified(Protocol::VertexAnthropic, "access_token_expired_401.json", 401, &none);
    assert_eq!(e.kind, ErrorKind::AuthExpired);
    let e = classified(Protocol::VertexAnthropic, "overloaded_529.json", 529, &none);
    assert_eq!(e.kind, ErrorKind::Overloaded);
    // Google's envelope around Anthropic's error, as a JSON string.
    let e = classified(Protocol::VertexAnthropic, "nested_anthropic_400.json", 400, &none);
    assert_eq!(e.kind, ErrorKind::ContextLength);
    assert!(e.message.starts_with("prompt is too long"), "{}", e.message);
    let e = classified(Protocol::VertexAnthropic, "unavailable_array_503.json", 503, &none);
    assert_eq!(e.kind, ErrorKind::Unavailable);
}

#[test]
fn a_body_that_is_not_json_is_classified_by_status() {
    let e = classify(&target(Protocol::Anthropic), 502, &HeaderMap::new(), b"<html>Bad gateway</html>", 0);
    assert_eq!((e.kind, e.status), (ErrorKind::Server, 502));
    assert!(e.kind.retryable());
}
