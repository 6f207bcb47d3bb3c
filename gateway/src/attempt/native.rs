//! One attempt at an upstream that speaks a provider's native protocol (docs/design.md
//! §9): the client's OpenAI request is translated by `sluice_providers`, authorised
//! (API-key header, Google token or SigV4), sent, and the answer translated back — a
//! whole body, or a stream transcoded as it arrives.
//!
//! For a stream the attempt commits on the first *content* event (text or a tool call),
//! not on the first byte: a role-only chunk, an Anthropic `message_start` or a Bedrock
//! `messageStart` says nothing about whether an answer is coming, and an error event
//! before any content is a failed attempt that fails over like a 5xx would.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::{BodyDataStream, BodyExt, Full};
use sluice_crds::snapshot::{Protocol as CrdProtocol, UpstreamConfig};
use sluice_providers::{
    self as providers, AnswerOpts, ChatRequest, ErrorKind, Out, Protocol, Target, Transcoder, UpstreamError,
};

use super::{AttemptSpec, BodyStream, StreamError, classify};
use crate::config::UpstreamHandle;
use crate::config::source::Secrets;
use crate::egress;
use crate::endpoint::Endpoint;
use crate::headers::X_REQUEST_ID;
use crate::outcome::{AttemptError, Outcome, Passthrough};
use crate::usage::Usage;

/// What a native attempt needs besides the common [`AttemptSpec`].
pub struct NativeInput<'a> {
    /// The model id at the upstream (the candidate's `model`).
    pub model: &'a str,
    /// `max_tokens` when the client sets none (the route's `defaultMaxTokens`).
    pub default_max_tokens: u32,
    /// The client's request body.
    pub client_body: &'a [u8],
    /// A hosted tool the target lacks is left out, not refused (a translated request
    /// on a route with `hostedTools: omit`).
    pub omit_hosted_tools: bool,
}

/// The protocol of the translation layer for a configured one.
pub fn protocol(p: CrdProtocol) -> Protocol {
    match p {
        CrdProtocol::Openai => Protocol::OpenAi,
        CrdProtocol::AzureOpenai => Protocol::AzureOpenAi,
        CrdProtocol::Anthropic => Protocol::Anthropic,
        CrdProtocol::Bedrock => Protocol::Bedrock,
        CrdProtocol::VertexAnthropic => Protocol::VertexAnthropic,
        CrdProtocol::VertexGemini => Protocol::VertexGemini,
        CrdProtocol::Gemini => Protocol::Gemini,
    }
}

/// The translation layer's target for a candidate.
pub(crate) fn target<'a>(cfg: &'a UpstreamConfig, input: &NativeInput<'a>) -> Target<'a> {
    Target {
        protocol: protocol(cfg.protocol),
        model: input.model,
        default_max_tokens: input.default_max_tokens,
        anthropic_version: cfg.anthropic_version.as_deref(),
        azure_api_version: cfg.azure_api_version.as_deref(),
        gcp_project: cfg.gcp.as_ref().map(|g| g.project.as_str()),
        gcp_location: cfg.gcp.as_ref().map(|g| g.location.as_str()),
        omit_hosted_tools: input.omit_hosted_tools,
    }
}

/// A client error found before anything was sent (the request cannot be expressed in
/// the target's protocol): the walk passes the candidate over, and answers this 400
/// naming the field when no candidate could take the request.
pub(super) fn refused_here(message: String) -> AttemptError {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "code": "invalid_request", "param": null}});
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    AttemptError {
        outcome: Outcome::Http4xx,
        detail: message,
        retryable: false,
        retry_after: None,
        overloaded: false,
        passthrough: Some(Passthrough {
            status: StatusCode::BAD_REQUEST,
            headers,
            body: Bytes::from(body.to_string()),
        }),
        refused: true,
    }
}

/// A classified upstream error as the attempt's failure: retryable when the provider's
/// error name says so, or, when only the status spoke, when the route's `retryOn` lists it.
/// Anthropic's 529 is named (`overloaded_error`), so it fails over whatever `retryOn` says.
fn failed(e: UpstreamError, retry_on: &[u16]) -> AttemptError {
    let named = e.kind != ErrorKind::from_status(e.status) || e.kind == ErrorKind::Overloaded;
    let retryable = if named { e.kind.retryable() } else { retry_on.contains(&e.status) };
    let outcome = match e.kind {
        ErrorKind::RateLimited => Outcome::Http429,
        k if k.retryable() && e.status != 408 => Outcome::Http5xx,
        _ => StatusCode::from_u16(e.status).map_or(Outcome::Http5xx, Outcome::of_status),
    };
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    AttemptError {
        outcome,
        detail: format!("{status}: {}", e.message.chars().take(300).collect::<String>()),
        retryable,
        retry_after: e.retry_after,
        overloaded: e.kind == ErrorKind::Overloaded,
        passthrough: (!retryable).then(|| Passthrough { status, headers, body: e.openai_body }),
        refused: false,
    }
}

