//! What the client has of a resumed stream, and how a continuation's chunks are made
//! part of it (docs/design.md §4.5): the first attempt's `id`, `created` and choice
//! index, no second role chunk, nothing the client already has sent twice (the
//! whitespace a prefill trimmed, or the replayed part of a replay), and a usage chunk
//! that reports every attempt's sum.

use serde_json::{Map, Value};

use crate::relay::sse::Usage;

/// What reached the client so far.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The text of every content delta sent.
    pub text: String,
    /// The first chunk's `id`, `created` and choice index.
    id: Option<Value>,
    created: Option<Value>,
    index: Option<Value>,
    /// A tool call was sent (a resume never cuts into one, so none follows it).
    pub tool_call: bool,
}

/// How a continuation's content is spliced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The first attempt: relayed as it comes.
    First,
    /// The upstream continues the prefill; `tail` is the delivered whitespace the
    /// prefill left out, skipped again at the start of the continuation.
    Prefill { tail: String },
    /// The upstream answers again from the start: held back while it matches the first
    /// `target` bytes the client has (`verified` so far), relayed after.
    Replay { verified: usize, target: usize },
}

/// What one chunk of a continuation becomes.
#[derive(Debug, PartialEq)]
pub enum Spliced {
    /// Send this event.
    Send(String),
    /// Nothing of it is new to the client.
    Skip,
    /// The replay differs from what the client has.
    Diverged,
}

impl Delivered {
    /// Reads a chunk of the first attempt as it is relayed.
    pub fn observe(&mut self, data: &str) {
        let Ok(Value::Object(chunk)) = serde_json::from_str::<Value>(data) else { return };
        self.remember_ids(&chunk);
        for choice in choices(&chunk) {
            self.take_delta(choice);
        }
    }

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
        if delta.get("tool_calls").is_some_and(|t| !t.is_null()) {
            self.tool_call = true;
        }
    }

    /// The prefill for a continuation (trailing whitespace trimmed) and the trimmed tail.
    pub fn prefill(&self) -> (&str, &str) {
        let kept = self.text.trim_end();
        (kept, &self.text[kept.len()..])
    }

    /// Rewrites one chunk of a continuation. `usage` is the sum to report when the chunk
    /// carries usage (this attempt's plus the earlier ones').
    pub fn splice(&mut self, data: &str, mode: &mut Mode, usage: Option<Usage>) -> Spliced {
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
            if delta.get("tool_calls").is_some_and(|t| !t.is_null()) {
                if let Mode::Replay { verified, target } = mode
                    && verified < target
                {
                    return None;
                }
                self.tool_call = true;
            }
        }
        // A replay that finishes before it reached what the client has diverged.
        if finished && let Mode::Replay { verified, target } = mode && verified < target {
            return None;
        }
        let empty = c.get("delta").and_then(Value::as_object).is_none_or(Map::is_empty);
        Some(finished || !empty || c.get("logprobs").is_some_and(|l| !l.is_null()))
    }
}

/// The part of a continuation's text that is new to the client; `None` when a replay
/// diverged.
fn splice_text(delivered: &str, text: &str, mode: &mut Mode) -> Option<String> {
    match mode {
        Mode::First => Some(text.to_string()),
        Mode::Prefill { tail } => {
            // Skip the continuation's leading whitespace while it repeats the trimmed tail.
            let mut skip = 0;
            for (a, b) in text.chars().zip(tail.chars()) {
                if a != b {
                    break;
                }
                skip += a.len_utf8();
            }
            let stop = skip < text.len() || skip >= tail.len();
            *tail = if stop { String::new() } else { tail[skip..].to_string() };
            Some(text[skip..].to_string())
        }
        Mode::Replay { verified, target } => {
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
    serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {
            "cached_tokens": u.prompt_tokens_details.cached_tokens,
            "cache_write_tokens": u.prompt_tokens_details.cache_write_tokens,
        },
    })
}

