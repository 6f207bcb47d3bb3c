//! One attempt against one upstream, bounded by the candidate budget and (for streams)
//! the first-byte watchdog, and classified into an [`Outcome`].
//!
//! This is the attempt's one lifecycle, whoever makes it (the dispatcher's walk, a
//! stream's resume, a synthetic check, a token count): [`AttemptSpec::new`] specifies it for a
//! candidate, [`run`] starts it (span, watchdog, in-flight count) and books what is
//! known when it ends or commits (a failure's outcome, or the first-byte time, into
//! health, metrics and the SLI rollups), and the [`Committed`] attempt books how its
//! answer ended in [`Committed::finish`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyDataStream, BodyExt, Full};
use sluice_crds::snapshot::{Protocol as CrdProtocol, RouteConfig};

use crate::backoff;
use crate::config::source::Secrets;
use crate::config::{Candidate, UpstreamHandle};
use crate::egress::{self, UpstreamResponse};
use crate::endpoint::Endpoint;
use crate::headers::{RequestId, X_REQUEST_ID};
use crate::health::HealthSettings;
use crate::request::ClientRequest;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::sli::Sli;
use crate::telemetry::traces::{RequestTrace, TRACEPARENT, Tracing};
mod finish;
pub mod native;

pub use finish::{Committed, InFlight, record};

use crate::outcome::{AttemptError, Outcome, Passthrough};

/// The rest of an upstream body, as OpenAI SSE bytes.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, StreamError>> + Send>>;

/// Why an upstream stream ended before it finished.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The connection broke.
    #[error("{0}")]
    Transport(String),
    /// The upstream sent an error event (or exception frame) after content.
    #[error("the upstream sent an error: {0}")]
    Upstream(String),
}

/// An attempt that produced its first body byte: the request is committed to it.
pub struct Started {
    /// Upstream status (2xx).
    pub status: StatusCode,
    /// Upstream content type.
    pub content_type: Option<http::HeaderValue>,
    /// The first chunk of a stream, or the whole body otherwise.
    pub first: Bytes,
    /// The rest of a stream.
    pub rest: Option<BodyStream>,
    /// A whole translated answer's usage, known from the translation; `None` when it is
    /// to be read from `first`.
    pub usage: Option<crate::usage::Usage>,
    /// The attempt itself (with its span), finished when the answer ends.
    pub attempt: Committed,
}

/// What attempts are made with and booked into, one per gateway: the upstreams'
/// credentials, the health settings their outcomes are judged by, metrics, SLI rollups
/// and the trace exporter (an upstream's own health and metric handles travel with it).
/// Requests, resumed streams, probes and synthetic checks all take it, and nothing more
/// of the gateway.
pub struct Books {
    /// Upstream credentials.
    pub secrets: Secrets,
    /// Health settings (windows, trial rules).
    pub settings: HealthSettings,
    /// The contract metrics.
    pub metrics: Metrics,
    /// SLI rollups not yet flushed.
    pub sli: Sli,
    /// The trace exporter; `None` (tracing off) unless an OTLP endpoint is set.
    pub traces: Option<Tracing>,
}

impl Books {
    /// Books with fresh metrics and rollups, and tracing off.
    pub fn new(settings: HealthSettings, secrets: Secrets) -> Self {
        Self { secrets, settings, metrics: Metrics::new(), sli: Sli::default(), traces: None }
    }
}

/// The time and the trial slot an attempt is given by its caller.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// First-byte limit; `None` for non-streaming requests and hedged attempts.
    pub first_byte: Option<Duration>,
    /// The candidate's share of the deadline.
    pub budget: Duration,
    /// Whether the attempt holds a trial slot (taken by the candidate order or the check).
    pub trial: bool,
}

/// What one attempt needs; made by [`AttemptSpec::new`] only.
pub struct AttemptSpec<'a> {
    /// The endpoint called (a translated Messages request calls chat).
    pub endpoint: Endpoint,
    /// The request body for this candidate.
    pub body: Bytes,
    /// Streaming request?
    pub stream: bool,
    /// First-byte limit; `None` for non-streaming requests and hedged attempts.
    pub first_byte: Option<Duration>,
    /// The candidate's share of the deadline.
    pub budget: Duration,
    /// Statuses that fail over.
    pub retry_on: &'a [u16],
    /// Request id sent upstream.
    pub request_id: &'a crate::headers::RequestId,
    /// Whether the attempt holds a trial slot (taken by the candidate order).
    pub trial: bool,
    /// The model id at the upstream (Azure: the deployment in the URL).
    pub model: &'a str,
    /// For an upstream that is not OpenAI-compatible: what its translation needs.
    pub native: Option<native::NativeInput<'a>>,
    /// For a Messages or Responses request: how it reaches this candidate.
    pub via: Option<Via<'a>>,
    /// Why the request cannot be sent to this candidate at all (a member its protocol
    /// cannot express): the attempt answers 400 naming it.
    pub refused: Option<String>,
    /// The request's span, parent of the attempt's.
    pub trace: &'a RequestTrace,
}

