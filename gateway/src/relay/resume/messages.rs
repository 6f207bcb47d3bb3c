//! What the client has of a resumed Messages stream, and how a continuation's events are
//! made part of it (docs/design.md §4.5): the client keeps the first attempt's
//! `message_start` (its id and model), content blocks keep counting from where they
//! were, nothing the client has is sent twice, and the `message_delta` reports every
//! attempt's usage summed.
//!
//! A prefill continuation (the delivered text as a trailing assistant message) continues
//! the open text block: its first block's start is dropped and its text joins the block
//! the client has; its later blocks follow with their indexes moved up. A replay is held
//! back block by block while it matches what the client has (the same kind, tool name
//! and text, thinking or tool input), and relayed where it goes past it.

use serde_json::{Map, Value};

use super::{Spliced, Transcript};
use crate::relay::sse::Format;
use crate::usage::Usage;

/// The content blocks the client has, by index.
#[derive(Debug, Default)]
pub struct Delivered {
    blocks: Vec<Block>,
}

/// One content block as streamed so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Block {
    kind: Kind,
    /// A tool's name (`tool_use`, `server_tool_use`).
    name: String,
    /// The text, the thinking, a tool's input JSON or redacted thinking's data.
    text: String,
    /// Its thinking carries a signature.
    signed: bool,
    /// `content_block_stop` was sent.
    stopped: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Text,
    Thinking,
    RedactedThinking,
    /// `tool_use` and the server's tool calls: resumed after their stop only.
    ToolUse,
    /// Any other block (server tool results, …): resumed after its stop only.
    Other,
}

impl Kind {
    fn of(block: &Value) -> Self {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => Kind::Text,
            Some("thinking") => Kind::Thinking,
            Some("redacted_thinking") => Kind::RedactedThinking,
            Some("tool_use" | "server_tool_use" | "mcp_tool_use") => Kind::ToolUse,
            _ => Kind::Other,
        }
    }
}

impl Block {
    /// A block from its `content_block_start`.
    fn start(block: &Value) -> Self {
        let text_of = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = Kind::of(block);
        let text = match kind {
            Kind::Text => text_of("text"),
            Kind::Thinking => text_of("thinking"),
            Kind::RedactedThinking => text_of("data"),
            Kind::ToolUse | Kind::Other => String::new(),
        };
        let signed = block.get("signature").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
        Self { kind, name: text_of("name"), text, signed, stopped: false }
    }

    /// The text a `content_block_delta` adds, and whether it is a signature.
    fn delta_text(delta: &Value) -> (Option<&str>, bool) {
        let text = |key| delta.get(key).and_then(Value::as_str);
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => (text("text"), false),
            Some("thinking_delta") => (text("thinking"), false),
            Some("input_json_delta") => (text("partial_json"), false),
            Some("signature_delta") => (None, true),
            _ => (None, false),
        }
    }

    /// The member of a `content_block_delta` that holds its text.
    fn delta_key(delta: &Value) -> Option<&'static str> {
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => Some("text"),
            Some("thinking_delta") => Some("thinking"),
            Some("input_json_delta") => Some("partial_json"),
            _ => None,
        }
    }

    /// Takes a `content_block_delta`.
    fn take(&mut self, delta: &Value) {
        match Self::delta_text(delta) {
            (Some(text), _) => self.text.push_str(text),
            (None, true) => self.signed = true,
            (None, false) => {}
        }
    }
}

/// How a continuation joins the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The upstream continues the prefill: its block `i` is the client's block
    /// `base + i`, its first block joins the client's open one when `join` is set, and
    /// `tail` is the delivered whitespace the prefill left out, skipped again at the
    /// start of that block.
    Prefill { tail: String, base: usize, join: bool },
    /// The upstream answers again from the start: its block `i` is the client's block
    /// `i`; the first `target` blocks are the client's and are held back while they
    /// match (`replayed` holds them as the replay sent them).
    Replay { target: usize, replayed: Vec<Block> },
}