/// The sum of two attempts' usage.
pub fn add(a: Usage, b: Usage) -> Usage {
    let mut sum = Usage::plain(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens);
    sum.prompt_tokens_details.cached_tokens = a.prompt_tokens_details.cached_tokens + b.prompt_tokens_details.cached_tokens;
    sum.prompt_tokens_details.cache_write_tokens =
        a.prompt_tokens_details.cache_write_tokens + b.prompt_tokens_details.cache_write_tokens;
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &str, created: u64, text: Option<&str>, role: bool) -> String {
        let mut delta = serde_json::json!({});
        if role {
            delta["role"] = "assistant".into();
        }
        if let Some(t) = text {
            delta["content"] = t.into();
        }
        serde_json::json!({"id": id, "object": "chat.completion.chunk", "created": created,
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        .to_string()
    }

    fn sent(s: Spliced) -> Value {
        match s {
            Spliced::Send(e) => serde_json::from_str(e.trim_start_matches("data: ").trim()).unwrap_or_default(),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[test]
    fn a_prefill_continuation_keeps_the_first_ids_drops_its_role_and_the_repeated_space() {
        let mut d = Delivered::default();
        d.observe(&chunk("chatcmpl-a", 100, Some("The "), true));
        d.observe(&chunk("chatcmpl-a", 100, Some("upstream "), false));
        assert_eq!(d.prefill(), ("The upstream", " "));
        let mut mode = Mode::Prefill { tail: " ".into() };
        // The role-only chunk of the new attempt is dropped.
        assert_eq!(d.splice(&chunk("chatcmpl-b", 200, None, true), &mut mode, None), Spliced::Skip);
        let e = sent(d.splice(&chunk("chatcmpl-b", 200, Some(" said "), true), &mut mode, None));
        assert_eq!((e["id"].as_str(), e["created"].as_u64()), (Some("chatcmpl-a"), Some(100)));
        assert_eq!(e["choices"][0]["delta"], serde_json::json!({"content": "said "}));
        // Only the first piece loses its repeated whitespace.
        let e = sent(d.splice(&chunk("chatcmpl-b", 200, Some(" hello"), false), &mut mode, None));
        assert_eq!(e["choices"][0]["delta"]["content"], " hello");
        assert_eq!(d.text, "The upstream said  hello");
    }

    #[test]
    fn a_replay_is_held_back_while_it_matches_and_relayed_after() {
        let mut d = Delivered::default();
        d.observe(&chunk("x", 1, Some("The upstream "), true));
        let mut mode = Mode::Replay { verified: 0, target: d.text.len() };
        assert_eq!(d.splice(&chunk("y", 2, Some("The "), true), &mut mode, None), Spliced::Skip);
        let e = sent(d.splice(&chunk("y", 2, Some("upstream said "), false), &mut mode, None));
        assert_eq!(e["choices"][0]["delta"]["content"], "said ");
        let e = sent(d.splice(&chunk("y", 2, Some("hello "), false), &mut mode, None));
        assert_eq!(e["choices"][0]["delta"]["content"], "hello ");
        assert_eq!(d.text, "The upstream said hello ");
    }

    #[test]
    fn a_replay_that_differs_or_ends_early_diverges() {
        let mut d = Delivered::default();
        d.observe(&chunk("x", 1, Some("The upstream "), true));
        let mut mode = Mode::Replay { verified: 0, target: d.text.len() };
        assert_eq!(d.splice(&chunk("y", 2, Some("A different "), true), &mut mode, None), Spliced::Diverged);
        let mut mode = Mode::Replay { verified: 0, target: d.text.len() };
        assert_eq!(d.splice(&chunk("y", 2, Some("The "), true), &mut mode, None), Spliced::Skip);
        let stop = r#"{"id":"y","created":2,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(d.splice(stop, &mut mode, None), Spliced::Diverged);
    }

    #[test]
    fn the_usage_chunk_reports_the_sum_and_tool_calls_are_noticed() {
        let mut d = Delivered::default();
        d.observe(r#"{"id":"x","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#);
        assert!(d.tool_call);
        let mut mode = Mode::Prefill { tail: String::new() };
        let usage = r#"{"id":"y","created":2,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
        let sum = add(Usage::plain(7, 3), Usage::plain(5, 2));
        let e = sent(d.splice(usage, &mut mode, Some(sum)));
        assert_eq!((e["usage"]["prompt_tokens"].as_u64(), e["usage"]["completion_tokens"].as_u64()), (Some(12), Some(5)));
        assert_eq!(e["id"], "x");
    }
}
