//! The request path of the OpenAI endpoints: authenticate, validate, reserve, dispatch,
//! answer (or relay the stream), settle, count.

use std::sync::Arc;
use std::time::Instant;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use sluice_ledger::{AccountRef, LedgerError, Reservation, format_usd};

use crate::app::{AuthMode, Gateway};
use crate::config::Route;
use crate::dispatch::{self, DispatchCtx, Dispatched, Failed};
use crate::error::ApiError;
use crate::headers::{RequestId, X_REQUEST_ID, X_SLUICE_ATTEMPTS, X_SLUICE_FAILOVER, X_SLUICE_UPSTREAM};
use crate::outcome::Outcome;
use crate::relay::{self, StreamEnd};
use crate::request::{ClientRequest, Endpoint};
use crate::sse::Usage;

/// How long the end of a stream waits for its settlement before sending the last event.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Handles one OpenAI request end to end.
pub async fn handle(gw: Arc<Gateway>, endpoint: Endpoint, headers: HeaderMap, body: Bytes) -> Response {
    let request_id = RequestId::of(&headers);
    let response = match serve(&gw, endpoint, &headers, body, &request_id).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    with_request_id(response, &request_id)
}

/// Answers an error found before [`handle`] could run (e.g. a body over the limit),
/// with the request id echoed or made like every other answer.
pub fn refuse(headers: &HeaderMap, error: ApiError) -> Response {
    with_request_id(error.into_response(), &RequestId::of(headers))
}

fn with_request_id(mut response: Response, request_id: &RequestId) -> Response {
    response.headers_mut().insert(X_REQUEST_ID, request_id.header());
    response
}

async fn serve(gw: &Arc<Gateway>, endpoint: Endpoint, headers: &HeaderMap, body: Bytes, request_id: &RequestId) -> Result<Response, ApiError> {
    let started = Instant::now();
    let account = authenticate(gw, headers).await?;
    if body.len() > gw.max_body {
        return Err(ApiError::RequestTooLarge(gw.max_body));
    }
    let req = ClientRequest::parse(endpoint, &body)?;
    let runtime = gw.current.get().ok_or_else(|| ApiError::NotReady("no configuration is loaded yet".into()))?;
    let route = runtime.routes.get(&req.model).cloned().ok_or_else(|| ApiError::ModelNotFound(req.model.clone()))?;
    let reservation = match &account {
        Some(a) => match reserve(gw, &route, &req, a, request_id).await {
            Ok(r) => r,
            Err(e) => {
                // The route is known: a refused request (402) is one of its answers.
                count_request(gw, &route, e.status(), started);
                return Err(e);
            }
        },
        None => None,
    };
    let ctx = DispatchCtx { secrets: &gw.secrets, settings: &gw.settings, metrics: &gw.metrics, request_id, sli: &gw.sli };
    match dispatch::dispatch(&ctx, &route, &req).await {
        Ok(d) if req.stream => Ok(stream_answer(gw, route.clone(), &req, d, reservation, started)),
        Ok(d) => Ok(answer(gw, &route, &req, d, reservation, started).await),
        Err(f) => Ok(failure(gw, &route, f, reservation, started).await),
    }
}

/// The account of the request's API key (`None` with `--auth none`).
pub async fn authenticate(gw: &Gateway, headers: &HeaderMap) -> Result<Option<AccountRef>, ApiError> {
    if gw.auth == AuthMode::None {
        return Ok(None);
    }
    let Some(ledger) = &gw.ledger else {
        return Err(ApiError::NotReady("auth is keys but no ledger is configured".into()));
    };
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ApiError::InvalidApiKey("missing API key: send Authorization: Bearer sk-sluice-…".into()))?;
    match ledger.authenticate(key).await {
        Ok(Some(account)) => Ok(Some(account)),
        Ok(None) => Err(ApiError::InvalidApiKey("incorrect API key provided".into())),
        Err(e) => Err(ApiError::NotReady(format!("the ledger is unreachable: {e}"))),
    }
}