impl Transcript for Delivered {
    type Mode = Mode;
    const FORMAT: Format = Format::Messages;

    fn observe(&mut self, data: &str) {
        if let Ok(Value::Object(event)) = serde_json::from_str::<Value>(data) {
            record(&mut self.blocks, &event);
        }
    }

    /// No block but empty text or thinking.
    fn nothing(&self) -> bool {
        self.blocks.iter().all(|b| matches!(b.kind, Kind::Text | Kind::Thinking) && b.text.trim().is_empty())
    }

    /// Text and thinking are resumed inside; a tool call once its input is a whole JSON
    /// object; any other block after its stop.
    fn resumable(&self) -> bool {
        self.blocks.iter().all(|b| match b.kind {
            _ if b.stopped => true,
            Kind::Text | Kind::Thinking => true,
            Kind::ToolUse => serde_json::from_str::<Value>(&b.text).is_ok_and(|v| v.is_object()),
            Kind::RedactedThinking | Kind::Other => false,
        })
    }

    /// One text block continues as a prefill; thinking and tool calls are replayed.
    fn prefill(&self) -> Option<(&str, &str)> {
        let [only] = self.blocks.as_slice() else { return None };
        let kept = only.text.trim_end();
        (only.kind == Kind::Text && !kept.is_empty()).then(|| (kept, &only.text[kept.len()..]))
    }

    fn continuation(&self, prefill_tail: Option<&str>) -> Mode {
        match prefill_tail {
            Some(tail) => {
                let open = self.blocks.last().is_some_and(|b| !b.stopped);
                let base = if open { self.blocks.len() - 1 } else { self.blocks.len() };
                Mode::Prefill { tail: tail.to_string(), base, join: open }
            }
            None => Mode::Replay { target: self.blocks.len(), replayed: Vec::new() },
        }
    }

    fn splice(&mut self, data: &str, mode: &mut Mode, usage: Option<Usage>) -> Spliced {
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(data) else { return Spliced::Skip };
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        match kind.as_str() {
            // The client has the first attempt's: its id, model and input usage.
            "message_start" | "message_stop" => return Spliced::Skip,
            "message_delta" => {
                if let Mode::Replay { target, replayed } = mode
                    && !self.caught_up(*target, replayed)
                {
                    return Spliced::Diverged;
                }
                if let Some(sum) = usage {
                    event.insert("usage".into(), usage_json(sum));
                }
            }
            "content_block_start" | "content_block_delta" | "content_block_stop" => {
                let index = event.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
                let Some(index) = index else { return Spliced::Skip };
                let keep = match mode {
                    Mode::Prefill { tail, base, join } => self.continue_prefill(&mut event, index, tail, *base, *join),
                    Mode::Replay { target, replayed } => self.replay(&mut event, index, *target, replayed),
                };
                match keep {
                    Some(true) => {}
                    Some(false) => return Spliced::Skip,
                    None => return Spliced::Diverged,
                }
            }
            _ => {}
        }
        Spliced::Send(format!("event: {kind}\ndata: {}\n\n", Value::Object(event)))
    }

    fn chars(&self) -> usize {
        self.blocks.iter().map(|b| b.text.chars().count()).sum()
    }
}

impl Delivered {
    /// A prefill continuation's block event, moved to the client's index; `Some(false)`
    /// when nothing of it is new.
    fn continue_prefill(
        &mut self,
        event: &mut Map<String, Value>,
        index: usize,
        tail: &mut String,
        base: usize,
        join: bool,
    ) -> Option<bool> {
        let at = base + index;
        event.insert("index".into(), at.into());
        if index != 0 {
            return record_kept(&mut self.blocks, event);
        }
        match event.get("type").and_then(Value::as_str) {
            // The client's block is open already.
            Some("content_block_start") if join => return Some(false),
            // The continuation's first text repeats the whitespace the prefill trimmed.
            Some("content_block_delta") => {
                let delta = event.get_mut("delta")?;
                if let Some(key) = Block::delta_key(delta)
                    && let Some(text) = delta.get(key).and_then(Value::as_str)
                {
                    let new = super::skip_tail(text, tail).to_string();
                    if new.is_empty() {
                        return Some(false);
                    }
                    delta[key] = Value::String(new);
                }
            }
            _ => {}
        }
        record_kept(&mut self.blocks, event)
    }

