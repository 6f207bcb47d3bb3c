//! What the client has of a resumed Responses stream, and how a continuation's events are
//! made part of it (docs/design.md §4.5): the client keeps the first attempt's response
//! (its `id` and `created_at`), `sequence_number`s count on from the last one it has,
//! output items keep their `output_index` and `id`, nothing it has is sent twice, and
//! the `response.completed` that ends the stream carries the whole output as the client
//! read it and every attempt's usage summed.
//!
//! A prefill continuation continues the open message item: its first item's `added`
//! events are dropped and its text joins the client's item (whose `…done` events then
//! carry the whole text); its later items follow with their indexes moved up. A replay
//! is held back item by item while it matches what the client has (the same type,
//! function name, and text or arguments), and relayed where it goes past it.

use serde_json::{Map, Value};
use sluice_crds::snapshot::Metered;

use super::{Spliced, Transcript};
use crate::relay::sse::Format;
use crate::usage::Usage;

/// The response and output items the client has.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The first attempt's response `id` and `created_at`.
    id: Option<Value>,
    created_at: Option<Value>,
    /// The last `sequence_number` the client was sent.
    seq: Option<u64>,
    items: Vec<Item>,
}

/// One output item as streamed so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Item {
    kind: Kind,
    id: String,
    /// A function call's name.
    name: String,
    /// A message's text, or a function call's arguments.
    text: String,
    /// A message's content part was added.
    part: bool,
    /// The item as `response.output_item.done` sent it.
    done: Option<Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Message,
    FunctionCall,
    /// Reasoning, hosted tool calls, …: resumed after their `done` only, and held back
    /// whole in a replay.
    Other,
}

impl Item {
    /// An item from `response.output_item.added`.
    fn added(item: &Value) -> Self {
        let kind = match item.get("type").and_then(Value::as_str) {
            Some("message") => Kind::Message,
            Some("function_call") => Kind::FunctionCall,
            _ => Kind::Other,
        };
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        Self { kind, id: text("id"), name: text("name"), ..Self::default() }
    }

    /// Its text or arguments are what `other` has.
    fn same(&self, other: &Item) -> bool {
        self.kind == Kind::Other || self.text == other.text
    }
}

/// How a continuation joins the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The upstream continues the prefill: its item `i` is the client's item `base + i`,
    /// its first item joins the client's open message when `join` is set, and `tail` is
    /// the delivered whitespace the prefill left out.
    Prefill { tail: String, base: usize, join: bool },
    /// The upstream answers again from the start: its item `i` is the client's item `i`;
    /// the first `target` items are the client's and are held back while they match.
    Replay { target: usize, replayed: Vec<Item> },
}

impl Transcript for Delivered {
    type Mode = Mode;
    const FORMAT: Format = Format::Responses;

    fn observe(&mut self, data: &str) {
        let Ok(Value::Object(event)) = serde_json::from_str::<Value>(data) else { return };
        self.seq = event.get("sequence_number").and_then(Value::as_u64).or(self.seq);
        if event.get("type").and_then(Value::as_str) == Some("response.created") {
            self.id = event.get("response").and_then(|r| r.get("id")).cloned();
            self.created_at = event.get("response").and_then(|r| r.get("created_at")).cloned();
        }
        record(&mut self.items, &event);
    }

    /// No item but messages without text.
    fn nothing(&self) -> bool {
        self.items.iter().all(|i| i.kind == Kind::Message && i.text.trim().is_empty())
    }

    /// Inside a message; a function call once its arguments are a whole JSON object; any
    /// other item after its `done`.
    fn resumable(&self) -> bool {
        self.items.iter().all(|i| match i.kind {
            _ if i.done.is_some() => true,
            Kind::Message => true,
            Kind::FunctionCall => serde_json::from_str::<Value>(&i.text).is_ok_and(|v| v.is_object()),
            Kind::Other => false,
        })
    }

    /// One message item continues as a prefill; anything else is replayed.
    fn prefill(&self) -> Option<(&str, &str)> {
        let [only] = self.items.as_slice() else { return None };
        let kept = only.text.trim_end();
        (only.kind == Kind::Message && !kept.is_empty()).then(|| (kept, &only.text[kept.len()..]))
    }

