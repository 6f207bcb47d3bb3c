//! The write path: every create, update, patch and apply ends in [`Store::commit`].

use serde_json::{Map, Value, json};

use super::names::name_errors;
use super::{FieldValidation, Propagation, Store, WriteOpts, Written, finalizers};
use crate::error::ApiError;
use crate::merge::{self, Scope};
use crate::resources::ResourceType;
use crate::util::{self, meta_mut, meta_str};
use crate::validate::{self, FieldError};

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

impl Store {
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
}
