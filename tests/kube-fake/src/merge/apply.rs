//! `metadata.managedFields` and server-side apply: per-manager field sets, conflicts
//! unless `force`, and removal of fields a manager stopped applying.

use serde_json::{Map, Value};

use super::fields::{FieldPath, FieldSet, Scope, display_path, fields_of, get_at, remove_at, scoped};
use super::{Ctx, ListKind, same_key};

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Managed {
    pub manager: String,
    pub operation: String,
    pub subresource: String,
    pub api_version: String,
    pub time: String,
    pub fields: FieldSet,
}

impl Managed {
    pub fn same_owner(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

fn from_fields_v1(tree: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    let Value::Object(m) = tree else { return };
    for (tok, sub) in m {
        if tok == "." {
            out.insert(prefix.clone());
            continue;
        }
        prefix.push(tok.clone());
        if sub.as_object().is_none_or(Map::is_empty) {
            out.insert(prefix.clone());
        } else {
            from_fields_v1(sub, prefix, out);
        }
        prefix.pop();
    }
}

fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for path in set {
        let mut node = &mut root;
        for tok in path {
            let Value::Object(m) = node else { break };
            node = m.entry(tok.clone()).or_insert_with(|| Value::Object(Map::new()));
        }
        let is_element = path.last().is_some_and(|t| t.starts_with("k:") || t.starts_with("v:"));
        if is_element && let Value::Object(m) = node {
            // Marks the element itself as owned (only needed when it has children too,
            // but harmless otherwise).
            m.insert(".".into(), Value::Object(Map::new()));
        }
    }
    root
}

/// Reads `metadata.managedFields`.
pub fn read_managed(obj: &Value) -> Vec<Managed> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = FieldSet::new();
            from_fields_v1(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Managed {
                manager: e["manager"].as_str().unwrap_or_default().into(),
                operation: e["operation"].as_str().unwrap_or_default().into(),
                subresource: e["subresource"].as_str().unwrap_or_default().into(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
                time: e["time"].as_str().unwrap_or_default().into(),
                fields,
            }
        })
        .collect()
}

/// Writes `metadata.managedFields` (dropping entries that own nothing).
pub fn write_managed(obj: &mut Value, entries: &[Managed]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = serde_json::json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = Value::String(e.subresource.clone());
            }
            v
        })
        .collect();
    let meta = crate::util::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Records a non-apply write by `manager`: the fields it changed become its own and
/// nobody else's; every entry forgets fields that no longer exist.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: Scope,
    schema: Option<&Value>,
    api_version: &str,
) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let subresource = if scope == Scope::Status { "status" } else { "" };
    let new_fields = fields_of(new, scope, schema);
    let changed: FieldSet = match old {
        None => new_fields,
        Some(old) => new_fields.into_iter().filter(|p| get_at(old, p) != get_at(new, p)).collect(),
    };
    if !changed.is_empty() {
        for e in entries.iter_mut() {
            e.fields.retain(|p| !changed.contains(p));
        }
        let now = crate::util::now();
        match entries.iter_mut().find(|e| e.same_owner(manager, "Update", subresource)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now;
                e.api_version = api_version.into();
            }
            None => entries.push(Managed {
                manager: manager.into(),
                operation: "Update".into(),
                subresource: subresource.into(),
                api_version: api_version.into(),
                time: now,
                fields: changed,
            }),
        }
    }
    for e in entries.iter_mut() {
        e.fields.retain(|p| get_at(new, p).is_some());
    }
    write_managed(new, &entries);
}

/// Server-side apply merge of an apply configuration into the live object.
pub fn apply_merge(live: &mut Value, cfg: &Value, ctx: Ctx) {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) => {
            for (k, cv) in c {
                if cv.is_null() {
                    continue;
                }
                let sub = ctx.key(k);
                match l.get_mut(k) {
                    Some(lv) => match (lv, cv) {
                        (lv @ Value::Object(_), Value::Object(_)) => apply_merge(lv, cv, sub),
                        (Value::Array(litems), Value::Array(citems)) => {
                            let refs: Vec<&Value> = citems.iter().chain(litems.iter()).collect();
                            match sub.list_kind(&refs) {
                                ListKind::Map(keys) => {
                                    for item in citems {
                                        match litems.iter().position(|x| same_key(x, item, &keys)) {
                                            Some(i) => apply_merge(&mut litems[i], item, sub.item()),
                                            None => litems.push(item.clone()),
                                        }
                                    }
                                }
                                ListKind::Set => {
                                    for item in citems {
                                        if !litems.contains(item) {
                                            litems.push(item.clone());
                                        }
                                    }
                                }
                                ListKind::Atomic => *litems = citems.clone(),
                            }
                        }
                        (lv, cv) => *lv = cv.clone(),
                    },
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (live, cfg) => *live = cfg.clone(),
    }
}

/// A server-side apply conflict.
#[derive(Debug, Clone)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Server-side apply of `cfg` by `manager` onto `live` (which has managedFields).
/// Returns the new object (with managedFields) or the conflicts.
pub fn server_side_apply(
    live: &Value,
    cfg: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
    schema: Option<&Value>,
    api_version: &str,
) -> Result<Value, Vec<Conflict>> {
    let subresource = if scope == Scope::Status { "status" } else { "" };
    let mut entries = read_managed(live);
    let cfg_scoped = scoped(cfg, scope);
    let applied = fields_of(cfg, scope, schema);
    let mut conflicts = Vec::new();
    for p in &applied {
        let is_element = p.last().is_some_and(|t| t.starts_with("k:") || t.starts_with("v:"));
        if is_element {
            continue;
        }
        let (Some(lv), Some(cv)) = (get_at(live, p), get_at(&cfg_scoped, p)) else { continue };
        if lv == cv {
            continue;
        }
        for e in entries.iter_mut() {
            if e.same_owner(manager, "Apply", subresource) || !e.fields.contains(p) {
                continue;
            }
            if force {
                e.fields.remove(p);
            } else {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    path: display_path(p),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut new = live.clone();
    let mut cfg_merge = cfg_scoped.clone();
    // Only the metadata fields that ownership tracks are merged from the configuration.
    if let Some(m) = cfg_merge.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    apply_merge(&mut new, &cfg_merge, Ctx::root(schema));
    // Fields this manager applied before and no longer applies, owned by nobody else, go.
    let previous = entries
        .iter()
        .find(|e| e.same_owner(manager, "Apply", subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !e.same_owner(manager, "Apply", subresource))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&FieldPath> = previous.difference(&applied).collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        let owned_elsewhere = others.iter().any(|o| o.starts_with(p));
        let still_applied = applied.iter().any(|a| a.starts_with(p));
        if !owned_elsewhere && !still_applied {
            remove_at(&mut new, p);
        }
    }
    let now = crate::util::now();
    match entries.iter_mut().find(|e| e.same_owner(manager, "Apply", subresource)) {
        Some(e) => {
            if e.fields != applied {
                e.time = now;
            }
            e.fields = applied;
            e.api_version = api_version.into();
        }
        None => entries.push(Managed {
            manager: manager.into(),
            operation: "Apply".into(),
            subresource: subresource.into(),
            api_version: api_version.into(),
            time: now,
            fields: applied,
        }),
    }
    for e in entries.iter_mut() {
        e.fields.retain(|p| get_at(&new, p).is_some());
    }
    write_managed(&mut new, &entries);
    Ok(new)
}
