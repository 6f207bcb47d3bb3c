//! A minimal SSE event splitter for relaying upstream streams: events are forwarded as
//! they complete, each read only for the fields the gateway needs (docs/design.md §4.4).

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// Token usage reported by an upstream, in OpenAI's accounting: `prompt_tokens`
/// includes cache reads (`prompt_tokens_details.cached_tokens`) and cache writes
/// (`prompt_tokens_details.cache_write_tokens`, which sluice's translation of Anthropic
/// and Bedrock answers reports), so that each is priced apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Input tokens, cache reads and writes included.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Where the input tokens came from.
    #[serde(default, deserialize_with = "null_as_default")]
    pub prompt_tokens_details: PromptDetails,
}

/// The cache part of `prompt_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PromptDetails {
    /// Read from the provider's prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Written to it.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Plain input and output tokens, nothing cached.
    pub fn plain(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self { prompt_tokens, completion_tokens, prompt_tokens_details: PromptDetails::default() }
    }

    /// (uncached input, cache reads, cache writes, output): the four quantities a price has.
    pub fn priced_parts(&self) -> (u64, u64, u64, u64) {
        let PromptDetails { cached_tokens, cache_write_tokens } = self.prompt_tokens_details;
        // A provider that reports more cached than prompt tokens is not trusted for the split.
        let cached = cached_tokens.min(self.prompt_tokens);
        let written = cache_write_tokens.min(self.prompt_tokens - cached);
        (self.prompt_tokens - cached - written, cached, written, self.completion_tokens)
    }
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

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
    /// `data: [DONE]`.
    Done,
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

/// Splits a byte stream into SSE events.
#[derive(Default)]
pub struct Splitter {
    buf: BytesMut,
}

impl Splitter {
    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some((end, sep)) = find_boundary(&self.buf) {
            let raw = self.buf.split_to(end + sep).freeze();
            events.push(classify(raw));
        }
        events
    }

    /// Bytes of an unfinished event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Finds the end of the first event: a blank line (`\n\n` or `\r\n\r\n`).
fn find_boundary(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The data of an event (its `data:` lines joined), if it has any.
fn data_of(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(rest);
                }
                None => data = Some(rest.to_owned()),
            }
        }
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
    fn a_chunk_names_the_model_that_answered() {
        let chunk = b"data: {\"model\":\"gpt-4o-2024-08-06\",\"choices\":[]}\n\n";
        assert_eq!(model_of(chunk).as_deref(), Some("gpt-4o-2024-08-06"));
        assert_eq!(model_of(b"data: {\"model\":\"a\\\"b\",\"choices\":[]}\n\n").as_deref(), Some("a\"b"), "escaped");
        assert_eq!(model_of(b"data: {\"choices\":[]}\n\n"), None);
        assert_eq!(model_of(b": keep-alive\n\n"), None);
        assert_eq!(model_of(b"data: [DONE]\n\n"), None);
    }
}