/// `chatcmpl-{request id}`, the id of an answer whose provider gives none.
fn answer_id(request_id: &str) -> String {
    let mut id = String::with_capacity(9 + request_id.len());
    id.push_str("chatcmpl-");
    id.push_str(request_id);
    id
}

fn unix_now() -> (u64, u64) {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The answer of an attempt (native or not), as the OpenAI side sees it.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) content_type: Option<HeaderValue>,
    /// The whole body, or a stream's first bytes.
    pub(super) first: Bytes,
    /// The rest of a stream.
    pub(super) rest: Option<BodyStream>,
    /// A whole translated answer's usage, known from its translation (so not read again
    /// from the body); `None` otherwise.
    pub(super) usage: Option<Usage>,
}

impl Answer {
    pub(super) fn new(
        status: StatusCode,
        content_type: Option<HeaderValue>,
        first: Bytes,
        rest: Option<BodyStream>,
    ) -> Self {
        Self { status, content_type, first, rest, usage: None }
    }
}

/// The gateway's form of a translated answer's usage.
pub(super) fn usage_of(u: &providers::Usage) -> Usage {
    Usage::from(*u)
}

/// Runs the exchange of one native attempt (the caller bounds it in time).
pub(super) async fn exchange(
    upstream: &UpstreamHandle,
    secrets: &Secrets,
    spec: &AttemptSpec<'_>,
    input: &NativeInput<'_>,
    traceparent: Option<&HeaderValue>,
) -> Result<Answer, AttemptError> {
    let cfg = &upstream.cfg;
    let target = target(cfg, input);
    if spec.endpoint != Endpoint::Chat {
        return Err(refused_here(format!(
            "the upstream {:?} speaks the {} protocol, which serves /v1/chat/completions only",
            cfg.name,
            target.protocol.as_str()
        )));
    }
    let chat: ChatRequest =
        serde_json::from_slice(input.client_body).map_err(|e| refused_here(format!("invalid chat request: {e}")))?;
    let native = providers::build(&target, &chat, spec.stream).map_err(|e| refused_here(e.to_string()))?;
    let uri = upstream
        .native_uris
        .get(&cfg.base_url, &native.path)
        .map_err(|e| AttemptError::transport(Outcome::Connect, e))?;
    let (now_secs, _) = unix_now();
    let opts = AnswerOpts { id: answer_id(spec.request_id.as_str()), created: now_secs };
    let response = send(upstream, secrets, spec, &target, &native, &uri, traceparent, false).await?;
    let status = response.status();
    let json = Some(HeaderValue::from_static("application/json"));
    if !spec.stream {
        let body = response.into_body().collect().await.map_err(|e| broken(&e))?.to_bytes();
        let completion = providers::parse(&target, &body, &opts).map_err(|e| failed(e, spec.retry_on))?;
        let usage = Some(usage_of(&completion.usage));
        return Ok(Answer { usage, ..Answer::new(status, json, completion.body, None) });
    }
    commit(status, body_stream(response), providers::transcoder(&target, opts), spec.retry_on).await
}

