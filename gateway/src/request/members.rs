//! One strict pass over a request body that keeps only what the gateway reads: the
//! small members it reads or rewrites as their raw JSON text (so that `null` and wrong
//! types are told apart from absence, and their place in the body is known), and of
//! the large ones (`messages`, `prompt`, `input`) only their kind. Everything is
//! walked as strictly as parsing it into a tree would (nesting limit, escapes decoded,
//! lone surrogates refused) without building one: what the gateway forwards is JSON any
//! upstream parser accepts.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use sluice_providers::WEB_SEARCH_MAX_USES;

/// A body: a JSON object's members, or some other JSON value.
pub(super) enum Body<'a> {
    /// An object.
    Object(Box<Members<'a>>),
    /// Valid JSON, not an object.
    NotObject,
}

/// What the gateway reads of a request object.
#[derive(Default)]
pub(super) struct Members<'a> {
    pub model: Option<&'a RawValue>,
    pub stream: Option<&'a RawValue>,
    pub max_tokens: Option<&'a RawValue>,
    pub max_completion_tokens: Option<&'a RawValue>,
    pub stream_options: Option<&'a RawValue>,
    /// Responses: the output limit and the members that need a response store.
    pub max_output_tokens: Option<&'a RawValue>,
    pub store: Option<&'a RawValue>,
    pub previous_response_id: Option<&'a RawValue>,
    pub conversation: Option<&'a RawValue>,
    pub background: Option<&'a RawValue>,
    pub messages: Option<Kind>,
    pub prompt: Option<Kind>,
    pub input: Option<Kind>,
    /// Chat's hosted web search.
    pub web_search_options: Option<&'a RawValue>,
    /// `tools`: the most web searches its search tools allow (see [`Tools`]).
    pub tools: Option<Tools>,
}

/// What the gateway reads of `tools`, in the same strict pass: the web search tools
/// (OpenAI's `web_search…`, Anthropic's `web_search_2…`), for the fees a reservation
/// holds (docs/design.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tools {
    /// The most searches they allow: each one's `max_uses`, [`WEB_SEARCH_MAX_USES`]
    /// for one without.
    pub web_searches: u64,
}

/// The kind of a large member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// An array, empty or not.
    Array { empty: bool },
    /// A string.
    String,
    /// Anything else (`null` included).
    Other,
}

enum Key {
    Model,
    Stream,
    MaxTokens,
    MaxCompletionTokens,
    StreamOptions,
    MaxOutputTokens,
    Store,
    PreviousResponseId,
    Conversation,
    Background,
    Messages,
    Prompt,
    Input,
    WebSearchOptions,
    Tools,
    Other,
}

impl Key {
    fn name(&self) -> &'static str {
        match self {
            Key::Model => "model",
            Key::Stream => "stream",
            Key::MaxTokens => "max_tokens",
            Key::MaxCompletionTokens => "max_completion_tokens",
            Key::StreamOptions => "stream_options",
            Key::MaxOutputTokens => "max_output_tokens",
            Key::Store => "store",
            Key::PreviousResponseId => "previous_response_id",
            Key::Conversation => "conversation",
            Key::Background => "background",
            Key::Messages => "messages",
            Key::Prompt => "prompt",
            Key::Input => "input",
            Key::WebSearchOptions => "web_search_options",
            Key::Tools => "tools",
            Key::Other => "",
        }
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "model" => Key::Model,
                    "stream" => Key::Stream,
                    "max_tokens" => Key::MaxTokens,
                    "max_completion_tokens" => Key::MaxCompletionTokens,
                    "stream_options" => Key::StreamOptions,
                    "max_output_tokens" => Key::MaxOutputTokens,
                    "store" => Key::Store,
                    "previous_response_id" => Key::PreviousResponseId,
                    "conversation" => Key::Conversation,
                    "background" => Key::Background,
                    "messages" => Key::Messages,
                    "prompt" => Key::Prompt,
                    "input" => Key::Input,
                    "web_search_options" => Key::WebSearchOptions,
                    "tools" => Key::Tools,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Body<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BodyVisitor)
    }
}

/// Fills `slot` once; a second value for the same member is refused.
fn set_once<T, E: de::Error>(slot: &mut Option<T>, key: &Key, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(key.name()));
    }
    *slot = Some(value);
    Ok(())
}

