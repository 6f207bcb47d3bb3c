//! A minimal SSE event splitter for relaying upstream streams: events are forwarded as
//! they complete, each read only for the fields the gateway needs (docs/design.md §4.4).

use std::borrow::Cow;

use crate::usage::{PromptDetails, ServerToolUse, Usage};
use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// A chunk's `finish_reason`: OpenAI's four values, and whatever else an
/// OpenAI-compatible upstream may send (it still ends the choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// `stop`.
    Stop,
    /// `length`.
    Length,
    /// `tool_calls` (or the deprecated `function_call`).
    #[serde(alias = "function_call")]
    ToolCalls,
    /// `content_filter`.
    ContentFilter,
    /// Any other value.
    #[serde(other)]
    Other,
}

impl FinishReason {
    /// The value as OpenAI writes it (`other` for the rest).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other => "other",
        }
    }
}

/// The fields of a chunk the gateway reads; everything else is skipped unparsed.
#[derive(Deserialize)]
struct ChunkPeek {
    #[serde(default)]
    choices: Option<Vec<ChoicePeek>>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct ChoicePeek {
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    #[serde(default)]
    delta: Option<DeltaPeek>,
}

#[derive(Deserialize)]
struct DeltaPeek {
    #[serde(default)]
    content: Option<serde::de::IgnoredAny>,
}

/// What one complete event is.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// `data: [DONE]` (Messages: `message_stop`).
    Done,
    /// The event that ends a Responses stream (`response.completed`,
    /// `response.incomplete`), carrying the usage: held back until the answer is billed.
    Last {
        /// The raw event bytes.
        raw: Bytes,
        /// The whole answer's usage.
        usage: Option<Usage>,
        /// How it ended.
        finished: FinishReason,
    },
    /// A JSON chunk.
    Chunk {
        /// The raw event bytes, ending in a blank line.
        raw: Bytes,
        /// Usage, if the chunk carries it.
        usage: Option<Usage>,
        /// A choice carries a finish reason.
        finished: Option<FinishReason>,
        /// A usage-only chunk (empty choices), as sent for `include_usage`.
        usage_only: bool,
        /// A choice carries content.
        content: bool,
    },
    /// An event without data (comments, keep-alives): forwarded as is.
    Other(Bytes),
    /// Data that is not valid JSON: dropped and counted.
    Malformed(String),
}

/// The event format of a relayed stream: the inbound API's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// OpenAI chunks, ending in `data: [DONE]`.
    #[default]
    OpenAi,
    /// Anthropic Messages events, ending in `message_stop`.
    Messages,
    /// OpenAI Responses events, ending in `response.completed` (or `.incomplete`).
    Responses,
}

impl Format {
    /// The stream format of an endpoint.
    pub fn of(endpoint: crate::endpoint::Endpoint) -> Self {
        match endpoint {
            crate::endpoint::Endpoint::Messages => Format::Messages,
            crate::endpoint::Endpoint::Responses => Format::Responses,
            _ => Format::OpenAi,
        }
    }

