//! OpenAI chat tool calls, as OpenAI documents them: an assistant message
//! with `content: null` and one `tool_calls` entry, `finish_reason:
//! "tool_calls"`; streamed as `delta.tool_calls` pieces of the `arguments`
//! string, the first opening the call with its `id`, `type` and `name`.
//!
//! Not the hot path (only scripted tool calls come here), so the choices are
//! built with `serde_json` and written after the shared head.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Meta, Usage, head, push_usage};

/// A chat answer's call of one function, its arguments in pieces (one per
/// content chunk).
#[derive(Debug)]
pub(crate) struct ToolCall {
    /// `call_chaos_<seq>`.
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) pieces: Vec<String>,
}

impl ToolCall {
    /// The whole arguments; `{}` when no piece is sent.
    fn arguments(&self) -> String {
        if self.pieces.is_empty() { "{}".to_owned() } else { self.pieces.concat() }
    }

    /// The `delta.tool_calls` entry carrying `arguments`; the first one
    /// (`opening`) names the call.
    fn delta(&self, opening: bool, arguments: &str) -> Value {
        if opening {
            json!({"index": 0, "id": self.id, "type": "function",
                   "function": {"name": self.name, "arguments": arguments}})
        } else {
            json!({"index": 0, "function": {"arguments": arguments}})
        }
    }
}

/// A non-streamed chat answer that calls the tool.
pub(crate) fn tool_call_body(meta: &Meta<'_>, call: &ToolCall, usage: Usage, finish: &str) -> Bytes {
    let whole = json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments()}});
    let choice = json!({
        "index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [whole]},
        "logprobs": null, "finish_reason": finish,
    });
    let mut out = Vec::with_capacity(384);
    head(&mut out, meta, "chat.completion");
    out.extend_from_slice(choice.to_string().as_bytes());
    out.extend_from_slice(br#"],"usage":"#);
    push_usage(&mut out, usage);
    out.push(b'}');
    Bytes::from(out)
}

/// The chunk carrying piece `i` of the arguments; the first also carries
/// the assistant role and opens the call.
pub(crate) fn tool_call_event(prefix: &[u8], call: &ToolCall, i: u32) -> Bytes {
    let at = usize::try_from(i).unwrap_or(usize::MAX);
    let piece = call.pieces.get(at).map_or("", String::as_str);
    let mut delta = json!({"tool_calls": [call.delta(i == 0, piece)]});
    if i == 0 {
        delta["role"] = json!("assistant");
        delta["content"] = Value::Null;
    }
    choice_event(prefix, &json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}))
}

/// The chunk carrying `finish_reason`; when no piece was sent (0 chunks) it
/// opens the call too, with `{}` arguments, so that the call is never lost.
pub(crate) fn tool_finish_event(prefix: &[u8], call: &ToolCall, finish: &str) -> Bytes {
    let delta = if call.pieces.is_empty() {
        json!({"role": "assistant", "content": null, "tool_calls": [call.delta(true, "{}")]})
    } else {
        json!({})
    };
    choice_event(prefix, &json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}))
}

/// `prefix` (`data: {…,"choices":[`), the choice, `]}` and the blank line.
fn choice_event(prefix: &[u8], choice: &Value) -> Bytes {
    let choice = choice.to_string();
    let mut out = Vec::with_capacity(prefix.len() + choice.len() + 4);
    out.extend_from_slice(prefix);
    out.extend_from_slice(choice.as_bytes());
    out.extend_from_slice(b"]}\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Endpoint, event_prefix};

    fn data(event: &[u8]) -> Value {
        let json = event.strip_prefix(b"data: ").unwrap().strip_suffix(b"\n\n").unwrap();
        serde_json::from_slice(json).unwrap()
    }

    #[test]
    fn tool_calls_render_as_openai_documents_them() {
        let meta = Meta { endpoint: Endpoint::Chat, seq: 3, created: 7, model: "m" };
        let call = ToolCall {
            id: "call_chaos_3".to_owned(),
            name: "f".to_owned(),
            pieces: vec!["{\"a\"".into(), ":1}".into()],
        };
        let v: Value =
            serde_json::from_slice(&tool_call_body(&meta, &call, Usage { prompt: 2, completion: 2 }, "tool_calls"))
                .unwrap();
        let message = &v["choices"][0]["message"];
        assert_eq!((&message["content"], &v["choices"][0]["finish_reason"]), (&Value::Null, &json!("tool_calls")));
        assert_eq!(
            message["tool_calls"][0],
            json!({"id": "call_chaos_3", "type": "function",
            "function": {"name": "f", "arguments": "{\"a\":1}"}})
        );
        assert_eq!(v["usage"]["total_tokens"], 4);

        let prefix = event_prefix(&meta);
        let first = data(&tool_call_event(&prefix, &call, 0));
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            first["choices"][0]["delta"]["tool_calls"][0]["function"],
            json!({"name": "f", "arguments": "{\"a\""})
        );
        let second = data(&tool_call_event(&prefix, &call, 1));
        assert_eq!(
            second["choices"][0]["delta"],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})
        );
        let last = data(&tool_finish_event(&prefix, &call, "tool_calls"));
        assert_eq!((&last["choices"][0]["delta"], &last["object"]), (&json!({}), &json!("chat.completion.chunk")));
        let empty = ToolCall { pieces: Vec::new(), ..call };
        let last = data(&tool_finish_event(&prefix, &empty, "tool_calls"));
        assert_eq!(last["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
    }
}
