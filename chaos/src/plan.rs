//! A validated [`Script`] turned into what the handler needs per request.
//!
//! Everything that does not depend on the request (durations, the error
//! body, `Retry-After` values, the answer text) is computed here once: for
//! the default script when it is set, not for every request.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, StatusCode};

use super::script::Script;
use super::wire;

/// Content chunks when the script does not say.
pub(crate) const DEFAULT_CHUNKS: u32 = 5;

const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// How one request will be answered, before the request body is known.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) fail: FailMode,
    /// Status of a normal answer (200 unless the script set a status < 400).
    pub(crate) success_status: StatusCode,
    /// Delay before headers, for every response.
    pub(crate) headers_delay: Duration,
    /// Delay before the first byte: before headers for plain answers, before
    /// the first SSE event for streams.
    pub(crate) first_byte: Duration,
    pub(crate) chunks: u32,
    pub(crate) chunk_gap: Duration,
    pub(crate) hang: bool,
    pub(crate) hang_after: Option<u32>,
    pub(crate) reset_after: Option<u32>,
    pub(crate) malformed: Option<u32>,
    pub(crate) no_done: bool,
    /// Between a stream's last event and the end of its body.
    pub(crate) end_gap: Duration,
    /// In-stream error event after this many content chunks.
    pub(crate) error_after: Option<u32>,
    /// The script's `error_code`: names the in-stream error too.
    pub(crate) error_code: Option<String>,
    /// Answer with a call to this tool when the request declares it (and
    /// does not carry a tool result).
    pub(crate) tool_call: Option<String>,
    /// The tool call's arguments (a JSON object's text); `None`: `{"query": …}`.
    pub(crate) tool_arguments: Option<String>,
    /// The scripted failure hits only requests that carry a tool result.
    pub(crate) fail_on_tool_result: bool,
    /// Refuse a trailing assistant message with a 400.
    pub(crate) refuse_prefill: bool,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
    /// The answer text for `chunks` words.
    pub(crate) content: Bytes,
}

/// Whether a request fails with the scripted error.
#[derive(Debug)]
pub(crate) enum FailMode {
    Never,
    Always(ErrorReply),
    /// Fails with this probability.
    Rate(f64, ErrorReply),
}

/// A ready-made OpenAI-shaped error response, and what native protocols
/// need to render their own.
#[derive(Debug)]
pub(crate) struct ErrorReply {
    pub(crate) status: StatusCode,
    /// The script's `error_code`: a native error name for native protocols.
    pub(crate) code: Option<String>,
    /// The script's `retry_after`, in seconds.
    pub(crate) retry_after_s: Option<u64>,
    body: Bytes,
    retry_after: Option<HeaderValue>,
    retry_after_ms: Option<HeaderValue>,
}

impl Plan {
    /// Builds the plan of a script that passed [`Script::validate`].
    pub(crate) fn new(script: &Script) -> Self {
        let ms = |v: Option<u64>| Duration::from_millis(v.unwrap_or(0));
        let status = script.status.unwrap_or(200);
        let fail_on_tool_result = script.fail_on_tool_result.unwrap_or(false);
        let fail = match (script.fail_rate, status >= 400 || fail_on_tool_result) {
            (Some(rate), _) => FailMode::Rate(rate, ErrorReply::new(script, status)),
            (None, true) => FailMode::Always(ErrorReply::new(script, status)),
            (None, false) => FailMode::Never,
        };
        let success_status =
            if status < 400 { StatusCode::from_u16(status).unwrap_or(StatusCode::OK) } else { StatusCode::OK };
        let chunks = script.chunks.unwrap_or(DEFAULT_CHUNKS);
        Self {
            fail,
            success_status,
            headers_delay: ms(script.headers_first_byte_ms),
            first_byte: ms(script.first_byte_ms),
            chunks,
            chunk_gap: ms(script.chunk_ms),
            hang: script.hang.unwrap_or(false),
            hang_after: script.hang_after_chunks,
            reset_after: script.reset_after_chunks,
            malformed: script.malformed_chunk,
            no_done: script.no_done.unwrap_or(false),
            end_gap: ms(script.end_ms),
            error_after: script.error_after_chunks,
            error_code: script.error_code.clone(),
            tool_call: script.tool_call.clone(),
            tool_arguments: script.tool_arguments.clone(),
            fail_on_tool_result,
            refuse_prefill: script.refuse_prefill.unwrap_or(false),
            cache_read: script.cache_read_tokens.unwrap_or(0),
            cache_write: script.cache_write_tokens.unwrap_or(0),
            content: wire::content(chunks),
        }
    }

