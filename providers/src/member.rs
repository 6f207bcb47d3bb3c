//! Finding one top-level member of a JSON object without reading the rest: how a whole
//! answer's `usage` is found. The walk follows JSON's structure exactly (strings,
//! escapes, nesting) but checks no scalar, so it costs a fraction of a full parse;
//! whatever it cannot decide cheaply it leaves to the full parse.

/// What the walk says of the member asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Member<'a> {
    /// The object has the member once: its value, as written.
    Found(&'a [u8]),
    /// The object has no such member.
    Absent,
    /// Not decided here: the body is not a well-nested object, has the member twice, or
    /// writes a member name with escapes. The full parse answers.
    Unsure,
}

/// `name`'s value in the top-level object `body`.
pub fn member<'a>(body: &'a [u8], name: &str) -> Member<'a> {
    walk(body, name.as_bytes()).unwrap_or(Member::Unsure)
}

/// `name`'s value in the top-level object `body`, read as a `T`: `Some(None)` when the
/// object has no such member or its value is not a `T`, `None` when the walk cannot
/// decide (the caller parses the whole body instead).
pub fn read<'a, T: serde::Deserialize<'a>>(body: &'a [u8], name: &str) -> Option<Option<T>> {
    match member(body, name) {
        // The value's text is checked as UTF-8 once, not string by string.
        Member::Found(raw) => Some(std::str::from_utf8(raw).ok().and_then(|t| serde_json::from_str(t).ok())),
        Member::Absent => Some(None),
        Member::Unsure => None,
    }
}

fn walk<'a>(body: &'a [u8], name: &[u8]) -> Option<Member<'a>> {
    let mut at = skip_space(body, 0);
    (body.get(at) == Some(&b'{')).then_some(())?;
    at = skip_space(body, at + 1);
    let mut found = None;
    if body.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            (body.get(at) == Some(&b'"')).then_some(())?;
            let key_end = string_end(body, at + 1)?;
            let key = &body[at + 1..key_end];
            if key.contains(&b'\\') {
                return None;
            }
            at = skip_space(body, key_end + 1);
            (body.get(at) == Some(&b':')).then_some(())?;
            let start = skip_space(body, at + 1);
            at = value_end(body, start)?;
            if key == name {
                if found.is_some() {
                    return None;
                }
                found = Some(&body[start..at]);
            }
            at = skip_space(body, at);
            match body.get(at) {
                Some(b',') => at = skip_space(body, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_space(body, at) == body.len()).then_some(())?;
    Some(found.map_or(Member::Absent, Member::Found))
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index of the quote closing the string whose text starts at `at`.
fn string_end(body: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr::memchr2(b'"', b'\\', body.get(at..)?)?;
        if body[at] == b'"' {
            return Some(at);
        }
        at += 2;
    }
}

/// The index just past the value starting at `at`; nesting deeper than 64 is left to
/// the full parse.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    match *body.get(at)? {
        b'"' => string_end(body, at + 1).map(|end| end + 1),
        b'{' | b'[' => {
            // One bit per open level: set for an object, clear for an array.
            let (mut open, mut depth, mut i) = (0u64, 0u32, at);
            loop {
                match *body.get(i)? {
                    b'"' => i = string_end(body, i + 1)?,
                    c @ (b'{' | b'[') => {
                        (depth < 64).then_some(())?;
                        open = open << 1 | u64::from(c == b'{');
                        depth += 1;
                    }
                    c @ (b'}' | b']') => {
                        (depth > 0 && (open & 1 == 1) == (c == b'}')).then_some(())?;
                        open >>= 1;
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        b',' | b'}' | b']' | b':' => None,
        _ => {
            let len = body[at..].iter().position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len.unwrap_or(body.len() - at))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn usage(body: &str) -> Member<'_> {
        member(body.as_bytes(), "usage")
    }

    #[test]
    fn finds_the_member_at_the_top_level_only() {
        let body = r#"{"id":"x","choices":[{"message":{"content":"a \"usage\": {} } ] {","usage":1}}],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(usage(body), Member::Found(br#"{"prompt_tokens":9}"#));
        assert_eq!(usage(r#" { "usage" : null } "#), Member::Found(b"null"));
        assert_eq!(usage(r#"{"a":[1,{"usage":2}],"b":"usage"}"#), Member::Absent);
        assert_eq!(usage("{}"), Member::Absent);
        assert_eq!(usage(r#"{"usage":12,"x":true}"#), Member::Found(b"12"));
        assert_eq!(usage(r#"{"a":"ends in \\","usage":[1]}"#), Member::Found(b"[1]"));
    }

    #[test]
    fn leaves_to_the_full_parse_what_it_cannot_decide() {
        for body in [
            r#"{"usage":1,"usage":2}"#,
            r#"{"us\u0061ge":1}"#,
            r#"{"usage":{"a":[1}}"#,
            r#"{"usage":1} x"#,
            r#"{"usage":1"#,
            r#"{"usage":"open}"#,
            r#"{"usage":,}"#,
            r#"{"usage" 1}"#,
            r#"{"a":1,}"#,
            r#"["usage"]"#,
            "",
        ] {
            assert_eq!(usage(body), Member::Unsure, "{body}");
        }
        let deep = format!(r#"{{"a":{}{}}}"#, "[".repeat(65), "]".repeat(65));
        assert_eq!(usage(&deep), Member::Unsure);
        let fine = format!(r#"{{"a":{}{}}}"#, "[".repeat(64), "]".repeat(64));
        assert_eq!(usage(&fine), Member::Absent);
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a-z\"\\\\{}\\[\\], :\u{e9}\u{1f600}\n]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("(usage|[a-z\" ]{0,6})", inner), 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever a full parse finds, the walk finds, compact or pretty.
        #[test]
        fn agrees_with_a_full_parse(
            members in prop::collection::vec(("(usage|[a-z ]{0,6})", value()), 0..6),
            pretty in any::<bool>(),
        ) {
            let object = Value::Object(members.into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) }.unwrap();
            // Read back from the text, as the walk's value is: the same digits parse
            // to the same float.
            let reread: Value = serde_json::from_str(&text).unwrap();
            let expected = reread.get("usage");
            match member(text.as_bytes(), "usage") {
                Member::Found(raw) => {
                    prop_assert_eq!(Some(&serde_json::from_slice::<Value>(raw).unwrap()), expected);
                }
                Member::Absent => prop_assert!(expected.is_none()),
                Member::Unsure => prop_assert!(false, "undecided for {}", text),
            }
        }
    }

    #[test]
    fn an_answer_as_providers_write_it() {
        let answer = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14},
        });
        let text = serde_json::to_vec(&answer).unwrap();
        assert_eq!(
            member(&text, "usage"),
            Member::Found(br#"{"completion_tokens":5,"prompt_tokens":9,"total_tokens":14}"#)
        );
    }
}
