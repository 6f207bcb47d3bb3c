//! Gemini on AI Studio and Vertex AI: fixtures and error classification.

use std::time::Duration;

use http::HeaderMap;
use sluice_providers::{ErrorKind, Protocol, classify};

use crate::fixture::{check_all, read, target};

#[test]
fn gemini_fixtures_translate() {
    assert_eq!(check_all(Protocol::Gemini), 13);
}

#[test]
fn vertex_gemini_fixtures_translate() {
    assert_eq!(check_all(Protocol::VertexGemini), 3);
}

#[test]
fn gemini_errors_are_classified_by_status_name() {
    let cases = [
        ("resource_exhausted_429.json", 429, ErrorKind::RateLimited, Some(Duration::from_secs(22))),
        ("access_token_expired_401.json", 401, ErrorKind::AuthExpired, None),
        ("context_length_400.json", 400, ErrorKind::ContextLength, None),
        ("api_key_invalid_400.json", 400, ErrorKind::InvalidRequest, None),
        ("not_found_404.json", 404, ErrorKind::NotFound, None),
        ("deadline_504.json", 504, ErrorKind::Timeout, None),
    ];
    for protocol in [Protocol::Gemini, Protocol::VertexGemini] {
        for (file, status, kind, retry_after) in cases {
            let body = read(Protocol::Gemini, "errors", file);
            let e = classify(&target(protocol), status, &HeaderMap::new(), &body, 0);
            assert_eq!((e.kind, e.status, e.retry_after), (kind, status, retry_after), "{file}");
        }
    }
    let body = read(Protocol::Gemini, "errors", "context_length_400.json");
    let e = classify(&target(Protocol::Gemini), 400, &HeaderMap::new(), &body, 0);
    let openai: serde_json::Value = serde_json::from_slice(&e.openai_body).unwrap();
    assert_eq!(openai["error"]["code"], "context_length_exceeded");
}
