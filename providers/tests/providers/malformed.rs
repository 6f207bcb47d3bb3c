//! Bad input from upstreams, for every protocol: a malformed answer or stream is a
//! failed attempt (an error the dispatcher can act on), never a panic and never a
//! truncated success (docs/design.md §9).
//!
//! Two generators: arbitrary bytes, and JSON shaped like the protocols' own (their
//! keys, nested at random, with values of the wrong types), which reaches deeper into
//! the parsers than random bytes do.

use http::HeaderMap;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use sluice_providers::{AnswerOpts, Out, Protocol, Target};

const PROTOCOLS: [Protocol; 7] = [
    Protocol::OpenAi,
    Protocol::AzureOpenAi,
    Protocol::Anthropic,
    Protocol::VertexAnthropic,
    Protocol::Gemini,
    Protocol::VertexGemini,
    Protocol::Bedrock,
];

/// Keys the native answers and events use, so that generated objects look plausible.
const KEYS: [&str; 24] = [
    "type",
    "id",
    "model",
    "content",
    "text",
    "delta",
    "index",
    "stop_reason",
    "usage",
    "input_tokens",
    "output_tokens",
    "candidates",
    "parts",
    "finishReason",
    "usageMetadata",
    "functionCall",
    "args",
    "name",
    "choices",
    "message",
    "output",
    "stopReason",
    "error",
    "partial_json",
];

fn target(protocol: Protocol) -> Target<'static> {
    let mut t = Target::new(protocol, "model-x", 256);
    t.gcp_project = Some("p");
    t.gcp_location = Some("us-east5");
    t.azure_api_version = Some("2024-10-21");
    t
}

fn opts() -> AnswerOpts {
    AnswerOpts { id: "chatcmpl-test".into(), created: 1_800_000_000 }
}

fn plausible_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z_ ]{0,12}".prop_map(Value::from),
        prop::sample::select(KEYS.to_vec()).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())),
        ]
    })
}

/// Feeds `pieces` and finishes; the outputs in order.
fn transcode(protocol: Protocol, pieces: &[&[u8]]) -> Vec<Out> {
    let mut t = sluice_providers::transcoder(&target(protocol), opts());
    let mut out = Vec::new();
    for p in pieces {
        out.extend(t.feed(p));
    }
    out.extend(t.finish());
    out
}

/// A transcoded stream ends in exactly one of [`Out::Done`] or [`Out::Error`], and
/// nothing follows it.
fn ends_once(out: &[Out]) -> bool {
    let ends: Vec<usize> =
        out.iter().enumerate().filter(|(_, o)| matches!(o, Out::Done | Out::Error { .. })).map(|(i, _)| i).collect();
    ends.len() == 1 && ends[0] + 1 == out.len()
}

/// An SSE body of `events` (Bedrock gets them as `data:` lines too: it is not its
/// framing, so it must refuse them as a malformed stream).
fn sse(events: &[Value]) -> Vec<u8> {
    events.iter().map(|e| format!("data: {e}\n\n")).collect::<String>().into_bytes()
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_a_non_json_answer_is_an_error(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        for p in PROTOCOLS {
            let parsed = sluice_providers::parse(&target(p), &bytes, &opts());
            if serde_json::from_slice::<Value>(&bytes).is_err() {
                prop_assert!(parsed.is_err(), "{p:?} took {bytes:?} as an answer");
            }
            let _ = sluice_providers::classify(&target(p), 502, &HeaderMap::new(), &bytes, 0);
            let out = transcode(p, &[&bytes]);
            prop_assert!(ends_once(&out), "{p:?}: {out:?}");
        }
    }

    #[test]
    fn plausible_but_wrong_json_never_panics(answer in plausible_json(), events in prop::collection::vec(plausible_json(), 0..6)) {
        let body = answer.to_string();
        for p in PROTOCOLS {
            let native = !matches!(p, Protocol::OpenAi | Protocol::AzureOpenAi);
            // OpenAI-compatible answers are passed on as they came; a translated one is
            // built by the gateway, so whatever it accepted is a well-formed chat.completion.
            if native && let Ok(c) = sluice_providers::parse(&target(p), body.as_bytes(), &opts()) {
                let v: Value = serde_json::from_slice(&c.body).unwrap_or(Value::Null);
                prop_assert_eq!(&v["object"], &json!("chat.completion"), "{:?}", p);
            }
            let e = sluice_providers::classify(&target(p), 400, &HeaderMap::new(), body.as_bytes(), 0);
            prop_assert!(serde_json::from_slice::<Value>(&e.openai_body).is_ok_and(|v| v["error"]["message"].is_string()));
            let bytes = sse(&events);
            let out = transcode(p, &[&bytes]);
            prop_assert!(ends_once(&out), "{p:?}: {out:?}");
            // Cut anywhere, the same stream is never a clean success unless it was whole.
            if let Some(cut) = bytes.len().checked_sub(1) {
                let cut_out = transcode(p, &[&bytes[..cut]]);
                prop_assert!(ends_once(&cut_out));
            }
        }
    }
}

#[test]
fn a_stream_with_no_bytes_at_all_is_an_error_for_every_native_protocol() {
    for p in PROTOCOLS {
        let out = transcode(p, &[]);
        let native = !matches!(p, Protocol::OpenAi | Protocol::AzureOpenAi);
        if native {
            assert!(matches!(out.last(), Some(Out::Error { before_content: true, .. })), "{p:?}: {out:?}");
        }
        assert!(ends_once(&out), "{p:?}: {out:?}");
    }
}