    fn continuation(&self, prefill_tail: Option<&str>) -> Mode {
        match prefill_tail {
            Some(tail) => {
                let open = self.items.last().is_some_and(|i| i.done.is_none());
                let base = if open { self.items.len() - 1 } else { self.items.len() };
                Mode::Prefill { tail: tail.to_string(), base, join: open }
            }
            None => Mode::Replay { target: self.items.len(), replayed: Vec::new() },
        }
    }

    fn splice(&mut self, data: &str, mode: &mut Mode, usage: Option<Usage>) -> Spliced {
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(data) else { return Spliced::Skip };
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        match kind.as_str() {
            // The client has the first attempt's.
            "response.created" | "response.in_progress" => return Spliced::Skip,
            "response.completed" | "response.incomplete" => {
                if let Mode::Replay { target, replayed } = mode
                    && !self.caught_up(*target, replayed)
                {
                    return Spliced::Diverged;
                }
                if let Some(Value::Object(response)) = event.get_mut("response") {
                    self.as_the_clients(response, usage);
                }
            }
            _ => {
                let index = event.get("output_index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
                if let Some(index) = index {
                    let keep = match mode {
                        Mode::Prefill { tail, base, join } => {
                            self.continue_prefill(&mut event, index, tail, *base, *join)
                        }
                        Mode::Replay { target, replayed } => self.replay(&mut event, index, *target, replayed),
                    };
                    match keep {
                        Some(true) => {}
                        Some(false) => return Spliced::Skip,
                        None => return Spliced::Diverged,
                    }
                }
            }
        }
        let seq = self.seq.map_or(0, |s| s + 1);
        self.seq = Some(seq);
        event.insert("sequence_number".into(), seq.into());
        Spliced::Send(format!("event: {kind}\ndata: {}\n\n", Value::Object(event)))
    }

    fn chars(&self) -> usize {
        self.items.iter().map(|i| i.text.chars().count()).sum()
    }
}

impl Delivered {
    /// A prefill continuation's item event, moved to the client's index (and item);
    /// `Some(false)` when nothing of it is new.
    fn continue_prefill(
        &mut self,
        event: &mut Map<String, Value>,
        index: usize,
        tail: &mut String,
        base: usize,
        join: bool,
    ) -> Option<bool> {
        let at = base + index;
        event.insert("output_index".into(), at.into());
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        if index == 0 && kind == "response.output_text.delta" {
            // The continuation's first text repeats the whitespace the prefill trimmed.
            let new = super::skip_tail(event.get("delta").and_then(Value::as_str).unwrap_or_default(), tail);
            if new.is_empty() {
                return Some(false);
            }
            event.insert("delta".into(), new.to_string().into());
        }
        if index != 0 || !join {
            return record_kept(&mut self.items, event);
        }
        let have = self.items.get(at)?;
        match kind.as_str() {
            // The client's item (and its part) is open already.
            "response.output_item.added" => return Some(false),
            "response.content_part.added" if have.part => return Some(false),
            _ => {}
        }
        self.as_the_clients_item(event, at);
        record_kept(&mut self.items, event)
    }

