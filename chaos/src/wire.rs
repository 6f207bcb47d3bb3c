//! Rendering the OpenAI wire format: JSON answers, SSE events, errors.
//!
//! Answers are written straight into one buffer per body or SSE event,
//! without building a `serde_json::Value`: this is the benchmark mock's hot
//! path. Chat tool calls are rendered in `wire/tool_call.rs`.

mod tool_call;

use bytes::Bytes;

pub(crate) use tool_call::{ToolCall, tool_call_body, tool_call_event, tool_finish_event};

/// The answer text, one word per content chunk, cycling.
const WORDS: [&str; 16] = [
    "The ",
    "upstream ",
    "said ",
    "hello ",
    "and ",
    "then ",
    "kept ",
    "talking ",
    "about ",
    "failover ",
    "budgets ",
    "while ",
    "the ",
    "gateway ",
    "listened ",
    "carefully. ",
];

/// `GET /models`.
pub(crate) const MODELS_BODY: &str = concat!(
    r#"{"object":"list","data":[{"id":"chaos-model","object":"model","created":0,"#,
    r#""owned_by":"sluice-chaos"}]}"#
);

/// The embedding of an input: 8 numbers made from its hash, enough shape for clients
/// and the same for the same input, no maths.
fn push_embedding(out: &mut Vec<u8>, hash: u64) {
    out.push(b'[');
    for k in 0..8 {
        if k > 0 {
            out.push(b',');
        }
        let byte = (hash >> (k * 8)) & 0xff;
        let value = (byte as f64 - 127.5) / 1000.0;
        out.extend_from_slice(format!("{value:.4}").as_bytes());
    }
    out.push(b']');
}

pub(crate) const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";
pub(crate) const MALFORMED_EVENT: &[u8] = b"data: {not json\n\n";

/// Which API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Completion,
    Embedding,
}

/// Token counts of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
}

/// The fields shared by every object of one answer.
pub(crate) struct Meta<'a> {
    pub(crate) endpoint: Endpoint,
    pub(crate) seq: u64,
    pub(crate) created: u64,
    pub(crate) model: &'a str,
}

impl Endpoint {
    fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl-chaos-",
            Endpoint::Completion => "cmpl-chaos-",
            Endpoint::Embedding => "embd-chaos-",
        }
    }
}

/// The answer text of `chunks` words.
pub(crate) fn content(chunks: u32) -> Bytes {
    let mut out = String::new();
    for i in 0..chunks {
        out.push_str(word(i));
    }
    Bytes::from(out)
}

/// The first `chunks` words of `content` (made by [`content`]).
pub(crate) fn truncate(content: &Bytes, chunks: u32) -> Bytes {
    let len: usize = (0..chunks).map(|i| word(i).len()).sum();
    content.slice(..len.min(content.len()))
}

pub(crate) fn word(i: u32) -> &'static str {
    WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()]
}

