//! Reading native answers the way each provider's clients do, written here
//! from the providers' documented formats (not with the gateway's parsers):
//! SSE events with `event:` names and CRLF separators, and
//! `application/vnd.amazon.eventstream` frames with both CRCs checked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::Value;

use super::{Chaos, Headers};

/// A whole body as read by a client, and how it ended.
pub(crate) struct Body {
    pub(crate) bytes: Vec<u8>,
    pub(crate) end: Result<(), reqwest::Error>,
}

/// One SSE event: its `event:` name (if any) and its `data:` as JSON.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) name: Option<String>,
    pub(crate) data: Value,
}

/// One event-stream frame: its string headers and its payload.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) payload: Vec<u8>,
}

impl Chaos {
    /// `POST` with `headers`; the status and the whole body.
    pub(crate) async fn call(&self, path: &str, body: &Value, h: Headers<'_>) -> (u16, Response) {
        let resp = self.send(path, body, h).await.unwrap();
        (resp.status().as_u16(), resp)
    }

    /// `POST` expecting a JSON answer: status and JSON.
    pub(crate) async fn call_json(&self, path: &str, body: &Value, h: Headers<'_>) -> (u16, Value) {
        let (status, resp) = self.call(path, body, h).await;
        (status, resp.json().await.unwrap())
    }
}

/// The `x-amzn-errortype` header of an AWS-shaped error answer (Bedrock).
pub(crate) fn aws_error_type(resp: &Response) -> &str {
    resp.headers()["x-amzn-errortype"].to_str().unwrap()
}

pub(crate) async fn read_body(mut resp: Response) -> Body {
    let mut bytes = Vec::new();
    let end = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    Body { bytes, end }
}

/// Parses an SSE body (LF or CRLF line ends); every `data:` must be JSON.
pub(crate) fn parse_sse(bytes: &[u8]) -> Vec<Event> {
    let text = std::str::from_utf8(bytes).unwrap().replace("\r\n", "\n");
    assert!(text.is_empty() || text.ends_with("\n\n"), "partial event at the end: {text:?}");
    text.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let (mut name, mut data) = (None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            let data = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"));
            Event { name, data }
        })
        .collect()
}

/// The `event:` names of `events`, in order.
pub(crate) fn names(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_deref().unwrap_or("")).collect()
}

/// CRC-32 (IEEE, as in gzip), bit by bit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn be32(b: &[u8]) -> usize {
    usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).unwrap()
}

/// Decodes a whole event-stream body: prelude (total length, headers
/// length, CRC), headers (string-typed, type 7), payload, message CRC.
pub(crate) fn decode_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 16, "truncated frame");
        let total = be32(&bytes[0..4]);
        let headers_len = be32(&bytes[4..8]);
        assert_eq!(be32(&bytes[8..12]), crc32(&bytes[0..8]) as usize, "prelude CRC");
        let (frame, rest) = bytes.split_at(total);
        assert_eq!(be32(&frame[total - 4..]), crc32(&frame[..total - 4]) as usize, "message CRC");
        let mut h = &frame[12..12 + headers_len];
        let mut headers = BTreeMap::new();
        while !h.is_empty() {
            let name_len = usize::from(h[0]);
            let name = std::str::from_utf8(&h[1..1 + name_len]).unwrap().to_owned();
            assert_eq!(h[1 + name_len], 7, "header {name} is not a string");
            let at = 2 + name_len;
            let value_len = usize::from(u16::from_be_bytes([h[at], h[at + 1]]));
            let value = std::str::from_utf8(&h[at + 2..at + 2 + value_len]).unwrap().to_owned();
            headers.insert(name, value);
            h = &h[at + 2 + value_len..];
        }
        let payload = frame[12 + headers_len..total - 4].to_vec();
        frames.push(Frame { headers, payload });
        bytes = rest;
    }
    frames
}

/// Frames with the time each became complete at the client.
pub(crate) async fn timed_frames(mut resp: Response, t0: Instant) -> Vec<(Duration, Frame)> {
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    while let Some(chunk) = resp.chunk().await.unwrap() {
        buf.extend_from_slice(&chunk);
        while buf.len() >= 4 && buf.len() >= be32(&buf[0..4]) {
            let rest = buf.split_off(be32(&buf[0..4]));
            let frame = decode_frames(&buf).pop().unwrap();
            out.push((t0.elapsed(), frame));
            buf = rest;
        }
    }
    assert!(buf.is_empty(), "partial frame at the end");
    out
}

impl Frame {
    /// `:event-type` of an event, `!` + `:exception-type` of an exception.
    pub(crate) fn kind(&self) -> String {
        match self.headers[":message-type"].as_str() {
            "event" => self.headers[":event-type"].clone(),
            "exception" => format!("!{}", self.headers[":exception-type"]),
            other => panic!("message type {other}"),
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap()
    }
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}
