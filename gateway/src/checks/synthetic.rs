//! Synthetic checks (`ModelRoute.spec.synthetic`, docs/design.md §10): every interval,
//! each candidate of the route gets a minimal real completion, sent to it alone (no
//! failover), in its own protocol, through the attempt machinery live traffic uses.
//! The check is written in the inbound API the route's clients speak
//! (`synthetic.api`: Chat Completions, Messages or Responses), so a native candidate
//! is checked on the endpoint those clients reach, and a translated one through the
//! translation they get.
//!
//! A check is an attempt like any other for the upstream: it feeds its health (success
//! ratio, circuit breaker, first-byte times), `sluice_upstream_attempts_total` and the
//! upstream rollups, so a dead backup is demoted before a client needs it. It is not a
//! request: it never counts in `sluice_requests_total`, the route's rollups or an
//! ErrorBudget. It is sent whatever the circuit says; while the circuit is open (or
//! half-open with its slots taken) the check is the upstream's trial
//! ([`Health::check_trial`](crate::health::Health::check_trial)).
//!
//! The check is streamed: its first content event gives a real time to first byte (the
//! first-byte watchdog and the status page need one; a whole answer would only measure
//! the time to the last token), and a silent upstream fails it as `first_byte_timeout`
//! exactly as it fails a streamed request. Each check is counted in
//! `sluice_synthetic_checks_total{route,upstream,outcome}`, stored in the ledger's
//! `synthetic_checks` and billed at the candidate's price to the system account
//! `sluice-synthetic` ([`sluice_ledger::Ledger::record_synthetic`]).
//!
//! One scheduler runs per gateway process, and every process checks: health is per
//! process (docs/design.md §4), so a pod that did not check itself would keep sending
//! clients to a dead backup. The rows name the gateway that ran them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue};
use rand::Rng;
use sluice_crds::model_route::SyntheticApi;
use sluice_crds::snapshot::SyntheticConfig;
use sluice_ledger::{Ledger, SyntheticCheck};

use crate::attempt::{self, AttemptSpec, BodyStream, Books, StreamError};
use crate::config::{Current, Route, UpstreamHandle};
use crate::endpoint::Endpoint;
use crate::headers::{RequestId, X_REQUEST_ID};
use crate::outcome::Outcome;
use crate::relay::IdleWatch;
use crate::relay::sse::{Event, Format, Splitter};
use crate::request::ClientRequest;
use crate::telemetry::metrics::SyntheticLabel;
use crate::telemetry::traces::RequestTrace;
use crate::usage::Usage;

/// How often the scheduler looks for checks that are due.
const TICK: Duration = Duration::from_millis(100);
/// The most of an answer a check reads; a one-token answer is far smaller.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// When one candidate's next check is due.
struct Due {
    interval: Duration,
    next: Instant,
    /// Set while a check runs: a candidate never has two at once.
    running: Arc<AtomicBool>,
}

/// Runs the checks of every route of the `current` config that asks for them until
/// aborted: booked into `books` like any attempt, and kept in `ledger`'s check history
/// as made by `gateway_id`.
pub async fn run(current: &Current, books: &Arc<Books>, ledger: Option<&Ledger>, gateway_id: &str) {
    let mut due: HashMap<(String, String), Due> = HashMap::new();
    // ThreadRng is not Send; jitter needs no cryptographic randomness.
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::from_rng(&mut rand::rng());
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(rt) = current.get() else { continue };
        let now = Instant::now();
        let mut seen = HashSet::new();
        for route in rt.routes.values() {
            let Some(synthetic) = route.cfg.synthetic else { continue };
            let interval = Duration::from_millis(synthetic.interval_ms.max(1));
            for (idx, c) in route.candidates.iter().enumerate() {
                let key = (route.cfg.key.clone(), c.upstream.cfg.key.clone());
                // The first check of a candidate (or after its interval changed) comes
                // at a random point of the interval, so that the candidates of a
                // route, and the pods of a deployment, do not all check at once.
                let first = |rng: &mut rand::rngs::SmallRng| Due {
                    interval,
                    next: now + interval.mul_f64(rng.random_range(0.0..1.0)),
                    running: Arc::new(AtomicBool::new(false)),
                };
                let entry = due.entry(key.clone()).or_insert_with(|| first(&mut rng));
                if entry.interval != interval {
                    // A check still running keeps its flag: no second one meanwhile.
                    *entry = Due { running: entry.running.clone(), ..first(&mut rng) };
                }
                seen.insert(key);
                if now < entry.next {
                    continue;
                }
                entry.next = (entry.next + interval).max(now);
                if entry.running.swap(true, Ordering::AcqRel) {
                    tracing::debug!(route = %route.cfg.name, upstream = %c.upstream.cfg.name, "synthetic check still running; this one is skipped");
                    continue;
                }
                let running = Running(entry.running.clone());
                let (books, ledger, route, id) = (books.clone(), ledger.cloned(), route.clone(), gateway_id.to_owned());
                tokio::spawn(async move {
                    check(&books, ledger, &route, idx, synthetic, id).await;
                    drop(running);
                });
            }
        }
        due.retain(|k, _| seen.contains(k));
    }
}

