//! Reading an OpenAI request: only the fields that shape the answer.
//!
//! The prompt is never copied, only measured: [`Text`] walks any JSON value
//! and sums the bytes of its strings, noting on the way whether the last
//! message is a tool result (role `tool`).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Model named when a request has none.
const DEFAULT_MODEL: &str = "chaos-model";

/// What the answer depends on in a request.
#[derive(Debug)]
pub(crate) struct InferenceRequest {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) max_tokens: Option<u64>,
    /// Estimate: text bytes / 4, rounded up, at least 1.
    pub(crate) prompt_tokens: u64,
    /// A hash of each embedding input, in order: its vector is made from it, so the
    /// same input always gets the same embedding and different ones (almost surely)
    /// different ones.
    pub(crate) input_hashes: Vec<u64>,
    /// Names of the function tools the request declares (chat).
    pub(crate) tools: Vec<String>,
    /// The last message is a tool result (role `tool`): answered in text,
    /// never with a tool call.
    pub(crate) answers_tool: bool,
}

#[derive(Deserialize)]
struct RawRequest {
    model: Option<String>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    messages: Text,
    #[serde(default)]
    prompt: Text,
    #[serde(default)]
    input: Text,
    tools: Option<Vec<RawTool>>,
}

/// `{"type": "function", "function": {"name": …}}`; other members are skipped.
#[derive(Deserialize)]
struct RawTool {
    function: Option<RawFunction>,
}

#[derive(Deserialize)]
struct RawFunction {
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

/// The size of any JSON value: bytes of its strings (numbers count as one
/// token, 4 bytes) and how many direct items are strings or arrays.
#[derive(Clone, Copy, Debug, Default)]
struct Text {
    bytes: u64,
    items: u64,
    kind: Kind,
    /// A tool turn: a string that is `tool`, an object whose `role` is, an
    /// array whose last item is such an object.
    tool: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Other,
    Str,
    Seq,
    Map,
}

struct TextVisitor;

/// An object's member name, only told apart when it is `role`.
struct Key {
    role: bool,
}

struct KeyVisitor;

impl InferenceRequest {
    /// Parses a request body; the error is serde_json's message.
    pub(crate) fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        let raw: RawRequest = serde_json::from_slice(body)?;
        let bytes = raw.messages.bytes + raw.prompt.bytes + raw.input.bytes;
        let tools = raw.tools.into_iter().flatten().filter_map(|t| t.function?.name).collect();
        let input_hashes = match raw.input.kind {
            Kind::Str | Kind::Seq => input_hashes(body),
            _ => Vec::new(),
        };
        Ok(Self {
            answers_tool: raw.messages.kind == Kind::Seq && raw.messages.tool,
            tools,
            model: raw.model.unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            stream: raw.stream.unwrap_or(false),
            include_usage: raw.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
            max_tokens: raw.max_completion_tokens.or(raw.max_tokens),
            prompt_tokens: bytes.div_ceil(4).max(1),
            input_hashes,
        })
    }

    /// Content chunks to send: the script's, cut at `max_tokens`.
    pub(crate) fn completion_chunks(&self, scripted: u32) -> u32 {
        match self.max_tokens {
            Some(max) => u32::try_from(max).map_or(scripted, |max| scripted.min(max)),
            None => scripted,
        }
    }
}

/// The hash of each embedding input (a string, a token array, or a list of either).
fn input_hashes(body: &[u8]) -> Vec<u64> {
    #[derive(Deserialize)]
    struct Input {
        input: serde_json::Value,
    }
    let hash = |v: &serde_json::Value| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.to_string().hash(&mut h);
        h.finish()
    };
    match serde_json::from_slice::<Input>(body).map(|i| i.input) {
        Ok(serde_json::Value::Array(items)) if items.iter().all(|i| i.is_string() || i.is_array()) => {
            items.iter().map(hash).collect()
        }
        Ok(one) => vec![hash(&one)],
        Err(_) => Vec::new(),
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
        let bytes = u64::try_from(v.len()).unwrap_or(u64::MAX);
        Ok(Text { bytes, items: 0, kind: Kind::Str, tool: v == "tool" })
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text, E> {
        Ok(Text { bytes: 4, ..Text::default() })
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text, E> {
        Ok(Text { bytes: 4, ..Text::default() })
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
        Ok(Text { bytes: 4, ..Text::default() })
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
        Ok(Text::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Text, D::Error> {
        Text::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        let mut total = Text { kind: Kind::Seq, ..Text::default() };
        while let Some(item) = seq.next_element::<Text>()? {
            total.bytes = total.bytes.saturating_add(item.bytes);
            total.items += u64::from(matches!(item.kind, Kind::Str | Kind::Seq));
            total.tool = item.kind == Kind::Map && item.tool;
        }
        Ok(total)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        let mut total = Text { kind: Kind::Map, ..Text::default() };
        while let Some((key, value)) = map.next_entry::<Key, Text>()? {
            total.bytes = total.bytes.saturating_add(value.bytes);
            total.tool |= key.role && value.kind == Kind::Str && value.tool;
        }
        Ok(total)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key { role: v == "role" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_estimates_prompt_tokens() {
        let body = br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},
            "max_tokens":3,"messages":[{"role":"user","content":"abcdefgh"}]}"#;
        let r = InferenceRequest::parse(body).unwrap();
        assert_eq!(r.model, "m");
        assert!(r.stream && r.include_usage);
        // "user" + "abcdefgh" = 12 bytes = 3 tokens.
        assert_eq!(r.prompt_tokens, 3);
        assert_eq!(r.completion_chunks(5), 3);
        let r = InferenceRequest::parse(br#"{"model":"e","input":["a","b",[1,2]]}"#).unwrap();
        assert_eq!((r.input_hashes.len(), r.prompt_tokens), (3, 3));
        let r = InferenceRequest::parse(b"{}").unwrap();
        assert_eq!((r.model.as_str(), r.prompt_tokens, r.stream), ("chaos-model", 1, false));
        assert!(r.tools.is_empty() && !r.answers_tool);
    }

    #[test]
    fn request_names_its_tools_and_a_trailing_tool_result() {
        let body = br#"{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}},
            {"type":"function","function":{"description":"nameless"}}],
            "messages":[{"role":"user","content":"tool"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",
              "function":{"name":"get_weather","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c","content":"sunny"}]}"#;
        let r = InferenceRequest::parse(body).unwrap();
        assert_eq!(r.tools, ["get_weather"]);
        assert!(r.answers_tool);
        // "user" + "tool" + "assistant" + "c" + "function" + "get_weather" + "{}" + "tool" + "c" + "sunny".
        assert_eq!(r.prompt_tokens, 49_u64.div_ceil(4));
        let body = br#"{"messages":[{"role":"tool","content":"x"},{"role":"user","content":"tool"}]}"#;
        assert!(!InferenceRequest::parse(body).unwrap().answers_tool, "only the last message counts");
        let body = br#"{"messages":[{"content":"x","name":"role"},"tool"]}"#;
        assert!(!InferenceRequest::parse(body).unwrap().answers_tool);
    }
}