/// How a Messages or Responses request reaches a candidate (docs/design.md §12).
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// In its own API: Messages with the client's `anthropic-*` headers (`anthropic`,
    /// `vertex-anthropic`), Responses as it came (`openai`, `azure-openai`).
    Native(&'a [(http::HeaderName, HeaderValue)]),
    /// A Messages `count_tokens` request to the count endpoint of a candidate that speaks
    /// Messages (`anthropic`, `vertex-anthropic`, Claude on `bedrock`), with the client's
    /// `anthropic-*` headers; the answer is Anthropic's `{"input_tokens": N}`.
    CountTokens(&'a [(http::HeaderName, HeaderValue)]),
    /// As a chat request; the answer re-encoded into the inbound API's format.
    Translated {
        /// The inbound API.
        api: Endpoint,
        /// The route's model: names the answer when the upstream does not.
        model: &'a str,
        /// Responses: the tool namespaces flattened into function names.
        namespaces: &'a [String],
    },
}

impl<'a> AttemptSpec<'a> {
    /// The one place an attempt is specified: candidate `c` of a route (`route`), for
    /// the client's request `req`, sent with the client's `request_id` and traced as a
    /// child of `trace`. A candidate that is not OpenAI-compatible gets its request
    /// translated from the client's body by the attempt; the others get the client's
    /// bytes with the candidate's model (and the route's default `max_tokens`) spliced in.
    pub fn new(
        c: &'a Candidate,
        route: &'a RouteConfig,
        req: &'a ClientRequest,
        limits: Limits,
        request_id: &'a RequestId,
        trace: &'a RequestTrace,
    ) -> Self {
        if req.endpoint.is_inbound_format() {
            return Self::inbound(c, route, req, limits, request_id, trace);
        }
        let native = c.upstream.is_native().then(|| native::NativeInput {
            model: &c.cfg.model,
            default_max_tokens: route.default_max_tokens,
            client_body: req.body(),
            omit_hosted_tools: false,
        });
        let body =
            if native.is_some() { Bytes::new() } else { req.upstream_body(&c.cfg.model, route.default_max_tokens) };
        Self { native, ..Self::plain(c, route, req, limits, request_id, trace, req.endpoint, body) }
    }

    /// A `count_tokens` attempt on candidate `c` (one that speaks Messages): `body` is the
    /// client's count request with the candidate's model spliced in, `headers` its
    /// `anthropic-*` headers. It is never streamed and fails over as the route's
    /// `retryOn` says.
    pub fn count_tokens(
        c: &'a Candidate,
        route: &'a RouteConfig,
        body: Bytes,
        headers: &'a [(http::HeaderName, HeaderValue)],
        limits: Limits,
        request_id: &'a RequestId,
        trace: &'a RequestTrace,
    ) -> Self {
        Self {
            endpoint: Endpoint::Messages,
            body,
            stream: false,
            first_byte: None,
            budget: limits.budget,
            retry_on: &route.retry_on,
            request_id,
            trial: limits.trial,
            model: &c.cfg.model,
            native: None,
            via: Some(Via::CountTokens(headers)),
            refused: None,
            trace,
        }
    }

    /// A spec with no translation: `body` sent to `endpoint` as it is.
    #[allow(clippy::too_many_arguments)]
    fn plain(
        c: &'a Candidate,
        route: &'a RouteConfig,
        req: &'a ClientRequest,
        limits: Limits,
        request_id: &'a RequestId,
        trace: &'a RequestTrace,
        endpoint: Endpoint,
        body: Bytes,
    ) -> Self {
        Self {
            endpoint,
            body,
            stream: req.stream,
            first_byte: limits.first_byte,
            budget: limits.budget,
            retry_on: &route.retry_on,
            request_id,
            trial: limits.trial,
            model: &c.cfg.model,
            native: None,
            via: None,
            refused: None,
            trace,
        }
    }

    /// A Messages or Responses request: sent as it came to a candidate that speaks its
    /// API, translated to chat for the others (and refused there when it cannot be).
    fn inbound(
        c: &'a Candidate,
        route: &'a RouteConfig,
        req: &'a ClientRequest,
        limits: Limits,
        request_id: &'a RequestId,
        trace: &'a RequestTrace,
    ) -> Self {
        let spec = |body: Bytes| Self {
            via: Some(Via::Native(&req.anthropic_headers)),
            ..Self::plain(c, route, req, limits, request_id, trace, req.endpoint, body)
        };
        let protocol = c.upstream.cfg.protocol;
        if !req.endpoint.native_on(protocol, &c.cfg.model) {
            let options = crate::request::to_chat_options(route);
            return match req.as_chat(options) {
                Ok(chat) => {
                    let mut translated = Self::new(c, route, &chat.request, limits, request_id, trace);
                    if let Some(native) = translated.native.as_mut() {
                        native.omit_hosted_tools = options.omit_hosted_tools;
                    }
                    Self {
                        via: Some(Via::Translated {
                            api: req.endpoint,
                            model: &route.model,
                            namespaces: &chat.namespaces,
                        }),
                        ..translated
                    }
                }
                Err(e) => Self { refused: Some(e.to_string()), via: None, ..spec(Bytes::new()) },
            };
        }
        match protocol {
            // The envelope (model in the path) is the attempt's to make.
            CrdProtocol::VertexAnthropic | CrdProtocol::Bedrock => spec(Bytes::copy_from_slice(req.body())),
            // The candidate's model (and the output limit the reservation assumed)
            // spliced into the client's bytes, nothing else changed.
            _ => spec(req.upstream_body(&c.cfg.model, route.default_max_tokens)),
        }
    }
}

/// Runs one attempt and books what its end tells: a failure's outcome (and its trial
/// slot), or the first-byte time of an attempt that answered (health and the
/// first-byte histogram); the committed attempt books the rest when its answer ends.
pub async fn run(
    upstream: &Arc<UpstreamHandle>,
    spec: AttemptSpec<'_>,
    books: &Books,
) -> Result<Started, AttemptError> {
    let secrets = &books.secrets;
    let start = Instant::now();
    let in_flight = InFlight::enter(&upstream.in_flight);
    let (limit, limit_outcome) = match spec.first_byte {
        Some(fb) if fb < spec.budget => (fb, Outcome::FirstByteTimeout),
        _ => (spec.budget, Outcome::Budget),
    };
    let trace = spec.trace.attempt(&upstream.cfg.name);
    let traceparent = trace.traceparent();
    let exchange = async {
        if let Some(why) = &spec.refused {
            return Err(native::refused_here(why.clone()));
        }
        let answer = match (&spec.via, &spec.native) {
            (Some(Via::Native(headers)), _) if spec.endpoint == Endpoint::Messages => {
                native::messages_exchange(upstream, secrets, &spec, headers, traceparent.as_ref(), false).await
            }
            (Some(Via::CountTokens(headers)), _) => {
                native::messages_exchange(upstream, secrets, &spec, headers, traceparent.as_ref(), true).await
            }
            (_, Some(input)) => native::exchange(upstream, secrets, &spec, input, traceparent.as_ref()).await,
            (_, None) => openai_exchange(upstream, secrets, &spec, traceparent.as_ref()).await,
        }?;
        match spec.via {
            Some(Via::Translated { api, model, namespaces }) => reencode(answer, &spec, api, model, namespaces)
                .map_err(|e| AttemptError::transport(Outcome::Http5xx, e)),
            _ => Ok(answer),
        }
    };
    let failure = match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(native::Answer { status, content_type, first, rest, usage })) => {
            let first_byte = start.elapsed();
            upstream.health.record_first_byte(first_byte);
            upstream.metrics.first_byte.observe(first_byte.as_secs_f64());
            let attempt = Committed::new(upstream.clone(), spec.trial, first_byte, in_flight, trace);
            return Ok(Started { status, content_type, first, rest, usage, attempt });
        }
        Ok(Err(e)) => e,
        Err(_) => {
            let what = if limit_outcome == Outcome::FirstByteTimeout { "no first byte" } else { "no answer" };
            AttemptError::transport(limit_outcome, format!("{what} within {}ms", limit.as_millis()))
        }
    };
    if failure.refused {
        // Nothing reached the upstream: its health, metrics and SLI do not hear of it.
        if spec.trial {
            upstream.health.cancel_trial();
        }
    } else {
        record(upstream, books, failure.outcome, spec.trial, failure.retry_after, None);
    }
    trace.outcome(failure.outcome, failure.retryable);
    Err(failure)
}

