//! Writes with a full body: POST (create) and PUT (update), and the checks and options
//! every write shares.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};

use super::wire::{Want, decode, key_of, q, render, respond};
use super::{Shared, lock};
use crate::error::ApiError;
use crate::log::RequestRecord;
use crate::merge::Scope;
use crate::resources::ResourceType;
use crate::store::{FieldValidation, WriteOpts};
use crate::util::{self, meta_mut, meta_str};

pub(super) fn write_opts(
    rt: &ResourceType,
    info: &RequestRecord,
    query: &[(String, String)],
    scope: Scope,
    apply: bool,
) -> WriteOpts {
    let _ = rt;
    WriteOpts {
        scope,
        manager: manager(query, info),
        apply,
        field_validation: field_validation(query),
        dry_run: q(query, "dryRun").is_some_and(|d| d == "All"),
    }
}

fn field_validation(query: &[(String, String)]) -> FieldValidation {
    match q(query, "fieldValidation") {
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        _ => FieldValidation::Warn,
    }
}

fn manager(query: &[(String, String)], info: &RequestRecord) -> String {
    match q(query, "fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => {
            let ua = info.user_agent.split('/').next().unwrap_or_default();
            if ua.is_empty() { "unknown".into() } else { ua.to_string() }
        }
    }
}

/// Checks `apiVersion`/`kind` of a body against the URL (defaulting them when missing).
pub(super) fn check_type(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request was in an unknown format"));
    }
    let av = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    if !av.is_empty() && av != rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if !kind.is_empty() && kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    obj["apiVersion"] = json!(rt.api_version());
    obj["kind"] = json!(rt.kind);
    Ok(())
}

pub(super) fn check_namespace(rt: &ResourceType, ns: &str, obj: &Value) -> Result<(), ApiError> {
    let body_ns = meta_str(obj, "namespace");
    if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

pub(super) fn created_or_ok(created: bool) -> u16 {
    if created { 201 } else { 200 }
}

pub(super) fn create(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    body: &Bytes,
    want: Want,
) -> Result<Response, ApiError> {
    if rt.namespaced && ns.is_empty() {
        return Err(ApiError::no_such_path());
    }
    let mut obj = decode(body)?;
    check_type(rt, &mut obj)?;
    check_namespace(rt, ns, &obj)?;
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let generate = meta_str(&obj, "generateName").to_string();
        if !generate.is_empty() {
            name = format!("{generate}{}", util::random_suffix(5));
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
    }
    let mut store = lock(&shared.store);
    if !name.is_empty() && store.get(&key_of(rt, ns, &name)).is_some() {
        return Err(ApiError::already_exists(rt, &name));
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    let opts = write_opts(rt, info, query, Scope::Main { with_status: !rt.status_subresource }, false);
    let w = store.commit(rt, ns, None, obj, &opts)?;
    let rv = store.resource_version();
    Ok(respond(created_or_ok(true), &render(rt, &w.object, want, query, rv), &w.warnings))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn update(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    body: &Bytes,
    scope: Scope,
    want: Want,
) -> Result<Response, ApiError> {
    let mut obj = decode(body)?;
    check_type(rt, &mut obj)?;
    check_namespace(rt, ns, &obj)?;
    let name = info.name.as_str();
    let body_name = meta_str(&obj, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    let mut store = lock(&shared.store);
    let old = store.get(&key_of(rt, ns, name)).cloned().ok_or_else(|| ApiError::not_found(rt, name))?;
    let opts = write_opts(rt, info, query, scope, false);
    let w = store.commit(rt, ns, Some(&old), obj, &opts)?;
    let rv = store.resource_version();
    Ok(respond(200, &render(rt, &w.object, want, query, rv), &w.warnings))
}