    /// The last event of a complete stream.
    pub fn done(self) -> Bytes {
        match self {
            Format::OpenAi => Bytes::from_static(b"data: [DONE]\n\n"),
            Format::Messages => Bytes::from_static(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
            // Its last event carries the answer: relayed as [`Event::Last`], nothing added.
            Format::Responses => Bytes::new(),
        }
    }

    /// Whether `events` (a whole stream as the client was sent it) ended complete: with
    /// `[DONE]`, `message_stop` or `response.completed`, not an error event.
    pub fn completes(self, events: &[u8]) -> bool {
        let trimmed = events.trim_ascii_end();
        let last = match trimmed.windows(2).rposition(|w| w == b"\n\n") {
            Some(at) => &trimmed[at + 2..],
            None => trimmed,
        };
        let has = |needle: &[u8]| last.windows(needle.len()).any(|w| w == needle);
        match self {
            Format::OpenAi => last == b"data: [DONE]",
            Format::Messages => has(b"message_stop"),
            Format::Responses => has(b"response.completed"),
        }
    }

    /// A keep-alive for a silent stream: Messages' `ping` event, else an SSE comment
    /// (which every SSE client skips).
    pub fn keep_alive(self) -> Bytes {
        match self {
            Format::Messages => Bytes::from_static(b"event: ping\ndata: {\"type\": \"ping\"}\n\n"),
            Format::OpenAi | Format::Responses => Bytes::from_static(b": keep-alive\n\n"),
        }
    }

    /// An error event ending a stream: OpenAI's `data: {"error"}` (with `code`) or a
    /// Messages `event: error` (`kind` as its type).
    pub fn error(self, kind: &str, code: &str, message: &str) -> Bytes {
        match self {
            Format::OpenAi => {
                let event = serde_json::json!({"error": {"message": message, "type": kind, "code": code}});
                Bytes::from(format!("data: {event}\n\n"))
            }
            Format::Messages => sluice_providers::messages::error_event(kind, message),
            Format::Responses => sluice_providers::responses::failed_event("", code, message),
        }
    }
}

/// Splits a byte stream into SSE events.
#[derive(Default)]
pub struct Splitter {
    buf: BytesMut,
    format: Format,
    /// A Messages stream's usage so far (its counts are cumulative, spread over
    /// `message_start` and `message_delta`).
    usage: MessagesUsage,
}

impl Splitter {
    /// A splitter of `format` events.
    pub fn new(format: Format) -> Self {
        Self { format, ..Self::default() }
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some((end, sep)) = find_boundary(&self.buf) {
            let raw = self.buf.split_to(end + sep).freeze();
            events.push(match self.format {
                Format::OpenAi => classify(raw),
                Format::Messages => self.usage.classify(raw),
                Format::Responses => classify_responses(raw),
            });
        }
        events
    }

    /// The model a stream's first event names.
    pub fn model_of(&self, raw: &[u8]) -> Option<String> {
        match self.format {
            Format::OpenAi => model_of(raw),
            Format::Messages => {
                let v: serde_json::Value = serde_json::from_str(data_of(raw)?.trim()).ok()?;
                v["message"]["model"].as_str().map(str::to_owned)
            }
            Format::Responses => {
                let v: serde_json::Value = serde_json::from_str(data_of(raw)?.trim()).ok()?;
                v["response"]["model"].as_str().map(str::to_owned)
            }
        }
    }

    /// Bytes of an unfinished event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Finds the end of the first event: a blank line (`\n\n` or `\r\n\r\n`), as where it
/// starts and the separator's length. Runs on every event of every stream: one pass
/// over the line feeds.
fn find_boundary(buf: &[u8]) -> Option<(usize, usize)> {
    for at in memchr::memchr_iter(b'\n', buf) {
        let after = &buf[at + 1..];
        if after.first() == Some(&b'\n') {
            return Some((at, 2));
        }
        if at > 0 && buf[at - 1] == b'\r' && after.starts_with(b"\r\n") {
            return Some((at - 1, 4));
        }
    }
    None
}

/// The data of an event (its `data:` lines joined by line feeds), if it has any:
/// borrowed from the event when it is one line of UTF-8, as nearly every event is.
pub(crate) fn data_of(raw: &[u8]) -> Option<Cow<'_, str>> {
    let mut data: Option<Cow<'_, str>> = None;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', raw).chain([raw.len()]) {
        let line = &raw[start..end];
        start = end + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"data:") else { continue };
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        // The validator's fast path; only text that is not UTF-8 is repaired.
        let text = std::str::from_utf8(rest).map_or_else(|_| String::from_utf8_lossy(rest), Cow::Borrowed);
        data = Some(match data {
            None => text,
            Some(before) => {
                let mut joined = before.into_owned();
                joined.push('\n');
                joined.push_str(&text);
                Cow::Owned(joined)
            }
        });
    }
    data
}