/// A chat answer as an answer of the inbound API `api` (docs/design.md §12): a whole
/// body converted, a stream re-encoded as it is relayed.
/// A whole answer that cannot be converted is malformed (`Err` says why).
fn reencode(
    answer: native::Answer,
    spec: &AttemptSpec<'_>,
    api: Endpoint,
    model: &str,
    namespaces: &[String],
) -> Result<native::Answer, String> {
    use sluice_providers::{messages, responses};
    let (body, usage) = if api == Endpoint::Responses {
        let ids = responses::ResponseIds {
            id: format!("resp_{}", spec.request_id.as_str()),
            model: model.to_owned(),
            created: SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            namespaces: namespaces.to_vec(),
        };
        if spec.stream {
            return Ok(native::reencode(answer, responses::from_chat(ids)));
        }
        responses::response_of_completion(&answer.first, &ids)
    } else {
        let id = format!("msg_{}", spec.request_id.as_str());
        if spec.stream {
            return Ok(native::reencode(answer, messages::from_chat(&id, model)));
        }
        messages::message_of_completion(&answer.first, &id, model)
    }
    .map_err(|e| e.message)?;
    Ok(native::Answer {
        usage: Some(native::usage_of(&usage)),
        ..native::Answer::new(answer.status, answer.content_type, body, None)
    })
}

