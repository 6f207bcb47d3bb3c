//! DELETE of one object (with preconditions) and of a collection.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};

use super::read::Filter;
use super::wire::{decode, key_of, q, respond};
use super::{Shared, lock};
use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::{Key, Propagation};
use crate::util::meta_str;

fn delete_options(query: &[(String, String)], body: &Bytes) -> Result<(Propagation, bool, Value), ApiError> {
    let opts = decode(body)?;
    let policy = opts["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| q(query, "propagationPolicy").map(str::to_string));
    let propagation = match policy.as_deref() {
        Some("Orphan") => Propagation::Orphan,
        Some("Foreground") => Propagation::Foreground,
        _ if opts["orphanDependents"] == json!(true) || q(query, "orphanDependents") == Some("true") => {
            Propagation::Orphan
        }
        _ => Propagation::Background,
    };
    let dry =
        opts["dryRun"].as_array().is_some_and(|d| d.iter().any(|x| x == "All")) || q(query, "dryRun") == Some("All");
    Ok((propagation, dry, opts["preconditions"].clone()))
}

pub(super) fn delete(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    query: &[(String, String)],
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (propagation, dry, pre) = delete_options(query, body)?;
    let mut store = lock(&shared.store);
    let key = key_of(rt, ns, name);
    let current = store.get(&key).cloned().ok_or_else(|| ApiError::not_found(rt, name))?;
    if let Some(uid) = pre["uid"].as_str()
        && uid != meta_str(&current, "uid")
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&current, "uid")
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && rv != meta_str(&current, "resourceVersion")
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&current, "resourceVersion")
            ),
        ));
    }
    let (obj, gone) = store.delete(&key, propagation, dry).ok_or_else(|| ApiError::not_found(rt, name))?;
    if gone && !rt.is_custom() {
        return Ok(respond(
            200,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta_str(&obj, "uid")},
            }),
            &[],
        ));
    }
    Ok(respond(200, &obj, &[]))
}

pub(super) fn delete_collection(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    query: &[(String, String)],
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (propagation, dry, _) = delete_options(query, body)?;
    let filter = Filter::parse(ns, "", query)?;
    let mut store = lock(&shared.store);
    let keys: Vec<Key> = store
        .list(&rt.gvr(), filter.ns.as_deref())
        .into_iter()
        .filter(|o| filter.matches(o))
        .map(|o| key_of(rt, meta_str(o, "namespace"), meta_str(o, "name")))
        .collect();
    let mut items = Vec::new();
    for k in keys {
        if let Some((o, _)) = store.delete(&k, propagation, dry) {
            items.push(o);
        }
    }
    let rv = store.resource_version().to_string();
    Ok(respond(
        200,
        &json!({"apiVersion": rt.api_version(), "kind": rt.list_kind(), "metadata": {"resourceVersion": rv}, "items": items}),
        &[],
    ))
}

// ---- watch -------------------------------------------------------------------------------