/// The `model` a chunk event names, if any: read from a stream's first chunk only.
pub fn model_of(raw: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ModelPeek<'a> {
        #[serde(default, borrow)]
        model: Option<std::borrow::Cow<'a, str>>,
    }
    let data = data_of(raw)?;
    let peek: ModelPeek<'_> = serde_json::from_str(data.trim()).ok()?;
    peek.model.map(std::borrow::Cow::into_owned)
}

/// A Messages usage object: counts present replace the ones before.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct MessagesCounts {
    input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    server_tool_use: Option<ServerToolUse>,
}

/// The members of a Messages event the gateway reads.
#[derive(Deserialize)]
struct MessagesPeek {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: Option<MessageStartPeek>,
    #[serde(default)]
    usage: Option<MessagesCounts>,
    #[serde(default)]
    delta: Option<StopPeek>,
}

#[derive(Deserialize)]
struct MessageStartPeek {
    #[serde(default)]
    usage: Option<MessagesCounts>,
}

#[derive(Deserialize)]
struct StopPeek {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A Messages stream's usage, accumulated over its events.
#[derive(Default)]
struct MessagesUsage(MessagesCounts);

impl MessagesUsage {
    fn add(&mut self, c: MessagesCounts) {
        let u = &mut self.0;
        u.input_tokens = c.input_tokens.or(u.input_tokens);
        u.cache_read_input_tokens = c.cache_read_input_tokens.or(u.cache_read_input_tokens);
        u.cache_creation_input_tokens = c.cache_creation_input_tokens.or(u.cache_creation_input_tokens);
        u.output_tokens = c.output_tokens.or(u.output_tokens);
        u.server_tool_use = c.server_tool_use.or(u.server_tool_use);
    }

    /// In OpenAI's accounting: input includes cache reads and writes.
    fn usage(&self) -> Usage {
        let c = self.0;
        let (read, write) = (c.cache_read_input_tokens.unwrap_or(0), c.cache_creation_input_tokens.unwrap_or(0));
        Usage {
            prompt_tokens: c.input_tokens.unwrap_or(0) + read + write,
            completion_tokens: c.output_tokens.unwrap_or(0),
            prompt_tokens_details: PromptDetails { cached_tokens: read, cache_write_tokens: write },
            server_tool_use: c.server_tool_use.unwrap_or_default(),
        }
    }

