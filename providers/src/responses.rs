//! The OpenAI Responses API as an inbound API (docs/design.md §12): what the gateway
//! needs to serve `POST /v1/responses` on every candidate, without I/O.
//!
//! - **Native** (`openai`, `azure-openai`): the client's body goes out with only the
//!   model spliced in (the gateway's request splicer does that), and [`relay`] passes
//!   the answer's events on unchanged while reading what the gateway needs (content,
//!   errors, the end); [`usage_of_response`] reads a whole answer's usage.
//! - **Translated** (every other protocol): [`to_chat`] turns the request into an OpenAI
//!   chat request, which the candidate's own translation then takes as any chat
//!   request; the answer comes back as OpenAI chunks, which [`from_chat`] turns into
//!   the Responses events (and [`response_of_completion`] a whole answer). What has no
//!   equivalent is refused naming the member, never dropped, except the hints
//!   docs/gateway.md lists (reasoning, `include`, `prompt_cache_key`, …).

mod chat;
mod encode;

use bytes::Bytes;
use serde_json::{Value, json};

pub use chat::to_chat;
pub use encode::{ResponseIds, from_chat, response_of_completion};

use crate::messages::event;
use crate::{ErrorKind, Transcoder, UpstreamError, Usage};

/// A Responses `usage` object in OpenAI's chat accounting (`input_tokens` includes
/// the cached tokens, as `prompt_tokens` does), with the web searches sluice's own
/// encoding counts in it.
pub fn usage_of(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let usage = Usage::from_inclusive(
        n(&u["input_tokens"]),
        n(&u["output_tokens"]),
        n(&u["input_tokens_details"]["cached_tokens"]),
    );
    Usage { web_searches: n(&u["server_tool_use"]["web_search_requests"]), ..usage }
}

/// The usage of a whole Responses answer (`usage` at its top level); `None` when the
/// body has none.
pub fn usage_of_response(body: &[u8]) -> Option<Usage> {
    let v: Value = serde_json::from_slice(body).ok()?;
    usage_of_response_object(&v)
}

/// The usage of a response object (a whole answer, or the one `response.completed`
/// carries), with its web searches: one per `web_search_call` output item, as OpenAI
/// bills them (or as [`usage_of`] reads them).
pub fn usage_of_response_object(response: &Value) -> Option<Usage> {
    let usage = usage_of(response.get("usage").filter(|u| u.is_object())?);
    let items = response["output"].as_array().map_or(&[][..], Vec::as_slice);
    let calls = items.iter().filter(|i| i["type"] == "web_search_call").count() as u64;
    Some(Usage { web_searches: usage.web_searches.max(calls), ..usage })
}

/// The kind of failure a Responses error `code` names (`response.failed`, `error`).
fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        // Quota is per upstream account: another candidate may have some.
        "rate_limit_exceeded" | "slow_down" | "insufficient_quota" => ErrorKind::RateLimited,
        "context_length_exceeded" => ErrorKind::ContextLength,
        "invalid_prompt" | "invalid_request_error" => ErrorKind::InvalidRequest,
        _ => ErrorKind::Server,
    }
}

/// The error a `response.failed` or `error` event carries.
fn stream_error(data: &str) -> UpstreamError {
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let e = if v["type"] == "error" { &v } else { &v["response"]["error"] };
    let code = e["code"].as_str().unwrap_or("server_error");
    let message = e["message"].as_str().unwrap_or("the upstream's response failed");
    UpstreamError::new(kind_of_code(code), 200, format!("{code}: {message}"), None)
}

/// A `response.failed` event for a stream the gateway ends (the upstream broke, the
/// ledger did not confirm): the response `id`, failed with `code` and `message`.
pub fn failed_event(id: &str, code: &str, message: &str) -> Bytes {
    let response = json!({
        "id": id, "object": "response", "status": "failed", "output": [],
        "error": {"code": code, "message": message}, "incomplete_details": null, "usage": null,
    });
    event("response.failed", &json!({"type": "response.failed", "response": response}).to_string())
}

/// The transcoder of a native Responses stream: every event passes unchanged (its data
/// byte for byte, re-framed as `event:`/`data:`), marked as content from the first
/// delta; an `error` or `response.failed` event ends it in an error (which fails over
/// while no content was sent), and `response.completed` or `response.incomplete` ends it.
pub fn relay() -> Box<dyn Transcoder + Send> {
    crate::sse::named_relay(crate::sse::NamedEvents {
        is_error: |kind| matches!(kind, "error" | "response.failed"),
        error: stream_error,
        is_end: |kind| matches!(kind, "response.completed" | "response.incomplete"),
        is_content: |kind| kind.ends_with(".delta"),
        end_name: "response.completed",
    })
}

#[cfg(test)]
mod tests;
