//! An incremental Server-Sent Events framer: bytes in at any split, whole events out;
//! and the [`Transcoder`] of every SSE protocol, which feeds each event's data to the
//! protocol's [`SseEvents`].

use serde_json::Value;

use crate::lenient::{self, Lenient};
use crate::{ChunkWriter, Out, Transcoder, UpstreamError};

/// One SSE event: its `event:` name (if any) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Frames a byte stream into [`SseEvent`]s. Lines end in LF or CRLF; an event ends at a
/// blank line. Comments (`:`), `id:` and `retry:` are ignored, as is an event without data.
#[derive(Debug, Default)]
pub struct SseFramer {
    buf: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseFramer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `bytes` and returns every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let mut line = &self.buf[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            // Lines are whole, so no UTF-8 sequence is cut (a continuation byte is never `\n`).
            let line = String::from_utf8_lossy(line).into_owned();
            if let Some(event) = self.line(&line) {
                out.push(event);
            }
            start = end + 1;
        }
        self.buf.drain(..start);
        out
    }

    /// Ends the stream: a last event not followed by a blank line is still returned.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(buf.strip_suffix(b"\r").unwrap_or(&buf)).into_owned();
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.dispatch()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent { event, data: std::mem::take(&mut self.data) })
    }
}

/// What an SSE protocol makes of its events (see [`SseTranscoder`]).
pub(crate) trait SseEvents {
    /// One event's data.
    fn event(&mut self, data: &str, out: &mut Vec<Out>);
    /// The body ended after its last event: a stream not yet done ends here, in an
    /// error if it lacked its end marker.
    fn end(&mut self, out: &mut Vec<Out>);
}

/// The JSON of an event of a stream `writer` still writes: a stream that is done takes
/// nothing more, and data that is not JSON ends it in an error.
pub(crate) fn event_json(writer: &mut ChunkWriter, data: &str, out: &mut Vec<Out>) -> Option<Value> {
    if writer.is_done() {
        return None;
    }
    let parsed = serde_json::from_str::<Value>(data).ok();
    if parsed.is_none() {
        writer.error(UpstreamError::malformed(200, "a stream event is not JSON"), out);
    }
    parsed
}

/// The [`Transcoder`] of an SSE stream: frames the body and hands each event's data,
/// then the body's end, to `E`.
pub(crate) struct SseTranscoder<E> {
    framer: SseFramer,
    events: E,
}

impl<E: SseEvents> SseTranscoder<E> {
    pub(crate) fn new(events: E) -> Self {
        Self { framer: SseFramer::new(), events }
    }
}

impl<E: SseEvents> Transcoder for SseTranscoder<E> {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Out> {
        let mut out = Vec::new();
        for ev in self.framer.feed(bytes) {
            self.events.event(&ev.data, &mut out);
        }
        out
    }

    fn finish(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let Some(ev) = self.framer.finish() {
            self.events.event(&ev.data, &mut out);
        }
        self.events.end(&mut out);
        out
    }
}

/// What a relay of named events (Messages, Responses) needs to know of its API: which
/// event types end the stream in an error (and the error they carry), which end it
/// complete, and which carry content (the stream commits on the first).
pub(crate) struct NamedEvents {
    pub(crate) is_error: fn(&str) -> bool,
    pub(crate) error: fn(&str) -> UpstreamError,
    pub(crate) is_end: fn(&str) -> bool,
    pub(crate) is_content: fn(&str) -> bool,
    /// Says what a stream cut short lacked (`the stream ended before …`).
    pub(crate) end_name: &'static str,
}

/// The transcoder of a native stream of named events: every event passes unchanged (its
/// data byte for byte, re-framed as `event:`/`data:`), marked as content from the first
/// content event; an error event ends it in an error (which fails over while no content
/// was sent), an end event ends it.
pub(crate) fn named_relay(api: NamedEvents) -> Box<dyn Transcoder + Send> {
    Box::new(SseTranscoder::new(NamedRelay::new(api)))
}

/// The relay of named events, event by event (also fed by frames other than SSE's:
/// Bedrock's InvokeModel stream).
pub(crate) struct NamedRelay {
    api: NamedEvents,
    content: bool,
    pub(crate) done: bool,
}

impl NamedRelay {
    pub(crate) fn new(api: NamedEvents) -> Self {
        Self { api, content: false, done: false }
    }

    /// Ends the stream in `error`.
    pub(crate) fn fail(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        self.done = true;
        out.push(Out::Error { error, before_content: !self.content });
    }
}

impl SseEvents for NamedRelay {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        let Some(kind) = type_of(data) else {
            return self.fail(UpstreamError::malformed(200, "a stream event is not a JSON object with a type"), out);
        };
        if (self.api.is_error)(&kind) {
            return self.fail((self.api.error)(data), out);
        }
        let end = (self.api.is_end)(&kind);
        let content = !end && (self.api.is_content)(&kind);
        self.content |= content;
        out.push(Out::Event { bytes: crate::messages::event(&kind, data), content });
        if end {
            self.done = true;
            out.push(Out::Done);
        }
    }

    fn end(&mut self, out: &mut Vec<Out>) {
        if !self.done {
            let message = format!("the stream ended before {}", self.api.end_name);
            self.fail(UpstreamError::malformed(200, message), out);
        }
    }
}

/// The `type` member of an event's data (Messages and Responses events name
/// themselves so), read without building a tree.
pub fn type_of(data: &str) -> Option<String> {
    #[derive(Default)]
    struct Kind(Option<String>);
    impl<'de> Lenient<'de> for Kind {
        fn from_map<A: serde::de::MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
            let mut k = Self::default();
            lenient::members(map, |key, map| {
                match key {
                    "type" => k.0 = map.next_value::<lenient::Str<'de>>()?.as_deref().map(str::to_owned),
                    _ => lenient::skip(map)?,
                }
                Ok(())
            })?;
            Ok(k)
        }
    }
    impl<'de> serde::Deserialize<'de> for Kind {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            lenient::deserialize(d)
        }
    }
    serde_json::from_str::<Kind>(data).ok().and_then(|k| k.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], split: usize) -> Vec<SseEvent> {
        let mut f = SseFramer::new();
        let mut out = f.feed(&input[..split]);
        out.extend(f.feed(&input[split..]));
        out.extend(f.finish());
        out
    }

    #[test]
    fn frames_events_at_every_split_with_lf_and_crlf() {
        let input = b"event: a\ndata: {\"x\":1}\n\n: comment\r\nevent: b\r\ndata: one\r\ndata: two\r\n\r\ndata: tail";
        let want = vec![
            SseEvent { event: Some("a".into()), data: "{\"x\":1}".into() },
            SseEvent { event: Some("b".into()), data: "one\ntwo".into() },
            SseEvent { event: None, data: "tail".into() },
        ];
        for split in 0..=input.len() {
            assert_eq!(all(input, split), want, "split at {split}");
        }
    }

    #[test]
    fn an_event_without_data_is_dropped() {
        assert_eq!(all(b"event: ping\n\ndata: x\n\n", 3), vec![SseEvent { event: None, data: "x".into() }]);
    }
}
