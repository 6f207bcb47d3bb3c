//! Errors the gateway answers with, classified once at the edge (docs/contributing.md (conventions, rule 3)): one
//! place maps an error to HTTP status, OpenAI error body and the `code` metric label.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::outcome::Passthrough;

/// An error answered to the client in the OpenAI shape (docs/design.md §3).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Bad JSON, missing or invalid fields.
    #[error("{0}")]
    InvalidRequest(String),
    /// A member the gateway does not serve (e.g. `previous_response_id`: no response
    /// store); `param` names it.
    #[error("{message}")]
    UnsupportedParameter {
        /// The member.
        param: &'static str,
        /// Why.
        message: String,
    },
    /// Missing or unknown API key.
    #[error("{0}")]
    InvalidApiKey(String),
    /// The wallet cannot cover the reservation.
    #[error("{0}")]
    InsufficientQuota(String),
    /// No route serves the model.
    #[error("the model {0:?} does not exist or you do not have access to it")]
    ModelNotFound(String),
    /// The route cannot serve this endpoint (e.g. count_tokens without a candidate that speaks Messages).
    #[error("{0}")]
    NotServed(String),
    /// Body over the limit.
    #[error("request body is larger than the limit of {0} bytes")]
    RequestTooLarge(usize),
    /// An endpoint called with a method it does not serve.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The body did not arrive in time.
    #[error("the request body did not arrive within {}s", .0.as_secs())]
    RequestTimeout(Duration),
    /// Every candidate throttled after backoff.
    #[error("{message}")]
    RateLimited {
        /// What happened.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// Over a limit of the key or its account (docs/design.md §5b): the client's, never
    /// counted against an upstream or an error budget.
    #[error("{message}")]
    LimitExceeded {
        /// What happened, naming the limit.
        message: String,
        /// The OpenAI `type`: `requests`, `tokens` or `insufficient_quota`.
        kind: &'static str,
        /// A spend cap (`insufficient_quota`, not worth retrying soon).
        spend: bool,
        /// When to try again.
        retry_after: Duration,
    },
    /// Every candidate was overloaded (Anthropic's 529) or throttled, and not all
    /// throttled: a 503 that says when to come back (Messages: Anthropic's 529).
    #[error("{message}")]
    Overloaded {
        /// What happened.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// Every candidate failed.
    #[error("{0}")]
    UpstreamsUnavailable(String),
    /// The route's deadline ran out.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// The ledger cannot be reached and no balance grant held in memory covers the
    /// request, or a settlement did not commit in time (docs/design.md §5a).
    #[error("{0}")]
    LedgerUnavailable(String),
    /// The gateway is not ready (no config, or a ledger it cannot use right now).
    #[error("{0}")]
    NotReady(String),
    /// A failure that is the gateway's own (e.g. the ledger refused a value it sent).
    #[error("{0}")]
    Internal(String),
    /// A non-retryable upstream answer, passed through unchanged.
    #[error("upstream answered {}", .0.status)]
    Upstream(Box<Passthrough>),
}

impl ApiError {
    /// HTTP status, OpenAI `type` and `code`.
    pub fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_request"),
            ApiError::UnsupportedParameter { .. } => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", "unsupported_parameter")
            }
            ApiError::InvalidApiKey(_) => (StatusCode::UNAUTHORIZED, "authentication_error", "invalid_api_key"),
            ApiError::InsufficientQuota(_) => {
                (StatusCode::PAYMENT_REQUIRED, "insufficient_quota", "insufficient_quota")
            }
            ApiError::ModelNotFound(_) => (StatusCode::NOT_FOUND, "invalid_request_error", "model_not_found"),
            ApiError::NotServed(_) => (StatusCode::NOT_FOUND, "invalid_request_error", "not_served"),
            ApiError::RequestTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", "request_too_large")
            }
            ApiError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method_not_allowed")
            }
            ApiError::RequestTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "invalid_request_error", "request_timeout"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "rate_limited"),
            ApiError::LimitExceeded { kind, spend, .. } => {
                (StatusCode::TOO_MANY_REQUESTS, kind, if *spend { "insufficient_quota" } else { "rate_limit_exceeded" })
            }
            ApiError::UpstreamsUnavailable(_) | ApiError::Overloaded { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "api_error", "upstreams_unavailable")
            }
            ApiError::DeadlineExceeded(_) => (StatusCode::GATEWAY_TIMEOUT, "api_error", "deadline_exceeded"),
            ApiError::LedgerUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", "ledger_unavailable"),
            ApiError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", "not_ready"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "api_error", "internal_error"),
            ApiError::Upstream(p) => (p.status, "upstream_error", "upstream_error"),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// Whether this answer counts as a bad event for error budgets (§2): 5xx, and 429
    /// after every candidate was throttled. Client errors are neither good nor bad.
    pub fn is_bad(&self) -> bool {
        let status = self.status();
        status.is_server_error() || matches!(self, ApiError::RateLimited { .. })
    }

    /// The OpenAI-shaped JSON body.
    pub fn body(&self) -> serde_json::Value {
        let (_, kind, code) = self.parts();
        let mut body = serde_json::json!({"error": {"message": self.to_string(), "type": kind, "code": code}});
        if let ApiError::UnsupportedParameter { param, .. } = self {
            body["error"]["param"] = serde_json::json!(param);
        }
        body
    }
}