/// Clears a candidate's `running` flag when its check ends, however it ends.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The endpoint a route's checks are sent through.
pub fn check_endpoint(api: SyntheticApi) -> Endpoint {
    match api {
        SyntheticApi::Chat => Endpoint::Chat,
        SyntheticApi::Messages => Endpoint::Messages,
        SyntheticApi::Responses => Endpoint::Responses,
    }
}

/// The body of a check in `endpoint`'s format: one user message, `max_tokens`, streamed
/// with usage. Responses' smallest `max_output_tokens` is 16 (OpenAI refuses less).
pub fn check_body(endpoint: Endpoint, model: &str, max_tokens: u32) -> Bytes {
    let ping = serde_json::json!([{"role": "user", "content": "ping"}]);
    let body = match endpoint {
        Endpoint::Messages => serde_json::json!({
            "model": model,
            "messages": ping,
            "max_tokens": max_tokens,
            "stream": true,
        }),
        Endpoint::Responses => serde_json::json!({
            "model": model,
            "input": ping,
            "max_output_tokens": max_tokens.max(16),
            "stream": true,
            "store": false,
        }),
        _ => serde_json::json!({
            "model": model,
            "messages": ping,
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
    };
    Bytes::from(body.to_string())
}

/// One check of candidate `idx`: sent, read to its end, recorded everywhere.
async fn check(
    books: &Books,
    ledger: Option<Ledger>,
    route: &Arc<Route>,
    idx: usize,
    synthetic: SyntheticConfig,
    gateway_id: String,
) {
    let Some(c) = route.candidates.get(idx) else { return };
    let up = &c.upstream;
    let began = SystemTime::now();
    let request_id = request_id(&route.cfg.key, &up.cfg.key, began);
    let trial = up.health.check_trial(&up.cfg.circuit_breaker, &books.settings, Instant::now());
    let endpoint = check_endpoint(synthetic.api);
    let body = check_body(endpoint, &c.cfg.model, synthetic.max_tokens);
    // The check is a client request like any other, through the attempt clients get.
    let req = match ClientRequest::parse(endpoint, &body) {
        Ok(req) => req,
        Err(e) => {
            tracing::error!(error = %e, route = %route.cfg.name, "a synthetic check's own body did not parse");
            return;
        }
    };
    let trace = RequestTrace::start(
        books.traces.as_ref(),
        &HeaderMap::new(),
        endpoint,
        &route.cfg.model,
        &route.cfg.name,
        &body,
    );
    let limits = attempt::Limits {
        first_byte: Some(up.health.first_byte_limit(up.cfg.first_byte)),
        // Alone on the route: the whole deadline is this candidate's.
        budget: Duration::from_millis(route.cfg.deadline_ms),
        trial,
    };
    let spec = AttemptSpec::new(c, &route.cfg, &req, limits, &request_id, &trace);
    let read_as = Format::of(endpoint);
    let (outcome, first_byte, usage) = attempt_and_read(books, route, up, spec, read_as, body.len() as u64).await;
    // The gauges are otherwise set when a request orders the candidates: without client
    // traffic they would not show what the checks found.
    let now = Instant::now();
    up.metrics.circuit.set(up.health.circuit(now).gauge());
    up.metrics.effective_weight.set(f64::from(c.cfg.weight) * up.health.success_ratio(&books.settings, now));
    books
        .metrics
        .synthetic_checks
        .get_or_create(&SyntheticLabel { route: route.cfg.name.clone(), upstream: up.cfg.name.clone(), outcome })
        .inc();
    let cost = usage.zip(c.cfg.price).map_or(0, |(u, p)| p.cost_of(&u.metered()));
    trace.end(client_status(outcome), route.served(Some(idx)), usage.as_ref());
    drop(trace);
    let Some(ledger) = ledger else { return };
    let row = SyntheticCheck {
        route: route.cfg.key.clone(),
        upstream: up.cfg.key.clone(),
        gateway_id,
        at: SystemTime::now(),
        outcome: outcome.as_str().to_string(),
        first_byte_ms: first_byte.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        cost_nanos: i64::try_from(cost).unwrap_or(i64::MAX),
    };
    store(ledger, row, &route.cfg.name, &up.cfg.name).await;
}

/// The check's attempt, and its answer read to the end in the format of the inbound API
/// the check was written in (the attempt finished with how the answer ended): the
/// outcome, the first-byte time of an attempt that answered, and what the answer used.
async fn attempt_and_read(
    books: &Books,
    route: &Route,
    up: &Arc<UpstreamHandle>,
    spec: AttemptSpec<'_>,
    format: Format,
    input_bound: u64,
) -> (Outcome, Option<Duration>, Option<Usage>) {
    match attempt::run(up, spec, books).await {
        Err(e) => {
            tracing::warn!(route = %route.cfg.name, upstream = %up.cfg.name, reason = e.outcome.as_str(), detail = %e.detail, "synthetic check failed");
            (e.outcome, None, None)
        }
        Ok(started) => {
            let first_byte = started.attempt.first_byte();
            let read = read_answer(up, format, &started.first, started.rest).await;
            started.attempt.finish(read.outcome, books);
            if read.outcome != Outcome::Ok {
                tracing::warn!(route = %route.cfg.name, upstream = %up.cfg.name, reason = read.outcome.as_str(), "synthetic check broke after its first byte");
            }
            // Without reported usage, what is known: the body's size as the input bound
            // and one token per content event (as a live stream is billed).
            let usage = read
                .usage
                .or_else(|| (read.content_events > 0).then(|| Usage::plain(input_bound, read.content_events)));
            (read.outcome, Some(first_byte), usage)
        }
    }
}

/// The status a client would have seen from a check's outcome: what its span says.
fn client_status(outcome: Outcome) -> u16 {
    match outcome {
        Outcome::Ok => 200,
        Outcome::Http4xx => 400,
        Outcome::Http429 => 429,
        _ => 503,
    }
}

/// Stores a check's row; a failure is logged (the check's metrics and health already
/// have it).
async fn store(ledger: sluice_ledger::Ledger, row: SyntheticCheck, route: &str, upstream: &str) {
    // In its own task: a transaction must never be cancelled half way (see billing).
    match tokio::spawn(async move { ledger.record_synthetic(&row).await }).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, route, upstream, "storing a synthetic check failed"),
        Err(e) => tracing::warn!(error = %e, "the task storing a synthetic check failed"),
    }
}