    fn classify(&mut self, raw: Bytes) -> Event {
        let Some(data) = data_of(&raw) else {
            return Event::Other(raw);
        };
        let peek = match serde_json::from_str::<MessagesPeek>(data.trim()) {
            Ok(p) => p,
            Err(e) => return Event::Malformed(e.to_string()),
        };
        let chunk = |usage, finished, content| Event::Chunk { raw, usage, finished, usage_only: false, content };
        match peek.kind.as_str() {
            "message_stop" => Event::Done,
            "message_start" => {
                if let Some(u) = peek.message.and_then(|m| m.usage) {
                    self.add(u);
                }
                chunk(None, None, false)
            }
            "message_delta" => {
                if let Some(u) = peek.usage {
                    self.add(u);
                }
                let finished = peek.delta.and_then(|d| d.stop_reason).map(|r| match r.as_str() {
                    "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
                    "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
                    "tool_use" => FinishReason::ToolCalls,
                    "refusal" => FinishReason::ContentFilter,
                    _ => FinishReason::Other,
                });
                chunk(Some(self.usage()), finished, false)
            }
            "content_block_delta" => chunk(None, None, true),
            _ => chunk(None, None, false),
        }
    }
}

/// A Responses event: read only for its type, and the last one for the usage.
fn classify_responses(raw: Bytes) -> Event {
    let Some(data) = data_of(&raw) else {
        return Event::Other(raw);
    };
    let Some(kind) = sluice_providers::sse::type_of(&data) else {
        return Event::Malformed("a Responses event without a type".into());
    };
    let finished = match kind.as_str() {
        "response.completed" => FinishReason::Stop,
        "response.incomplete" => FinishReason::Length,
        _ => {
            let content = kind.ends_with(".delta");
            return Event::Chunk { raw, usage: None, finished: None, usage_only: false, content };
        }
    };
    let usage = serde_json::from_str::<serde_json::Value>(&data)
        .ok()
        .and_then(|v| sluice_providers::responses::usage_of_response_object(&v["response"]))
        .map(Usage::from);
    Event::Last { raw, usage, finished }
}

fn classify(raw: Bytes) -> Event {
    let Some(data) = data_of(&raw) else {
        return Event::Other(raw);
    };
    let data = data.trim();
    if data == "[DONE]" {
        return Event::Done;
    }
    match serde_json::from_str::<ChunkPeek>(data) {
        Ok(peek) => {
            let choices = peek.choices.unwrap_or_default();
            Event::Chunk {
                finished: choices.iter().find_map(|c| c.finish_reason),
                content: choices.iter().any(|c| c.delta.as_ref().is_some_and(|d| d.content.is_some())),
                usage_only: choices.is_empty() && peek.usage.is_some(),
                usage: peek.usage,
                raw,
            }
        }
        Err(e) => Event::Malformed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_completes_with_its_apis_last_event_only() {
        let chat = b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
        assert!(Format::OpenAi.completes(chat));
        assert!(!Format::OpenAi.completes(b"data: {\"choices\":[]}\n\ndata: {\"error\":{}}\n\n"));
        let messages = b"event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert!(Format::Messages.completes(messages));
        assert!(!Format::Messages.completes(b"event: message_start\ndata: {}\n\nevent: error\ndata: {}\n\n"));
        assert!(Format::Responses.completes(b"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n"));
        assert!(!Format::Responses.completes(b"event: response.failed\ndata: {}\n\n"));
        assert!(!Format::OpenAi.completes(b""));
    }

    #[test]
    fn boundaries_are_the_first_blank_line_of_either_kind() {
        assert_eq!(find_boundary(b"data: a\n\ndata: b\n\n"), Some((7, 2)));
        assert_eq!(find_boundary(b"data: a\r\n\r\ndata: b\n\n"), Some((7, 4)));
        assert_eq!(find_boundary(b"data: a\r\n\n"), Some((8, 2)), "a CRLF line, then a bare LF blank line");
        assert_eq!(find_boundary(b"\n\n"), Some((0, 2)));
        assert_eq!(find_boundary(b"data: a\ndata: b\n"), None);
        assert_eq!(find_boundary(b"data: a\r\n\r"), None);
        assert_eq!(find_boundary(b""), None);
    }

    #[test]
    fn data_lines_are_joined_and_one_line_is_borrowed() {
        assert!(matches!(data_of(b"event: x\ndata: {\"a\":1}\n\n"), Some(Cow::Borrowed("{\"a\":1}"))));
        assert_eq!(data_of(b"data:a\r\ndata: b\r\n\r\n").as_deref(), Some("a\nb"));
        assert_eq!(data_of(b"data:  two spaces\n\n").as_deref(), Some(" two spaces"), "one space is the separator");
        assert_eq!(data_of(b": comment\nevent: ping\n\n"), None);
        assert_eq!(data_of(b"data: \xff\n\n").as_deref(), Some("\u{fffd}"));
    }

    #[test]
    fn splits_events_across_chunks() {
        let mut s = Splitter::default();
        assert!(s.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}").is_empty());
        let events = s.push(b"\n\ndata: [DONE]\n\n");
        assert_eq!(events.len(), 2);
        assert!(matches!(events[0], Event::Chunk { content: true, finished: None, .. }));
        assert_eq!(events[1], Event::Done);
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn reads_usage_finish_and_malformed() {
        let mut s = Splitter::default();
        let events = s.push(
            b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n\
              data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\n\
              data: {not json\n\n: keep-alive\n\n",
        );
        assert!(matches!(events[0], Event::Chunk { finished: Some(FinishReason::Stop), usage: None, .. }));
        assert!(matches!(
            events[1],
            Event::Chunk { usage_only: true, usage: Some(Usage { prompt_tokens: 3, completion_tokens: 5, .. }), .. }
        ));
        assert!(matches!(events[2], Event::Malformed(_)));
        assert!(matches!(events[3], Event::Other(_)));
    }

    #[test]
    fn null_finish_reason_is_not_a_finish() {
        let mut s = Splitter::default();
        let events =
            s.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}],\"usage\":null}\n\n");
        assert!(matches!(events[0], Event::Chunk { finished: None, usage: None, usage_only: false, .. }));
    }

    #[test]
    fn web_searches_are_read_from_chat_usage_and_from_a_responses_answers_items() {
        let mut chat = Splitter::new(Format::OpenAi);
        let events = chat.push(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"server_tool_use\":{\"web_search_requests\":1}}}\n\n");
        let Event::Chunk { usage: Some(u), .. } = &events[0] else { panic!("{events:?}") };
        assert_eq!(u.metered().web_searches, 1);

        let mut responses = Splitter::new(Format::Responses);
        let completed = serde_json::json!({"type": "response.completed", "response": {
            "output": [{"type": "web_search_call", "status": "completed"}, {"type": "web_search_call"}, {"type": "message"}],
            "usage": {"input_tokens": 9, "output_tokens": 4},
        }});
        let events = responses.push(format!("event: response.completed\ndata: {completed}\n\n").as_bytes());
        let Event::Last { usage: Some(u), .. } = &events[0] else { panic!("{events:?}") };
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.metered().web_searches), (9, 4, 2));
    }

    #[test]
    fn a_messages_stream_reads_usage_finish_and_its_end() {
        let mut s = Splitter::new(Format::Messages);
        let events = s.push(
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":10,\"output_tokens\":1}}}\n\n\
              event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n\
              event: ping\ndata: {\"type\":\"ping\"}\n\n\
              event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7,\"server_tool_use\":{\"web_search_requests\":2}}}\n\n\
              event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        assert!(matches!(events[0], Event::Chunk { content: false, usage: None, .. }));
        assert!(matches!(events[1], Event::Chunk { content: true, .. }));
        assert!(matches!(events[2], Event::Chunk { content: false, finished: None, .. }));
        let want = Usage {
            prompt_tokens: 13,
            completion_tokens: 7,
            prompt_tokens_details: PromptDetails { cached_tokens: 10, cache_write_tokens: 0 },
            server_tool_use: ServerToolUse { web_search_requests: 2 },
        };
        assert_eq!(want.metered().web_searches, 2);
        assert!(
            matches!(&events[3], Event::Chunk { finished: Some(FinishReason::ToolCalls), usage: Some(u), .. } if *u == want),
            "{:?}",
            events[3]
        );
        assert_eq!(events[4], Event::Done);
        let start =
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\"}}\n\n";
        assert_eq!(s.model_of(start).as_deref(), Some("claude-x"));
    }

    #[test]
    fn a_chunk_names_the_model_that_answered() {
        let chunk = b"data: {\"model\":\"gpt-4o-2024-08-06\",\"choices\":[]}\n\n";
        assert_eq!(model_of(chunk).as_deref(), Some("gpt-4o-2024-08-06"));
        assert_eq!(model_of(b"data: {\"model\":\"a\\\"b\",\"choices\":[]}\n\n").as_deref(), Some("a\"b"), "escaped");
        assert_eq!(model_of(b"data: {\"choices\":[]}\n\n"), None);
        assert_eq!(model_of(b": keep-alive\n\n"), None);
        assert_eq!(model_of(b"data: [DONE]\n\n"), None);
    }
}
