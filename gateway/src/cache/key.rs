//! What a cache key is made of (docs/design.md §13): the route, the scope, and the
//! request in a canonical form: objects with their members sorted, numbers and strings
//! as JSON writes them, and without the members that cannot change the answer.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Members left out of a key: they do not change what the model answers (`user` and
/// `metadata` identify the caller, `stream` and `stream_options` only the wire form,
/// `store` and `service_tier` where and how it is kept or billed upstream).
pub const INERT: &[&str] = &["user", "metadata", "stream", "stream_options", "store", "service_tier"];

/// Whose answers a key may be read by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The account of the request's key (the default): no tenant reads another's.
    Account(i64),
    /// Every caller of the route (`cache.scope: shared`), or a gateway without keys.
    Shared,
}

impl Scope {
    /// The scope of a request by `account` (`None` without keys) on a route whose
    /// cache is `shared` or not.
    pub fn of(account: Option<&sluice_ledger::AccountRef>, shared: bool) -> Scope {
        match account {
            Some(a) if !shared => Scope::Account(a.id),
            _ => Scope::Shared,
        }
    }

    /// The bytes hashed into the key.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Scope::Account(id) => format!("account:{id}").into_bytes(),
            Scope::Shared => b"shared".to_vec(),
        }
    }
}

/// What the pass that writes a request's canonical form learnt of its top level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// `temperature` is the number 0.
    pub cold: bool,
    /// `seed` is set (not `null`).
    pub seeded: bool,
}

/// A JSON object's text in canonical form, written in one pass over the text without
/// building a tree: members sorted by their JSON text, recursively; numbers and strings
/// as JSON writes them; no whitespace; `skip` members of the top level left out. `None`
/// when `text` is not a JSON object.
///
/// Most requests are written in the subset [`Plain`] copies as it is (strings without
/// escapes, integers, literals); the others are parsed, so that each value is written
/// the one way JSON writes it.
pub fn canonical_text(text: &[u8], skip: &[&str]) -> Option<(Vec<u8>, Facts)> {
    Plain::canonical(text, skip).or_else(|| parsed_canonical_text(text, skip))
}

/// The canonical form by a parse of the text: every value decoded and written again.
fn parsed_canonical_text(text: &[u8], skip: &[&str]) -> Option<(Vec<u8>, Facts)> {
    let mut out = Vec::with_capacity(text.len());
    let mut facts = Facts::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    de.deserialize_map(Top { out: &mut out, skip, facts: &mut facts }).ok()?;
    de.end().ok()?;
    Some((out, facts))
}

/// The canonical form copied from the text, for the values JSON writes only one way:
/// strings without escapes or control characters, integers of up to 18 digits without a
/// leading zero (and not `-0`, which JSON reads as a float), `true`, `false`, `null`, and
/// objects and arrays of them nested up to [`Plain::MAX_DEPTH`]. Anything else stops
/// the copy (`None`), and the text is parsed instead.
struct Plain<'t> {
    text: &'t [u8],
    at: usize,
    out: Vec<u8>,
    /// The members of the objects being copied, innermost last: each object's are those
    /// from where it started (one list for all, not one per object).
    members: Vec<(usize, usize, usize)>,
    /// Where [`sorted`] keeps an object's members while it writes them back in order.
    scratch: Vec<u8>,
}

impl<'t> Plain<'t> {
    const MAX_DEPTH: u32 = 64;

    fn canonical(text: &'t [u8], skip: &[&str]) -> Option<(Vec<u8>, Facts)> {
        std::str::from_utf8(text).ok()?;
        let mut plain = Plain {
            text,
            at: 0,
            out: Vec::with_capacity(text.len()),
            members: Vec::with_capacity(16),
            scratch: Vec::with_capacity(text.len()),
        };
        let mut facts = Facts::default();
        plain.space();
        (text.get(plain.at) == Some(&b'{')).then_some(())?;
        plain.object(Some((skip, &mut facts)), 1)?;
        plain.space();
        (plain.at == text.len()).then_some((plain.out, facts))
    }

