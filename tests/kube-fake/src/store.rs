//! The object store: objects by `(group/version/resource, namespace, name)`, the global
//! resourceVersion counter, the watch history and one broadcast channel per resource,
//! and the write path every mutation goes through (identity, status subresource rules,
//! validation, managedFields, generation, no-op detection, finalizers, garbage collection).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::merge::{self, Scope};
use crate::resources::{self, CRD_GVR, NAMESPACE_GVR, ResourceType};
use crate::util::{self, meta_mut, meta_str};
use crate::validate::{self, FieldError};

/// `(group/version/resource, namespace, name)`; the namespace is `""` for cluster-scoped objects.
pub type Key = (String, String, String);

/// A watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventType {
    #[serde(rename = "ADDED")]
    Added,
    #[serde(rename = "MODIFIED")]
    Modified,
    #[serde(rename = "DELETED")]
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and broadcast to watchers.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub gvr: String,
    pub rv: u64,
    pub type_: EventType,
    pub object: Value,
    /// The object before a MODIFIED (for label-selector transitions).
    pub old: Option<Value>,
}

/// `fieldValidation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

/// How one write is made.
#[derive(Clone, Debug)]
pub struct WriteOpts {
    pub scope: Scope,
    pub manager: String,
    /// managedFields were already computed (server-side apply).
    pub apply: bool,
    pub field_validation: FieldValidation,
    pub dry_run: bool,
}

/// A successful write.
#[derive(Clone, Debug)]
pub struct Written {
    pub object: Value,
    pub warnings: Vec<String>,
    /// Whether the object was created (201) rather than updated.
    pub created: bool,
}

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

pub struct Store {
    objects: BTreeMap<Key, Value>,
    uids: HashMap<String, Key>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    pub history_limit: usize,
    /// Changes with a resourceVersion at or below this are no longer in the history.
    compacted: u64,
    channels: HashMap<String, broadcast::Sender<Arc<Change>>>,
    types: Vec<ResourceType>,
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

fn name_errors(rt: &ResourceType, name: &str) -> Vec<FieldError> {
    let v = Value::String(name.to_string());
    let bad = |msg: &str| vec![FieldError::invalid("metadata.name", &v, msg)];
    if name.is_empty() {
        return vec![FieldError::required("metadata.name", "name or generateName is required")];
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") if !is_label(name) => bad(LABEL_MSG),
        ("", "services") if !(is_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase())) => bad(DNS1035_MSG),
        ("rbac.authorization.k8s.io", _) | ("", "events") | ("events.k8s.io", _) => {
            if name.contains('/') || name.contains('%') || name == "." || name == ".." {
                bad("may not contain '/' or '%'")
            } else {
                Vec::new()
            }
        }
        _ if !is_subdomain(name) => bad(SUBDOMAIN_MSG),
        _ => Vec::new(),
    }
}