    /// A replayed block event: held back while it matches the client's block, relayed
    /// where it goes past it (`Some(true)`), `None` when it differs.
    fn replay(
        &mut self,
        event: &mut Map<String, Value>,
        index: usize,
        target: usize,
        replayed: &mut Vec<Block>,
    ) -> Option<bool> {
        if index >= target {
            // A block the client does not have: every block it has was replayed whole.
            if !self.caught_up(target, replayed) {
                return None;
            }
            return record_kept(&mut self.blocks, event);
        }
        record(replayed, event);
        let (got, have) = (replayed.get(index)?, self.blocks.get_mut(index)?);
        if got.kind != have.kind || !have.name.starts_with(&got.name) {
            return None;
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default();
        if got.text.len() <= have.text.len() {
            if !have.text.starts_with(&got.text) {
                return None;
            }
            // A block the client has whole ends where the replay's does.
            if kind == "content_block_stop" && got.text.len() < have.text.len() {
                return None;
            }
            return match kind {
                // The replay completes a block the client has open.
                "content_block_stop" if !have.stopped => {
                    have.stopped = true;
                    Some(true)
                }
                "content_block_delta"
                    if !have.stopped
                        && !have.signed
                        && got.text.len() == have.text.len()
                        && Block::delta_text(&event["delta"]).1 =>
                {
                    have.signed = true;
                    Some(true)
                }
                _ => Some(false),
            };
        }
        // Past what the client has: only an open block goes on.
        let new = got.text.strip_prefix(have.text.as_str())?.to_string();
        if have.stopped || kind != "content_block_delta" {
            return None;
        }
        let key = Block::delta_key(&event["delta"])?;
        have.text.push_str(&new);
        event.get_mut("delta")?[key] = Value::String(new);
        Some(true)
    }

    /// The replay has sent every one of the client's first `target` blocks whole.
    fn caught_up(&self, target: usize, replayed: &[Block]) -> bool {
        replayed.len() >= target
            && self.blocks.iter().zip(replayed).take(target).all(|(have, got)| got.stopped && got.text == have.text)
    }
}

/// Records a block event (`content_block_start`, `_delta`, `_stop`) into `blocks`.
fn record(blocks: &mut Vec<Block>, event: &Map<String, Value>) {
    let index = event.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
    let Some(index) = index else { return };
    match event.get("type").and_then(Value::as_str) {
        Some("content_block_start") => {
            if blocks.len() <= index {
                blocks.resize(index + 1, Block::default());
            }
            if let (Some(b), Some(start)) = (blocks.get_mut(index), event.get("content_block")) {
                *b = Block::start(start);
            }
        }
        Some("content_block_delta") => {
            if let (Some(b), Some(delta)) = (blocks.get_mut(index), event.get("delta")) {
                b.take(delta);
            }
        }
        Some("content_block_stop") => {
            if let Some(b) = blocks.get_mut(index) {
                b.stopped = true;
            }
        }
        _ => {}
    }
}

/// Records an event the client is sent.
fn record_kept(blocks: &mut Vec<Block>, event: &Map<String, Value>) -> Option<bool> {
    record(blocks, event);
    Some(true)
}

/// A `message_delta`'s usage, in Anthropic's accounting (input without cache reads and
/// writes).
fn usage_json(u: Usage) -> Value {
    let m = u.metered();
    let mut usage = serde_json::json!({
        "input_tokens": m.input_uncached,
        "cache_read_input_tokens": m.cache_read,
        "cache_creation_input_tokens": m.cache_write,
        "output_tokens": m.output,
    });
    if m.web_searches > 0 {
        usage["server_tool_use"] = serde_json::json!({"web_search_requests": m.web_searches});
    }
    usage
}

#[cfg(test)]
mod tests;
