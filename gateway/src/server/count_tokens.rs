//! `POST /v1/messages/count_tokens` (docs/design.md §12): counted by the route's
//! candidates that speak Messages (`anthropic`, `vertex-anthropic`, Claude on `bedrock`),
//! each at its own count endpoint, in the order of a walk (docs/design.md §4.1) and
//! failing over as it does; a route without one answers 404 rather than a guess (Claude
//! Code then estimates by itself).
//!
//! Each try is an attempt like any other ([`attempt::run`]): authorised as the
//! upstream's live calls are, bounded by its share of the route's deadline, and booked in
//! the upstream's health and `sluice_upstream_attempts_total`. A count is neither billed
//! nor a request of the route's SLI.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};

use crate::attempt::{self, AttemptSpec, Books, Limits, Started};
use crate::billing;
use crate::config::Route;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::headers::{RequestId, X_SLUICE_ATTEMPTS, X_SLUICE_FAILOVER, X_SLUICE_UPSTREAM};
use crate::outcome::Outcome;
use crate::route::{order, walk};
use crate::server::Gateway;
use crate::server::handle::refuse;
use crate::telemetry::traces::RequestTrace;

/// Counts the input tokens of a Messages request.
pub async fn count_tokens(gw: Arc<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    match count(&gw, &headers, body).await {
        Ok(r) => r,
        Err(e) => refuse(&headers, Endpoint::Messages, e),
    }
}

async fn count(gw: &Gateway, headers: &HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    billing::authenticate(&gw.billing, headers).await?;
    let mut request: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("request body is not valid JSON: {e}")))?;
    let model = match request.get("model") {
        Some(serde_json::Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(ApiError::InvalidRequest("'model' must be a non-empty string".into())),
    };
    let runtime = gw.current.get().ok_or_else(|| ApiError::NotReady("no configuration is loaded yet".into()))?;
    let route = runtime.routes.get(&model).cloned().ok_or_else(|| ApiError::ModelNotFound(model.clone()))?;
    // The candidates that cannot count are left out of the order, as a timed-out one
    // is left out of a walk.
    let excluded: Vec<bool> =
        route.candidates.iter().map(|c| !Endpoint::Messages.native_on(c.upstream.cfg.protocol, &c.cfg.model)).collect();
    if excluded.iter().all(|x| *x) {
        return Err(ApiError::NotServed(format!(
            "count_tokens is served by a route's anthropic, vertex-anthropic and Claude-on-bedrock candidates, \
             and {model:?} has none"
        )));
    }
    let forwarded: Vec<_> = headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("anthropic-"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let request_id = RequestId::of(headers);
    let trace = RequestTrace::default();
    let books = &gw.books;
    let deadline = Instant::now() + Duration::from_millis(route.cfg.deadline_ms);
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::from_rng(&mut rand::rng());
    let picks = order::order(&route, &books.settings, Instant::now(), &excluded, &mut rng);
    let mut trials = walk::HeldTrials::new(&route);
    trials.hold(&picks);
    let mut failed: Vec<(usize, crate::outcome::AttemptError)> = Vec::new();
    for (tried, pick) in picks.iter().enumerate() {
        let Some(c) = route.candidates.get(pick.idx) else { continue };
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        request["model"] = serde_json::Value::String(c.cfg.model.clone());
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        // The candidate's share of the deadline: what is left ÷ candidates not yet tried.
        let untried = u32::try_from(picks.len() - tried).unwrap_or(u32::MAX);
        let limits =
            Limits { first_byte: None, budget: deadline.saturating_duration_since(now) / untried, trial: pick.trial };
        let spec = AttemptSpec::count_tokens(c, &route.cfg, body, &forwarded, limits, &request_id, &trace);
        let result = attempt::run(&c.upstream, spec, books).await;
        // The attempt booked its failure (and gave back its trial slot), or holds both.
        trials.handed_back(pick.idx, pick.trial);
        match result {
            Ok(started) => {
                let failovers: Vec<Outcome> = failed.iter().map(|(_, e)| e.outcome).collect();
                return Ok(answer(books, started, tried + 1, &failovers));
            }
            Err(e) => {
                tracing::warn!(
                    request_id = request_id.as_str(),
                    route = %route.cfg.name,
                    upstream = %c.upstream.cfg.name,
                    reason = e.outcome.as_str(),
                    detail = %e.detail,
                    retryable = e.retryable,
                    "count_tokens attempt failed"
                );
                if !e.retryable {
                    return Err(match e.passthrough {
                        Some(p) => ApiError::Upstream(Box::new(p)),
                        None => ApiError::UpstreamsUnavailable(e.detail),
                    });
                }
                failed.push((pick.idx, e));
            }
        }
    }
    Err(exhausted(&route, &failed, deadline))
}

/// The count a candidate gave, with the `x-sluice-*` headers of any answer: who
/// counted, after how many attempts, and why the others failed over. The attempt is
/// finished here: a whole body has ended.
fn answer(books: &Books, started: Started, attempts: usize, failovers: &[Outcome]) -> Response {
    let Started { status, first, attempt, .. } = started;
    let upstream = attempt.upstream().name_header.clone();
    attempt.finish(Outcome::Ok, books);
    let mut response = (status, first).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(v) = upstream {
        headers.insert(X_SLUICE_UPSTREAM, v);
    }
    headers.insert(X_SLUICE_ATTEMPTS, HeaderValue::from(attempts));
    let labels: Vec<&str> = failovers.iter().map(|o| o.as_str()).collect();
    if let (false, Ok(v)) = (labels.is_empty(), HeaderValue::from_str(&labels.join(","))) {
        headers.insert(X_SLUICE_FAILOVER, v);
    }
    response
}

/// The answer when every candidate that could count failed retryably: as a walk's
/// (504 past the deadline, 429 or 529 when they were all throttling or overloaded,
/// else 503 naming each).
fn exhausted(route: &Route, failed: &[(usize, crate::outcome::AttemptError)], deadline: Instant) -> ApiError {
    let attempts = u32::try_from(failed.len()).unwrap_or(u32::MAX);
    let failovers = failed.iter().map(|(_, e)| e.outcome).collect();
    walk::exhausted(route, attempts, failovers, failed, Vec::new(), deadline).error
}
