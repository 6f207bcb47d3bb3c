//! An OpenAI chat answer as a Messages answer: the chunks of a stream as the Messages
//! events ([`from_chat`]), a whole `chat.completion` as a `message`
//! ([`message_of_completion`]).

use bytes::Bytes;
use serde_json::{Value, json};

use super::event;
use crate::sse::{SseEvents, SseTranscoder};
use crate::{Out, Transcoder, UpstreamError, Usage};

/// Messages' `stop_reason` for an OpenAI `finish_reason`.
fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// Messages' `usage`: `input_tokens` without cache reads and writes.
fn messages_usage(u: &Usage) -> Value {
    let cached = u.cached_tokens.min(u.prompt_tokens);
    let written = u.cache_write_tokens.min(u.prompt_tokens - cached);
    let mut usage = json!({
        "input_tokens": u.prompt_tokens - cached - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": u.completion_tokens,
    });
    if u.web_searches > 0 {
        usage["server_tool_use"] = json!({"web_search_requests": u.web_searches});
    }
    usage
}

/// A whole OpenAI `chat.completion` as a Messages `message`, and its usage. `id` is
/// the message id (`msg_…`); `model` names the model when the answer does not.
pub fn message_of_completion(body: &[u8], id: &str, model: &str) -> Result<(Bytes, Usage), UpstreamError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| UpstreamError::malformed(200, e))?;
    let choice = &v["choices"][0];
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let args = call["function"]["arguments"].as_str().unwrap_or("");
        let input: Value = if args.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(args)
                .map_err(|e| UpstreamError::malformed(200, format!("tool call arguments: {e}")))?
        };
        content.push(json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": input}));
    }
    let usage = Usage::of_openai_json(&v["usage"]);
    let answer = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": v["model"].as_str().filter(|m| !m.is_empty()).unwrap_or(model),
        "content": content,
        "stop_reason": stop_reason(choice["finish_reason"].as_str().unwrap_or("stop")),
        "stop_sequence": null,
        "usage": messages_usage(&usage),
    });
    Ok((Bytes::from(answer.to_string()), usage))
}

/// A transcoder from an OpenAI chunk stream (as every candidate's attempt produces
/// it) to the Messages events: `message_start`, one content block per text run and
/// per tool call, `message_delta` with the stop reason and the usage, `message_stop`.
pub fn from_chat(id: &str, model: &str) -> Box<dyn Transcoder + Send> {
    Box::new(SseTranscoder::new(FromChat {
        id: id.to_owned(),
        model: model.to_owned(),
        started: false,
        open: None,
        next_index: 0,
        tools: Vec::new(),
        finish: None,
        usage: None,
        content: false,
        done: false,
    }))
}

/// The content block open in the Messages stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(u64),
    /// A tool call: OpenAI's call index, Messages' block index.
    Tool(u64, u64),
}

struct FromChat {
    id: String,
    model: String,
    started: bool,
    open: Option<Open>,
    next_index: u64,
    /// OpenAI tool-call index → Messages block index.
    tools: Vec<(u64, u64)>,
    finish: Option<String>,
    usage: Option<Usage>,
    content: bool,
    done: bool,
}

impl FromChat {
    fn emit(out: &mut Vec<Out>, name: &str, data: &Value, content: bool) {
        out.push(Out::Event { bytes: event(name, &data.to_string()), content });
    }

    fn start(&mut self, model: Option<&str>, out: &mut Vec<Out>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant",
            "model": model.filter(|m| !m.is_empty()).unwrap_or(&self.model),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        Self::emit(out, "message_start", &json!({"type": "message_start", "message": message}), false);
    }

    fn close(&mut self, out: &mut Vec<Out>) {
        if let Some(open) = self.open.take() {
            let index = match open {
                Open::Text(i) | Open::Tool(_, i) => i,
            };
            Self::emit(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}), false);
        }
    }

    fn open(&mut self, open: impl FnOnce(u64) -> (Open, Value), out: &mut Vec<Out>) -> u64 {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        let (o, block) = open(index);
        self.open = Some(o);
        Self::emit(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
            false,
        );
        index
    }

    fn text(&mut self, text: &str, out: &mut Vec<Out>) {
        let index = match self.open {
            Some(Open::Text(i)) => i,
            _ => self.open(|i| (Open::Text(i), json!({"type": "text", "text": ""})), out),
        };
        self.content = true;
        let delta =
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}});
        Self::emit(out, "content_block_delta", &delta, true);
    }

    fn tool(&mut self, call: &Value, out: &mut Vec<Out>) {
        let k = call["index"].as_u64().unwrap_or(0);
        let index = match self.tools.iter().find(|(c, _)| *c == k) {
            Some(&(_, i)) => i,
            None => {
                let id = call["id"].as_str().unwrap_or("").to_owned();
                let name = call["function"]["name"].as_str().unwrap_or("").to_owned();
                let i = self.open(
                    |i| (Open::Tool(k, i), json!({"type": "tool_use", "id": id, "name": name, "input": {}})),
                    out,
                );
                self.tools.push((k, i));
                i
            }
        };
        if let Some(args) = call["function"]["arguments"].as_str().filter(|a| !a.is_empty()) {
            self.content = true;
            let delta = json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": args}});
            Self::emit(out, "content_block_delta", &delta, true);
        }
    }

    fn end_message(&mut self, out: &mut Vec<Out>) {
        self.start(None, out);
        self.close(out);
        let usage = self.usage.unwrap_or_default();
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(self.finish.as_deref().unwrap_or("stop")), "stop_sequence": null},
            "usage": messages_usage(&usage),
        });
        Self::emit(out, "message_delta", &delta, false);
        Self::emit(out, "message_stop", &json!({"type": "message_stop"}), false);
        out.push(Out::Done);
        self.done = true;
    }

    fn fail(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        self.done = true;
        out.push(Out::Error { error, before_content: !self.content });
    }
}

impl SseEvents for FromChat {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        if data.trim() == "[DONE]" {
            return self.end_message(out);
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return self.fail(UpstreamError::malformed(200, "a stream event is not JSON"), out);
        };
        if let Some(e) = v.get("error") {
            return self.fail(UpstreamError::of_chunk_error(e), out);
        }
        self.start(v["model"].as_str(), out);
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(Usage::of_openai_json(u));
        }
        for choice in v["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.text(text, out);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                self.tool(call, out);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                self.finish = Some(f.to_owned());
            }
        }
    }

    fn end(&mut self, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        if self.finish.is_some() {
            self.end_message(out);
        } else {
            self.fail(UpstreamError::malformed(200, "the stream ended before it finished"), out);
        }
    }
}
