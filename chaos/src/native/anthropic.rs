//! Anthropic Messages wire format (also Claude on Vertex AI): the message
//! body, the SSE events and the error object, as Anthropic documents them.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, Finish};

/// `event: {name}\ndata: {json}\n\n`.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn stop_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::Tool => "tool_use",
    }
}

/// `usage` with the cache fields Anthropic always reports; `input_tokens`
/// excludes cached tokens.
fn usage(a: &Answer, output: u64) -> Value {
    json!({
        "input_tokens": a.usage.prompt,
        "cache_creation_input_tokens": a.usage.cache_write,
        "cache_read_input_tokens": a.usage.cache_read,
        "output_tokens": output,
    })
}

fn tool_id(a: &Answer) -> String {
    format!("toolu_chaos_{}", a.seq)
}

/// The page a searching answer finds and cites.
pub(crate) const SEARCH_RESULT_URL: &str = "https://example.org/chaos/search-result";
const SEARCH_RESULT_TITLE: &str = "Chaos search result";

/// A searching answer's `server_tool_use` block and its `web_search_tool_result`, as
/// Anthropic's web search tool writes them.
fn search_blocks(a: &Answer) -> [Value; 2] {
    let id = format!("srvtoolu_chaos_{}", a.seq);
    [
        json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {"query": "chaos search"}}),
        json!({"type": "web_search_tool_result", "tool_use_id": id, "content": [{
            "type": "web_search_result", "url": SEARCH_RESULT_URL, "title": SEARCH_RESULT_TITLE,
            "encrypted_content": "Y2hhb3MgcmVzdWx0", "page_age": null,
        }]}),
    ]
}

/// The citation of the search result a searching answer's text carries.
fn citation() -> Value {
    json!({
        "type": "web_search_result_location", "url": SEARCH_RESULT_URL, "title": SEARCH_RESULT_TITLE,
        "encrypted_index": "Y2hhb3MgaW5kZXg=", "cited_text": "The chaos upstream answers every search with this page.",
    })
}

/// The content-block index of the answer's text or tool call: after the search's two
/// blocks when it searched.
fn block_index(a: &Answer) -> u64 {
    if a.web_search { 2 } else { 0 }
}

/// The non-streamed `message`.
pub(super) fn body(a: &Answer) -> Bytes {
    let block = match &a.tool {
        Some(name) => {
            json!({"type": "tool_use", "id": tool_id(a), "name": name, "input": a.tool_input()})
        }
        None if a.web_search => json!({"type": "text", "text": a.pieces.concat(), "citations": [citation()]}),
        None => json!({"type": "text", "text": a.pieces.concat()}),
    };
    let mut content = Vec::new();
    if a.web_search {
        content.extend(search_blocks(a));
    }
    content.push(block);
    let mut usage = usage(a, a.usage.completion);
    if a.web_search {
        usage["server_tool_use"] = json!({"web_search_requests": 1});
    }
    let v = json!({
        "id": a.id, "type": "message", "role": "assistant", "model": a.model,
        "content": content,
        "stop_reason": stop_reason(a.finish), "stop_sequence": null,
        "usage": usage,
    });
    Bytes::from(v.to_string())
}

/// `message_start`, the content block's start and a `ping`.
pub(super) fn preamble(a: &Answer) -> Vec<Bytes> {
    let message = json!({
        "id": a.id, "type": "message", "role": "assistant", "model": a.model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": usage(a, 1),
    });
    let block = match &a.tool {
        Some(name) => json!({"type": "tool_use", "id": tool_id(a), "name": name, "input": {}}),
        None if a.web_search => json!({"type": "text", "text": "", "citations": []}),
        None => json!({"type": "text", "text": ""}),
    };
    let mut events = vec![event("message_start", &json!({"type": "message_start", "message": message}))];
    if a.web_search {
        // The search's call, streamed as its input JSON, then its result, whole.
        let [mut call, result] = search_blocks(a);
        let query = std::mem::replace(&mut call["input"], json!({})).to_string();
        events.push(block_start(0, call));
        events.push(block_delta(0, json!({"type": "input_json_delta", "partial_json": query})));
        events.push(block_stop(0));
        events.push(block_start(1, result));
        events.push(block_stop(1));
    }
    let index = block_index(a);
    events.push(block_start(index, block));
    events.push(event("ping", &json!({"type": "ping"})));
    if a.web_search {
        events.push(block_delta(index, json!({"type": "citations_delta", "citation": citation()})));
    }
    events
}

fn block_start(index: u64, block: Value) -> Bytes {
    event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_delta(index: u64, delta: Value) -> Bytes {
    event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn block_stop(index: u64) -> Bytes {
    event("content_block_stop", &json!({"type": "content_block_stop", "index": index}))
}

/// One `text_delta` or `input_json_delta`.
pub(super) fn piece(a: &Answer, i: usize) -> Bytes {
    let text = a.pieces.get(i).map_or("", String::as_str);
    let delta = if a.tool.is_some() {
        json!({"type": "input_json_delta", "partial_json": text})
    } else {
        json!({"type": "text_delta", "text": text})
    };
    block_delta(block_index(a), delta)
}

/// The block's stop, `message_delta` (stop reason, cumulative usage) and
/// `message_stop`, the end marker.
pub(super) fn closing(a: &Answer) -> Vec<Bytes> {
    let mut usage = json!({"output_tokens": a.usage.completion});
    if a.web_search {
        usage["server_tool_use"] = json!({"web_search_requests": 1});
    }
    vec![
        block_stop(block_index(a)),
        event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(a.finish), "stop_sequence": null},
                "usage": usage,
            }),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ]
}

/// `{"type":"error","error":{"type","message"}}`.
pub(super) fn error_json(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The in-stream `event: error`.
pub(super) fn error_event(kind: &str, message: &str) -> Bytes {
    event("error", &error_json(kind, message))
}

pub(super) const MALFORMED: &[u8] = b"event: content_block_delta\ndata: {not json\n\n";

/// Anthropic's error type for a status (docs: Errors).
pub(super) fn error_kind(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ if (400..500).contains(&status) => "invalid_request_error",
        _ => "api_error",
    }
}

/// The message Anthropic sends with an error type.
pub(super) fn error_message(kind: &str) -> &'static str {
    match kind {
        "overloaded_error" => "Overloaded",
        "rate_limit_error" => "This request would exceed the rate limit for your organization. Please try again later.",
        "authentication_error" => "invalid x-api-key",
        "permission_error" => "Your API key does not have permission to use the specified resource.",
        "not_found_error" => "The requested resource could not be found.",
        "request_too_large" => "Request exceeds the maximum allowed number of bytes.",
        "billing_error" => "Your credit balance is too low to access the Anthropic API.",
        "api_error" => "Internal server error",
        _ => "Injected invalid request [chaos upstream]",
    }
}
