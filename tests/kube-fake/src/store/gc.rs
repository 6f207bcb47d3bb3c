//! Deletion (finalizers, propagation) and owner-reference garbage collection.

use serde_json::{Value, json};

use super::{Key, Propagation, Store, finalizers};
use crate::resources::{self, CRD_GVR, NAMESPACE_GVR, ResourceType};
use crate::util::{self, meta_mut, meta_str};

impl Store {
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

    pub(super) fn orphan_dependents(&mut self, uid: &str) {
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

    pub(super) fn after_removal(&mut self, key: &Key, removed: &Value, propagation: Propagation) {
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
    pub(super) fn check_owners(&mut self, key: &Key) {
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
