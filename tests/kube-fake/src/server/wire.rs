//! What goes over the wire: JSON and text responses, content negotiation, query
//! parameters and request bodies.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::Key;
use crate::table;

pub(super) fn respond(code: u16, body: &Value, warnings: &[String]) -> Response {
    let mut resp = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

pub(super) fn fail(e: &ApiError) -> Response {
    respond(e.code, &e.status(), &[])
}

pub(super) fn text(code: u16, body: &str) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// What representation the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// The object as stored.
    Json,
    /// A `Table` for `kubectl get`.
    Table,
    /// `PartialObjectMetadata`.
    Metadata,
}

pub(super) fn want(headers: &HeaderMap) -> Want {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    // The first acceptable media type wins, as in the API server's negotiation.
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=Table") {
            return Want::Table;
        }
        if p.contains("as=PartialObjectMetadata") {
            return Want::Metadata;
        }
        if p.starts_with("application/json") || p.starts_with("*/*") || p.starts_with("application/yaml") {
            return Want::Json;
        }
    }
    Want::Json
}

pub(super) fn header_str(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

pub(super) fn q<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

pub(super) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    if body.starts_with(b"k8s\0") {
        return crate::proto::decode(body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "kube-fake decodes application/vnd.kubernetes.protobuf only for v1 Namespace, ConfigMap, Secret and ServiceAccount ({e}); send JSON or YAML, e.g. `kubectl create -f` / `kubectl apply -f`"
            ))
        });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice::<Value>(body))
        .map_err(|e| ApiError::bad_request(format!("couldn't decode the request body: {e}")))
}

// ---- discovery ---------------------------------------------------------------------------

pub(super) fn key_of(rt: &ResourceType, ns: &str, name: &str) -> Key {
    (rt.gvr(), if rt.namespaced { ns.to_string() } else { String::new() }, name.to_string())
}

pub(super) fn render(rt: &ResourceType, obj: &Value, want: Want, query: &[(String, String)], rv: u64) -> Value {
    match want {
        Want::Json => obj.clone(),
        Want::Metadata => table::partial_metadata(obj),
        Want::Table => table::table(rt, &[obj], q(query, "includeObject").unwrap_or_default(), &rv.to_string()),
    }
}
