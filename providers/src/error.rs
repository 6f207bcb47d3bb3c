//! The two error types of the crate: a request the target cannot express
//! ([`TranslateError`]) and a classified upstream error answer ([`UpstreamError`]).

use std::time::Duration;

use bytes::Bytes;

/// A request that cannot be translated for the target. The gateway answers 400
/// naming `field`; it never sends a request that would silently change the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// A field the target cannot express and whose loss would change the answer.
    #[error("`{field}` is not supported by this upstream: {reason}")]
    Unsupported { field: String, reason: String },
    /// A field whose value is malformed (e.g. a tool call whose arguments are not JSON).
    #[error("invalid `{field}`: {reason}")]
    Invalid { field: String, reason: String },
}

impl TranslateError {
    pub fn unsupported(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Unsupported { field: field.into(), reason: reason.into() }
    }
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), reason: reason.into() }
    }
    /// The field the error names.
    pub fn field(&self) -> &str {
        match self {
            Self::Unsupported { field, .. } | Self::Invalid { field, .. } => field,
        }
    }
}

/// What an upstream error means for the attempt, decided from the provider's
/// error name first and the HTTP status second (docs/design.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 429-like: a quota or rate limit; `retry_after` may say when to come back.
    RateLimited,
    /// The provider is overloaded (Anthropic 529 `overloaded_error`).
    Overloaded,
    /// 503-like: the service or model is unavailable right now.
    Unavailable,
    /// The upstream timed out (408, 504, `DEADLINE_EXCEEDED`).
    Timeout,
    /// Any other 5xx, or a 2xx answer that could not be understood.
    Server,
    /// The credential expired: the gateway refreshes it and retries once on the same candidate.
    AuthExpired,
    /// The credential was rejected (401/403).
    Auth,
    /// The prompt is longer than the model's context window.
    ContextLength,
    /// The provider's content filter refused the prompt.
    ContentFilter,
    /// The request itself is malformed for this provider.
    InvalidRequest,
    /// The model or deployment does not exist.
    NotFound,
    /// Any other 4xx.
    Client,
}

impl ErrorKind {
    /// Whether another candidate may be tried: rate limits, overload, unavailability,
    /// timeouts and server errors. Client errors would fail everywhere.
    pub fn retryable(self) -> bool {
        matches!(self, Self::RateLimited | Self::Overloaded | Self::Unavailable | Self::Timeout | Self::Server)
    }

    /// The OpenAI error `type` used in [`UpstreamError::openai_body`].
    pub fn openai_type(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limit_error",
            Self::Overloaded | Self::Unavailable | Self::Timeout | Self::Server => "server_error",
            Self::AuthExpired | Self::Auth => "authentication_error",
            Self::ContextLength | Self::ContentFilter | Self::InvalidRequest | Self::NotFound | Self::Client => {
                "invalid_request_error"
            }
        }
    }

    /// The OpenAI error `code` used in [`UpstreamError::openai_body`], if OpenAI has one.
    pub fn openai_code(self) -> Option<&'static str> {
        match self {
            Self::RateLimited => Some("rate_limit_exceeded"),
            Self::Overloaded => Some("overloaded"),
            Self::ContextLength => Some("context_length_exceeded"),
            Self::ContentFilter => Some("content_filter"),
            Self::NotFound => Some("model_not_found"),
            Self::AuthExpired | Self::Auth => Some("invalid_api_key"),
            _ => None,
        }
    }

    /// The kind an HTTP status alone implies, when the provider gives no error name.
    pub fn from_status(status: u16) -> Self {
        match status {
            429 => Self::RateLimited,
            529 => Self::Overloaded,
            503 => Self::Unavailable,
            408 | 504 => Self::Timeout,
            401 | 403 => Self::Auth,
            404 => Self::NotFound,
            413 => Self::ContextLength,
            400 | 422 => Self::InvalidRequest,
            s if s >= 500 => Self::Server,
            _ => Self::Client,
        }
    }
}

/// A classified error answer: a non-2xx response, or an error object inside a 2xx
/// body or stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream error ({status}, {kind:?}): {message}")]
pub struct UpstreamError {
    pub kind: ErrorKind,
    /// The upstream's HTTP status (the 2xx status for an in-stream error).
    pub status: u16,
    /// When the upstream said to come back, from its headers or body.
    pub retry_after: Option<Duration>,
    /// The provider's message, for logs and the client.
    pub message: String,
    /// The OpenAI-shaped `{"error":{"message","type","code","param"}}` the client is sent.
    pub openai_body: Bytes,
}

impl UpstreamError {
    /// The error object of an OpenAI chunk stream's `{"error": …}` event (its `code`,
    /// when a status, tells the kind).
    pub fn of_chunk_error(e: &serde_json::Value) -> Self {
        let message = e["message"].as_str().unwrap_or("the upstream sent an error").to_owned();
        let kind = ErrorKind::from_status(e["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(500));
        Self::new(kind, 200, message, None)
    }

    /// An error of `kind`; `code` (e.g. the provider's own error name) is used when
    /// OpenAI has no code for the kind.
    pub fn new(kind: ErrorKind, status: u16, message: impl Into<String>, code: Option<&str>) -> Self {
        let message = message.into();
        let code = kind.openai_code().or(code);
        // An error object inside a 2xx body or stream stands for the status of its kind.
        let status = if (200..300).contains(&status) { kind.canonical_status() } else { status };
        let body = serde_json::json!({
            "error": { "message": message, "type": kind.openai_type(), "code": code, "param": null }
        });
        Self { kind, status, retry_after: None, message, openai_body: Bytes::from(body.to_string()) }
    }

    /// The same error with a retry hint.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// A 2xx answer that could not be understood: treated as a server error so the
    /// attempt may fail over.
    pub fn malformed(status: u16, what: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::Server, status, format!("malformed upstream answer: {what}"), None)
    }

    /// The `data: {"error":…}\n\n` SSE event that carries this error after the
    /// stream has committed.
    pub fn sse_event(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.openai_body.len() + 8);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.openai_body);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

impl ErrorKind {
    /// The HTTP status an error of this kind stands for when it arrived inside a 2xx
    /// body or stream, so the client sees e.g. 529 for an in-stream `overloaded_error`.
    pub fn canonical_status(self) -> u16 {
        match self {
            Self::RateLimited => 429,
            Self::Overloaded => 529,
            Self::Unavailable => 503,
            Self::Timeout => 504,
            Self::Server => 500,
            Self::AuthExpired | Self::Auth => 401,
            Self::NotFound => 404,
            Self::ContextLength | Self::ContentFilter | Self::InvalidRequest | Self::Client => 400,
        }
    }
}

/// Whether a provider's error message says the prompt exceeds the context window
/// (Anthropic "prompt is too long", Gemini "exceeds the maximum number of tokens",
/// OpenAI "maximum context length").
pub(crate) fn says_context_length(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "prompt is too long",
        "maximum context length",
        "context window",
        "context limit",
        "exceeds the maximum number of tokens",
        "too many tokens",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Whether a 401's message says the credential expired (the gateway refreshes it).
pub(crate) fn says_expired(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("expired") || m.contains("access_token_expired")
}
