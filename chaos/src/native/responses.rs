//! OpenAI Responses API wire format (`POST /v1/responses`): the `response`
//! object and its SSE events, as OpenAI's API reference documents them.
//!
//! Every event is `event: <type>` with a `data:` object carrying the same
//! `type` and a `sequence_number` (its position in the stream, from 0); no
//! `[DONE]`. The answer is one output item: an assistant `message` with one
//! `output_text` part, or a `function_call`. `input_tokens` includes the
//! cached tokens (`input_tokens_details.cached_tokens` is a subset).

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Answer, Finish};

/// `event: {type}\ndata: {json with sequence_number n}\n\n`.
fn event(n: u32, mut data: Value) -> Bytes {
    data["sequence_number"] = json!(n);
    let name = data["type"].as_str().unwrap_or_default().to_owned();
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn item_id(a: &Answer) -> String {
    match a.tool {
        Some(_) => format!("fc_chaos_{}", a.seq),
        None => format!("msg_chaos_{}", a.seq),
    }
}

/// The function call's arguments: the pieces, or `{}` when there are none.
fn arguments(a: &Answer) -> String {
    if a.pieces.is_empty() { "{}".to_owned() } else { a.pieces.concat() }
}

/// `completed`, or `incomplete` when `max_output_tokens` cut the answer.
fn status(a: &Answer) -> &'static str {
    match a.finish {
        Finish::Length => "incomplete",
        Finish::Stop | Finish::Tool => "completed",
    }
}

/// `usage`: `input_tokens` includes cached tokens.
fn usage(a: &Answer) -> Value {
    let input = a.usage.prompt + a.usage.cache_read;
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": a.usage.cache_read},
        "output_tokens": a.usage.completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + a.usage.completion,
    })
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The output item: whole when `done`, else as `output_item.added` shows it
/// (in progress, no content, no arguments).
fn item(a: &Answer, done: bool) -> Value {
    let status = if done { status(a) } else { "in_progress" };
    match &a.tool {
        Some(name) => json!({
            "id": item_id(a), "type": "function_call", "status": status,
            "call_id": format!("call_chaos_{}", a.seq), "name": name,
            "arguments": if done { arguments(a) } else { String::new() },
        }),
        None => json!({
            "id": item_id(a), "type": "message", "status": status, "role": "assistant",
            "content": if done { vec![text_part(&a.pieces.concat())] } else { Vec::new() },
        }),
    }
}

/// The `response` object in `status`; the request's settings laid over
/// OpenAI's defaults, as the API repeats them.
fn response(a: &Answer, status: &str, output: Value, usage: Value) -> Value {
    let mut v = json!({
        "id": a.id, "object": "response", "created_at": a.created, "status": status,
        "error": null, "incomplete_details": null, "instructions": null, "max_output_tokens": null,
        "model": a.model, "output": output, "parallel_tool_calls": true, "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null}, "store": false, "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "truncation": "disabled", "usage": usage, "user": null, "metadata": {},
    });
    if let Value::Object(members) = &mut v {
        echo(members, &a.echo);
    }
    v
}

/// Lays the request's `settings` over `members`: objects key by key (a
/// `reasoning` without `summary` keeps `summary: null`), other values whole.
fn echo(members: &mut Map<String, Value>, settings: &Map<String, Value>) {
    for (key, value) in settings {
        match (members.get_mut(key), value) {
            (Some(Value::Object(default)), Value::Object(given)) => {
                default.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                members.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The finished `response`: output, usage, and why it is incomplete.
fn finished(a: &Answer) -> Value {
    let mut v = response(a, status(a), json!([item(a, true)]), usage(a));
    if a.finish == Finish::Length {
        v["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    v
}

/// The non-streamed `response`.
pub(super) fn body(a: &Answer) -> Bytes {
    Bytes::from(finished(a).to_string())
}

/// `response.created`, `response.in_progress`, `response.output_item.added`
/// and, for text, `response.content_part.added`; `n` = events before them.
pub(super) fn preamble(a: &Answer, n: u32) -> Vec<Bytes> {
    let open = response(a, "in_progress", json!([]), Value::Null);
    let mut out = vec![
        json!({"type": "response.created", "response": open}),
        json!({"type": "response.in_progress", "response": open}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item(a, false)}),
    ];
    if a.tool.is_none() {
        out.push(json!({
            "type": "response.content_part.added", "item_id": item_id(a), "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []},
        }));
    }
    numbered(out, n)
}

/// One `response.output_text.delta` or `response.function_call_arguments.delta`.
pub(super) fn piece(a: &Answer, i: usize, n: u32) -> Bytes {
    let delta = a.pieces.get(i).map_or("", String::as_str);
    let data = match a.tool {
        Some(_) => json!({
            "type": "response.function_call_arguments.delta", "item_id": item_id(a),
            "output_index": 0, "delta": delta,
        }),
        None => json!({
            "type": "response.output_text.delta", "item_id": item_id(a), "output_index": 0,
            "content_index": 0, "delta": delta, "logprobs": [],
        }),
    };
    event(n, data)
}

/// The content's `…done` events, `response.output_item.done`, then
/// `response.completed` (or `response.incomplete`), the end marker;
/// `n` = events before the first.
pub(super) fn closing(a: &Answer, n: u32) -> Vec<Bytes> {
    let id = item_id(a);
    let mut out = match &a.tool {
        Some(name) => vec![json!({
            "type": "response.function_call_arguments.done", "item_id": id, "output_index": 0,
            "arguments": arguments(a), "name": name,
        })],
        None => {
            let text = a.pieces.concat();
            vec![
                json!({
                    "type": "response.output_text.done", "item_id": id, "output_index": 0,
                    "content_index": 0, "text": text, "logprobs": [],
                }),
                json!({
                    "type": "response.content_part.done", "item_id": id, "output_index": 0,
                    "content_index": 0, "part": text_part(&text),
                }),
            ]
        }
    };
    out.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item(a, true)}));
    let last = match a.finish {
        Finish::Length => "response.incomplete",
        Finish::Stop | Finish::Tool => "response.completed",
    };
    out.push(json!({"type": last, "response": finished(a)}));
    numbered(out, n)
}

/// The in-stream error: `response.failed`, whose response carries
/// `error: {code, message}`.
pub(super) fn error_event(a: &Answer, n: u32, code: &str, message: &str) -> Bytes {
    let mut failed = response(a, "failed", json!([]), Value::Null);
    failed["error"] = json!({"code": code, "message": message});
    event(n, json!({"type": "response.failed", "response": failed}))
}

/// A delta event whose data is not JSON.
pub(super) fn malformed(a: &Answer) -> Bytes {
    let name = match a.tool {
        Some(_) => "response.function_call_arguments.delta",
        None => "response.output_text.delta",
    };
    Bytes::from(format!("event: {name}\ndata: {{not json\n\n"))
}

/// Renders `events` as numbered from `n`.
fn numbered(events: Vec<Value>, n: u32) -> Vec<Bytes> {
    (n..).zip(events).map(|(n, data)| event(n, data)).collect()
}