/// The exchange of a Messages request with a candidate that speaks Messages
/// (`anthropic`, `vertex-anthropic`, Claude on `bedrock`): the client's body in the
/// candidate's envelope and its `anthropic-*` headers; the answer — events, a whole
/// message or an error body — passed on as it came (Bedrock's events unwrapped from
/// its frames, its errors in Anthropic's shape). With `count_tokens`, the request's
/// token count at the candidate's count endpoint instead, answered as Anthropic's
/// `{"input_tokens": N}` (Bedrock's own count converted to it).
pub(super) async fn messages_exchange(
    upstream: &UpstreamHandle,
    secrets: &Secrets,
    spec: &AttemptSpec<'_>,
    headers: &[(http::HeaderName, HeaderValue)],
    traceparent: Option<&HeaderValue>,
    count_tokens: bool,
) -> Result<Answer, AttemptError> {
    let cfg = &upstream.cfg;
    let input = NativeInput { model: spec.model, default_max_tokens: 0, client_body: &[], omit_hosted_tools: false };
    let target = target(cfg, &input);
    let native = providers::messages::native(&target, &spec.body, headers, spec.stream, count_tokens)
        .map_err(|e| refused_here(e.to_string()))?;
    let uri = upstream
        .native_uris
        .get(&cfg.base_url, &native.path)
        .map_err(|e| AttemptError::transport(Outcome::Connect, e))?;
    let bedrock = target.protocol == Protocol::Bedrock;
    let response = send(upstream, secrets, spec, &target, &native, &uri, traceparent, !bedrock).await?;
    let status = response.status();
    if count_tokens {
        let body = response.into_body().collect().await.map_err(|e| broken(&e))?.to_bytes();
        let count = if bedrock {
            providers::messages::token_count_of_bedrock(&body).map_err(|e| failed(e, spec.retry_on))?
        } else {
            body
        };
        return Ok(Answer::new(status, Some(HeaderValue::from_static("application/json")), count, None));
    }
    if !spec.stream {
        let body = response.into_body().collect().await.map_err(|e| broken(&e))?.to_bytes();
        let usage = providers::messages::usage_of_message(&body).map(|u| usage_of(&u));
        return Ok(Answer {
            usage,
            ..Answer::new(status, Some(HeaderValue::from_static("application/json")), body, None)
        });
    }
    let relay = if bedrock { providers::messages::bedrock_relay() } else { providers::messages::relay() };
    commit(status, body_stream(response), relay, spec.retry_on).await
}

/// The answer of an OpenAI-compatible candidate to a native Responses request: events
/// passed on as they came, read until the first content (an error before it fails
/// over), or a whole response and its usage.
pub(super) async fn responses_answer(
    status: StatusCode,
    response: egress::UpstreamResponse,
    spec: &AttemptSpec<'_>,
) -> Result<Answer, AttemptError> {
    if spec.stream {
        return commit(status, body_stream(response), providers::responses::relay(), spec.retry_on).await;
    }
    let body = response.into_body().collect().await.map_err(|e| broken(&e))?.to_bytes();
    let usage = providers::responses::usage_of_response(&body).map(|u| usage_of(&u));
    Ok(Answer { usage, ..Answer::new(status, Some(HeaderValue::from_static("application/json")), body, None) })
}

/// A response body as a stream of bytes.
fn body_stream(response: egress::UpstreamResponse) -> BodyStream {
    Box::pin(
        BodyDataStream::new(response.into_body()).map(|r| r.map_err(|e| StreamError::Transport(egress::describe(&e)))),
    )
}