/// A non-streaming answer: chat, completion or embedding.
pub(crate) fn full_body(meta: &Meta<'_>, text: &[u8], usage: Usage, finish: &str, inputs: &[u64]) -> Bytes {
    let mut out = Vec::with_capacity(256 + text.len());
    match meta.endpoint {
        Endpoint::Chat => {
            head(&mut out, meta, "chat.completion");
            out.extend_from_slice(br#"{"index":0,"message":{"role":"assistant","content":""#);
            out.extend_from_slice(text);
            out.extend_from_slice(br#""},"logprobs":null,"finish_reason":""#);
        }
        Endpoint::Completion => {
            head(&mut out, meta, "text_completion");
            out.extend_from_slice(br#"{"text":""#);
            out.extend_from_slice(text);
            out.extend_from_slice(br#"","index":0,"logprobs":null,"finish_reason":""#);
        }
        Endpoint::Embedding => {
            out.extend_from_slice(br#"{"object":"list","data":["#);
            for (i, hash) in inputs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(br#"{"object":"embedding","index":"#);
                push_u64(&mut out, i as u64);
                out.extend_from_slice(br#","embedding":"#);
                push_embedding(&mut out, *hash);
                out.push(b'}');
            }
            out.extend_from_slice(br#"],"model":"#);
            push_json_str(&mut out, meta.model);
            out.extend_from_slice(br#","usage":{"prompt_tokens":"#);
            push_u64(&mut out, usage.prompt);
            out.extend_from_slice(br#","total_tokens":"#);
            push_u64(&mut out, usage.prompt);
            out.extend_from_slice(b"}}");
            return Bytes::from(out);
        }
    }
    out.extend_from_slice(finish.as_bytes());
    out.extend_from_slice(br#""}],"usage":"#);
    push_usage(&mut out, usage);
    out.push(b'}');
    Bytes::from(out)
}

/// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[` shared by
/// every event of one stream.
pub(crate) fn event_prefix(meta: &Meta<'_>) -> Bytes {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"data: ");
    let object = match meta.endpoint {
        Endpoint::Chat => "chat.completion.chunk",
        Endpoint::Completion | Endpoint::Embedding => "text_completion",
    };
    head(&mut out, meta, object);
    Bytes::from(out)
}

/// A content chunk (`first` carries the assistant role, as OpenAI does).
pub(crate) fn content_event(prefix: &[u8], endpoint: Endpoint, text: &str, first: bool) -> Bytes {
    let mut out = Vec::with_capacity(prefix.len() + 96 + text.len());
    out.extend_from_slice(prefix);
    if endpoint == Endpoint::Chat {
        out.extend_from_slice(br#"{"index":0,"delta":{"#);
        if first {
            out.extend_from_slice(br#""role":"assistant","#);
        }
        out.extend_from_slice(br#""content":"#);
        push_json_str(&mut out, text);
        out.extend_from_slice(br#"},"logprobs":null,"finish_reason":null}]}"#);
    } else {
        out.extend_from_slice(br#"{"text":"#);
        push_json_str(&mut out, text);
        out.extend_from_slice(br#","index":0,"logprobs":null,"finish_reason":null}]}"#);
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The chunk that carries `finish_reason`.
pub(crate) fn finish_event(prefix: &[u8], endpoint: Endpoint, finish: &str) -> Bytes {
    let mut out = Vec::with_capacity(prefix.len() + 96);
    out.extend_from_slice(prefix);
    if endpoint == Endpoint::Chat {
        out.extend_from_slice(br#"{"index":0,"delta":{},"logprobs":null,"finish_reason":""#);
    } else {
        out.extend_from_slice(br#"{"text":"","index":0,"logprobs":null,"finish_reason":""#);
    }
    out.extend_from_slice(finish.as_bytes());
    out.extend_from_slice(b"\"}]}\n\n");
    Bytes::from(out)
}

/// The `stream_options.include_usage` chunk: empty `choices`, a `usage`.
pub(crate) fn usage_event(prefix: &[u8], usage: Usage) -> Bytes {
    let mut out = Vec::with_capacity(prefix.len() + 96);
    out.extend_from_slice(prefix);
    out.extend_from_slice(br#"],"usage":"#);
    push_usage(&mut out, usage);
    out.extend_from_slice(b"}\n\n");
    Bytes::from(out)
}

/// `{"error":{"message","type","code"}}`.
pub(crate) fn error_body(message: &str, kind: &str, code: &str) -> Bytes {
    let mut out = Vec::with_capacity(64 + message.len());
    out.extend_from_slice(br#"{"error":{"message":"#);
    push_json_str(&mut out, message);
    out.extend_from_slice(br#","type":"#);
    push_json_str(&mut out, kind);
    out.extend_from_slice(br#","code":"#);
    push_json_str(&mut out, code);
    out.extend_from_slice(b"}}");
    Bytes::from(out)
}

fn head(out: &mut Vec<u8>, meta: &Meta<'_>, object: &str) {
    out.extend_from_slice(br#"{"id":""#);
    out.extend_from_slice(meta.endpoint.id_prefix().as_bytes());
    push_u64(out, meta.seq);
    out.extend_from_slice(br#"","object":""#);
    out.extend_from_slice(object.as_bytes());
    out.extend_from_slice(br#"","created":"#);
    push_u64(out, meta.created);
    out.extend_from_slice(br#","model":"#);
    push_json_str(out, meta.model);
    out.extend_from_slice(br#","choices":["#);
}

fn push_usage(out: &mut Vec<u8>, usage: Usage) {
    out.extend_from_slice(br#"{"prompt_tokens":"#);
    push_u64(out, usage.prompt);
    out.extend_from_slice(br#","completion_tokens":"#);
    push_u64(out, usage.completion);
    out.extend_from_slice(br#","total_tokens":"#);
    push_u64(out, usage.prompt.saturating_add(usage.completion));
    out.push(b'}');
}

fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` is below 10, so the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Writes `s` as a JSON string literal.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn rendered_bodies_are_valid_json() {
        let meta = Meta { endpoint: Endpoint::Chat, seq: 42, created: 7, model: "m\"\u{1}x" };
        let usage = Usage { prompt: 2, completion: 5 };
        let body = full_body(&meta, &content(5), usage, "stop", &[1]);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "chatcmpl-chaos-42");
        assert_eq!(v["model"], "m\"\u{1}x");
        assert_eq!(v["choices"][0]["message"]["content"], "The upstream said hello and ");
        assert_eq!(v["usage"]["total_tokens"], 7);
        let prefix = event_prefix(&meta);
        for event in [
            content_event(&prefix, Endpoint::Chat, "hi", true),
            finish_event(&prefix, Endpoint::Chat, "stop"),
            usage_event(&prefix, usage),
        ] {
            let json = event.strip_prefix(b"data: ").unwrap().strip_suffix(b"\n\n").unwrap();
            let v: Value = serde_json::from_slice(json).unwrap();
            assert_eq!(v["object"], "chat.completion.chunk");
        }
        let embed = Meta { endpoint: Endpoint::Embedding, ..meta };
        let v: Value = serde_json::from_slice(&full_body(&embed, b"", usage, "", &[7, 9, 7])).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 3);
        // The same input, the same embedding; another input, another one.
        assert_eq!(v["data"][0]["embedding"], v["data"][2]["embedding"]);
        assert_ne!(v["data"][0]["embedding"], v["data"][1]["embedding"]);
        assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 8);
        assert_eq!(truncate(&content(5), 2), Bytes::from_static(b"The upstream "));
    }
}
