//! Field sets for server-side apply: the FieldsV1 paths of an object's fields, the part
//! of an object a scope covers, and reading and removing by path.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Ctx, ListKind, key_of};

/// A field path in FieldsV1 tokens (`f:spec`, `k:{"name":"a"}`, `v:"x"`).
pub type FieldPath = Vec<String>;
pub type FieldSet = BTreeSet<FieldPath>;

/// Collects the field set of `v`: leaves (scalars, atomic lists, empty maps) and keyed
/// or set list elements.
pub fn collect_fields(v: &Value, ctx: Ctx, prefix: &mut FieldPath, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, cv) in m {
                if cv.is_null() {
                    continue;
                }
                prefix.push(format!("f:{k}"));
                collect_fields(cv, ctx.key(k), prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            let refs: Vec<&Value> = items.iter().collect();
            match ctx.list_kind(&refs) {
                ListKind::Map(keys) => {
                    for item in items {
                        prefix.push(format!("k:{}", key_of(item, &keys)));
                        out.insert(prefix.clone());
                        if let Value::Object(m) = item {
                            for (k, cv) in m {
                                if cv.is_null() {
                                    continue;
                                }
                                prefix.push(format!("f:{k}"));
                                collect_fields(cv, ctx.item().key(k), prefix, out);
                                prefix.pop();
                            }
                        }
                        prefix.pop();
                    }
                }
                ListKind::Set => {
                    for item in items {
                        prefix.push(format!("v:{item}"));
                        out.insert(prefix.clone());
                        prefix.pop();
                    }
                }
                ListKind::Atomic => {
                    out.insert(prefix.clone());
                }
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

/// Which part of an object a write may touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The main resource; `with_status` when the type has no status subresource.
    Main { with_status: bool },
    /// The `/status` subresource.
    Status,
}

/// The part of `obj` that field ownership tracks for a scope.
pub fn scoped(obj: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    let Value::Object(m) = obj else { return Value::Object(out) };
    for (k, v) in m {
        match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => {}
            ("status", Scope::Status) => {
                out.insert(k.clone(), v.clone());
            }
            (_, Scope::Status) => {}
            ("status", Scope::Main { with_status }) => {
                if with_status {
                    out.insert(k.clone(), v.clone());
                }
            }
            ("metadata", Scope::Main { .. }) => {
                let mut meta = Map::new();
                for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(x) = v.get(f).filter(|x| !x.is_null()) {
                        meta.insert(f.to_string(), x.clone());
                    }
                }
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The field set of the scoped part of `obj`.
pub fn fields_of(obj: &Value, scope: Scope, schema: Option<&Value>) -> FieldSet {
    let mut out = FieldSet::new();
    collect_fields(&scoped(obj, scope), Ctx::root(schema), &mut Vec::new(), &mut out);
    out
}

fn find_element(items: &[Value], token: &str) -> Option<usize> {
    if let Some(k) = token.strip_prefix("k:") {
        let key: Value = serde_json::from_str(k).ok()?;
        let key = key.as_object()?;
        items.iter().position(|i| key.iter().all(|(kk, kv)| i.get(kk) == Some(kv)))
    } else if let Some(v) = token.strip_prefix("v:") {
        let v: Value = serde_json::from_str(v).ok()?;
        items.iter().position(|i| *i == v)
    } else {
        None
    }
}

/// The value at a field path.
pub fn get_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = v;
    for tok in path {
        node = if let Some(f) = tok.strip_prefix("f:") {
            node.get(f)?
        } else {
            let items = node.as_array()?;
            &items[find_element(items, tok)?]
        };
    }
    Some(node)
}

/// Removes the value at a field path, if present.
pub fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut node = v;
    for tok in parents {
        node = if let Some(f) = tok.strip_prefix("f:") {
            match node.get_mut(f) {
                Some(n) => n,
                None => return,
            }
        } else {
            let Some(items) = node.as_array_mut() else { return };
            let Some(i) = find_element(items, tok) else { return };
            &mut items[i]
        };
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Value::Object(m) = node {
            m.remove(f);
        }
    } else if let Some(items) = node.as_array_mut()
        && let Some(i) = find_element(items, last)
    {
        items.remove(i);
    }
}

/// A field path as the API server prints it in conflicts (`.spec.model`, `.status.conditions[type="Ready"]`).
pub fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for tok in path {
        if let Some(f) = tok.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = tok.strip_prefix("k:") {
            let key: Value = serde_json::from_str(k).unwrap_or(Value::Null);
            let parts: Vec<String> = key.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = tok.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}