/// Sends a native request and returns its 2xx response; a credential the upstream
/// says expired is refreshed once and the same candidate asked again. Any other answer
/// is the attempt's failure; with `raw_errors`, a non-retryable one is passed to the
/// client with the upstream's own body (a client of the same protocol matches its
/// wording), else as the OpenAI error.
#[allow(clippy::too_many_arguments)]
async fn send(
    upstream: &UpstreamHandle,
    secrets: &Secrets,
    spec: &AttemptSpec<'_>,
    target: &Target<'_>,
    native: &providers::NativeRequest,
    uri: &Uri,
    traceparent: Option<&HeaderValue>,
    raw_errors: bool,
) -> Result<egress::UpstreamResponse, AttemptError> {
    let cfg = &upstream.cfg;
    let mut refreshed = false;
    loop {
        let mut request = http::Request::new(Full::new(native.body.clone()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        let headers = request.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(X_REQUEST_ID, spec.request_id.header());
        // Before signing: SigV4 covers it like any other header.
        if let Some(tp) = traceparent {
            headers.insert(crate::telemetry::traces::TRACEPARENT, tp.clone());
        }
        if spec.stream && target.protocol != Protocol::Bedrock {
            headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        let client = match spec.via {
            Some(super::Via::Native(h) | super::Via::CountTokens(h)) => h,
            _ => &[],
        };
        for (name, value) in native.all_headers(client) {
            headers.insert(name.clone(), value.clone());
        }
        if let Some((name, value)) = secrets.header(&cfg.key) {
            headers.insert(name, value);
        } else if let Some(creds) = &upstream.credentials {
            creds
                .authorize(&Method::POST, uri, headers, &native.body, SystemTime::now())
                .await
                .map_err(|e| AttemptError::transport(Outcome::Connect, format!("credentials: {e}")))?;
        }
        let response = upstream.client.request(request).await.map_err(|e| classify(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let head = response.headers().clone();
        let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let error = providers::classify(target, status, &head, &body, unix_now().1);
        if error.kind == ErrorKind::AuthExpired
            && !refreshed
            && let Some(creds) = &upstream.credentials
        {
            tracing::info!(upstream = %cfg.name, "the upstream says the credential expired; refreshing it and asking again");
            creds.invalidate();
            refreshed = true;
            continue;
        }
        let mut failure = failed(error, spec.retry_on);
        if raw_errors && let Some(p) = &mut failure.passthrough {
            p.body = body;
        }
        return Err(failure);
    }
}

/// Reads a transcoded stream until its first content (or the end of an answer without
/// any): an error before it is the attempt's failure, so the walk fails over.
async fn commit(
    status: StatusCode,
    body: BodyStream,
    transcoder: Box<dyn Transcoder + Send>,
    retry_on: &[u16],
) -> Result<Answer, AttemptError> {
    let mut stream = Transcoded { body, transcoder, ready: VecDeque::new(), ended: false };
    let sse = || Some(HeaderValue::from_static("text/event-stream"));
    let mut first = BytesMut::new();
    loop {
        let Some(item) = stream.next_out(retry_on).await? else {
            return Ok(Answer::new(status, sse(), first.freeze(), None));
        };
        first.extend_from_slice(&item.bytes);
        if item.content {
            return Ok(Answer::new(status, sse(), first.freeze(), Some(Box::pin(stream))));
        }
    }
}

/// A committed stream of OpenAI chunks (an OpenAI-compatible upstream's, or a native
/// one's transcoded) re-encoded by `transcoder` (into the Messages events); the bytes
/// already read are fed first.
pub(super) fn reencode(answer: Answer, mut transcoder: Box<dyn Transcoder + Send>) -> Answer {
    let outs = transcoder.feed(&answer.first);
    let mut stream = Transcoded {
        body: answer.rest.unwrap_or_else(|| Box::pin(futures::stream::empty())),
        transcoder,
        ready: VecDeque::new(),
        ended: false,
    };
    stream.push(outs);
    Answer { first: Bytes::new(), rest: Some(Box::pin(stream)), ..answer }
}

fn broken(e: &hyper::Error) -> AttemptError {
    AttemptError::transport(Outcome::Reset, egress::describe(e))
}

/// One transcoded event.
struct Item {
    bytes: Bytes,
    content: bool,
}

/// A native body stream transcoded into OpenAI SSE events.
struct Transcoded {
    body: BodyStream,
    transcoder: Box<dyn Transcoder + Send>,
    /// Events transcoded but not yet handed out; an error ends the stream.
    ready: VecDeque<Result<Item, UpstreamError>>,
    ended: bool,
}

impl Transcoded {
    fn push(&mut self, outs: Vec<Out>) {
        for out in outs {
            match out {
                Out::Event { bytes, content } => self.ready.push_back(Ok(Item { bytes, content })),
                Out::Done => self.ended = true,
                Out::Error { error, .. } => {
                    self.ready.push_back(Err(error));
                    self.ended = true;
                }
            }
        }
    }

    /// The next event before the attempt committed: an error is the attempt's failure.
    async fn next_out(&mut self, retry_on: &[u16]) -> Result<Option<Item>, AttemptError> {
        loop {
            match self.ready.pop_front() {
                Some(Ok(item)) => return Ok(Some(item)),
                Some(Err(e)) => return Err(failed(e, retry_on)),
                None if self.ended => return Ok(None),
                None => {}
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    let outs = self.transcoder.feed(&chunk);
                    self.push(outs);
                }
                Some(Err(e)) => return Err(AttemptError::transport(Outcome::Reset, e.to_string())),
                None => {
                    let outs = self.transcoder.finish();
                    self.push(outs);
                    if self.ready.is_empty() {
                        return Err(AttemptError::transport(Outcome::Reset, "stream closed before its first content"));
                    }
                    self.ended = true;
                }
            }
        }
    }
}

impl Stream for Transcoded {
    type Item = Result<Bytes, StreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.ready.pop_front() {
                Some(Ok(item)) => return Poll::Ready(Some(Ok(item.bytes))),
                Some(Err(e)) => return Poll::Ready(Some(Err(StreamError::Upstream(e.message)))),
                None if self.ended => return Poll::Ready(None),
                None => {}
            }
            match self.body.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    let outs = self.transcoder.feed(&chunk);
                    self.push(outs);
                }
                Poll::Ready(Some(Err(e))) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    let outs = self.transcoder.finish();
                    self.push(outs);
                    self.ended = true;
                }
            }
        }
    }
}
