//! Bedrock Converse wire format: the `converse` body, `converse-stream`
//! events in `application/vnd.amazon.eventstream` frames, and AWS errors
//! (`x-amzn-errortype` + `{"message"}`; exception frames in streams).

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_providers::eventstream::{self, FrameError};

use super::{Answer, Finish};

/// Suffix AWS appends to the `x-amzn-errortype` name.
pub(super) const ERROR_TYPE_SUFFIX: &str = ":http://internal.amazon.com/coral/com.amazon.bedrock/";

fn stop_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::Tool => "tool_use",
    }
}

/// `usage`: `inputTokens` excludes cache reads and writes.
fn usage(a: &Answer) -> Value {
    let u = &a.usage;
    let mut v = json!({
        "inputTokens": u.prompt,
        "outputTokens": u.completion,
        "totalTokens": u.prompt + u.cache_read + u.cache_write + u.completion,
    });
    if u.cache_read > 0 || u.cache_write > 0 {
        v["cacheReadInputTokens"] = json!(u.cache_read);
        v["cacheWriteInputTokens"] = json!(u.cache_write);
    }
    v
}

fn tool_id(a: &Answer) -> String {
    format!("tooluse_chaos_{}", a.seq)
}

/// The non-streamed `converse` answer.
pub(super) fn body(a: &Answer) -> Bytes {
    let block = match &a.tool {
        Some(name) => {
            json!({"toolUse": {"toolUseId": tool_id(a), "name": name, "input": a.tool_input()}})
        }
        None => json!({"text": a.pieces.concat()}),
    };
    let v = json!({
        "output": {"message": {"role": "assistant", "content": [block]}},
        "stopReason": stop_reason(a.finish),
        "usage": usage(a),
        "metrics": {"latencyMs": 1},
    });
    Bytes::from(v.to_string())
}

/// Frames are written by the shared event-stream encoder; the tests decode
/// them by hand. A frame that cannot be encoded (a payload over 16 MiB) is
/// sent as nothing, which the client sees as a broken stream.
fn framed(encoded: Result<Bytes, FrameError>) -> Bytes {
    encoded.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "chaos: cannot encode an event-stream frame");
        Bytes::new()
    })
}

/// An event frame; `p` pads payloads as Bedrock does.
fn event(kind: &str, mut payload: Value) -> Bytes {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEFGH");
    framed(eventstream::encode_event(kind, payload.to_string().as_bytes()))
}

/// `messageStart`, and `contentBlockStart` for a tool call.
pub(super) fn preamble(a: &Answer) -> Vec<Bytes> {
    let mut out = vec![event("messageStart", json!({"role": "assistant"}))];
    if let Some(name) = &a.tool {
        out.push(event(
            "contentBlockStart",
            json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": tool_id(a), "name": name}}}),
        ));
    }
    out
}

/// One `contentBlockDelta`: text, or a piece of the tool input.
pub(super) fn piece(a: &Answer, i: usize) -> Bytes {
    let text = a.pieces.get(i).map_or("", String::as_str);
    let delta = if a.tool.is_some() { json!({"toolUse": {"input": text}}) } else { json!({"text": text}) };
    event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": delta}))
}

/// `contentBlockStop`, `messageStop` and `metadata` (usage comes last).
pub(super) fn closing(a: &Answer) -> Vec<Bytes> {
    vec![
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": stop_reason(a.finish)})),
        event("metadata", json!({"usage": usage(a), "metrics": {"latencyMs": 1}})),
    ]
}

/// An exception frame: `:exception-type` is the camelCase name
/// (`throttlingException`), the payload `{"message"}`.
pub(super) fn exception(name: &str, message: &str) -> Bytes {
    let mut camel = name.to_owned();
    if let Some(first) = camel.get_mut(..1) {
        first.make_ascii_lowercase();
    }
    let payload = json!({"message": message}).to_string();
    framed(eventstream::encode_exception(&camel, payload.as_bytes()))
}

/// A well-framed event whose payload is not JSON.
pub(super) fn malformed() -> Bytes {
    framed(eventstream::encode_event("contentBlockDelta", b"{not json"))
}
/// The exception name AWS answers a status with.
pub(super) fn error_name(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        _ if (400..500).contains(&status) => "ValidationException",
        _ => "InternalServerException",
    }
}

/// The message AWS sends with an exception name.
pub(super) fn error_message(name: &str) -> &'static str {
    match name {
        "ThrottlingException" => "Too many requests, please wait before trying again.",
        "ServiceUnavailableException" => "Bedrock is unable to process your request.",
        "ModelNotReadyException" => "Model is not ready to serve inference requests.",
        "ModelStreamErrorException" => "The model stream encountered an error.",
        "ModelTimeoutException" => "Model has timed out in processing the request.",
        "AccessDeniedException" => "You don't have access to the model with the specified model ID.",
        "ResourceNotFoundException" => "The provided model identifier is invalid.",
        "InternalServerException" => "The server encountered an internal error.",
        _ => "Injected failure [chaos upstream]",
    }
}

/// Claude's Messages events (`event:`/`data:` SSE text, as [`super::anthropic`] renders
/// them) as InvokeModelWithResponseStream sends them: each event's data, base64, in a
/// `chunk` frame (`{"bytes": …}`).
pub(super) fn chunks(events: Vec<Bytes>) -> Vec<Bytes> {
    events.into_iter().map(|e| chunk(&e)).collect()
}

/// One Messages event in a `chunk` frame.
pub(super) fn chunk(sse: &[u8]) -> Bytes {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(sse);
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_default();
    event("chunk", json!({"bytes": base64::engine::general_purpose::STANDARD.encode(data)}))
}

/// The closing Messages events; `message_stop` carries Bedrock's invocation metrics, as
/// InvokeModel's does.
pub(super) fn messages_closing(a: &Answer) -> Vec<Bytes> {
    let mut events = super::anthropic::closing(a);
    if let Some(stop) = events.pop() {
        let text = String::from_utf8_lossy(&stop);
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_default();
        let mut v: Value = serde_json::from_str(data).unwrap_or_default();
        v["amazon-bedrock-invocationMetrics"] = json!({
            "inputTokenCount": a.usage.prompt, "outputTokenCount": a.usage.completion,
            "invocationLatency": 1, "firstByteLatency": 1,
        });
        events.push(Bytes::from(format!("event: message_stop\ndata: {v}\n\n")));
    }
    chunks(events)
}
