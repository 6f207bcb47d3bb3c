//! `application/vnd.amazon.eventstream` framing (Bedrock's streamed answers), on
//! `aws-smithy-eventstream`.
//!
//! A message is a prelude (total length, headers length, CRC32), headers, a payload
//! and a CRC32 over everything before it; both CRCs are checked. [`FrameDecoder`] takes
//! body bytes split anywhere and yields whole [`Frame`]s; [`write_message_to`],
//! [`encode_event`] and [`encode_exception`] write frames for tests and fake upstreams.
//!
//! Only feed it a body whose `content-type` is [`CONTENT_TYPE`]: a JSON error body is
//! not frames, and the decoder reports it as malformed at once (its first four bytes
//! read as an absurd length) rather than waiting for gigabytes.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::{Buf, Bytes, BytesMut};

/// The `content-type` of an event stream body.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";
/// The largest message accepted (AWS's limit is 16 MiB of payload; headers are small).
pub const MAX_MESSAGE_LEN: usize = 16 * 1024 * 1024 + 128 * 1024;
/// Prelude (12 bytes) + message CRC (4 bytes).
const OVERHEAD: usize = 16;

/// The `:message-type` of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// A modelled event; [`Frame::name`] is its `:event-type`.
    Event,
    /// A modelled exception; [`Frame::name`] is its `:exception-type`.
    Exception,
    /// An unmodelled error; [`Frame::name`] is its `:error-code`.
    Error,
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Event, exception or error.
    pub message_type: MessageType,
    /// `:event-type`, `:exception-type` or `:error-code` (empty if absent).
    pub name: String,
    /// `:error-message` of an error message.
    pub error_message: Option<String>,
    /// The payload (JSON for Bedrock).
    pub payload: Bytes,
}

/// Why the byte stream is not a valid event stream. The decoder is unusable after it.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// A bad length, CRC or header.
    #[error("malformed event stream frame: {0}")]
    Malformed(String),
    /// The body ended inside a frame.
    #[error("event stream ended inside a frame ({0} bytes left over)")]
    Truncated(usize),
}

/// An incremental frame decoder: [`push`](Self::push) bytes as they arrive, then take
/// frames with [`next_frame`](Self::next_frame) until it returns `Ok(None)`.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: BytesMut,
    inner: MessageFrameDecoder,
    failed: bool,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the next body bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.failed {
            return Err(FrameError::Malformed("decoder already failed".to_owned()));
        }
        let Some(total) = self.peek_total_len().inspect_err(|_| self.failed = true)? else {
            return Ok(None);
        };
        if self.buf.len() < total {
            return Ok(None);
        }
        // A whole frame is buffered: the inner decoder reads it in one call and keeps
        // no partial state between calls.
        let mut frame = self.buf.split_to(total).freeze();
        match self.inner.decode_frame(&mut frame) {
            Ok(DecodedFrame::Complete(message)) if !frame.has_remaining() => Frame::from_message(&message).map(Some),
            Ok(_) => Err(FrameError::Malformed("frame length mismatch".to_owned())),
            Err(e) => Err(FrameError::Malformed(e.to_string())),
        }
        .inspect_err(|_| self.failed = true)
    }

    /// Call at the end of the body: an error if a partial frame is left over.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }

    fn peek_total_len(&self) -> Result<Option<usize>, FrameError> {
        let Some(prelude) = self.buf.get(..8) else {
            return Ok(None);
        };
        let total = u32::from_be_bytes([prelude[0], prelude[1], prelude[2], prelude[3]]) as usize;
        let headers = u32::from_be_bytes([prelude[4], prelude[5], prelude[6], prelude[7]]) as usize;
        if !(OVERHEAD..=MAX_MESSAGE_LEN).contains(&total) || headers > total - OVERHEAD {
            return Err(FrameError::Malformed(format!("prelude claims {total} bytes with {headers} bytes of headers")));
        }
        Ok(Some(total))
    }
}

impl Frame {
    fn from_message(message: &Message) -> Result<Frame, FrameError> {
        let string = |name: &str| {
            message
                .headers()
                .iter()
                .find(|h| h.name().as_str() == name)
                .and_then(|h| h.value().as_string().ok())
                .map(|s| s.as_str().to_owned())
        };
        let (message_type, name_header) = match string(":message-type").as_deref() {
            Some("event") => (MessageType::Event, ":event-type"),
            Some("exception") => (MessageType::Exception, ":exception-type"),
            Some("error") => (MessageType::Error, ":error-code"),
            other => {
                return Err(FrameError::Malformed(format!("unknown :message-type {other:?}")));
            }
        };
        Ok(Frame {
            message_type,
            name: string(name_header).unwrap_or_default(),
            error_message: string(":error-message"),
            payload: message.payload().clone(),
        })
    }
}

/// Whether a response's `content-type` says its body is an event stream. The gateway
/// checks it before handing a Bedrock stream to the transcoder: an error answer is JSON.
pub fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(CONTENT_TYPE))
}

/// Writes one message with string `headers` and `payload` to `out`.
pub fn write_message_to(headers: &[(&str, &str)], payload: &[u8], out: &mut BytesMut) -> Result<(), FrameError> {
    let headers = headers
        .iter()
        .map(|(name, value)| Header::new(name.to_string(), HeaderValue::String(value.to_string().into())))
        .collect();
    let message = Message::new_from_parts(headers, Bytes::copy_from_slice(payload));
    aws_smithy_eventstream::frame::write_message_to(&message, out).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// One JSON event frame, as Bedrock sends them.
pub fn encode_event(event_type: &str, payload: &[u8]) -> Result<Bytes, FrameError> {
    let mut out = BytesMut::new();
    write_message_to(
        &[(":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")],
        payload,
        &mut out,
    )?;
    Ok(out.freeze())
}

/// One exception frame (`exception_type` as Bedrock spells it in streams, e.g.
/// `throttlingException`), payload `{"message": …}`.
pub fn encode_exception(exception_type: &str, payload: &[u8]) -> Result<Bytes, FrameError> {
    let mut out = BytesMut::new();
    write_message_to(
        &[(":exception-type", exception_type), (":content-type", "application/json"), (":message-type", "exception")],
        payload,
        &mut out,
    )?;
    Ok(out.freeze())
}
