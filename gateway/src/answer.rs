//! Answering the client once the dispatch is decided: the whole body, a stream relayed
//! as it arrives, or the error; then the request is counted and its reservation settled.

use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use sluice_crds::model_route::MidStreamAction;
use sluice_providers::lenient;
use sluice_providers::member;

use crate::attempt::Books;
use crate::billing::{Held, settle};
use crate::config::Route;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::headers::{X_SLUICE_ATTEMPTS, X_SLUICE_DROPPED, X_SLUICE_FAILOVER, X_SLUICE_UPSTREAM};
use crate::outcome::Outcome;
use crate::relay::{self, StreamEnd};
use crate::request::ClientRequest;
use crate::route::{Dispatched, Failed};
use crate::telemetry::traces::RequestTrace;
use crate::usage::Usage;

/// How long an answer's last byte waits for its settlement to commit (docs/design.md
/// §5a); then the answer ends with `ledger_unavailable` and the settlement stays queued.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How a request ended: everything its bookkeeping needs.
pub struct Ending {
    /// The inbound API asked.
    pub api: Endpoint,
    /// The status answered.
    pub status: StatusCode,
    /// Whether the answer was bad for the SLO; `None` when it does not count (client errors).
    pub slo_bad: Option<bool>,
    /// The latency the SLI sees: to the whole answer, or to a stream's first byte.
    pub latency_ms: u64,
    /// Attempts made.
    pub attempts: u32,
    /// The candidate that served (index in `route.candidates`); `None` releases the reservation.
    pub candidate: Option<usize>,
    /// Tokens used, to count and to charge.
    pub usage: Option<Usage>,
    /// The continuations of a resumed stream: each candidate and what it used, charged
    /// at its price besides `usage` (docs/design.md §4.5).
    pub resumed: Vec<(usize, Usage)>,
}

/// The end of every request, whatever its answer: counts it (status and duration), its
/// SLI and its tokens at once, and returns the settlement of its reservation to await;
/// it says whether the settlement committed within [`SETTLE_WAIT`] (nothing to settle
/// counts as committed). The request's span records the ending and ends with the
/// settlement.
pub fn conclude(
    books: &Books,
    route: &Arc<Route>,
    started: Instant,
    end: Ending,
    reservation: Option<Held>,
    trace: RequestTrace,
) -> impl Future<Output = bool> + Send + 'static {
    trace.end(end.status.as_u16(), route.served(end.candidate), end.usage.as_ref());
    route.metrics.answered(&books.metrics, end.api, end.status.as_u16(), started.elapsed().as_secs_f64());
    if let Some(bad) = end.slo_bad {
        books.sli.request(&route.cfg.key, end.api, bad, end.latency_ms, u64::from(end.attempts.saturating_sub(1)));
    }
    for u in end.usage.iter().chain(end.resumed.iter().map(|(_, u)| u)) {
        route.metrics.input_tokens.inc_by(u.prompt_tokens);
        route.metrics.output_tokens.inc_by(u.completion_tokens);
    }
    let charges: Vec<(usize, Usage)> = end.candidate.zip(end.usage).into_iter().chain(end.resumed).collect();
    let route = route.clone();
    async move {
        let billed = matches!(tokio::time::timeout(SETTLE_WAIT, settle(&route, &charges, reservation)).await, Ok(true));
        drop(trace);
        billed
    }
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

/// `x-sluice-dropped`: the hints a Messages or Responses request was sent without,
/// when the candidate that served it was sent a translation (docs/gateway.md), and
/// its web search when that candidate has none (the route omits hosted tools; without
/// that such a candidate refuses the request).
fn dropped_header(headers: &mut HeaderMap, req: &ClientRequest, route: &Route, candidate: usize) {
    let Some(c) = route.candidates.get(candidate) else { return };
    let protocol = c.upstream.cfg.protocol;
    let translated = req.endpoint.is_inbound_format() && !req.endpoint.native_on(protocol, &c.cfg.model);
    let Some(chat) = translated.then(|| req.as_chat(crate::request::to_chat_options(&route.cfg)).ok()).flatten() else {
        return;
    };
    let search = chat.web_search && !crate::attempt::native::protocol(protocol).translates_web_search();
    let dropped: Vec<&str> =
        chat.dropped.iter().map(AsRef::as_ref).chain(search.then_some("tools.web_search")).collect();
    if !dropped.is_empty()
        && let Ok(v) = HeaderValue::from_str(&dropped.join(","))
    {
        headers.insert(X_SLUICE_DROPPED, v);
    }
}

/// What the gateway reads from a whole answer: its usage and, for a traced request, the
/// choices' finish reasons and the model the upstream says answered (docs/design.md
/// §11). Anything unreadable reads as nothing; only `usage` is typed (given twice or of
/// the wrong shape, there is none).
#[derive(Default)]
struct Peek {
    usage: Option<Usage>,
    finish_reasons: Vec<String>,
    model: Option<String>,
}