    fn space(&mut self) {
        while matches!(self.text.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: u32) -> Option<()> {
        match *self.text.get(self.at)? {
            b'{' => self.object(None, depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                let s = self.string()?;
                self.out.extend_from_slice(s);
                Some(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.integer(),
        }
    }

    /// The string at `at` with its quotes, if it has no escape or control character.
    ///
    /// Its end found by `memchr`, then its bytes checked for control characters in a
    /// loop without an early exit, which the compiler vectorises: a prompt of a few KB
    /// is most of a request's text.
    fn string(&mut self) -> Option<&'t [u8]> {
        let start = self.at;
        let len = memchr::memchr2(b'"', b'\\', self.text.get(start + 1..)?)?;
        let end = start + 1 + len;
        let control = self.text[start + 1..end].iter().fold(false, |seen, &c| seen | (c < 0x20));
        (self.text[end] == b'"' && !control).then_some(())?;
        self.at = end + 1;
        Some(&self.text[start..=end])
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.text[self.at..].starts_with(word).then_some(())?;
        self.at += word.len();
        self.out.extend_from_slice(word);
        Some(())
    }

    fn integer(&mut self) -> Option<()> {
        let start = self.at;
        let digits = start + usize::from(self.text[start] == b'-');
        let n = self.text.get(digits..)?.iter().take_while(|c| c.is_ascii_digit()).count();
        let end = digits + n;
        let one_form = (1..=18).contains(&n) && (self.text[digits] != b'0' || (n == 1 && digits == start));
        (one_form && !matches!(self.text.get(end), Some(b'.' | b'e' | b'E'))).then_some(())?;
        self.out.extend_from_slice(&self.text[start..end]);
        self.at = end;
        Some(())
    }

    fn array(&mut self, depth: u32) -> Option<()> {
        (depth <= Self::MAX_DEPTH).then_some(())?;
        self.at += 1;
        self.out.push(b'[');
        self.space();
        if self.text.get(self.at) != Some(&b']') {
            loop {
                self.value(depth)?;
                self.space();
                match *self.text.get(self.at)? {
                    b',' => {
                        self.at += 1;
                        self.out.push(b',');
                        self.space();
                    }
                    b']' => break,
                    _ => return None,
                }
            }
        }
        self.at += 1;
        self.out.push(b']');
        Some(())
    }

    /// An object, its members sorted as [`sorted`] sorts them; at the top (`top`), its
    /// `skip` members left out and its facts noted, as [`Top`] does.
    fn object(&mut self, mut top: Option<(&[&str], &mut Facts)>, depth: u32) -> Option<()> {
        (depth <= Self::MAX_DEPTH).then_some(())?;
        self.at += 1;
        self.space();
        let start = self.out.len();
        let first = self.members.len();
        if self.text.get(self.at) != Some(&b'}') {
            loop {
                (self.text.get(self.at) == Some(&b'"')).then_some(())?;
                let name = self.string()?;
                let at = self.out.len();
                self.out.extend_from_slice(name);
                let name_end = self.out.len();
                self.space();
                (self.text.get(self.at) == Some(&b':')).then_some(())?;
                self.at += 1;
                self.out.push(b':');
                self.space();
                let value_at = self.out.len();
                self.value(depth)?;
                let name = &name[1..name.len() - 1];
                match &mut top {
                    Some((skip, _)) if skip.iter().any(|s| s.as_bytes() == name) => self.out.truncate(at),
                    Some((_, facts)) => {
                        facts.note(name, &self.out[value_at..]);
                        self.members.push((at, name_end, self.out.len()));
                    }
                    None => self.members.push((at, name_end, self.out.len())),
                }
                self.space();
                match *self.text.get(self.at)? {
                    b',' => {
                        self.at += 1;
                        self.space();
                    }
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        self.at += 1;
        sorted(&mut self.out, &mut self.scratch, start, &mut self.members[first..]);
        self.members.truncate(first);
        Some(())
    }
}

impl Facts {
    /// Notes what a top-level member `name` with the canonical `value` says.
    fn note(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"temperature" => {
                self.cold = std::str::from_utf8(value).ok().and_then(|v| v.parse::<f64>().ok()) == Some(0.0)
            }
            b"seed" => self.seeded = value != b"null",
            _ => {}
        }
    }
}

/// The top-level object: its members are filtered and its facts noted.
struct Top<'o> {
    out: &'o mut Vec<u8>,
    skip: &'o [&'o str],
    facts: &'o mut Facts,
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let start = self.out.len();
        let mut members = Vec::new();
        while let Some((at, name_end)) = map.next_key_seed(Name { out: &mut *self.out })? {
            let value_at = self.out.len();
            map.next_value_seed(Canon { out: &mut *self.out })?;
            // The name's text without its quotes (names with escapes are not among
            // those skipped or read here).
            let name = &self.out[at + 1..name_end - 1];
            if self.skip.iter().any(|s| s.as_bytes() == name) {
                self.out.truncate(at);
                continue;
            }
            self.facts.note(name, &self.out[value_at..]);
            members.push((at, name_end, self.out.len()));
        }
        sorted(&mut *self.out, &mut Vec::new(), start, &mut members);
        Ok(())
    }
}

/// A member name, written as JSON text and a `:`; where its text starts and ends.
struct Name<'o> {
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Name<'_> {
    type Value = (usize, usize);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(usize, usize), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Name<'_> {
    type Value = (usize, usize);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_str<E>(self, name: &str) -> Result<(usize, usize), E> {
        let at = self.out.len();
        string(&mut *self.out, name);
        let end = self.out.len();
        self.out.push(b':');
        Ok((at, end))
    }
}

