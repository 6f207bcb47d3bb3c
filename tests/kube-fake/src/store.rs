//! The object store: objects by `(group/version/resource, namespace, name)`, the global
//! resourceVersion counter, the watch history and one broadcast channel per resource,
//! and the write path every mutation goes through (identity, status subresource rules,
//! validation, managedFields, generation, no-op detection, finalizers, garbage collection).
//!
//! Here: the types, reads, the watch history and subscriptions; [`write`] is the write
//! path ([`Store::commit`]), [`gc`] deletion and garbage collection ([`Store::delete`]),
//! [`names`] the name rules.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::merge::Scope;
use crate::resources::{self, CRD_GVR, NAMESPACE_GVR, ResourceType};
use crate::util::{self, meta_mut, meta_str};

mod gc;
mod names;
mod write;

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
}