impl Peek {
    /// `traced`: read what only the trace needs (finish reasons, model) too. `usage` is
    /// found without parsing the rest of the body (a scalar malformed elsewhere does not
    /// hide it, traced or not); the full parse runs for the trace, or when the walk
    /// cannot decide.
    fn of(body: &[u8], traced: bool) -> Self {
        let usage = member::read::<Option<Usage>>(body, "usage").map(Option::flatten);
        if let (Some(usage), false) = (usage, traced) {
            return Self { usage, ..Self::default() };
        }
        let mut de = serde_json::Deserializer::from_slice(body);
        let peek = PeekSeed { traced }.deserialize(&mut de).and_then(|p| de.end().map(|()| p)).unwrap_or_default();
        Self { usage: usage.unwrap_or(peek.usage), ..peek }
    }
}

struct PeekSeed {
    traced: bool,
}

impl<'de> DeserializeSeed<'de> for PeekSeed {
    type Value = Peek;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Peek, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PeekSeed {
    type Value = Peek;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a chat completion object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Peek, A::Error> {
        let mut peek = Peek::default();
        let mut usage_seen = false;
        while let Some(key) = map.next_key::<lenient::Str<'de>>()? {
            match key.as_deref() {
                Some("usage") if usage_seen => return Err(de::Error::duplicate_field("usage")),
                Some("usage") => {
                    usage_seen = true;
                    peek.usage = map.next_value()?;
                }
                Some("choices") if self.traced => {
                    let choices: lenient::List<FinishReason<'de>> = map.next_value()?;
                    peek.finish_reasons = choices.0.into_iter().filter_map(|c| c.0.0.map(Cow::into_owned)).collect();
                }
                Some("model") if self.traced => {
                    let model: lenient::Str<'de> = map.next_value()?;
                    peek.model = model.0.map(Cow::into_owned);
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(peek)
    }
}

/// A choice's `finish_reason`, if a string.
#[derive(Default)]
struct FinishReason<'a>(lenient::Str<'a>);

impl<'de> lenient::Lenient<'de> for FinishReason<'de> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut reason = Self::default();
        lenient::members(map, |key, map| {
            match key {
                "finish_reason" => reason.0 = map.next_value()?,
                _ => lenient::skip(map)?,
            }
            Ok(())
        })?;
        Ok(reason)
    }
}

impl<'de> serde::Deserialize<'de> for FinishReason<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::deserialize(d)
    }
}

/// A whole (non-streamed) answer: the upstream's body as it came.
pub fn answer(
    books: &Books,
    route: &Arc<Route>,
    req: &ClientRequest,
    d: Dispatched,
    reservation: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> impl Future<Output = Response> + Send + 'static {
    // Everything but the settlement is done before the returned future: it holds only
    // the answer and the settlement, not the dispatch's parts.
    let Dispatched { started: s, candidate, attempts, failovers, .. } = d;
    let name = s.attempt.upstream().name_header.clone();
    s.attempt.finish(Outcome::Ok, books);
    // A translated answer's usage is known; the body is read only when something is
    // still to be learnt from it.
    let traced = trace.is_on();
    let usage = match s.usage {
        Some(u) if !traced => Some(u),
        known => {
            let peek = Peek::of(&s.first, traced);
            trace.answered(&s.first, peek.finish_reasons, peek.model.as_deref());
            known.or(peek.usage)
        }
    };
    let usage = usage.or_else(|| (req.endpoint == Endpoint::Embeddings).then(Usage::default));
    let usage = usage.map(|u| with_chat_search(u, req.chat_search, route, candidate));
    let latency_ms = started.elapsed().as_millis() as u64;
    let end = Ending {
        api: req.endpoint,
        status: s.status,
        slo_bad: Some(false),
        latency_ms,
        attempts,
        candidate: Some(candidate),
        usage,
        resumed: Vec::new(),
    };
    let settled = conclude(books, route, started, end, reservation, trace);
    let mut response = (s.status, s.first).into_response();
    let headers = response.headers_mut();
    headers
        .insert(header::CONTENT_TYPE, s.content_type.unwrap_or_else(|| HeaderValue::from_static("application/json")));
    sluice_headers(headers, name.as_ref(), attempts, &failovers);
    dropped_header(headers, req, route, candidate);
    let endpoint = req.endpoint;
    async move {
        if !settled.await {
            return unbilled(attempts, &failovers, endpoint);
        }
        response
    }
}

/// What an answer used, with the one web search an `openai` or `azure-openai` candidate
/// ran for a chat request's `web_search_options` ([`ClientRequest::chat_search`]) when
/// its usage counts none: OpenAI's
/// search models search once per such request and report no count (docs/design.md §5).
fn with_chat_search(mut usage: Usage, chat_search: bool, route: &Route, candidate: usize) -> Usage {
    use sluice_crds::snapshot::Protocol;
    let openai = route
        .candidates
        .get(candidate)
        .is_some_and(|c| matches!(c.upstream.cfg.protocol, Protocol::Openai | Protocol::AzureOpenai));
    if chat_search && openai && usage.server_tool_use.web_search_requests == 0 {
        usage.server_tool_use.web_search_requests = 1;
    }
    usage
}

