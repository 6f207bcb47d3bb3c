//! What the client has of a resumed chat stream, and how a continuation's chunks are
//! made part of it (docs/design.md §4.5): the first attempt's `id`, `created` and choice
//! index, no second role chunk, nothing the client already has sent twice (the
//! whitespace a prefill trimmed, or the replayed part of a replay), and a usage chunk
//! that reports every attempt's sum.

use serde_json::{Map, Value};

use super::{Spliced, Transcript};
use crate::relay::sse::Format;
use crate::usage::Usage;

/// What reached the client so far.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The text of every content delta sent.
    text: String,
    /// The first chunk's `id`, `created` and choice index.
    id: Option<Value>,
    created: Option<Value>,
    index: Option<Value>,
    /// The tool calls sent, by index.
    tools: Vec<ToolCall>,
}

/// A tool call as streamed so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    name: String,
    arguments: String,
}

impl ToolCall {
    /// Its arguments are a whole JSON object: nothing can follow in the same call.
    fn complete(&self) -> bool {
        serde_json::from_str::<Value>(&self.arguments).is_ok_and(|v| v.is_object())
    }

    /// Adds a streamed piece (`{"index", "id", "function": {"name", "arguments"}}`).
    fn push(list: &mut Vec<ToolCall>, item: &Value) {
        let at = item.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok()).unwrap_or(0);
        if list.len() <= at {
            list.resize(at + 1, ToolCall::default());
        }
        let Some(call) = list.get_mut(at) else { return };
        let function = item.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            call.name.push_str(name);
        }
        if let Some(args) = function.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
            call.arguments.push_str(args);
        }
    }

    /// `so_far` can still become `self`.
    fn leads_to(&self, so_far: &ToolCall) -> bool {
        self.name.starts_with(&so_far.name) && self.arguments.starts_with(&so_far.arguments)
    }
}

/// How a continuation's content is spliced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The upstream continues the prefill; `tail` is the delivered whitespace the
    /// prefill left out, skipped again at the start of the continuation.
    Prefill { tail: String },
    /// The upstream answers again from the start: held back while it matches the first
    /// `target` bytes of text and the first `tools` tool calls the client has
    /// (`verified` bytes and `replayed` calls so far), relayed after.
    Replay { verified: usize, target: usize, tools: usize, replayed: Vec<ToolCall> },
}

impl Mode {
    /// Replay-and-verify against everything `delivered` holds.
    pub fn replay(delivered: &Delivered) -> Self {
        Mode::Replay { verified: 0, target: delivered.text.len(), tools: delivered.tools.len(), replayed: Vec::new() }
    }
}

impl Transcript for Delivered {
    type Mode = Mode;
    const FORMAT: Format = Format::OpenAi;

    fn observe(&mut self, data: &str) {
        let Ok(Value::Object(chunk)) = serde_json::from_str::<Value>(data) else { return };
        self.remember_ids(&chunk);
        for choice in choices(&chunk) {
            self.take_delta(choice);
        }
    }

    /// No text but whitespace, no tool call.
    fn nothing(&self) -> bool {
        self.text.trim().is_empty() && self.tools.is_empty()
    }

    /// Not inside a tool call's arguments.
    fn resumable(&self) -> bool {
        self.tools.iter().all(ToolCall::complete)
    }

    /// A turn that holds a tool call cannot be continued as a prefill.
    fn prefill(&self) -> Option<(&str, &str)> {
        let kept = self.text.trim_end();
        (self.tools.is_empty() && !kept.is_empty()).then(|| (kept, &self.text[kept.len()..]))
    }

    fn continuation(&self, prefill_tail: Option<&str>) -> Mode {
        match prefill_tail {
            Some(tail) => Mode::Prefill { tail: tail.to_string() },
            None => Mode::replay(self),
        }
    }

    fn splice(&mut self, data: &str, mode: &mut Mode, usage: Option<Usage>) -> Spliced {
        let Ok(Value::Object(mut chunk)) = serde_json::from_str::<Value>(data) else { return Spliced::Skip };
        for (key, value) in [("id", &self.id), ("created", &self.created)] {
            if let Some(v) = value {
                chunk.insert(key.to_string(), v.clone());
            }
        }
        let had_choices = chunk.get("choices").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
        let mut kept = Vec::new();
        if let Some(Value::Array(list)) = chunk.remove("choices") {
            for mut choice in list {
                match self.splice_choice(&mut choice, mode) {
                    Some(true) => kept.push(choice),
                    Some(false) => {}
                    None => return Spliced::Diverged,
                }
            }
        }
        let has_usage = chunk.get("usage").is_some_and(|u| !u.is_null());
        if let (true, Some(sum)) = (has_usage, usage) {
            chunk.insert("usage".into(), usage_json(sum));
        }
        if had_choices && kept.is_empty() && !has_usage {
            return Spliced::Skip;
        }
        chunk.insert("choices".into(), Value::Array(kept));
        Spliced::Send(format!("data: {}\n\n", Value::Object(chunk)))
    }

