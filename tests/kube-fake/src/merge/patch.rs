//! The patch flavours: JSON merge patch (RFC 7386), strategic merge patch, and JSON
//! patch (RFC 6902).

use serde_json::{Map, Value};

use super::{Ctx, ListKind, same_key};

/// RFC 7386.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Removes `$…` directives from a value that is inserted as a whole.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), strip_directives(v))).collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A strategic merge patch (built-in kinds).
pub fn strategic_merge(target: &mut Value, patch: &Value, ctx: Ctx) {
    let Value::Object(p) = patch else {
        *target = strip_directives(patch);
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = strip_directives(patch);
            return;
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    let mut retain: Option<Vec<String>> = None;
    for (k, v) in p {
        if k == "$patch" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if k == "$retainKeys" {
            retain = Some(v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect());
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        let sub = ctx.key(k);
        if v.is_null() || v.get("$patch").and_then(Value::as_str) == Some("delete") {
            t.remove(k);
            continue;
        }
        match v {
            Value::Object(_) => strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v, sub),
            Value::Array(items) => {
                let refs: Vec<&Value> = items.iter().collect();
                let kind = sub.list_kind(&refs);
                let replace = items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
                match (kind, t.get_mut(k)) {
                    (ListKind::Map(keys), Some(Value::Array(live))) if !replace => {
                        for item in items {
                            let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                            let pos = live.iter().position(|l| same_key(l, item, &keys));
                            match (pos, delete) {
                                (Some(i), true) => {
                                    live.remove(i);
                                }
                                (Some(i), false) => strategic_merge(&mut live[i], item, sub.item()),
                                (None, true) => {}
                                (None, false) => live.push(strip_directives(item)),
                            }
                        }
                    }
                    (ListKind::Set, Some(Value::Array(live))) if !replace => {
                        for item in items {
                            if !live.contains(item) {
                                live.push(item.clone());
                            }
                        }
                    }
                    _ => {
                        let cleaned: Vec<Value> = items
                            .iter()
                            .filter(|i| !matches!(i.get("$patch").and_then(Value::as_str), Some("delete" | "replace")))
                            .map(strip_directives)
                            .collect();
                        t.insert(k.clone(), Value::Array(cleaned));
                    }
                }
            }
            scalar => {
                t.insert(k.clone(), scalar.clone());
            }
        }
    }
    if let Some(keep) = retain {
        t.retain(|k, _| keep.contains(k));
    }
}

/// RFC 6902, except that `test` of `null` against a missing path succeeds (the real API
/// server behaves so, and kube-runtime's `finalizer()` relies on it).
pub fn json_patch(doc: &mut Value, body: &Value) -> Result<(), String> {
    let ops: json_patch::Patch =
        serde_json::from_value(body.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    for op in &ops.0 {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(doc, std::slice::from_ref(op)).map_err(|e| e.to_string())?;
    }
    Ok(())
}
