//! Gemini wire format (AI Studio and Vertex AI): `GenerateContentResponse`
//! bodies, their stream (SSE with `alt=sse`, else one JSON array sent in
//! pieces) and Google's error object.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, Finish};

fn finish_reason(finish: Finish) -> &'static str {
    match finish {
        // Gemini ends a function call with STOP too.
        Finish::Stop | Finish::Tool => "STOP",
        Finish::Length => "MAX_TOKENS",
    }
}

/// `usageMetadata`: `promptTokenCount` includes cached tokens.
fn usage(a: &Answer) -> Value {
    let prompt = a.usage.prompt + a.usage.cache_read;
    let mut v = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": a.usage.completion,
        "totalTokenCount": prompt + a.usage.completion,
    });
    if a.usage.cache_read > 0 {
        v["cachedContentTokenCount"] = json!(a.usage.cache_read);
    }
    v
}

fn response(a: &Answer, parts: Value, finish: Option<Finish>, with_usage: bool) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(finish_reason(f));
    }
    let mut v = json!({"candidates": [candidate], "modelVersion": a.model, "responseId": a.id});
    if with_usage {
        v["usageMetadata"] = usage(a);
    }
    v
}

fn parts(a: &Answer, text: &str) -> Value {
    match &a.tool {
        Some(name) => json!([{"functionCall": {"name": name, "args": a.tool_input()}}]),
        None => json!([{"text": text}]),
    }
}

/// The non-streamed answer.
pub(super) fn body(a: &Answer) -> Bytes {
    let v = response(a, parts(a, &a.pieces.concat()), Some(a.finish), true);
    Bytes::from(v.to_string())
}

/// Frames the `n`th stream element (from 0): an SSE event, or an item of
/// the JSON array that `streamGenerateContent` sends without `alt=sse`.
pub(super) fn frame(a: &Answer, n: u32, json: &str) -> Bytes {
    if a.sse {
        // Google's SSE separates events with CRLF pairs.
        Bytes::from(format!("data: {json}\r\n\r\n"))
    } else if n == 0 {
        Bytes::from(format!("[{json}"))
    } else {
        Bytes::from(format!(",\r\n{json}"))
    }
}

/// A content chunk: one text part, or the whole function call (Gemini sends
/// calls whole).
pub(super) fn piece(a: &Answer, i: usize, n: u32) -> Bytes {
    let text = a.pieces.get(i).map_or("", String::as_str);
    frame(a, n, &response(a, parts(a, text), None, false).to_string())
}

/// The last chunk: `finishReason` and `usageMetadata`; then `]` for the
/// JSON array form.
pub(super) fn closing(a: &Answer, n: u32) -> Vec<Bytes> {
    let last = response(a, json!([{"text": ""}]), Some(a.finish), true);
    let mut out = vec![frame(a, n, &last.to_string())];
    if !a.sse {
        out.push(Bytes::from_static(b"]"));
    }
    out
}

/// An error object in the stream; the JSON array form is closed after it.
pub(super) fn error_event(a: &Answer, n: u32, status: &str, message: &str) -> Bytes {
    let v = error_json(code_of(status), status, message, None);
    let mut out = frame(a, n, &v.to_string()).to_vec();
    if !a.sse {
        out.push(b']');
    }
    Bytes::from(out)
}

pub(super) fn malformed(a: &Answer, n: u32) -> Bytes {
    frame(a, n, "{not json")
}

/// `{"error":{"code","message","status"}}`, with a `RetryInfo` detail when
/// a retry delay is given.
pub(super) fn error_json(code: u16, status: &str, message: &str, retry_after_s: Option<u64>) -> Value {
    let mut error = json!({"code": code, "message": message, "status": status});
    if let Some(s) = retry_after_s {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{s}s"),
        }]);
    }
    json!({"error": error})
}

/// `error.details` entry naming why a request was refused.
pub(crate) fn error_info(reason: &str, service: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": {"service": service},
    })
}

/// Google's canonical status name for an HTTP status.
pub(super) fn status_name(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "NOT_IMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ if (400..500).contains(&code) => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

/// The HTTP status of a canonical status name (500 for unknown names).
pub(super) fn code_of(status: &str) -> u16 {
    match status {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "ABORTED" | "ALREADY_EXISTS" => 409,
        "RESOURCE_EXHAUSTED" => 429,
        "CANCELLED" => 499,
        "NOT_IMPLEMENTED" => 501,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => 500,
    }
}

/// The message Google sends with a status.
pub(super) fn message_of(status: &str) -> &'static str {
    match status {
        "RESOURCE_EXHAUSTED" => "Resource has been exhausted (e.g. check quota).",
        "UNAVAILABLE" => "The model is overloaded. Please try again later.",
        "DEADLINE_EXCEEDED" => "The request timed out. Please try again.",
        "PERMISSION_DENIED" => "The caller does not have permission",
        "NOT_FOUND" => "Requested entity was not found.",
        "INTERNAL" => {
            "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
        }
        _ => "Injected failure [chaos upstream]",
    }
}
