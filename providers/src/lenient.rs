//! Reading the members of a native answer the way `serde_json::Value`'s accessors read
//! them (`v["k"].as_str()`, `.as_u64()`, `.as_array()`), without building the `Value`:
//! a member of another type, or of a non-object, reads as absent, never as an error; a
//! member given twice reads as its last value. Only malformed JSON is an error.
//!
//! A type opts in with [`Lenient`] (the shapes it takes; everything else is its
//! `Default`) and a `Deserialize` impl that calls [`deserialize`]. The gateway reads the
//! answers it passes through this way too (their usage and finish reasons).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What a lenient type takes; every other shape is `Self::default()`.
pub trait Lenient<'de>: Default {
    /// A string.
    fn from_str(_s: Cow<'de, str>) -> Self {
        Self::default()
    }

    /// A non-negative integer.
    fn from_u64(_n: u64) -> Self {
        Self::default()
    }

    /// An array (its elements must all be read).
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }

    /// An object (its members must all be read; see [`members`]).
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
}

/// Deserialises any `T: Lenient` from whatever JSON value comes.
pub fn deserialize<'de, T: Lenient<'de>, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(AnyVisitor(PhantomData))
}

/// `impl Deserialize` for lenient types.
macro_rules! lenient_deserialize {
    ($($t:ident),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t<'de> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::lenient::deserialize(d)
            }
        }
    )*};
}
pub(crate) use lenient_deserialize;

struct AnyVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for AnyVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<T, E> {
        Ok(T::from_u64(n))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<T, E> {
        Ok(T::from_str(Cow::Borrowed(s)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        Ok(T::from_str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<T, E> {
        Ok(T::from_str(Cow::Owned(s)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::from_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }
}

/// `v["k"].as_str()`: borrowed from the input unless it had escapes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Str<'a>(pub Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    /// The string, if it was one.
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de> Lenient<'de> for Str<'de> {
    fn from_str(s: Cow<'de, str>) -> Self {
        Self(Some(s))
    }
}

/// `v["k"].as_u64()`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct U64(pub Option<u64>);

impl<'de> Lenient<'de> for U64 {
    fn from_u64(n: u64) -> Self {
        Self(Some(n))
    }
}

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d)
    }
}

/// `v["k"].as_array()`, each element read leniently; not an array is empty.
#[derive(Debug)]
pub struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Lenient<'de> for List<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut all = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            all.push(item);
        }
        Ok(Self(all))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d)
    }
}

lenient_deserialize!(Str);

/// Reads an object's members with `each(key, map)`, which must read the value of every
/// key it is given (`map.next_value()`); keys it does not know it passes to [`skip`].
pub fn members<'de, A: MapAccess<'de>>(
    mut map: A,
    mut each: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key::<Str<'de>>()? {
        each(key.as_deref().unwrap_or(""), &mut map)?;
    }
    Ok(())
}

/// Skips the value of a member nobody reads.
pub fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_types_read_as_absent() -> Result<(), serde_json::Error> {
        assert_eq!(serde_json::from_str::<Str<'_>>(r#""a""#)?.as_deref(), Some("a"));
        assert_eq!(serde_json::from_str::<Str<'_>>(r#""a\"b""#)?.as_deref(), Some("a\"b"));
        for other in ["1", "-1", "1.5", "true", "null", "[1,[2]]", r#"{"a":{"b":1}}"#] {
            assert_eq!(serde_json::from_str::<Str<'_>>(other)?, Str(None), "{other}");
        }
        assert_eq!(serde_json::from_str::<U64>("7")?, U64(Some(7)));
        for other in ["-1", "7.0", r#""7""#, "[]", "{}"] {
            assert_eq!(serde_json::from_str::<U64>(other)?, U64(None), "{other}");
        }
        assert_eq!(serde_json::from_str::<List<U64>>("[1,\"x\",2]")?.0, [U64(Some(1)), U64(None), U64(Some(2))]);
        assert!(serde_json::from_str::<List<U64>>(r#"{"a":1}"#)?.0.is_empty());
        assert!(serde_json::from_str::<Str<'_>>("[1,").is_err(), "malformed JSON is still an error");
        Ok(())
    }
}
