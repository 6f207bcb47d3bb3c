//! `POST /v1/messages/count_tokens` (docs/design.md §12): counted by the route's
//! `anthropic` candidates, in order, the first that answers; a route without one
//! answers 404 rather than a guess (Claude Code then estimates by itself).

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, header};
use http_body_util::{BodyExt, Full};
use sluice_crds::snapshot::Protocol;
use sluice_providers::messages;

use crate::attempt::native::{NativeInput, target};
use crate::billing;
use crate::error::ApiError;
use crate::request::Endpoint;
use crate::server::Gateway;
use crate::server::handle::refuse;

/// Counts the input tokens of a Messages request.
pub async fn count_tokens(gw: Arc<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    match count(&gw, &headers, body).await {
        Ok(r) => r,
        Err(e) => refuse(&headers, Endpoint::Messages, e),
    }
}

async fn count(gw: &Gateway, headers: &HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    billing::authenticate(gw, headers).await?;
    let mut request: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("request body is not valid JSON: {e}")))?;
    let model = match request.get("model") {
        Some(serde_json::Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(ApiError::InvalidRequest("'model' must be a non-empty string".into())),
    };
    let runtime = gw.current.get().ok_or_else(|| ApiError::NotReady("no configuration is loaded yet".into()))?;
    let route = runtime.routes.get(&model).cloned().ok_or_else(|| ApiError::ModelNotFound(model.clone()))?;
    let forwarded: Vec<_> = headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("anthropic-"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let limit = Duration::from_millis(route.cfg.deadline_ms);
    let mut tried = Vec::new();
    for c in route.candidates.iter().filter(|c| c.upstream.cfg.protocol == Protocol::Anthropic) {
        let cfg = &c.upstream.cfg;
        request["model"] = serde_json::Value::String(c.cfg.model.clone());
        let input = NativeInput { model: &c.cfg.model, default_max_tokens: 0, client_body: &[] };
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let native = messages::native(&target(cfg, &input), &body, &forwarded, false, true)
            .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        let uri = match c.upstream.native_uris.get(&cfg.base_url, &native.path) {
            Ok(uri) => uri,
            Err(e) => {
                tried.push(format!("{}: {e}", cfg.name));
                continue;
            }
        };
        let mut call = http::Request::new(Full::new(native.body.clone()));
        *call.method_mut() = Method::POST;
        *call.uri_mut() = uri;
        let h = call.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in native.headers {
            h.insert(name, value);
        }
        if let Some((name, value)) = gw.secrets.header(&cfg.key) {
            h.insert(name, value);
        }
        let answer = match tokio::time::timeout(limit, c.upstream.client.request(call)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tried.push(format!("{}: {}", cfg.name, crate::egress::describe(&e)));
                continue;
            }
            Err(_) => {
                tried.push(format!("{}: no answer within {}ms", cfg.name, limit.as_millis()));
                continue;
            }
        };
        let status = answer.status();
        let body = answer.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        // A client error is the request's: answered as the upstream gave it.
        if status.is_success() || (status.is_client_error() && status.as_u16() != 429) {
            let mut response = (status, body).into_response();
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return Ok(response);
        }
        tried.push(format!("{}: {status}", cfg.name));
    }
    if tried.is_empty() {
        return Err(ApiError::NotServed(format!(
            "count_tokens is served by a route's anthropic candidates, and {model:?} has none"
        )));
    }
    Err(ApiError::UpstreamsUnavailable(format!("no candidate of {model:?} counted the tokens: {}", tried.join("; "))))
}
