//! The Anthropic Messages API as an inbound API (docs/design.md §12): what the gateway
//! needs to serve `POST /v1/messages` on every candidate, without I/O.
//!
//! - **Native** (`anthropic`, `vertex-anthropic`, Claude on `bedrock`): [`native`]
//!   sends the client's body as it came — every member, `cache_control` and thinking
//!   signature byte-exact — with only the envelope changed (the model; on Vertex and
//!   Bedrock the `anthropic_version` member, the path, and what they refuse, by the
//!   rules of docs/gateway.md), and [`relay`] (Bedrock: [`bedrock_relay`], which
//!   unwraps its event-stream frames) passes the answer's events on unchanged while
//!   reading what the gateway needs (content, errors, the end).
//! - **Translated** (every other protocol): [`to_chat`] turns the request into an OpenAI
//!   chat request, which the candidate's own translation then takes as any chat
//!   request; the answer comes back as OpenAI chunks, which [`from_chat`] turns into
//!   the Messages events (and [`message_of_completion`] a whole answer). What has no
//!   equivalent is refused naming the member, never dropped, except the members
//!   docs/gateway.md lists as hints (thinking, `cache_control`, …).

mod bedrock;
mod chat;
mod encode;
mod envelope;

use bytes::Bytes;
use serde_json::{Value, json};

pub use bedrock::{bedrock_relay, is_claude_on_bedrock, token_count_of_bedrock};
pub use chat::to_chat;
pub use encode::{from_chat, message_of_completion};
pub use envelope::{ANTHROPIC_VERSION, BEDROCK_VERSION, native};

use crate::lenient::{self, Lenient};
use crate::{Transcoder, Usage};

/// `event: {name}\ndata: {data}\n\n`, the framing of every Messages event.
pub fn event(name: &str, data: &str) -> Bytes {
    let mut out = Vec::with_capacity(name.len() + data.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// An `error` event: `{"type":"error","error":{"type":T,"message":M}}`.
pub fn error_event(kind: &str, message: &str) -> Bytes {
    event("error", &error_body(kind, message).to_string())
}

/// The Messages error object.
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The usage of a whole Messages answer (`usage` at its top level), in OpenAI's
/// accounting; `None` when the body has none. The member is found without parsing the
/// rest of the body ([`member`](crate::member)), which is parsed only when the walk
/// cannot decide.
pub fn usage_of_message(body: &[u8]) -> Option<Usage> {
    if let Some(usage) = crate::member::read::<crate::anthropic::UsageIn>(body, "usage") {
        return usage.map(|u| u.to_usage(&mut Usage::default()));
    }
    #[derive(Default)]
    struct Top(Option<crate::anthropic::UsageIn>);
    impl<'de> Lenient<'de> for Top {
        fn from_map<A: serde::de::MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
            let mut t = Self::default();
            lenient::members(map, |key, map| {
                match key {
                    "usage" => t.0 = Some(map.next_value()?),
                    _ => lenient::skip(map)?,
                }
                Ok(())
            })?;
            Ok(t)
        }
    }
    impl<'de> serde::Deserialize<'de> for Top {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            lenient::deserialize(d)
        }
    }
    let top: Top = serde_json::from_slice(body).ok()?;
    top.0.map(|u| u.to_usage(&mut Usage::default()))
}

/// The transcoder of a native Messages stream: every event passes unchanged (its data
/// byte for byte, re-framed as `event:`/`data:`), marked as content from the first
/// `content_block_delta`; an `error` event ends it in an error (which fails over while
/// no content was sent) and `message_stop` ends it.
pub fn relay() -> Box<dyn Transcoder + Send> {
    crate::sse::named_relay(events())
}

/// What the relay knows of Messages events.
fn events() -> crate::sse::NamedEvents {
    crate::sse::NamedEvents {
        is_error: |kind| kind == "error",
        error: |data| crate::anthropic::classify(200, &http::HeaderMap::new(), data.as_bytes(), 0),
        is_end: |kind| kind == "message_stop",
        is_content: |kind| kind == "content_block_delta",
        end_name: "message_stop",
    }
}

#[cfg(test)]
mod tests;