/// A non-2xx answer: retryable when listed in `retryOn`, passed through otherwise.
async fn refusal(response: UpstreamResponse, retry_on: &[u16]) -> AttemptError {
    let status = response.status();
    let mut headers = HeaderMap::new();
    if let Some(ct) = response.headers().get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, ct.clone());
    }
    let retry_after = backoff::retry_after(response.headers(), SystemTime::now());
    let retryable = retry_on.contains(&status.as_u16());
    // The body of a retryable refusal is only read for the log; a passthrough needs it whole.
    let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let outcome = Outcome::of_status(status);
    AttemptError {
        outcome,
        detail: status.to_string(),
        retryable,
        retry_after,
        overloaded: status.as_u16() == 529,
        passthrough: (!retryable).then_some(Passthrough { status, headers, body }),
        refused: false,
    }
}

/// Classifies an error of the client: no connection (refused, unreachable, connect
/// timeout, TLS handshake) or a connection that broke.
pub fn classify(e: &egress::ClientError) -> AttemptError {
    let outcome = if e.is_connect() { Outcome::Connect } else { Outcome::Reset };
    AttemptError::transport(outcome, egress::describe(e))
}

/// A body that broke while it was read.
fn broken(e: &hyper::Error) -> AttemptError {
    AttemptError::transport(Outcome::Reset, egress::describe(e))
}

/// The exchange with an OpenAI-compatible upstream (`openai`, `azure-openai`): the
/// client's bytes with the gateway's members spliced in, the answer passed on as it came.
async fn openai_exchange(
    upstream: &UpstreamHandle,
    secrets: &Secrets,
    spec: &AttemptSpec<'_>,
    traceparent: Option<&HeaderValue>,
) -> Result<native::Answer, AttemptError> {
    let mut request = http::Request::new(Full::new(spec.body.clone()));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = match &upstream.azure {
        Some(azure) => azure.uri(spec.endpoint, spec.model).map_err(|e| {
            AttemptError::transport(Outcome::Connect, format!("Azure deployment URL for {:?}: {e}", spec.model))
        })?,
        None => upstream.urls.of(spec.endpoint).clone(),
    };
    let headers = request.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(X_REQUEST_ID, spec.request_id.header());
    if let Some(tp) = traceparent {
        headers.insert(TRACEPARENT, tp.clone());
    }
    if spec.stream {
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    if let Some((name, value)) = secrets.header(&upstream.cfg.key) {
        headers.insert(name, value);
    }
    let response = upstream.client.request(request).await.map_err(|e| classify(&e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(refusal(response, spec.retry_on).await);
    }
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    if spec.endpoint == Endpoint::Responses {
        return native::responses_answer(status, response, spec).await;
    }
    if spec.stream {
        let mut body: BodyStream = Box::pin(
            BodyDataStream::new(response.into_body())
                .map(|r| r.map_err(|e| StreamError::Transport(egress::describe(&e)))),
        );
        // Skip empty chunks: the watchdog waits for a real byte of the body.
        loop {
            match body.next().await {
                Some(Ok(chunk)) if chunk.is_empty() => continue,
                Some(Ok(chunk)) => return Ok(native::Answer::new(status, content_type, chunk, Some(body))),
                Some(Err(e)) => return Err(AttemptError::transport(Outcome::Reset, e.to_string())),
                None => return Err(AttemptError::transport(Outcome::Reset, "stream closed before its first byte")),
            }
        }
    }
    let body = response.into_body().collect().await.map_err(|e| broken(&e))?.to_bytes();
    Ok(native::Answer::new(status, content_type, body, None))
}