/// The next value as raw text, checked strictly. Raw text alone is only checked for
/// syntax; these members are small, so walking them again costs little.
fn small<'de, A: MapAccess<'de>>(map: &mut A) -> Result<&'de RawValue, A::Error> {
    let raw: &'de RawValue = map.next_value()?;
    serde_json::from_str::<Walk>(raw.get()).map_err(A::Error::custom)?;
    Ok(raw)
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<'de>, A::Error> {
        let mut m = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Model => set_once(&mut m.model, &key, small(&mut map)?)?,
                Key::Stream => set_once(&mut m.stream, &key, small(&mut map)?)?,
                Key::MaxTokens => set_once(&mut m.max_tokens, &key, small(&mut map)?)?,
                Key::MaxCompletionTokens => set_once(&mut m.max_completion_tokens, &key, small(&mut map)?)?,
                Key::StreamOptions => set_once(&mut m.stream_options, &key, small(&mut map)?)?,
                Key::MaxOutputTokens => set_once(&mut m.max_output_tokens, &key, small(&mut map)?)?,
                Key::Store => set_once(&mut m.store, &key, small(&mut map)?)?,
                Key::PreviousResponseId => set_once(&mut m.previous_response_id, &key, small(&mut map)?)?,
                Key::Conversation => set_once(&mut m.conversation, &key, small(&mut map)?)?,
                Key::Background => set_once(&mut m.background, &key, small(&mut map)?)?,
                Key::Messages => set_once(&mut m.messages, &key, map.next_value::<Walk>()?.0)?,
                Key::Prompt => set_once(&mut m.prompt, &key, map.next_value::<Walk>()?.0)?,
                Key::Input => set_once(&mut m.input, &key, map.next_value::<Walk>()?.0)?,
                Key::WebSearchOptions => set_once(&mut m.web_search_options, &key, small(&mut map)?)?,
                Key::Tools => set_once(&mut m.tools, &key, map.next_value::<Tools>()?)?,
                Key::Other => {
                    map.next_value::<Walk>()?;
                }
            }
        }
        Ok(Body::Object(Box::new(m)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Body<'de>, A::Error> {
        WalkVisitor.visit_seq(seq).map(|_| Body::NotObject)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
    fn visit_unit<E>(self) -> Result<Body<'de>, E> {
        Ok(Body::NotObject)
    }
}

/// A visitor's methods for every value but arrays and objects: `$value`.
macro_rules! scalars {
    ($ty:ty, $value:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_bool<E>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<$ty, E> {
            Ok($value)
        }
    };
}

impl<'de> Deserialize<'de> for Tools {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ToolsVisitor)
    }
}

struct ToolsVisitor;

impl<'de> Visitor<'de> for ToolsVisitor {
    type Value = Tools;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools, A::Error> {
        let mut tools = Tools::default();
        while let Some(tool) = seq.next_element::<Tool>()? {
            if let Tool::Search(max_uses) = tool {
                tools.web_searches = tools.web_searches.saturating_add(max_uses.unwrap_or(WEB_SEARCH_MAX_USES));
            }
        }
        Ok(tools)
    }
    // Not an array: the upstream judges it; nothing to count.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Tools, A::Error> {
        WalkVisitor.visit_map(map).map(|_| Tools::default())
    }
    scalars!(Tools, Tools::default());
}

/// One element of `tools`: a web search tool and its `max_uses`, or anything else.
enum Tool {
    Search(Option<u64>),
    Other,
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ToolVisitor;
        impl<'de> Visitor<'de> for ToolVisitor {
            type Value = Tool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tool, A::Error> {
                let (mut search, mut max_uses) = (false, None);
                while let Some(key) = map.next_key::<ToolKey>()? {
                    match key {
                        ToolKey::Type => {
                            let kind = map.next_value::<serde_json::Value>()?;
                            search = kind.as_str().is_some_and(|k| k.starts_with("web_search"));
                        }
                        ToolKey::MaxUses => max_uses = map.next_value::<serde_json::Value>()?.as_u64(),
                        ToolKey::Other => {
                            map.next_value::<Walk>()?;
                        }
                    }
                }
                Ok(if search { Tool::Search(max_uses) } else { Tool::Other })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Tool, A::Error> {
                WalkVisitor.visit_seq(seq).map(|_| Tool::Other)
            }
            scalars!(Tool, Tool::Other);
        }
        d.deserialize_any(ToolVisitor)
    }
}

/// A member of a tool the gateway reads.
enum ToolKey {
    Type,
    MaxUses,
    Other,
}

impl<'de> Deserialize<'de> for ToolKey {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = ToolKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<ToolKey, E> {
                Ok(match v {
                    "type" => ToolKey::Type,
                    "max_uses" => ToolKey::MaxUses,
                    _ => ToolKey::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// Any JSON value, walked strictly; keeps only its kind.
struct Walk(Kind);

impl<'de> Deserialize<'de> for Walk {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WalkVisitor)
    }
}

struct WalkVisitor;

impl<'de> Visitor<'de> for WalkVisitor {
    type Value = Walk;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Walk, A::Error> {
        let mut empty = true;
        while seq.next_element::<Walk>()?.is_some() {
            empty = false;
        }
        Ok(Walk(Kind::Array { empty }))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Walk, A::Error> {
        while map.next_entry::<Walk, Walk>()?.is_some() {}
        Ok(Walk(Kind::Other))
    }
    fn visit_str<E>(self, _: &str) -> Result<Walk, E> {
        Ok(Walk(Kind::String))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Walk, E> {
        Ok(Walk(Kind::Other))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Walk, E> {
        Ok(Walk(Kind::Other))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Walk, E> {
        Ok(Walk(Kind::Other))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Walk, E> {
        Ok(Walk(Kind::Other))
    }
    fn visit_unit<E>(self) -> Result<Walk, E> {
        Ok(Walk(Kind::Other))
    }
}