    fn chars(&self) -> usize {
        self.text.chars().count()
    }
}

impl Delivered {
    fn remember_ids(&mut self, chunk: &Map<String, Value>) {
        if self.id.is_none() {
            self.id = chunk.get("id").cloned();
            self.created = chunk.get("created").cloned();
        }
        if self.index.is_none() {
            self.index = choices(chunk).next().and_then(|c| c.get("index").cloned());
        }
    }

    fn take_delta(&mut self, choice: &Value) {
        let Some(delta) = choice.get("delta") else { return };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(text);
        }
        for item in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            ToolCall::push(&mut self.tools, item);
        }
    }

    /// Rewrites a choice; `Some(false)` when nothing of it is left to send, `None` when
    /// a replay diverged.
    fn splice_choice(&mut self, choice: &mut Value, mode: &mut Mode) -> Option<bool> {
        let Value::Object(c) = choice else { return Some(false) };
        if let Some(index) = &self.index {
            c.insert("index".into(), index.clone());
        }
        let finished = c.get("finish_reason").is_some_and(|f| !f.is_null());
        if let Some(Value::Object(delta)) = c.get_mut("delta") {
            delta.remove("role");
            if let Some(Value::String(text)) = delta.get("content").cloned() {
                let new = splice_text(&self.text, &text, mode)?;
                if new.is_empty() {
                    delta.remove("content");
                } else {
                    self.text.push_str(&new);
                    delta.insert("content".into(), Value::String(new));
                }
            }
            if let Some(Value::Array(items)) = delta.remove("tool_calls") {
                let kept = self.splice_tools(items, mode)?;
                if !kept.is_empty() {
                    delta.insert("tool_calls".into(), Value::Array(kept));
                }
            }
        }
        // A replay that finishes before it reached what the client has diverged.
        if finished && let Mode::Replay { verified, target, tools, replayed } = mode {
            let all_tools = replayed.len() >= *tools && replayed.iter().zip(&self.tools).all(|(r, d)| r == d);
            if verified < target || !all_tools {
                return None;
            }
        }
        let empty = c.get("delta").and_then(Value::as_object).is_none_or(Map::is_empty);
        Some(finished || !empty || c.get("logprobs").is_some_and(|l| !l.is_null()))
    }
}

impl Delivered {
    /// The pieces of tool calls that are new to the client (a replay holds back those of
    /// calls the client has, while they match); `None` when a replay diverged.
    fn splice_tools(&mut self, items: Vec<Value>, mode: &mut Mode) -> Option<Vec<Value>> {
        let mut kept = Vec::new();
        for item in items {
            let Mode::Replay { verified, target, tools, replayed } = mode else {
                ToolCall::push(&mut self.tools, &item);
                kept.push(item);
                continue;
            };
            // A call before the delivered text was caught up with differs from it.
            if verified < target {
                return None;
            }
            ToolCall::push(replayed, &item);
            let index = item.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok()).unwrap_or(0);
            if index < *tools {
                let (Some(have), Some(got)) = (self.tools.get(index), replayed.get(index)) else { return None };
                if !have.leads_to(got) {
                    return None;
                }
                continue;
            }
            // A new call: every call the client has must have been replayed whole.
            if replayed.iter().take(*tools).zip(&self.tools).any(|(r, d)| r != d) {
                return None;
            }
            ToolCall::push(&mut self.tools, &item);
            kept.push(item);
        }
        Some(kept)
    }
}

/// The part of a continuation's text that is new to the client; `None` when a replay
/// diverged.
fn splice_text(delivered: &str, text: &str, mode: &mut Mode) -> Option<String> {
    match mode {
        Mode::Prefill { tail } => Some(super::skip_tail(text, tail).to_string()),
        Mode::Replay { verified, target, .. } => {
            let want = delivered.get(*verified..*target).unwrap_or("");
            if want.is_empty() {
                return Some(text.to_string());
            }
            if want.len() >= text.len() {
                if !want.starts_with(text) {
                    return None;
                }
                *verified += text.len();
                return Some(String::new());
            }
            let rest = text.strip_prefix(want)?;
            *verified = *target;
            Some(rest.to_string())
        }
    }
}

fn choices(chunk: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    chunk.get("choices").and_then(Value::as_array).into_iter().flatten()
}

fn usage_json(u: Usage) -> Value {
    let mut usage = serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {
            "cached_tokens": u.prompt_tokens_details.cached_tokens,
            "cache_write_tokens": u.prompt_tokens_details.cache_write_tokens,
        },
    });
    if u.server_tool_use.web_search_requests > 0 {
        usage["server_tool_use"] = serde_json::json!({"web_search_requests": u.server_tool_use.web_search_requests});
    }
    usage
}

#[cfg(test)]
mod tests;
