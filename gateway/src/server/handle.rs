//! One inference request (any inbound API) from start to end: authenticate, parse, reserve, dispatch over
//! the route's candidates, then answer (which counts the request and settles).

use std::sync::Arc;
use tokio::time::Instant;

use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use sluice_ledger::AccountRef;
use sluice_ledger::limits::{Ask, Standing};

use crate::answer;
use crate::billing::{self, Billing, Held};
use crate::cache::completions::{Lookup, Served};
use crate::cache::{self, key::Scope};
use crate::config::Route;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::headers::{RequestId, X_REQUEST_ID};
use crate::relay;
use crate::request::ClientRequest;
use crate::route;
use crate::server::Gateway;
use crate::telemetry::traces::RequestTrace;

/// Handles one request end to end.
pub async fn handle(gw: Arc<Gateway>, endpoint: Endpoint, headers: HeaderMap, body: Bytes) -> Response {
    let request_id = RequestId::of(&headers);
    let mut standings = Vec::new();
    let mut response = match serve(&gw, endpoint, &headers, body, &request_id, &mut standings).await {
        Ok(r) => r,
        Err(e) => e.respond(endpoint),
    };
    billing::limits::headers(&standings, response.headers_mut());
    with_request_id(response, &request_id)
}

/// Answers an error found before [`handle`] could run (e.g. a body over the limit),
/// in the endpoint's error shape, with the request id echoed or made like every
/// other answer.
pub fn refuse(headers: &HeaderMap, endpoint: Endpoint, error: ApiError) -> Response {
    with_request_id(error.respond(endpoint), &RequestId::of(headers))
}

/// How a request refused before any attempt ends: the route is known, so a refusal
/// (429 over a limit, 402) is one of its answers, and the client's: not an SLI event.
fn refused(endpoint: Endpoint, e: &ApiError) -> answer::Ending {
    answer::Ending {
        api: endpoint,
        status: e.status(),
        slo_bad: None,
        latency_ms: 0,
        attempts: 0,
        candidate: None,
        usage: None,
        resumed: Vec::new(),
    }
}

fn with_request_id(mut response: Response, request_id: &RequestId) -> Response {
    response.headers_mut().insert(X_REQUEST_ID, request_id.header());
    response
}

async fn serve(
    gw: &Arc<Gateway>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Bytes,
    request_id: &RequestId,
    standings: &mut Vec<Standing>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let books = &gw.books;
    let account = billing::authenticate(&gw.billing, headers).await?;
    if body.len() > gw.max_body {
        return Err(ApiError::RequestTooLarge(gw.max_body));
    }
    let req = ClientRequest::parse(endpoint, &body)?.with_headers(headers);
    let runtime = gw.current.get().ok_or_else(|| ApiError::NotReady("no configuration is loaded yet".into()))?;
    let route = runtime.routes.get(&req.model).cloned().ok_or_else(|| ApiError::ModelNotFound(req.model.clone()))?;
    let trace = RequestTrace::start(books.traces.as_ref(), headers, endpoint, &req.model, &route.cfg.name, &body);
    let scope = Scope::of(account.as_ref(), route.cache.shared);
    let plan = (gw.cache.as_ref())
        .filter(|_| endpoint == Endpoint::Embeddings && route.cache.embeddings)
        .and_then(|cache| cache::embeddings::Plan::of(cache, &req, &route, &scope));
    let cached = Lookup::of(gw.cache.as_ref(), &route, &req, &scope, headers);
    // What may be served from the cache is reserved at the cache price too.
    let from_cache = plan.as_ref().map_or(u64::from(cached.is_on()), cache::embeddings::Plan::inputs);
    let ask = billing::ask(&route, &req, from_cache);
    let held = match &account {
        Some(a) => match Box::pin(hold(&gw.billing, &route, &req, a, request_id, ask, standings)).await {
            Ok(held) => held,
            Err(e) => {
                Box::pin(answer::conclude(books, &route, started, refused(endpoint, &e), None, trace)).await;
                return Err(e);
            }
        },
        None => None,
    };
    if let Some(plan) = plan {
        let directive = cache::Directive::of(headers);
        return Box::pin(cache::embeddings::serve(
            books, &route, &req, request_id, plan, directive, held, started, trace,
        ))
        .await;
    }
    if cached.is_on()
        && let Some(hit) = Box::pin(cached.find(&books.metrics, &route, &trace)).await
    {
        let answer = cache::completions::answer(books, &route, &req, hit, Served::Hit, held, started, trace);
        return Ok(Box::pin(answer).await);
    }
    let ctx = gw.dispatch_ctx(request_id, &trace);
    let dispatched = route::dispatch(&ctx, &route, &req).await;
    match dispatched {
        Ok(d) if req.stream => {
            let format = relay::sse::Format::of(endpoint);
            let response = answer::stream_answer(books, route.clone(), &req, d, held, started, trace);
            Ok(cached.keep_stream(&route, format, response))
        }
        Ok(d) => {
            let body = d.started.first.clone();
            Ok(cached.keep_whole(&route, answer::answer(books, &route, &req, d, held, started, trace).await, body))
        }
        Err(f) => {
            let stale = if cached.is_on() { Box::pin(cached.stale(&books.metrics, &route, &f)).await } else { None };
            Ok(match stale {
                Some(entry) => {
                    let served = Served::Stale { attempts: f.attempts };
                    Box::pin(cache::completions::answer(books, &route, &req, entry, served, held, started, trace)).await
                }
                None => Box::pin(answer::failure(books, &route, endpoint, f, held, started, trace)).await,
            })
        }
    }
}

/// Admits the request by its key's and account's limits (docs/design.md §5b), then
/// reserves what it may cost (§5); a refused reservation gives the limits back.
async fn hold(
    billing: &Billing,
    route: &Route,
    req: &ClientRequest,
    account: &AccountRef,
    request_id: &RequestId,
    ask: Ask,
    standings: &mut Vec<Standing>,
) -> Result<Option<Held>, ApiError> {
    let limits = billing::limits::admit(billing, account, ask).await?;
    if let Some(admission) = &limits {
        standings.clone_from(&admission.standings);
    }
    match billing::reserve(billing, route, req, account, request_id, ask).await {
        Ok(reservation) => Ok(Held::of(reservation, limits)),
        Err(e) => {
            if let Some(admission) = limits {
                admission.settle(0, 0);
            }
            Err(e)
        }
    }
}