/// The Messages error `type` of a status (docs/design.md §12).
fn messages_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Anthropic's 529, for when every candidate is overloaded or throttling.
fn overloaded() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

impl ApiError {
    /// The answer in the inbound API's own shape: OpenAI's for the OpenAI endpoints,
    /// Anthropic's for `/v1/messages` (docs/design.md §12).
    pub fn respond(self, endpoint: crate::endpoint::Endpoint) -> Response {
        if endpoint == crate::endpoint::Endpoint::Messages { self.messages_response() } else { self.into_response() }
    }

    /// The Messages error answer: `{"type":"error","error":{"type","message"}}`. An
    /// upstream's own Messages error passes unchanged (clients match its wording);
    /// another upstream's error is re-shaped with its message.
    fn messages_response(self) -> Response {
        let self_limit = self.limit_retry();
        let (status, message) = match self {
            ApiError::Upstream(p) => {
                let Passthrough { status, headers, body } = *p;
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if v["type"] == "error" && v["error"]["type"].is_string() {
                    let mut response = (status, body).into_response();
                    let ct = headers.get(header::CONTENT_TYPE).cloned();
                    response
                        .headers_mut()
                        .insert(header::CONTENT_TYPE, ct.unwrap_or(HeaderValue::from_static("application/json")));
                    return response;
                }
                let message = v["error"]["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(1000).collect());
                (status, message)
            }
            ApiError::RateLimited { ref message, retry_after } | ApiError::Overloaded { ref message, retry_after } => {
                let body = sluice_providers::messages::error_body("overloaded_error", message);
                let mut response = (overloaded(), axum::Json(body)).into_response();
                // Claude Code stops retrying past 60 s.
                let secs = retry_after.as_secs_f64().ceil().clamp(1.0, 60.0) as u64;
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return response;
            }
            other => (other.status(), other.to_string()),
        };
        let body = sluice_providers::messages::error_body(messages_type(status), &message);
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::PAYMENT_REQUIRED {
            // A budget refusal does not pass by retrying.
            response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        }
        limit_headers(&self_limit, response.headers_mut());
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Upstream(p) = self {
            let Passthrough { status, headers, body } = *p;
            let mut response = (status, body).into_response();
            if let Some(ct) = headers.get(header::CONTENT_TYPE) {
                response.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
            }
            return response;
        }
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        if let ApiError::RateLimited { retry_after, .. } | ApiError::Overloaded { retry_after, .. } = &self {
            let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            // Retry-After has whole seconds; clients that read the precise hint get it too.
            response.headers_mut().insert("retry-after-ms", HeaderValue::from(retry_after.as_millis() as u64));
        }
        limit_headers(&self.limit_retry(), response.headers_mut());
        response
    }
}

impl ApiError {
    /// For a limit refusal: when to retry, and whether retrying soon is worth it.
    fn limit_retry(&self) -> Option<(Duration, bool)> {
        match self {
            ApiError::LimitExceeded { retry_after, spend, .. } => Some((*retry_after, !*spend)),
            _ => None,
        }
    }
}

/// `retry-after` (whole seconds, at least 1), `retry-after-ms`, and for a spend cap
/// `x-should-retry: false` (the OpenAI and Anthropic SDKs honour all three).
fn limit_headers(limit: &Option<(Duration, bool)>, headers: &mut http::HeaderMap) {
    let Some((retry_after, retry)) = limit else { return };
    let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    headers.insert("retry-after-ms", HeaderValue::from(retry_after.as_millis().max(1) as u64));
    if !retry {
        headers.insert("x-should-retry", HeaderValue::from_static("false"));
    }
}
