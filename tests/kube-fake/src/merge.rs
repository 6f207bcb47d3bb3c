//! The patch flavours and server-side apply:
//! - JSON merge patch (RFC 7386);
//! - strategic merge patch (merge patch whose keyed lists merge by key, plus the `$patch`,
//!   `$retainKeys`, `$setElementOrder` and `$deleteFromPrimitiveList` directives kubectl sends);
//! - JSON patch (RFC 6902) where a `test` of `null` on a missing path succeeds;
//! - server-side apply with minimal field ownership (`metadata.managedFields`, FieldsV1):
//!   per-manager field sets, conflicts unless `force`, and removal of fields a manager
//!   stopped applying.
//!
//! Which lists merge by key: for custom resources, what the schema says
//! (`x-kubernetes-list-type: map|set`, otherwise atomic); for built-in kinds, the usual
//! merge keys (`containers` by `name`, `volumeMounts` by `mountPath`, …) and otherwise
//! lists of maps that all carry `name` (or else `type`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// How a list merges.
#[derive(Clone, Debug, PartialEq)]
pub enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// Where we are in an object: the schema node (custom resources) and the field path.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    /// `Some` for custom resources (the schema decides list kinds); `None` for built-ins.
    pub schema: Option<&'a Value>,
    /// Whether the object has a schema at all (a CR): then schema-less subtrees are atomic.
    pub custom: bool,
    pub depth: usize,
    /// The field name this value sits under (`""` at the root).
    pub field: &'a str,
    /// Whether this node is the root's `metadata`.
    pub is_metadata: bool,
    /// Whether this node is a direct child of the root's `metadata`.
    pub under_metadata: bool,
}

impl<'a> Ctx<'a> {
    pub fn root(schema: Option<&'a Value>) -> Self {
        Self { schema, custom: schema.is_some(), depth: 0, field: "", is_metadata: false, under_metadata: false }
    }

    pub fn key(&self, k: &'a str) -> Ctx<'a> {
        let schema = self.schema.and_then(|s| {
            s["properties"].get(k).or(if s["additionalProperties"].is_object() {
                Some(&s["additionalProperties"])
            } else {
                None
            })
        });
        Ctx {
            schema,
            custom: self.custom,
            depth: self.depth + 1,
            field: k,
            is_metadata: self.depth == 0 && k == "metadata",
            under_metadata: self.is_metadata,
        }
    }

    pub fn item(&self) -> Ctx<'a> {
        Ctx {
            schema: self.schema.and_then(|s| s.get("items")),
            custom: self.custom,
            depth: self.depth + 1,
            field: "",
            is_metadata: false,
            under_metadata: false,
        }
    }

    /// The merge behaviour of the list at this position.
    pub fn list_kind(&self, items: &[&Value]) -> ListKind {
        if self.under_metadata && self.field == "finalizers" {
            return ListKind::Set;
        }
        if self.under_metadata && self.field == "ownerReferences" {
            return ListKind::Map(vec!["uid".into()]);
        }
        if self.custom {
            let Some(s) = self.schema else { return ListKind::Atomic };
            return match s["x-kubernetes-list-type"].as_str() {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map(
                    s["x-kubernetes-list-map-keys"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect(),
                ),
                _ => ListKind::Atomic,
            };
        }
        let all_have = |k: &str| !items.is_empty() && items.iter().all(|i| i.get(k).is_some());
        let keys: &[&str] = match self.field {
            "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets" => {
                &["name"]
            }
            "volumeMounts" => &["mountPath"],
            "volumeDevices" => &["devicePath"],
            "conditions" => &["type"],
            "ports" if all_have("containerPort") => &["containerPort"],
            "ports" if all_have("port") => &["port"],
            _ if all_have("name") && items.iter().all(|i| i.is_object()) => &["name"],
            _ if all_have("type") && items.iter().all(|i| i.is_object()) => &["type"],
            _ => return ListKind::Atomic,
        };
        ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
    }
}

fn key_of(item: &Value, keys: &[String]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k.as_str()) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

fn same_key(a: &Value, b: &Value, keys: &[String]) -> bool {
    keys.iter().all(|k| a.get(k.as_str()) == b.get(k.as_str()))
}

// ---------------------------------------------------------------------------------------
// JSON merge patch

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

// ---------------------------------------------------------------------------------------
// Strategic merge patch

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

// ---------------------------------------------------------------------------------------
// JSON patch

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

// ---------------------------------------------------------------------------------------
// Server-side apply: field sets

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

// ---------------------------------------------------------------------------------------
// managedFields

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn strategic_merge_by_key_and_directives() {
        let mut t =
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}], "args": ["x"]}});
        let p = json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "2"}, {"name": "b", "$patch": "delete"}],
            "args": ["y"]
        }});
        strategic_merge(&mut t, &p, Ctx::root(None));
        assert_eq!(t, json!({"spec": {"containers": [{"name": "a", "image": "2"}], "args": ["y"]}}));
    }

    #[test]
    fn json_patch_test_null_on_missing_path() {
        let mut doc = json!({"metadata": {"name": "x"}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]);
        assert_eq!(json_patch(&mut doc, &ops), Ok(()));
        assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
        let bad = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "other"}]);
        assert!(json_patch(&mut doc, &bad).is_err());
    }

    #[test]
    fn fields_v1_round_trip() {
        let obj = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]},
                         "spec": {"containers": [{"name": "c", "image": "i"}], "n": 1}});
        let set = fields_of(&obj, Scope::Main { with_status: true }, None);
        let mut o = obj.clone();
        write_managed(
            &mut o,
            &[Managed {
                manager: "m".into(),
                operation: "Apply".into(),
                subresource: String::new(),
                api_version: "v1".into(),
                time: "t".into(),
                fields: set.clone(),
            }],
        );
        assert_eq!(read_managed(&o)[0].fields, set);
        assert!(set.contains(&vec![
            "f:spec".to_string(),
            "f:containers".into(),
            "k:{\"name\":\"c\"}".into(),
            "f:image".into()
        ]));
    }

    #[test]
    fn apply_removes_fields_a_manager_stops_applying_and_detects_conflicts() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
        let a = server_side_apply(
            &live,
            &json!({"data": {"a": "1", "b": "2"}}),
            "m",
            false,
            Scope::Main { with_status: true },
            None,
            "v1",
        );
        let Ok(a) = a else { panic!("apply failed") };
        let Ok(b) = server_side_apply(
            &a,
            &json!({"data": {"a": "1"}}),
            "m",
            false,
            Scope::Main { with_status: true },
            None,
            "v1",
        ) else {
            panic!("apply failed")
        };
        assert_eq!(b["data"], json!({"a": "1"}));
        let c = server_side_apply(
            &b,
            &json!({"data": {"a": "other"}}),
            "n",
            false,
            Scope::Main { with_status: true },
            None,
            "v1",
        );
        assert!(matches!(c, Err(ref cs) if cs.len() == 1 && cs[0].path == ".data.a" && cs[0].manager == "m"));
        let Ok(d) = server_side_apply(
            &b,
            &json!({"data": {"a": "other"}}),
            "n",
            true,
            Scope::Main { with_status: true },
            None,
            "v1",
        ) else {
            panic!("forced apply failed")
        };
        assert_eq!(d["data"], json!({"a": "other"}));
    }
}
