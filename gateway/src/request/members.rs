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
    pub messages: Option<Kind>,
    pub prompt: Option<Kind>,
    pub input: Option<Kind>,
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
    Messages,
    Prompt,
    Input,
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
            Key::Messages => "messages",
            Key::Prompt => "prompt",
            Key::Input => "input",
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
                    "messages" => Key::Messages,
                    "prompt" => Key::Prompt,
                    "input" => Key::Input,
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

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<'de>, A::Error> {
        let mut m = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            let small = match key {
                Key::Model => &mut m.model,
                Key::Stream => &mut m.stream,
                Key::MaxTokens => &mut m.max_tokens,
                Key::MaxCompletionTokens => &mut m.max_completion_tokens,
                Key::StreamOptions => &mut m.stream_options,
                Key::Messages | Key::Prompt | Key::Input => {
                    let large = match key {
                        Key::Messages => &mut m.messages,
                        Key::Prompt => &mut m.prompt,
                        _ => &mut m.input,
                    };
                    if large.is_some() {
                        return Err(A::Error::duplicate_field(key.name()));
                    }
                    *large = Some(map.next_value::<KindOf>()?.0);
                    continue;
                }
                Key::Other => {
                    map.next_value::<Strict>()?;
                    continue;
                }
            };
            if small.is_some() {
                return Err(A::Error::duplicate_field(key.name()));
            }
            let raw: &'de RawValue = map.next_value()?;
            // Raw text is only checked for syntax; these members are small, so walking
            // them again strictly costs little.
            serde_json::from_str::<Strict>(raw.get()).map_err(A::Error::custom)?;
            *small = Some(raw);
        }
        Ok(Body::Object(Box::new(m)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Body<'de>, A::Error> {
        Strict.visit_seq(seq).map(|_| Body::NotObject)
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

/// A large member walked strictly, keeping only its kind.
struct KindOf(Kind);

impl<'de> Deserialize<'de> for KindOf {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl<'de> Visitor<'de> for KindVisitor {
            type Value = KindOf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KindOf, A::Error> {
                let mut empty = true;
                while seq.next_element::<Strict>()?.is_some() {
                    empty = false;
                }
                Ok(KindOf(Kind::Array { empty }))
            }
            fn visit_str<E>(self, _: &str) -> Result<KindOf, E> {
                Ok(KindOf(Kind::String))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KindOf, A::Error> {
                Strict.visit_map(map).map(|_| KindOf(Kind::Other))
            }
            fn visit_bool<E>(self, _: bool) -> Result<KindOf, E> {
                Ok(KindOf(Kind::Other))
            }
            fn visit_i64<E>(self, _: i64) -> Result<KindOf, E> {
                Ok(KindOf(Kind::Other))
            }
            fn visit_u64<E>(self, _: u64) -> Result<KindOf, E> {
                Ok(KindOf(Kind::Other))
            }
            fn visit_f64<E>(self, _: f64) -> Result<KindOf, E> {
                Ok(KindOf(Kind::Other))
            }
            fn visit_unit<E>(self) -> Result<KindOf, E> {
                Ok(KindOf(Kind::Other))
            }
        }
        d.deserialize_any(KindVisitor)
    }
}

/// Any JSON value, walked strictly and dropped.
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Strict)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        while map.next_entry::<Strict, Strict>()?.is_some() {}
        Ok(Strict)
    }
}