/// `synthetic:<route>:<upstream>:<unix ms>`, sent upstream as `x-request-id` so that the
/// provider's logs tell checks from clients.
fn request_id(route: &str, upstream: &str, at: SystemTime) -> RequestId {
    let ms = at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("synthetic:{route}:{upstream}:{ms}")) {
        headers.insert(X_REQUEST_ID, v);
    }
    RequestId::of(&headers)
}

/// What reading a check's answer found.
struct Read {
    outcome: Outcome,
    usage: Option<Usage>,
    content_events: u64,
    /// `[DONE]` or a finish reason was seen.
    ended: bool,
}

impl Read {
    /// Reads the events `chunk` completes.
    fn absorb(&mut self, splitter: &mut Splitter, chunk: &[u8]) {
        for event in splitter.push(chunk) {
            match event {
                Event::Done => self.ended = true,
                Event::Last { usage, .. } => {
                    self.usage = usage.or(self.usage);
                    self.ended = true;
                }
                Event::Chunk { usage, finished, content, .. } => {
                    self.usage = usage.or(self.usage);
                    self.content_events += u64::from(content);
                    self.ended |= finished.is_some();
                }
                Event::Other(_) | Event::Malformed(_) => {}
            }
        }
    }
}

/// Reads a streamed answer to its end, within the upstream's idle limit between chunks.
/// It is good when it ends with `[DONE]` or a finish reason.
async fn read_answer(up: &UpstreamHandle, format: Format, first: &Bytes, rest: Option<BodyStream>) -> Read {
    let mut splitter = Splitter::new(format);
    let mut read = Read { outcome: Outcome::Reset, usage: None, content_events: 0, ended: false };
    read.absorb(&mut splitter, first);
    let mut total = first.len();
    if let Some(mut rest) = rest {
        let idle = IdleWatch::of(up);
        loop {
            let next = tokio::time::timeout(idle.limit(), rest.next()).await;
            match next {
                Err(_) => return Read { outcome: Outcome::IdleTimeout, ..read },
                Ok(None) => break,
                Ok(Some(Err(StreamError::Transport(_)))) => return Read { outcome: Outcome::Reset, ..read },
                Ok(Some(Err(StreamError::Upstream(_)))) => return Read { outcome: Outcome::Http5xx, ..read },
                Ok(Some(Ok(chunk))) => {
                    total += chunk.len();
                    read.absorb(&mut splitter, &chunk);
                    if total > MAX_ANSWER_BYTES {
                        break;
                    }
                }
            }
        }
    }
    read.outcome = if read.ended || total > MAX_ANSWER_BYTES { Outcome::Ok } else { Outcome::Reset };
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_a_streamed_request_of_its_inbound_api() {
        for (api, member) in
            [(SyntheticApi::Chat, "messages"), (SyntheticApi::Messages, "messages"), (SyntheticApi::Responses, "input")]
        {
            let endpoint = check_endpoint(api);
            let body = check_body(endpoint, "m", 1);
            let req = ClientRequest::parse(endpoint, &body).unwrap_or_else(|e| panic!("{api:?}: {e:?}"));
            assert!(req.stream, "{api:?}");
            let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(v[member][0]["content"], "ping", "{api:?}");
        }
        let v = |endpoint| serde_json::from_slice::<serde_json::Value>(&check_body(endpoint, "m", 1)).expect("json");
        assert_eq!(v(Endpoint::Chat)["stream_options"]["include_usage"], true);
        assert_eq!(v(Endpoint::Messages)["max_tokens"], 1);
        // OpenAI refuses a `max_output_tokens` under 16.
        assert_eq!(v(Endpoint::Responses)["max_output_tokens"], 16);
        assert_eq!(v(Endpoint::Responses)["store"], false);
    }
}
