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
pub fn canonical_text(text: &[u8], skip: &[&str]) -> Option<(Vec<u8>, Facts)> {
    let mut out = Vec::with_capacity(text.len());
    let mut facts = Facts::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    de.deserialize_map(Top { out: &mut out, skip, facts: &mut facts }).ok()?;
    de.end().ok()?;
    Some((out, facts))
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
            let value = &self.out[value_at..];
            match name {
                b"temperature" => {
                    self.facts.cold = std::str::from_utf8(value).ok().and_then(|v| v.parse::<f64>().ok()) == Some(0.0);
                }
                b"seed" => self.facts.seeded = value != b"null",
                _ => {}
            }
            members.push((at, name_end, self.out.len()));
        }
        sorted(&mut *self.out, start, &mut members);
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
        sorted(&mut *self.out, start, &mut members);
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
/// name's text at `.0..name_end`, ending at `.2`) as one object, sorted by name text.
fn sorted(out: &mut Vec<u8>, start: usize, members: &mut [(usize, usize, usize)]) {
    let written = out.split_off(start);
    let text = |at: usize, end: usize| &written[at - start..end - start];
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

    #[test]
    fn scopes_differ_by_account() {
        assert_ne!(Scope::Account(1).bytes(), Scope::Account(2).bytes());
        assert_ne!(Scope::Account(1).bytes(), Scope::Shared.bytes());
    }
}