/// Any JSON value, written in canonical form.
struct Canon<'o> {
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Canon<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canon<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let start = self.out.len();
        let mut members = Vec::new();
        while let Some((at, name_end)) = map.next_key_seed(Name { out: &mut *self.out })? {
            map.next_value_seed(Canon { out: &mut *self.out })?;
            members.push((at, name_end, self.out.len()));
        }
        sorted(&mut *self.out, &mut Vec::new(), start, &mut members);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let at = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq.next_element_seed(Canon { out: &mut *self.out })?.is_none() {
                self.out.truncate(at);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        string(&mut *self.out, v);
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        let _ = serde_json::to_writer(&mut *self.out, &v);
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = serde_json::to_writer(&mut *self.out, &v);
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // Parsed JSON numbers are finite; JSON writes each in one shortest form.
        let _ = serde_json::to_writer(&mut *self.out, &v);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
}

/// `s` as a JSON string.
fn string(out: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Rewrites the members written back to back from `start` (each `name:value`, its
/// name's text at `.0..name_end`, ending at `.2`) as one object, sorted by name text;
/// `scratch` holds them meanwhile (one buffer for every object of a request).
fn sorted(out: &mut Vec<u8>, scratch: &mut Vec<u8>, start: usize, members: &mut [(usize, usize, usize)]) {
    scratch.clear();
    scratch.extend_from_slice(&out[start..]);
    out.truncate(start);
    let text = |at: usize, end: usize| &scratch[at - start..end - start];
    members.sort_by(|a, b| text(a.0, a.1).cmp(text(b.0, b.1)));
    out.push(b'{');
    for (i, (at, _, end)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(text(*at, *end));
    }
    out.push(b'}');
}

/// `v` in canonical form (of a value already parsed): objects sorted by member name,
/// recursively; `skip` members of the top level left out.
pub fn canonical(v: &Value, skip: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(v, skip, &mut out);
    out
}

fn write(v: &Value, skip: &[&str], out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| !skip.contains(&k.as_str())).collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, k);
                out.push(b':');
                write(v, &[], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, &[], out);
            }
            out.push(b']');
        }
        scalar => {
            // Scalars serialise canonically already (no whitespace, one form per value).
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn member_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical(&a, &[]), canonical(&b, &[]));
        assert_eq!(canonical(&a, &[]), br#"{"a":{"x":"s","y":[1,2]},"b":1}"#.to_vec());
    }

    #[test]
    fn inert_members_are_left_out_at_the_top_only() {
        let a = json!({"input": "x", "user": "u1", "stream": true});
        let b = json!({"input": "x", "user": "u2"});
        assert_eq!(canonical(&a, INERT), canonical(&b, INERT));
        // A member named `user` inside the content is content.
        let c = json!({"input": {"user": "u1"}});
        let d = json!({"input": {"user": "u2"}});
        assert_ne!(canonical(&c, INERT), canonical(&d, INERT));
    }

    fn text(body: &str, skip: &[&str]) -> Option<Vec<u8>> {
        canonical_text(body.as_bytes(), skip).map(|(c, _)| c)
    }

    #[test]
    fn the_one_pass_form_is_the_tree_form() {
        for body in [
            r#"{"b": 1, "a": {"y": [1, 2.5, -3, 1e3], "x": "s\u00e9\n"}, "c": [{"z": null, "y": true}, []], "d": {}}"#,
            r#"{"messages": [{"role": "user", "content": "hi \"there\""}], "temperature": 0, "user": "u"}"#,
        ] {
            let tree: Value = serde_json::from_str(body).unwrap();
            assert_eq!(text(body, INERT), Some(canonical(&tree, INERT)), "{body}");
        }
        assert_eq!(
            text(r#" { "b" : [ 1 , { "d" : 2 , "c" : 3 } ] , "a" : "x" } "#, &[]).unwrap(),
            br#"{"a":"x","b":[1,{"c":3,"d":2}]}"#.to_vec()
        );
    }

    #[test]
    fn the_one_pass_form_skips_at_the_top_only_and_refuses_what_is_not_an_object() {
        assert_eq!(text(r#"{"input": "x", "user": "u1", "stream": true}"#, INERT), text(r#"{"input":"x"}"#, INERT));
        assert_ne!(text(r#"{"input": {"user": "u1"}}"#, INERT), text(r#"{"input": {"user": "u2"}}"#, INERT));
        assert_eq!(text(r#"{"user": "u1"}"#, INERT).unwrap(), b"{}".to_vec());
        assert_eq!(text("[1, 2]", &[]), None);
        assert_eq!(text(r#""a""#, &[]), None);
        assert_eq!(text(r#"{"a": 1} trailing"#, &[]), None);
        assert_eq!(text(r#"{"a": 1"#, &[]), None);
    }

    /// A JSON value; `plain`: only of the subset [`Plain`] copies.
    fn json(plain: bool) -> BoxedStrategy<Value> {
        let string = if plain { "[a-z \u{e9}\u{1f600}/]{0,8}" } else { "[a-z\"\\\\\n\t\u{1}\u{e9}\u{1f600}/]{0,8}" };
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-100_000_000_000_000_000i64..100_000_000_000_000_000).prop_map(Value::from),
            string.prop_map(Value::from),
        ];
        let leaf = if plain {
            leaf.boxed()
        } else {
            prop_oneof![
                4 => leaf,
                1 => any::<i64>().prop_map(Value::from),
                1 => any::<u64>().prop_map(Value::from),
                1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            ]
            .boxed()
        };
        leaf.prop_recursive(4, 24, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((string, inner), 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
        .boxed()
    }

    /// An object's text with its members in the order (and repeats) given, compact or
    /// pretty.
    fn object_text(members: &[(String, Value)], pretty: bool) -> String {
        let write = |v: &Value| if pretty { serde_json::to_string_pretty(v) } else { serde_json::to_string(v) };
        let members: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), write(v).unwrap()))
            .collect();
        if pretty { format!("{{\n  {}\n}}\n", members.join(",\n  ")) } else { format!("{{{}}}", members.join(",")) }
    }

    fn top(plain: bool) -> impl Strategy<Value = Vec<(String, Value)>> {
        let names =
            if plain { "(temperature|seed|user|[a-z]{1,4})" } else { "(temperature|seed|user|[a-z\"\\\\]{1,4})" };
        prop::collection::vec((names, json(plain)), 0..6)
    }

    proptest::proptest! {
        /// Copied or parsed, the canonical form and the facts are the parse's.
        #[test]
        fn the_copy_writes_what_the_parse_writes(members in top(false), pretty in any::<bool>()) {
            let text = object_text(&members, pretty);
            proptest::prop_assert_eq!(canonical_text(text.as_bytes(), INERT), parsed_canonical_text(text.as_bytes(), INERT));
        }

        /// Requests in the plain subset are copied, not parsed.
        #[test]
        fn plain_requests_are_copied(members in top(true), pretty in any::<bool>()) {
            let text = object_text(&members, pretty);
            let copied = Plain::canonical(text.as_bytes(), INERT);
            proptest::prop_assert!(copied.is_some(), "{}", text);
            proptest::prop_assert_eq!(copied, parsed_canonical_text(text.as_bytes(), INERT));
        }
    }

    #[test]
    fn the_copy_leaves_to_the_parse_what_json_writes_another_way() {
        for body in [
            r#"{"a": 1.0}"#,
            r#"{"a": 1e2}"#,
            r#"{"a": -0}"#,
            r#"{"a": 007}"#,
            r#"{"a": 1234567890123456789}"#,
            r#"{"a": "\u0041"}"#,
            r#"{"\u0061": 1}"#,
            r#"{"a": [1,]}"#,
            r#"{"a": 1,}"#,
            "{\"a\": \"tab\tin\"}",
        ] {
            assert_eq!(Plain::canonical(body.as_bytes(), INERT), None, "{body}");
            assert_eq!(canonical_text(body.as_bytes(), INERT), parsed_canonical_text(body.as_bytes(), INERT), "{body}");
        }
        assert_eq!(text(r#"{"a": -0}"#, &[]).unwrap(), br#"{"a":-0.0}"#.to_vec());
        assert_eq!(text(r#"{"a": "\u0041", "b": 1.50}"#, &[]).unwrap(), br#"{"a":"A","b":1.5}"#.to_vec());
        let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(70), "]".repeat(70));
        assert_eq!(Plain::canonical(deep.as_bytes(), &[]), None);
        assert_eq!(text(&deep, &[]).map(|t| t.len()), Some(deep.len()));
    }

    #[test]
    fn long_strings_are_copied_and_a_control_character_anywhere_in_one_is_not() {
        let long = "word ".repeat(300);
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{long}"}}]}}"#);
        let sorted = format!(r#"{{"messages":[{{"content":"{long}","role":"user"}}],"model":"m"}}"#);
        assert_eq!(Plain::canonical(body.as_bytes(), INERT).map(|(c, _)| c), Some(sorted.into_bytes()));
        for at in [0, 1, 700, long.len() - 1] {
            let mut raw = long.clone().into_bytes();
            raw[at] = 0x1f;
            let body = format!(r#"{{"content":"{}"}}"#, String::from_utf8(raw).unwrap());
            assert_eq!(Plain::canonical(body.as_bytes(), INERT), None, "control character at {at}");
        }
    }

    #[test]
    fn repeated_members_keep_their_order() {
        // JSON readers take the last of a repeated member: the two mean different things.
        assert_ne!(text(r#"{"a": 1, "a": 2}"#, &[]), text(r#"{"a": 2, "a": 1}"#, &[]));
        assert_eq!(text(r#"{"b": 0, "a": 1, "a": 2}"#, &[]).unwrap(), br#"{"a":1,"a":2,"b":0}"#.to_vec());
    }

    #[test]
    fn scopes_differ_by_account() {
        assert_ne!(Scope::Account(1).bytes(), Scope::Account(2).bytes());
        assert_ne!(Scope::Account(1).bytes(), Scope::Shared.bytes());
    }
}
