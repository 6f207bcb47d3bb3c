//! OpenAI and Azure OpenAI: paths, passthrough and error classification.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use sluice_providers::{ErrorKind, Protocol, classify};

use crate::fixture::{check_all, read, target};

#[test]
fn openai_fixtures_translate() {
    assert_eq!(check_all(Protocol::OpenAi), 2);
}

#[test]
fn azure_openai_fixtures_translate() {
    assert_eq!(check_all(Protocol::AzureOpenAi), 2);
}

#[test]
fn openai_errors_are_classified_by_code() {
    let none = HeaderMap::new();
    let t = target(Protocol::OpenAi);
    let e = classify(&t, 400, &none, &read(Protocol::OpenAi, "errors", "context_length_400.json"), 0);
    assert_eq!(e.kind, ErrorKind::ContextLength);
    // The provider's own OpenAI-shaped body passes through unchanged.
    assert_eq!(e.openai_body, read(Protocol::OpenAi, "errors", "context_length_400.json"));
    let mut h = HeaderMap::new();
    h.insert("retry-after-ms", HeaderValue::from_static("200"));
    h.insert("retry-after", HeaderValue::from_static("1"));
    let e = classify(&t, 429, &h, &read(Protocol::OpenAi, "errors", "rate_limit_429.json"), 0);
    assert_eq!((e.kind, e.retry_after), (ErrorKind::RateLimited, Some(Duration::from_millis(200))));
    let e = classify(&t, 401, &none, &read(Protocol::OpenAi, "errors", "invalid_key_401.json"), 0);
    assert_eq!(e.kind, ErrorKind::Auth);
}

#[test]
fn azure_errors_are_classified_by_code() {
    let t = target(Protocol::AzureOpenAi);
    let none = HeaderMap::new();
    let e = classify(&t, 400, &none, &read(Protocol::AzureOpenAi, "errors", "content_filter_400.json"), 0);
    assert_eq!(e.kind, ErrorKind::ContentFilter);
    assert!(!e.kind.retryable());
    let mut h = HeaderMap::new();
    h.insert("x-ms-retry-after-ms", HeaderValue::from_static("6000"));
    let e = classify(&t, 429, &h, &read(Protocol::AzureOpenAi, "errors", "rate_limit_429.json"), 0);
    assert_eq!((e.kind, e.retry_after), (ErrorKind::RateLimited, Some(Duration::from_secs(6))));
    let e = classify(&t, 404, &none, &read(Protocol::AzureOpenAi, "errors", "deployment_not_found_404.json"), 0);
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = classify(&t, 401, &none, &read(Protocol::AzureOpenAi, "errors", "token_expired_401.json"), 0);
    assert_eq!(e.kind, ErrorKind::AuthExpired);
}
