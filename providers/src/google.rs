//! Google's error envelope, shared by Gemini (AI Studio and Vertex) and Claude on
//! Vertex: `{"error":{"code","message","status","details":[…]}}` with the retry delay in
//! a `google.rpc.RetryInfo` detail and the reason in a `google.rpc.ErrorInfo` detail.

use std::time::Duration;

use serde_json::Value;

use crate::error::{says_context_length, says_expired};
use crate::{ErrorKind, UpstreamError, retry};

/// A Google error object (the value of `"error"`), read.
pub(crate) struct GoogleError {
    pub kind: ErrorKind,
    pub message: String,
    pub retry_after: Option<Duration>,
    /// The `status` name, e.g. `RESOURCE_EXHAUSTED`.
    pub status_name: String,
}

/// An error body's JSON, unwrapping the one-element array Vertex sometimes sends;
/// `None` if the body is not JSON.
pub(crate) fn error_body(body: &[u8]) -> Option<Value> {
    match serde_json::from_slice::<Value>(body).ok()? {
        Value::Array(items) => Some(items.into_iter().next().unwrap_or(Value::Null)),
        v => Some(v),
    }
}

impl GoogleError {
    /// The error, its `status` name as the code; the headers' retry hint wins over
    /// the body's `RetryInfo`.
    pub(crate) fn into_upstream(self, status: u16, hinted: Option<Duration>) -> UpstreamError {
        UpstreamError::new(self.kind, status, self.message, Some(self.status_name.as_str()).filter(|s| !s.is_empty()))
            .with_retry_after(hinted.or(self.retry_after))
    }
}

/// Reads `err` if it is a Google error object (it has a `status` name or a numeric `code`).
pub(crate) fn read(status: u16, err: &Value) -> Option<GoogleError> {
    let status_name = err["status"].as_str();
    if status_name.is_none() && !err["code"].is_u64() {
        return None;
    }
    let status_name = status_name.unwrap_or("").to_owned();
    let message = err["message"].as_str().unwrap_or("").to_owned();
    let details = err["details"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let detail_type = |d: &Value, t: &str| d["@type"].as_str().is_some_and(|s| s.ends_with(t));
    let retry_after = details
        .iter()
        .filter(|d| detail_type(d, "google.rpc.RetryInfo"))
        .find_map(|d| d["retryDelay"].as_str().and_then(retry::proto_duration));
    let reason_expired =
        details.iter().any(|d| detail_type(d, "google.rpc.ErrorInfo") && d["reason"] == "ACCESS_TOKEN_EXPIRED");
    let code = err["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(status);
    let kind = match status_name.as_str() {
        "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
        "UNAVAILABLE" => ErrorKind::Unavailable,
        "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => ErrorKind::Server,
        "UNAUTHENTICATED" if reason_expired || says_expired(&message) => ErrorKind::AuthExpired,
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => ErrorKind::Auth,
        "NOT_FOUND" => ErrorKind::NotFound,
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" if says_context_length(&message) => {
            ErrorKind::ContextLength
        }
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => ErrorKind::InvalidRequest,
        _ if code == 401 && (reason_expired || says_expired(&message)) => ErrorKind::AuthExpired,
        _ => ErrorKind::from_status(code),
    };
    Some(GoogleError { kind, message, retry_after, status_name })
}
