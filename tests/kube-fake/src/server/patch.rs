//! PATCH: server-side apply, JSON merge patch, strategic merge patch (built-in kinds
//! only) and JSON patch.

use axum::body::Bytes;
use axum::response::Response;
use http::{HeaderMap, header};
use serde_json::json;

use super::wire::{Want, decode, header_str, key_of, q, render, respond};
use super::write::{check_namespace, check_type, created_or_ok, write_opts};
use super::{Shared, lock};
use crate::error::ApiError;
use crate::log::RequestRecord;
use crate::merge::{self, Ctx, Scope};
use crate::resources::ResourceType;
use crate::util::{meta_mut, meta_str};

#[allow(clippy::too_many_arguments)]
pub(super) fn patch(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    headers: &HeaderMap,
    body: &Bytes,
    scope: Scope,
    want: Want,
) -> Result<Response, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE).split(';').next().unwrap_or_default().trim().to_string();
    let name = info.name.as_str();
    let patch_body = decode(body)?;
    let schema = rt.crd.as_ref().and_then(|c| c.schema.as_ref());
    let mut store = lock(&shared.store);
    let key = key_of(rt, ns, name);
    let old = store.get(&key).cloned();
    if ct == "application/apply-patch+yaml" {
        let mut cfg = patch_body;
        let manager = q(query, "fieldManager").unwrap_or_default().to_string();
        if manager.is_empty() {
            return Err(ApiError::bad_request("PATCH, fieldManager is required for apply requests"));
        }
        if !cfg.is_object() {
            return Err(ApiError::bad_request("the body of an apply request must be an object"));
        }
        if cfg["apiVersion"].as_str().unwrap_or_default().is_empty()
            || cfg["kind"].as_str().unwrap_or_default().is_empty()
        {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: apiVersion and kind must be set in an apply configuration",
                rt.kind, rt.version, rt.kind
            )));
        }
        check_type(rt, &mut cfg)?;
        check_namespace(rt, ns, &cfg)?;
        let body_name = meta_str(&cfg, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let want_rv = meta_str(&cfg, "resourceVersion").to_string();
        let force = q(query, "force").is_some_and(|f| f == "true");
        let mut opts = write_opts(rt, info, query, scope, true);
        opts.manager = manager.clone();
        let track_scope = match scope {
            Scope::Status => Scope::Status,
            Scope::Main { .. } => Scope::Main { with_status: !rt.status_subresource },
        };
        let live = match &old {
            Some(o) => {
                if !want_rv.is_empty() && want_rv != meta_str(o, "resourceVersion") {
                    return Err(ApiError::modified(rt, name));
                }
                o.clone()
            }
            None if scope == Scope::Status => return Err(ApiError::not_found(rt, name)),
            None => {
                let mut skel = json!({"apiVersion": rt.api_version(), "kind": rt.kind, "metadata": {"name": name}});
                if rt.namespaced {
                    skel["metadata"]["namespace"] = json!(ns);
                }
                skel
            }
        };
        let new = merge::server_side_apply(&live, &cfg, &manager, force, track_scope, schema, &rt.api_version()).map_err(|cs| {
            let lines: Vec<String> = cs.iter().map(|c| format!("conflict with \"{}\" using {}: {}", c.manager, c.api_version, c.path)).collect();
            let head = if cs.len() == 1 { "Apply failed with 1 conflict".to_string() } else { format!("Apply failed with {} conflicts", cs.len()) };
            let mut e = ApiError::conflict(rt, name, "");
            e.message = format!("{head}: {}", lines.join("\n"));
            e.details = json!({
                "name": name, "group": rt.group, "kind": rt.plural,
                "causes": cs.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version), "field": c.path})).collect::<Vec<_>>(),
            });
            e
        })?;
        if old.is_none() && rt.namespaced && ns.is_empty() {
            return Err(ApiError::no_such_path());
        }
        let w = store.commit(rt, ns, old.as_ref(), new, &opts)?;
        let rv = store.resource_version();
        return Ok(respond(created_or_ok(w.created), &render(rt, &w.object, want, query, rv), &w.warnings));
    }
    let old = old.ok_or_else(|| ApiError::not_found(rt, name))?;
    let mut candidate = old.clone();
    match ct.as_str() {
        "application/merge-patch+json" => merge::merge_patch(&mut candidate, &patch_body),
        "application/strategic-merge-patch+json" => {
            if rt.is_custom() {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            merge::strategic_merge(&mut candidate, &patch_body, Ctx::root(None));
        }
        "application/json-patch+json" => {
            merge::json_patch(&mut candidate, &patch_body).map_err(|e| ApiError::new(422, "Invalid", e))?;
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
            )));
        }
    }
    // A patch cannot rename, move or retype an object.
    meta_mut(&mut candidate).insert("name".into(), json!(name));
    let opts = write_opts(rt, info, query, scope, false);
    let w = store.commit(rt, ns, Some(&old), candidate, &opts)?;
    let rv = store.resource_version();
    Ok(respond(200, &render(rt, &w.object, want, query, rv), &w.warnings))
}