/// A streamed answer: headers now, events as the relay forwards them; the attempt is
/// finished and the request concluded when the stream ends.
pub fn stream_answer(
    books: &Arc<Books>,
    route: Arc<Route>,
    req: &ClientRequest,
    d: Dispatched,
    reservation: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> Response {
    let Dispatched { started: s, candidate, attempts, failovers, request_id } = d;
    let attempt = s.attempt;
    let name = attempt.upstream().name_header.clone();
    let idle = relay::IdleWatch::of(attempt.upstream());
    let first_byte_ms = started.elapsed().as_millis() as u64;
    let status = s.status;
    let (books2, route2) = (books.clone(), route.clone());
    let (input_bound, api, chat_search) = (req.input_bound, req.endpoint, req.chat_search);
    let format = relay::sse::Format::of(req.endpoint);
    // Mid-stream resume continues a stream in its own format (docs/design.md §4.5).
    let resumable = route.cfg.mid_stream == MidStreamAction::Resume;
    let resumer = resumable.then(|| {
        relay::resume::Resumer::new(books.clone(), route.clone(), req, candidate, started, request_id, trace.clone())
    });
    let on_end = move |end: StreamEnd| {
        // A client that went away says nothing about the upstream.
        let outcome = if end.client_gone { Outcome::Ok } else { end.outcome };
        attempt.finish(outcome, &books2);
        if end.dropped > 0 {
            books2.metrics.dropped_events.inc_by(end.dropped);
        }
        // Without reported usage, bill what is known: the input bound and one token per
        // content event, never more than was reserved.
        let usage =
            end.usage.or_else(|| (end.content_events > 0).then_some(Usage::plain(input_bound, end.content_events)));
        let usage = usage.map(|u| with_chat_search(u, chat_search, &route2, candidate));
        trace.stream_finished(end.finish_reason.map(|r| r.as_str()), end.model.as_deref());
        // A stream resumed to its end is a good answer, whatever broke on the way.
        let bad = outcome != Outcome::Ok && !end.healed;
        let resumed = end
            .resumed
            .iter()
            .map(|r| (r.candidate, with_chat_search(r.usage, chat_search, &route2, r.candidate)))
            .collect();
        let end = Ending {
            api,
            status,
            slo_bad: Some(bad),
            latency_ms: first_byte_ms,
            attempts,
            candidate: Some(candidate),
            usage,
            resumed,
        };
        // The relay awaits this before the last event, so a client that saw `[DONE]` was
        // billed even if the process dies right after. A ledger that is away holds
        // `[DONE]` back at most SETTLE_WAIT; the stream then ends with an error event and
        // the settlement stays queued until the ledger is back (docs/design.md §5a).
        let settling = tokio::spawn(conclude(&books2, &route2, started, end, reservation, trace));
        async move { matches!(settling.await, Ok(true)) }
    };
    let body = match s.rest {
        Some(rest) => relay::relay(s.first, rest, format, req.wants_usage, idle, resumer, on_end),
        None => {
            tokio::spawn(async move {
                on_end(StreamEnd::default()).await;
            });
            axum::body::Body::empty()
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    sluice_headers(headers, name.as_ref(), attempts, &failovers);
    dropped_header(headers, req, &route, candidate);
    response
}

/// A whole answer whose settlement did not commit within [`SETTLE_WAIT`]: the upstream
/// did the work and the settlement stays queued, but the client is not told it succeeded.
fn unbilled(attempts: u32, failovers: &[Outcome], endpoint: Endpoint) -> Response {
    let e = ApiError::LedgerUnavailable(
        "the ledger did not confirm this answer's settlement in time; it stays queued and is billed once the ledger is back".into(),
    );
    let mut response = e.respond(endpoint);
    sluice_headers(response.headers_mut(), None, attempts, failovers);
    response
}

/// No candidate answered: the error, in the shape of the request's API, with the
/// attempts that were made.
pub async fn failure(
    books: &Books,
    route: &Arc<Route>,
    endpoint: Endpoint,
    f: Failed,
    reservation: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> Response {
    let status = f.error.status();
    // Client errors are neither good nor bad for the SLO; a 429 after every candidate
    // throttled is bad.
    let counts = !status.is_client_error() || matches!(f.error, ApiError::RateLimited { .. });
    let latency_ms = started.elapsed().as_millis() as u64;
    let end = Ending {
        api: endpoint,
        status,
        slo_bad: counts.then(|| f.error.is_bad()),
        latency_ms,
        attempts: f.attempts,
        candidate: None,
        usage: None,
        resumed: Vec::new(),
    };
    conclude(books, route, started, end, reservation, trace).await;
    let mut response = f.error.respond(endpoint);
    sluice_headers(response.headers_mut(), None, f.attempts, &f.failovers);
    response
}
