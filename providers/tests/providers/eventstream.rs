//! `application/vnd.amazon.eventstream` framing: round trips, arbitrary splits, and
//! refusing what is not a frame.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_providers::eventstream::{
    Frame, FrameDecoder, FrameError, MessageType, encode_event, encode_exception, is_event_stream, write_message_to,
};

fn stream() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&encode_event("messageStart", br#"{"p":"abcd","role":"assistant"}"#).unwrap());
    out.extend_from_slice(
        &encode_event("contentBlockDelta", br#"{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"ab"}"#).unwrap(),
    );
    out.extend_from_slice(&encode_event("messageStop", br#"{"stopReason":"end_turn"}"#).unwrap());
    out.extend_from_slice(&encode_exception("throttlingException", br#"{"message":"Too many requests"}"#).unwrap());
    out
}

fn decode_in(chunks: &[&[u8]]) -> Result<Vec<Frame>, FrameError> {
    let mut decoder = FrameDecoder::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        while let Some(frame) = decoder.next_frame()? {
            frames.push(frame);
        }
    }
    decoder.finish()?;
    Ok(frames)
}

#[test]
fn decodes_events_and_exceptions() {
    let frames = decode_in(&[&stream()]).unwrap();
    let names: Vec<_> = frames.iter().map(|f| (f.message_type, f.name.as_str())).collect();
    assert_eq!(
        names,
        [
            (MessageType::Event, "messageStart"),
            (MessageType::Event, "contentBlockDelta"),
            (MessageType::Event, "messageStop"),
            (MessageType::Exception, "throttlingException"),
        ]
    );
    assert_eq!(frames[3].payload, Bytes::from_static(br#"{"message":"Too many requests"}"#));
}

#[test]
fn decodes_unmodelled_error_messages() {
    let mut buf = BytesMut::new();
    write_message_to(
        &[(":message-type", "error"), (":error-code", "InternalFailure"), (":error-message", "boom")],
        b"",
        &mut buf,
    )
    .unwrap();
    let frames = decode_in(&[&buf]).unwrap();
    assert_eq!(frames[0].message_type, MessageType::Error);
    assert_eq!(frames[0].name, "InternalFailure");
    assert_eq!(frames[0].error_message.as_deref(), Some("boom"));
}

#[test]
fn every_single_split_gives_the_same_frames() {
    let bytes = stream();
    let whole = decode_in(&[&bytes]).unwrap();
    for at in 0..=bytes.len() {
        assert_eq!(decode_in(&[&bytes[..at], &bytes[at..]]).unwrap(), whole, "split at {at}");
    }
    let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode_in(&one_by_one).unwrap(), whole);
}

proptest! {
    #[test]
    fn random_splits_give_the_same_frames(cuts in proptest::collection::vec(0usize..400, 0..12)) {
        let bytes = stream();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for cut in cuts {
            chunks.push(&bytes[from..cut]);
            from = cut;
        }
        chunks.push(&bytes[from..]);
        prop_assert_eq!(decode_in(&chunks).unwrap(), decode_in(&[&bytes]).unwrap());
    }

    /// Garbage never panics: it is frames, an error, or a wait for more bytes.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_in(&[&bytes]);
    }
}

/// Regression (an ARN model id not encoded → a JSON error body decoded as frames,
/// "ChecksumMismatch"): a JSON body is refused at its first eight bytes, not buffered.
#[test]
fn a_json_error_body_is_refused_at_once() {
    let mut decoder = FrameDecoder::new();
    decoder.push(br#"{"message":"The provided model identifier is invalid."}"#);
    assert!(matches!(decoder.next_frame(), Err(FrameError::Malformed(_))));
    assert!(decoder.next_frame().is_err(), "the decoder stays failed");
}

#[test]
fn a_bad_crc_or_a_truncated_body_is_an_error() {
    let mut bytes = encode_event("messageStop", br#"{"stopReason":"end_turn"}"#).unwrap().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    assert!(matches!(decode_in(&[&bytes]), Err(FrameError::Malformed(_))));

    let whole = encode_event("messageStop", b"{}").unwrap();
    assert_eq!(decode_in(&[&whole[..whole.len() - 3]]), Err(FrameError::Truncated(whole.len() - 3)));
}

#[test]
fn content_type_check() {
    let mut headers = http::HeaderMap::new();
    assert!(!is_event_stream(&headers));
    headers.insert("content-type", http::HeaderValue::from_static("application/json"));
    assert!(!is_event_stream(&headers));
    headers.insert("content-type", http::HeaderValue::from_static("application/vnd.amazon.eventstream"));
    assert!(is_event_stream(&headers));
}
