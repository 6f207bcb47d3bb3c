//! Answering the client once the dispatch is decided: the whole body, a stream relayed
//! as it arrives, or the error; then the request is counted and its reservation settled.

use std::sync::Arc;
use std::time::Instant;

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;

use crate::attempt::outcome::Outcome;
use crate::billing::{Held, settle};
use crate::config::Route;
use crate::error::ApiError;
use crate::headers::{X_SLUICE_ATTEMPTS, X_SLUICE_FAILOVER, X_SLUICE_UPSTREAM};
use crate::relay::sse::Usage;
use crate::relay::{self, StreamEnd};
use crate::request::{ClientRequest, Endpoint};
use crate::route::{self, Dispatched, Failed};
use crate::server::Gateway;

/// How long the end of a stream waits for its settlement before sending the last event.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn count_tokens(route: &Route, usage: Option<Usage>) {
    if let Some(u) = usage {
        route.metrics.input_tokens.inc_by(u.prompt_tokens);
        route.metrics.output_tokens.inc_by(u.completion_tokens);
    }
}

pub fn count_request(gw: &Gateway, route: &Route, status: StatusCode, started: Instant) {
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

pub async fn answer(gw: &Gateway, route: &Route, req: &ClientRequest, d: Dispatched, reservation: Option<Held>, started: Instant) -> Response {
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

pub fn stream_answer(gw: &Arc<Gateway>, route: Arc<Route>, req: &ClientRequest, d: Dispatched, reservation: Option<Held>, started: Instant) -> Response {
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
        route::walk::record_attempt(&upstream, &gw2.settings, &gw2.sli, outcome, trial, None, Some(first_byte));
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

pub async fn failure(gw: &Gateway, route: &Route, f: Failed, reservation: Option<Held>, started: Instant) -> Response {
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