/// Reserves the most the request can cost on any candidate (docs/design.md §5).
async fn reserve(gw: &Gateway, route: &Route, req: &ClientRequest, account: &AccountRef, request_id: &RequestId) -> Result<Option<Held>, ApiError> {
    let output = req.reserved_output(route.cfg.default_max_tokens);
    let estimate = route
        .candidates
        .iter()
        .filter_map(|c| c.cfg.price)
        .map(|p| p.cost_nanos(req.input_bound, output))
        .max()
        .unwrap_or(0);
    if estimate == 0 {
        return Ok(None);
    }
    let Some(ledger) = &gw.ledger else { return Ok(None) };
    let estimate = i64::try_from(estimate).unwrap_or(i64::MAX);
    let (ledger, ttl, account_id, rid) = (ledger.clone(), gw.reservation_ttl, account.id, request_id.as_str().to_string());
    // Ledger work runs to completion even if the client goes away: a transaction
    // cancelled half way leaves its pooled connection unusable (sqlx's `begin` is not
    // cancel-safe), which on SQLite stops all billing. A reservation nobody waits for
    // any more is dropped by the task's output and released by the ledger.
    let reserved = tokio::spawn(async move { ledger.reserve(account_id, estimate, ttl, &rid).await })
        .await
        .map_err(|e| ApiError::NotReady(format!("the reservation task failed: {e}")))?;
    match reserved {
        Ok(r) => Ok(Some(Held::new(r, &gw.metrics.reservations_open))),
        Err(LedgerError::InsufficientFunds { available_nanos, needed_nanos }) => Err(ApiError::InsufficientQuota(format!(
            "insufficient quota: this request may cost up to ${} ({} input bytes, max_tokens {output}) and account {:?} has ${} available",
            format_usd(needed_nanos),
            req.input_bound,
            account.name,
            format_usd(available_nanos.max(0)),
        ))),
        Err(e) => Err(ApiError::NotReady(format!("the ledger is unreachable: {e}"))),
    }
}

/// A reservation counted in `sluice_reservations_open` for as long as it lives: settled,
/// released, or dropped with a request that nobody waits for any more (a client that
/// went away mid-dispatch; the ledger releases a dropped reservation itself).
struct Held {
    reservation: Reservation,
    _open: OpenGauge,
}

struct OpenGauge(Gauge);

