//! One attempt against one upstream, bounded by the candidate budget and (for streams)
//! the first-byte watchdog, and classified into an [`Outcome`].

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, StatusCode, header};

use crate::config::UpstreamHandle;
use crate::config::source::Secrets;
use crate::dispatch::backoff;
use crate::outcome::{AttemptError, Outcome, Passthrough};

/// The rest of an upstream body.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// An attempt that produced its first body byte: the request is committed to it.
pub struct Started {
    /// The upstream that answered.
    pub upstream: Arc<UpstreamHandle>,
    /// Upstream status (2xx).
    pub status: StatusCode,
    /// Upstream content type.
    pub content_type: Option<http::HeaderValue>,
    /// The first chunk of a stream, or the whole body otherwise.
    pub first: Bytes,
    /// The rest of a stream.
    pub rest: Option<BodyStream>,
    /// Time from sending to the first body byte.
    pub first_byte: Duration,
    /// Holds the upstream's in-flight count until the answer is finished.
    pub in_flight: InFlight,
}

/// Counts a request in flight on an upstream while alive.
pub struct InFlight(Arc<std::sync::atomic::AtomicU32>);

impl InFlight {
    /// Increments the counter.
    pub fn enter(counter: &Arc<std::sync::atomic::AtomicU32>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one attempt needs.
pub struct AttemptSpec<'a> {
    /// The endpoint called.
    pub endpoint: crate::request::Endpoint,
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
    pub request_id: &'a str,
}

/// Runs one attempt.
pub async fn run(upstream: &Arc<UpstreamHandle>, secrets: &Secrets, spec: AttemptSpec<'_>) -> Result<Started, AttemptError> {
    let start = Instant::now();
    let in_flight = InFlight::enter(&upstream.in_flight);
    let (limit, limit_outcome) = match spec.first_byte {
        Some(fb) if fb < spec.budget => (fb, Outcome::FirstByteTimeout),
        _ => (spec.budget, Outcome::Budget),
    };
    let mut request = upstream
        .client
        .post(upstream.urls.of(spec.endpoint).clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-request-id", spec.request_id)
        .body(spec.body);
    if spec.stream {
        request = request.header(header::ACCEPT, "text/event-stream");
    }
    if let Some((name, value)) = secrets.header(&upstream.cfg.key) {
        request = request.header(name, value);
    }
    let exchange = async {
        let response = request.send().await.map_err(classify)?;
        let status = response.status();
        if !status.is_success() {
            return Err(refusal(response, spec.retry_on).await);
        }
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        if spec.stream {
            let mut body: BodyStream = Box::pin(response.bytes_stream());
            // Skip empty chunks: the watchdog waits for a real byte of the body.
            loop {
                match body.next().await {
                    Some(Ok(chunk)) if chunk.is_empty() => continue,
                    Some(Ok(chunk)) => return Ok((status, content_type, chunk, Some(body))),
                    Some(Err(e)) => return Err(classify(e)),
                    None => return Err(AttemptError::transport(Outcome::Reset, "stream closed before its first byte")),
                }
            }
        }
        let body = response.bytes().await.map_err(classify)?;
        Ok((status, content_type, body, None))
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Ok((status, content_type, first, rest))) => {
            let first_byte = start.elapsed();
            Ok(Started { upstream: upstream.clone(), status, content_type, first, rest, first_byte, in_flight })
        }
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let what = if limit_outcome == Outcome::FirstByteTimeout { "no first byte" } else { "no answer" };
            Err(AttemptError::transport(limit_outcome, format!("{what} within {}ms", limit.as_millis())))
        }
    }
}

/// A non-2xx answer: retryable when listed in `retryOn`, passed through otherwise.
async fn refusal(response: reqwest::Response, retry_on: &[u16]) -> AttemptError {
    let status = response.status();
    let mut headers = HeaderMap::new();
    if let Some(ct) = response.headers().get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, ct.clone());
    }
    let retry_after = backoff::retry_after(response.headers(), SystemTime::now());
    let retryable = retry_on.contains(&status.as_u16());
    // The body of a retryable refusal is only read for the log; a passthrough needs it whole.
    let body = response.bytes().await.unwrap_or_default();
    let outcome = Outcome::of_status(status);
    AttemptError {
        outcome,
        detail: status.to_string(),
        retryable,
        retry_after,
        passthrough: (!retryable).then_some(Passthrough { status, headers, body }),
    }
}

/// Classifies a transport error.
pub fn classify(e: reqwest::Error) -> AttemptError {
    let outcome = if e.is_connect() { Outcome::Connect } else { Outcome::Reset };
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    AttemptError::transport(outcome, detail)
}