    /// A replayed item event: held back while it matches the client's item, relayed
    /// where it goes past it (`Some(true)`), `None` when it differs.
    fn replay(
        &mut self,
        event: &mut Map<String, Value>,
        index: usize,
        target: usize,
        replayed: &mut Vec<Item>,
    ) -> Option<bool> {
        if index >= target {
            // An item the client does not have: every item it has was replayed whole.
            if !self.caught_up(target, replayed) {
                return None;
            }
            return record_kept(&mut self.items, event);
        }
        record(replayed, event);
        let (got, have) = (replayed.get(index)?, self.items.get(index)?);
        if got.kind != have.kind || !have.name.starts_with(&got.name) {
            return None;
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let keep = match kind.as_str() {
            "response.output_text.delta" | "response.function_call_arguments.delta" => {
                if got.text.len() <= have.text.len() {
                    if !have.text.starts_with(&got.text) {
                        return None;
                    }
                    false
                } else {
                    // Past what the client has: only an open item goes on.
                    let new = got.text.strip_prefix(have.text.as_str())?.to_string();
                    if have.done.is_some() {
                        return None;
                    }
                    event.insert("delta".into(), new.into());
                    true
                }
            }
            "response.content_part.added" => !have.part,
            // The end of an item the client has: where the replay's ends too; sent when
            // the client's is still open.
            "response.output_text.done"
            | "response.content_part.done"
            | "response.function_call_arguments.done"
            | "response.output_item.done" => {
                if !got.same(have) && kind != "response.content_part.done" {
                    return None;
                }
                have.done.is_none()
            }
            _ => false,
        };
        if !keep {
            return Some(false);
        }
        self.as_the_clients_item(event, index);
        record_kept(&mut self.items, event)
    }

    /// The replay has sent every one of the client's first `target` items whole.
    fn caught_up(&self, target: usize, replayed: &[Item]) -> bool {
        replayed.len() >= target
            && self.items.iter().zip(replayed).take(target).all(|(have, got)| got.done.is_some() && got.same(have))
    }

    /// Makes an event of a continuation's item one of the client's item `at`: its id,
    /// and in the `…done` events the whole text the client has.
    fn as_the_clients_item(&self, event: &mut Map<String, Value>, at: usize) {
        let Some(have) = self.items.get(at) else { return };
        if event.contains_key("item_id") {
            event.insert("item_id".into(), have.id.clone().into());
        }
        match event.get("type").and_then(Value::as_str) {
            Some("response.output_text.done") if have.kind == Kind::Message => {
                event.insert("text".into(), have.text.clone().into());
            }
            Some("response.content_part.done") if have.kind == Kind::Message => {
                if let Some(part) = event.get_mut("part").and_then(Value::as_object_mut) {
                    part.insert("text".into(), have.text.clone().into());
                }
            }
            Some("response.output_item.done") => {
                if let Some(item) = event.get_mut("item").and_then(Value::as_object_mut) {
                    item.insert("id".into(), have.id.clone().into());
                    let text = have.text.clone();
                    match have.kind {
                        Kind::Message => {
                            if let Some(Value::Array(parts)) = item.get_mut("content")
                                && let Some(Value::Object(part)) = parts.first_mut()
                            {
                                part.insert("text".into(), text.into());
                            }
                        }
                        Kind::FunctionCall => {
                            item.insert("arguments".into(), text.into());
                        }
                        Kind::Other => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// The response a continuation finishes with, made the client's: its id and
    /// `created_at`, the output items as the client has them, every attempt's usage.
    fn as_the_clients(&self, response: &mut Map<String, Value>, usage: Option<Usage>) {
        for (key, value) in [("id", &self.id), ("created_at", &self.created_at)] {
            if let Some(v) = value {
                response.insert(key.into(), v.clone());
            }
        }
        let output: Vec<Value> = self.items.iter().filter_map(|i| i.done.clone()).collect();
        response.insert("output".into(), Value::Array(output));
        if let (Some(sum), Some(Value::Object(u))) = (usage, response.get_mut("usage")) {
            let Metered { cache_read: cached, output, .. } = sum.metered();
            u.insert("input_tokens".into(), sum.prompt_tokens.into());
            u.insert("output_tokens".into(), output.into());
            u.insert("total_tokens".into(), (sum.prompt_tokens + output).into());
            u.insert("input_tokens_details".into(), serde_json::json!({"cached_tokens": cached}));
        }
    }
}

/// Records an item event (`output_item.added`/`.done`, a part added, a text or arguments
/// delta) into `items`.
fn record(items: &mut Vec<Item>, event: &Map<String, Value>) {
    let index = event.get("output_index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
    let Some(index) = index else { return };
    let delta = || event.get("delta").and_then(Value::as_str).unwrap_or_default();
    match event.get("type").and_then(Value::as_str) {
        Some("response.output_item.added") => {
            if items.len() <= index {
                items.resize(index + 1, Item::default());
            }
            if let (Some(i), Some(item)) = (items.get_mut(index), event.get("item")) {
                *i = Item::added(item);
            }
        }
        Some("response.content_part.added") => {
            if let Some(i) = items.get_mut(index) {
                i.part = true;
            }
        }
        Some("response.output_text.delta" | "response.function_call_arguments.delta") => {
            if let Some(i) = items.get_mut(index) {
                i.text.push_str(delta());
            }
        }
        Some("response.output_item.done") => {
            if let Some(i) = items.get_mut(index) {
                i.done = event.get("item").cloned();
            }
        }
        _ => {}
    }
}

/// Records an event the client is sent.
fn record_kept(items: &mut Vec<Item>, event: &Map<String, Value>) -> Option<bool> {
    record(items, event);
    Some(true)
}

#[cfg(test)]
mod tests;