impl Held {
    fn new(reservation: Reservation, open: &Gauge) -> Self {
        open.inc();
        Self { reservation, _open: OpenGauge(open.clone()) }
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Settles with the serving candidate's price, or releases on failure. Also runs at the
/// end of a relayed stream, where nobody could take an error, so errors are logged, not
/// returned.
async fn settle(route: &Route, candidate: Option<usize>, reservation: Option<Held>, usage: Option<Usage>) {
    // `_open` leaves `sluice_reservations_open` when this settlement is done.
    let Some(Held { reservation: r, _open }) = reservation else { return };
    let cand = candidate.and_then(|i| route.candidates.get(i));
    let charge = match (cand, usage) {
        (Some(c), Some(u)) => {
            let cost = c.cfg.price.map_or(0, |p| p.cost_nanos(u.prompt_tokens, u.completion_tokens));
            let usage = sluice_ledger::Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                upstream: Some(c.upstream.cfg.key.clone()),
            };
            Some((i64::try_from(cost).unwrap_or(i64::MAX), usage))
        }
        _ => None,
    };
    let spend = route.metrics.spend.clone();
    // As in `reserve`: the transaction must not be cancelled half way by a client
    // that goes away, so it runs in its own task.
    let task = tokio::spawn(async move {
        let _open = _open;
        match charge {
            None => {
                if let Err(e) = r.release().await {
                    tracing::error!(error = %e, "releasing a reservation failed; the reaper will release it at expiry");
                }
            }
            Some((cost, usage)) => match r.settle(cost, usage).await {
                Ok(s) => {
                    spend.inc_by(u64::try_from(s.charged_nanos).unwrap_or(0));
                }
                Err(e) => tracing::error!(error = %e, "settling a reservation failed; the reaper will release it at expiry"),
            },
        }
    });
    if let Err(e) = task.await {
        tracing::error!(error = %e, "the settlement task failed; the reaper will release the reservation at expiry");
    }
}

fn count_tokens(route: &Route, usage: Option<Usage>) {
    if let Some(u) = usage {
        route.metrics.input_tokens.inc_by(u.prompt_tokens);
        route.metrics.output_tokens.inc_by(u.completion_tokens);
    }
}

fn count_request(gw: &Gateway, route: &Route, status: StatusCode, started: Instant) {
    route.metrics.count(&gw.metrics, status.as_u16());
    route.metrics.duration.observe(started.elapsed().as_secs_f64());
}

fn sluice_headers(headers: &mut HeaderMap, upstream: Option<&HeaderValue>, attempts: u32, failovers: &[Outcome]) {
    if let Some(v) = upstream {
        headers.insert(X_SLUICE_UPSTREAM, v.clone());
    }
    headers.insert(X_SLUICE_ATTEMPTS, HeaderValue::from(attempts));
    if !failovers.is_empty() {
        let labels: Vec<&str> = failovers.iter().map(|o| o.as_str()).collect();
        if let Ok(v) = HeaderValue::from_str(&labels.join(",")) {
            headers.insert(X_SLUICE_FAILOVER, v);
        }
    }
}

#[derive(Deserialize)]
struct UsagePeek {
    #[serde(default)]
    usage: Option<Usage>,
}

async fn answer(gw: &Gateway, route: &Route, req: &ClientRequest, d: Dispatched, reservation: Option<Held>, started: Instant) -> Response {
    let usage = serde_json::from_slice::<UsagePeek>(&d.started.first).ok().and_then(|p| p.usage);
    let usage = usage.or_else(|| (req.endpoint == Endpoint::Embeddings).then(Usage::default));
    settle(route, Some(d.candidate), reservation, usage).await;
    count_tokens(route, usage);
    count_request(gw, route, d.started.status, started);
    gw.sli.request(&route.cfg.key, false, started.elapsed().as_millis() as u64, u64::from(d.attempts.saturating_sub(1)));
    let mut response = (d.started.status, d.started.first.clone()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        d.started.content_type.clone().unwrap_or_else(|| HeaderValue::from_static("application/json")),
    );
    sluice_headers(headers, d.started.upstream.name_header.as_ref(), d.attempts, &d.failovers);
    response
}

fn stream_answer(gw: &Arc<Gateway>, route: Arc<Route>, req: &ClientRequest, d: Dispatched, reservation: Option<Held>, started: Instant) -> Response {
    let Dispatched { started: s, candidate, trial, attempts, failovers } = d;
    let upstream = s.upstream.clone();
    let first_byte_ms = started.elapsed().as_millis() as u64;
    let idle = std::time::Duration::from_millis(upstream.cfg.idle_timeout_ms);
    let status = s.status;
    let gw2 = gw.clone();
    let route2 = route.clone();
    let in_flight = s.in_flight;
    let first_byte = s.first_byte;
    let input_bound = req.input_bound;
    let on_end = move |end: StreamEnd| {
        drop(in_flight);
        // A client that went away says nothing about the upstream.
        let outcome = if end.client_gone { Outcome::Ok } else { end.outcome };
        dispatch::record_attempt(&upstream, &gw2.settings, &gw2.sli, outcome, trial, None, Some(first_byte));
        if end.dropped > 0 {
            gw2.metrics.dropped_events.inc_by(end.dropped);
        }
        gw2.sli.request(&route2.cfg.key, outcome != Outcome::Ok, first_byte_ms, u64::from(attempts.saturating_sub(1)));
        count_request(&gw2, &route2, status, started);
        // Without reported usage, bill what is known: the input bound and one token per
        // content event, never more than was reserved.
        let usage = end.usage.or_else(|| {
            (end.content_events > 0).then_some(Usage { prompt_tokens: input_bound, completion_tokens: end.content_events })
        });
        count_tokens(&route2, usage);
        // The relay awaits this before the last event, so a client that saw `[DONE]` was
        // billed even if the process dies right after. A slow ledger holds `[DONE]` back
        // at most SETTLE_WAIT; the settlement then goes on in the background.
        let settling = tokio::spawn(async move { settle(&route2, Some(candidate), reservation, usage).await });
        async move {
            let _ = tokio::time::timeout(SETTLE_WAIT, settling).await;
        }
    };
    let body = match s.rest {
        Some(rest) => relay::relay(s.first, rest, req.wants_usage, idle, on_end),
        None => {
            tokio::spawn(on_end(StreamEnd { outcome: Outcome::Ok, usage: None, content_events: 0, client_gone: false, dropped: 0 }));
            axum::body::Body::empty()
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let name = route.candidates.get(candidate).and_then(|c| c.upstream.name_header.as_ref());
    sluice_headers(headers, name, attempts, &failovers);
    response
}

async fn failure(gw: &Gateway, route: &Route, f: Failed, reservation: Option<Held>, started: Instant) -> Response {
    settle(route, None, reservation, None).await;
    let status = f.error.status();
    count_request(gw, route, status, started);
    if !status.is_client_error() || matches!(f.error, ApiError::RateLimited { .. }) {
        gw.sli.request(&route.cfg.key, f.error.is_bad(), started.elapsed().as_millis() as u64, u64::from(f.attempts.saturating_sub(1)));
    }
    let mut response = f.error.into_response();
    sluice_headers(response.headers_mut(), None, f.attempts, &f.failovers);
    response
}