/// The object without `metadata` and `status` (what `generation` tracks).
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Value::Object(m) = &mut v {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

/// `v` without `metadata.resourceVersion` (for no-op detection).
fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

fn finalizers(v: &Value) -> Vec<String> {
    v["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        let mut s = Self {
            objects: BTreeMap::new(),
            uids: HashMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_limit: 10_000,
            compacted: 0,
            channels: HashMap::new(),
            types: resources::builtins(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            s.ensure_namespace(ns);
        }
        s
    }

    /// Every served resource type (built-ins, then CRD versions).
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    fn refresh_types(&mut self) {
        let mut types = resources::builtins();
        for ((gvr, _, _), crd) in &self.objects {
            if gvr == CRD_GVR {
                types.extend(resources::from_crd(crd));
            }
        }
        self.types = types;
    }

    /// Finds a type by group, version and plural.
    pub fn find_type(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural).cloned()
    }

    /// Finds a type by `apiVersion` and `kind` (for owner references).
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<ResourceType> {
        self.types.iter().find(|t| t.api_version() == api_version && t.kind == kind).cloned()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Objects of one resource, optionally in one namespace, in key order.
    pub fn list(&self, gvr: &str, ns: Option<&str>) -> Vec<&Value> {
        let start = (gvr.to_string(), ns.unwrap_or_default().to_string(), String::new());
        self.objects
            .range(start..)
            .take_while(|((g, n, _), _)| g == gvr && ns.is_none_or(|ns| n == ns))
            .map(|(_, v)| v)
            .collect()
    }

    /// Every object (for dumps).
    pub fn all(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }

    // ---- changes and watches ---------------------------------------------------------

    fn emit(&mut self, gvr: &str, type_: EventType, object: Value, old: Option<Value>) {
        let change = Arc::new(Change { gvr: gvr.to_string(), rv: self.rv, type_, object, old });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.rv;
            }
        }
        if let Some(tx) = self.channels.get(gvr) {
            // No receivers is fine.
            let _ = tx.send(change);
        }
    }

    /// Forgets the whole watch history: a watch from any earlier resourceVersion gets 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// The changes of `gvr` after `since` (`None`: none) and a receiver for later ones.
    /// `Err((since, oldest))` when `since` is older than the history.
    #[allow(clippy::type_complexity)]
    pub fn subscribe(
        &mut self,
        gvr: &str,
        since: Option<u64>,
    ) -> Result<(Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>), (u64, u64)> {
        let mut replay = Vec::new();
        if let Some(since) = since {
            if since < self.compacted {
                return Err((since, self.compacted + 1));
            }
            replay = self.history.iter().filter(|c| c.rv > since && c.gvr == gvr).cloned().collect();
        }
        let rx = self.channels.entry(gvr.to_string()).or_insert_with(|| broadcast::channel(4096).0).subscribe();
        Ok((replay, rx))
    }

    // ---- raw puts and removals -------------------------------------------------------

    fn put(&mut self, key: Key, mut obj: Value) -> Value {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let old = self.objects.insert(key.clone(), obj.clone());
        let uid = meta_str(&obj, "uid").to_string();
        if !uid.is_empty() {
            self.uids.insert(uid, key.clone());
        }
        let type_ = if old.is_some() { EventType::Modified } else { EventType::Added };
        self.emit(&key.0, type_, obj.clone(), old);
        if key.0 == CRD_GVR {
            self.refresh_types();
        }
        obj
    }

    fn remove(&mut self, key: &Key) -> Option<Value> {
        let prev = self.objects.remove(key)?;
        self.uids.remove(meta_str(&prev, "uid"));
        self.rv += 1;
        let mut obj = prev.clone();
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        self.emit(&key.0, EventType::Deleted, obj.clone(), Some(prev));
        if key.0 == CRD_GVR {
            self.refresh_types();
        }
        Some(obj)
    }

    /// Creates namespace `ns` if it does not exist.
    pub fn ensure_namespace(&mut self, ns: &str) {
        let key = (NAMESPACE_GVR.to_string(), String::new(), ns.to_string());
        if ns.is_empty() || self.objects.contains_key(&key) {
            return;
        }
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "uid": util::uuid(),
                "creationTimestamp": util::now(),
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        self.put(key, obj);
    }

    // ---- the write path --------------------------------------------------------------

    /// Per-kind defaulting the real API server (or its controllers) would do.
    fn kind_defaults(&self, rt: &ResourceType, obj: &mut Value) {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "secrets") => {
                if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
                    let data = obj.as_object_mut().map(|m| m.entry("data").or_insert_with(|| json!({})));
                    if let Some(Value::Object(data)) = data {
                        for (k, v) in sd {
                            data.insert(k, Value::String(util::base64(v.as_str().unwrap_or_default().as_bytes())));
                        }
                    }
                }
                if obj.get("type").is_none() {
                    obj["type"] = json!("Opaque");
                }
            }
            ("", "namespaces") => {
                if obj["spec"]["finalizers"].is_null() {
                    obj["spec"] = json!({"finalizers": ["kubernetes"]});
                }
                if obj["status"]["phase"].is_null() {
                    obj["status"] = json!({"phase": "Active"});
                }
                let name = meta_str(obj, "name").to_string();
                let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
                if let Value::Object(l) = labels {
                    l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let storage: Vec<Value> = obj["spec"]["versions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|v| v["storage"] == json!(true))
                    .map(|v| v["name"].clone())
                    .collect();
                if obj["status"]["conditions"].is_array() {
                    // Established once; later writes keep the conditions (and their times).
                    obj["status"]["acceptedNames"] = obj["spec"]["names"].clone();
                    obj["status"]["storedVersions"] = json!(storage);
                    return;
                }
                let now = util::now();
                let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
                obj["status"] = json!({
                    "acceptedNames": obj["spec"]["names"].clone(),
                    "conditions": [
                        cond("NamesAccepted", "NoConflicts", "no conflicts found"),
                        cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                    ],
                    "storedVersions": storage,
                });
            }
            _ => {}
        }
    }

    /// Writes `new` (a create when `old` is `None`, else an update of `old`).
    pub fn commit(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        old: Option<&Value>,
        mut new: Value,
        opts: &WriteOpts,
    ) -> Result<Written, ApiError> {
        let name = meta_str(&new, "name").to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request("the body of the request must be an object"));
        }
        // Optimistic concurrency.
        if let Some(old) = old {
            let want = meta_str(&new, "resourceVersion");
            if !want.is_empty() && want != meta_str(old, "resourceVersion") {
                return Err(ApiError::modified(rt, &name));
            }
        }
        // The status subresource: each side writes only its part.
        if rt.status_subresource {
            match (opts.scope, old) {
                (Scope::Status, Some(old)) => {
                    let status = new.get("status").cloned();
                    let managed = new["metadata"].get("managedFields").cloned();
                    let mut next = old.clone();
                    match status {
                        Some(s) => next["status"] = s,
                        None => {
                            if let Some(m) = next.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                    if opts.apply
                        && let Some(mf) = managed
                    {
                        meta_mut(&mut next).insert("managedFields".into(), mf);
                    }
                    new = next;
                }
                (Scope::Status, None) => return Err(ApiError::not_found(rt, &name)),
                (Scope::Main { .. }, Some(old)) => match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                },
                (Scope::Main { .. }, None) => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        // Identity.
        new["apiVersion"] = Value::String(rt.api_version());
        new["kind"] = Value::String(rt.kind.clone());
        {
            let meta = meta_mut(&mut new);
            meta.insert("name".into(), Value::String(name.clone()));
            if rt.namespaced {
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            } else {
                meta.remove("namespace");
            }
            meta.remove("selfLink");
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
                match old.and_then(|o| o["metadata"].get(f)) {
                    Some(v) => {
                        meta.insert(f.into(), v.clone());
                    }
                    None => {
                        meta.remove(f);
                    }
                }
            }
            if old.is_none() {
                meta.insert("uid".into(), Value::String(util::uuid()));
                meta.insert("creationTimestamp".into(), Value::String(util::now()));
            }
            if meta.get("labels").is_some_and(|l| l.as_object().is_some_and(Map::is_empty)) {
                meta.remove("labels");
            }
            if meta.get("finalizers").is_some_and(|l| l.as_array().is_some_and(Vec::is_empty) || l.is_null()) {
                meta.remove("finalizers");
            }
        }
        self.kind_defaults(rt, &mut new);
        // Validation.
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        if old.is_none() {
            errors.extend(name_errors(rt, &name));
        }
        let schema = rt.crd.as_ref().and_then(|c| c.schema.as_ref());
        if let Some(schema) = schema {
            let out = validate::custom_resource(schema, &mut new, old);
            errors.extend(out.errors);
            if !out.unknown_fields.is_empty() {
                match opts.field_validation {
                    FieldValidation::Strict => {
                        let list: Vec<String> =
                            out.unknown_fields.iter().map(|f| format!("unknown field \"{f}\"")).collect();
                        return Err(ApiError::bad_request(format!(
                            "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                            list.join(", "),
                            kind = rt.kind,
                            v = rt.version
                        )));
                    }
                    FieldValidation::Warn => {
                        warnings.extend(out.unknown_fields.iter().map(|f| format!("unknown field \"{f}\"")))
                    }
                    FieldValidation::Ignore => {}
                }
            }
        }
        if let Some(old) = old
            && old["metadata"].get("deletionTimestamp").is_some()
        {
            let before = finalizers(old);
            let added: Vec<String> = finalizers(&new).into_iter().filter(|f| !before.contains(f)).collect();
            if !added.is_empty() {
                errors.push(FieldError::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    )
                    .replace('[', "[]string{")
                    .replace(']', "}"),
                ));
            }
        }
        if rt.plural == "customresourcedefinitions" && rt.group == "apiextensions.k8s.io" {
            let want = format!(
                "{}.{}",
                new["spec"]["names"]["plural"].as_str().unwrap_or_default(),
                new["spec"]["group"].as_str().unwrap_or_default()
            );
            if name != want {
                errors.push(FieldError::invalid(
                    "metadata.name",
                    &Value::String(name.clone()),
                    "must be spec.names.plural+\".\"+spec.group",
                ));
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        // Field ownership for non-apply writes.
        let track_scope = match opts.scope {
            Scope::Status => Scope::Status,
            Scope::Main { .. } => Scope::Main { with_status: !rt.status_subresource },
        };
        if !opts.apply {
            merge::record_update(old, &mut new, &opts.manager, track_scope, schema, &rt.api_version());
        }
        // Generation.
        let generation = match old {
            None => 1,
            Some(old) => {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
                if spec_part(old) != spec_part(&new) { g + 1 } else { g }
            }
        };
        meta_mut(&mut new).insert("generation".into(), json!(generation));
        // No-op writes change nothing and notify nobody.
        if let Some(old) = old
            && without_rv(old) == without_rv(&new)
        {
            return Ok(Written { object: old.clone(), warnings, created: false });
        }
        if opts.dry_run {
            return Ok(Written { object: new, warnings, created: old.is_none() });
        }
        let key = (rt.gvr(), if rt.namespaced { ns.to_string() } else { String::new() }, name);
        if rt.namespaced {
            self.ensure_namespace(ns);
        }
        let stored = self.put(key.clone(), new);
        // A finished deletion: the last finalizer is gone.
        if stored["metadata"].get("deletionTimestamp").is_some() && finalizers(&stored).is_empty() {
            let removed = self.remove(&key).unwrap_or(stored);
            self.after_removal(&key, &removed, Propagation::Background);
            return Ok(Written { object: removed, warnings, created: false });
        }
        self.check_owners(&key);
        let object = self.objects.get(&key).cloned().unwrap_or(stored);
        Ok(Written { object, warnings, created: old.is_none() })
    }

    // ---- deletion and garbage collection ---------------------------------------------

    /// Deletes `key`: marks it when finalizers remain, else removes it and collects
    /// garbage. Returns the object as last seen and whether it is gone.
    pub fn delete(&mut self, key: &Key, propagation: Propagation, dry_run: bool) -> Option<(Value, bool)> {
        let obj = self.objects.get(key)?.clone();
        if obj["metadata"].get("deletionTimestamp").is_some() {
            return Some((obj, false));
        }
        let pending = !finalizers(&obj).is_empty();
        if dry_run {
            return Some((obj, !pending));
        }
        if propagation == Propagation::Orphan {
            // The real server adds the `orphan` finalizer and lets the garbage collector
            // strip the references; the fake strips them right away.
            self.orphan_dependents(meta_str(&obj, "uid"));
        }
        if pending {
            let mut marked = obj.clone();
            let meta = meta_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), Value::String(util::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            if let Some(g) = meta.get("generation").and_then(Value::as_i64) {
                meta.insert("generation".into(), json!(g + 1));
            }
            let stored = self.put(key.clone(), marked);
            return Some((stored, false));
        }
        let removed = self.remove(key)?;
        self.after_removal(key, &removed, propagation);
        Some((removed, true))
    }

    fn orphan_dependents(&mut self, uid: &str) {
        if uid.is_empty() {
            return;
        }
        let deps: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, o)| owner_uids(o).iter().any(|u| u == uid))
            .map(|(k, _)| k.clone())
            .collect();
        for k in deps {
            if let Some(mut o) = self.objects.get(&k).cloned() {
                strip_owner_refs(&mut o, |r| r["uid"].as_str() != Some(uid));
                self.put(k, o);
            }
        }
    }

    fn after_removal(&mut self, key: &Key, removed: &Value, propagation: Propagation) {
        if key.0 == NAMESPACE_GVR {
            let inside: Vec<Key> = self.objects.keys().filter(|k| k.1 == key.2).cloned().collect();
            for k in inside {
                self.delete(&k, Propagation::Background, false);
            }
        }
        if key.0 == CRD_GVR {
            let gvrs: Vec<String> = resources::from_crd(removed).iter().map(ResourceType::gvr).collect();
            let objs: Vec<Key> = self.objects.keys().filter(|k| gvrs.contains(&k.0)).cloned().collect();
            for k in objs {
                if let Some(o) = self.remove(&k) {
                    self.after_removal(&k, &o, Propagation::Background);
                }
            }
        }
        let uid = meta_str(removed, "uid").to_string();
        if uid.is_empty() {
            return;
        }
        if propagation == Propagation::Orphan {
            self.orphan_dependents(&uid);
            return;
        }
        let deps: Vec<Key> =
            self.objects.iter().filter(|(_, o)| owner_uids(o).contains(&uid)).map(|(k, _)| k.clone()).collect();
        for k in deps {
            self.check_owners(&k);
        }
    }

    fn owner_exists(&self, uid: &str, dependent_ns: &str) -> bool {
        self.uids.get(uid).is_some_and(|k| k.1.is_empty() || k.1 == dependent_ns)
    }

    /// The garbage collector's view of one object: deleted when none of its owners
    /// exist, stripped of the references to absent owners when some do.
    fn check_owners(&mut self, key: &Key) {
        let Some(obj) = self.objects.get(key) else { return };
        let uids = owner_uids(obj);
        if uids.is_empty() {
            return;
        }
        let present: Vec<&String> = uids.iter().filter(|u| self.owner_exists(u, &key.1)).collect();
        if present.len() == uids.len() {
            return;
        }
        if present.is_empty() {
            self.delete(key, Propagation::Background, false);
        } else {
            let keep: Vec<String> = present.into_iter().cloned().collect();
            let mut o = obj.clone();
            strip_owner_refs(&mut o, |r| keep.iter().any(|u| r["uid"].as_str() == Some(u)));
            self.put(key.clone(), o);
        }
    }
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(str::to_string))
        .collect()
}

fn strip_owner_refs(obj: &mut Value, keep: impl Fn(&Value) -> bool) {
    let meta = meta_mut(obj);
    let refs: Vec<Value> = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| keep(r))
        .cloned()
        .collect();
    if refs.is_empty() {
        meta.remove("ownerReferences");
    } else {
        meta.insert("ownerReferences".into(), Value::Array(refs));
    }
}