    /// The error to answer this request with, if it fails (draws at random
    /// for `fail_rate`); `answers_tool`: the request's last turn carries a
    /// tool result, the only kind `fail_on_tool_result` fails.
    pub(crate) fn failure(&self, answers_tool: bool) -> Option<&ErrorReply> {
        if self.fail_on_tool_result && !answers_tool {
            return None;
        }
        match &self.fail {
            FailMode::Never => None,
            FailMode::Always(reply) => Some(reply),
            FailMode::Rate(rate, reply) => (rand::random::<f64>() < *rate).then_some(reply),
        }
    }
}

impl ErrorReply {
    /// `status` below 400 (a `fail_rate` or `fail_on_tool_result` without an
    /// error status) means 503.
    fn new(script: &Script, status: u16) -> Self {
        let status = match StatusCode::from_u16(status) {
            Ok(s) if s.as_u16() >= 400 => s,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        let (kind, default_code) = error_kind(status);
        let code = script.error_code.as_deref().unwrap_or(default_code);
        let message = error_message(status, code);
        let header = |v: Option<u64>| v.map(HeaderValue::from);
        Self {
            status,
            code: script.error_code.clone(),
            retry_after_s: script.retry_after,
            body: wire::error_body(&message, kind, code),
            retry_after: header(script.retry_after),
            retry_after_ms: header(script.retry_after_ms),
        }
    }

    pub(crate) fn response(&self) -> Response {
        self.with_retry_headers(json_response(self.status, self.body.clone()))
    }

    /// Adds the scripted `Retry-After` and `retry-after-ms` headers.
    pub(crate) fn with_retry_headers(&self, mut response: Response) -> Response {
        let headers = response.headers_mut();
        if let Some(v) = &self.retry_after {
            headers.insert(RETRY_AFTER, v.clone());
        }
        if let Some(v) = &self.retry_after_ms {
            headers.insert(RETRY_AFTER_MS, v.clone());
        }
        response
    }
}

/// A JSON response without a fallible builder.
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// OpenAI's `error.type` and usual `error.code` for a status.
pub(crate) fn error_kind(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("authentication_error", "invalid_api_key"),
        402 => ("insufficient_quota", "insufficient_quota"),
        403 => ("permission_error", "permission_denied"),
        404 => ("invalid_request_error", "model_not_found"),
        408 => ("timeout_error", "request_timeout"),
        413 => ("invalid_request_error", "request_too_large"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        500 => ("api_error", "server_error"),
        502 => ("api_error", "bad_gateway"),
        503 => ("api_error", "service_unavailable"),
        504 => ("api_error", "gateway_timeout"),
        529 => ("overloaded_error", "overloaded"),
        _ if status.is_client_error() => ("invalid_request_error", "invalid_request"),
        _ => ("api_error", "server_error"),
    }
}

/// A message a client (or a gateway matching on text) recognises.
fn error_message(status: StatusCode, code: &str) -> String {
    let what = match code {
        "context_length_exceeded" => {
            "This model's maximum context length was exceeded; please reduce the length of the messages"
        }
        "content_policy_violation" => {
            "Your request was rejected as a result of our safety system (content_policy_violation)"
        }
        "rate_limit_exceeded" => "Rate limit reached; please try again later",
        _ => "Injected failure",
    };
    format!("{what} [chaos upstream: HTTP {} {code}]", status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(script: Script) -> Plan {
        Plan::new(&script)
    }

    #[test]
    fn fail_on_tool_result_fails_only_tool_results() {
        let status = |p: &Plan, answers_tool: bool| p.failure(answers_tool).map(|r| r.status.as_u16());
        let p = plan(Script { fail_on_tool_result: Some(true), ..Script::default() });
        assert_eq!((status(&p, false), status(&p, true)), (None, Some(503)));
        let p = plan(Script { fail_on_tool_result: Some(true), status: Some(429), ..Script::default() });
        assert_eq!((status(&p, false), status(&p, true)), (None, Some(429)));
        assert_eq!(p.success_status, StatusCode::OK, "other requests are answered normally");
        let p = plan(Script { fail_on_tool_result: Some(true), fail_rate: Some(0.0), ..Script::default() });
        assert_eq!(status(&p, true), None, "at fail_rate when it is set");
        // Without it, a scripted error hits every request.
        let p = plan(Script { status: Some(500), ..Script::default() });
        assert_eq!((status(&p, false), status(&p, true)), (Some(500), Some(500)));
        let p = plan(Script { fail_on_tool_result: Some(false), ..Script::default() });
        assert_eq!(status(&p, true), None);
    }
}
