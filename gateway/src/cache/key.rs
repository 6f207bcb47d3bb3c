//! What a cache key is made of (docs/design.md §13): the route, the scope, and the
//! request in a canonical form: objects with their members sorted, numbers and strings
//! as JSON writes them, and without the members that cannot change the answer.

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

/// `v` in canonical form: objects sorted by member name, recursively; `skip` members of
/// the top level left out.
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
                write(&Value::String(k.clone()), &[], out);
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
            if let Ok(bytes) = serde_json::to_vec(scalar) {
                out.extend_from_slice(&bytes);
            }
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

    #[test]
    fn scopes_differ_by_account() {
        assert_ne!(Scope::Account(1).bytes(), Scope::Account(2).bytes());
        assert_ne!(Scope::Account(1).bytes(), Scope::Shared.bytes());
    }
}
