//! OpenTelemetry traces of requests (docs/design.md §11), with the GenAI semantic
//! conventions: one SERVER span per client request (`chat <model>`), and under it one
//! CLIENT span per upstream attempt and an INTERNAL span per cache lookup.
//!
//! Tracing is off unless an OTLP endpoint is configured ([`TraceArgs`]); a gateway
//! without one has no [`Tracing`], every [`RequestTrace`] is empty and no span is made
//! or attribute computed. When on, the spans are made with the OpenTelemetry API
//! directly (the gateway's own [`SdkTracer`], attributes as [`KeyValue`]s with static
//! keys), not through `tracing` and a bridging layer: the process's log subscriber never
//! sees them, each gateway (a test's, say) exports where it was told to, and a span costs
//! the request path only its own data. Finished spans are queued to the batch
//! processor's thread, which encodes and sends them ([`export`]).
//!
//! Prompt and completion text is never recorded unless `--trace-content` is given.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

use http::{HeaderMap, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, Span};
use sluice_crds::snapshot::{CandidateConfig, Protocol, UpstreamConfig};

use crate::endpoint::Endpoint;
use crate::outcome::Outcome;
use crate::usage::Usage;

pub mod export;

pub use export::TraceArgs;

/// The W3C trace-context header naming a span: read from the client, and sent upstream
/// naming the attempt's span when tracing.
pub const TRACEPARENT: &str = "traceparent";

/// A gateway's tracer and the provider that exports its spans.
pub struct Tracing {
    tracer: SdkTracer,
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    content: bool,
}

impl Tracing {
    /// Exports what was batched so far; waits for the export.
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        // The batch processor's flush blocks until its thread has exported.
        match tokio::task::spawn_blocking(move || provider.force_flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "exporting traces failed"),
            Err(e) => tracing::warn!(error = %e, "the trace flush task failed"),
        }
    }

    /// Exports what is left and stops exporting (on shutdown).
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => tracing::info!("traces flushed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "flushing traces at shutdown failed"),
            Err(e) => tracing::warn!(error = %e, "the trace shutdown task failed"),
        }
    }
}

/// The GenAI operation name of an endpoint.
pub fn operation(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat | Endpoint::Messages | Endpoint::Responses => "chat",
        Endpoint::Completions => "text_completion",
        Endpoint::Embeddings => "embeddings",
    }
}

/// The GenAI `gen_ai.provider.name` of a protocol.
pub fn provider_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Openai => "openai",
        Protocol::AzureOpenai => "azure.ai.openai",
        Protocol::Anthropic => "anthropic",
        Protocol::Bedrock => "aws.bedrock",
        Protocol::VertexAnthropic => "gcp.vertex_ai",
        Protocol::VertexGemini => "gcp.vertex_ai",
        Protocol::Gemini => "gcp.gemini",
    }
}

/// The attributes a request span gets at most (3 at its start, up to 10 at its end):
/// its attribute list is allocated once.
const REQUEST_ATTRIBUTES: usize = 14;

/// `a b` in one allocation (span names).
fn joined(a: &str, b: &str) -> Cow<'static, str> {
    let mut s = String::with_capacity(a.len() + 1 + b.len());
    s.push_str(a);
    s.push(' ');
    s.push_str(b);
    Cow::Owned(s)
}

/// A span's data, locked (the lock is never held across an await, so never contended
/// for long); a poisoned lock still holds a usable span.
fn lock(span: &Mutex<Span>) -> MutexGuard<'_, Span> {
    span.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The span of one client request; empty when tracing is off. It ends when the last
/// clone is dropped: whatever makes attempts for the request after the dispatch (a
/// stream's resume) holds a clone to parent them.
#[derive(Default, Clone)]
pub struct RequestTrace(Option<Arc<RequestSpan>>);

struct RequestSpan {
    span: Mutex<Span>,
    /// The span's own context: the parent of its attempts.
    context: SpanContext,
    tracer: SdkTracer,
    content: bool,
}

impl RequestTrace {
    /// Starts the request span, a child of the client's `traceparent` if it sent one.
    pub fn start(
        tracing: Option<&Tracing>,
        headers: &HeaderMap,
        endpoint: Endpoint,
        model: &str,
        route: &str,
        body: &[u8],
    ) -> Self {
        let Some(t) = tracing else { return Self::default() };
        let op = operation(endpoint);
        let mut attributes = Vec::with_capacity(REQUEST_ATTRIBUTES);
        attributes.extend([
            KeyValue::new("gen_ai.operation.name", op),
            KeyValue::new("gen_ai.request.model", model.to_owned()),
            KeyValue::new("sluice.route", route.to_owned()),
        ]);
        let builder = SpanBuilder {
            span_kind: Some(SpanKind::Server),
            attributes: Some(attributes),
            ..SpanBuilder::from_name(joined(op, model))
        };
        // Without a `traceparent` there is nothing to extract: the span starts a trace.
        let parent = if headers.contains_key(TRACEPARENT) {
            TraceContextPropagator::new().extract_with_context(&Context::new(), &HeaderExtractor(headers))
        } else {
            Context::new()
        };
        let mut span = t.tracer.build_with_context(builder, &parent);
        if t.content
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
            && let Some(input) = v.get("messages").or_else(|| v.get("prompt")).or_else(|| v.get("input"))
        {
            span.set_attribute(KeyValue::new("gen_ai.input.messages", input.to_string()));
        }
        let context = span.span_context().clone();
        Self(Some(Arc::new(RequestSpan {
            span: Mutex::new(span),
            context,
            tracer: t.tracer.clone(),
            content: t.content,
        })))
    }

    /// Starts the span of an attempt at `upstream`.
    pub fn attempt(&self, upstream: &str) -> AttemptTrace {
        let Some(r) = &self.0 else { return AttemptTrace(None) };
        // The request span is a local parent: its context says so (not remote).
        let parent = Context::new().with_remote_span_context(r.context.clone());
        let builder = SpanBuilder {
            span_kind: Some(SpanKind::Client),
            attributes: Some(vec![KeyValue::new("sluice.upstream", upstream.to_owned())]),
            ..SpanBuilder::from_name(joined("attempt", upstream))
        };
        AttemptTrace(Some(Mutex::new(r.tracer.build_with_context(builder, &parent))))
    }

    /// Starts the span of a cache lookup (`cache lookup`, INTERNAL); it ends when
    /// [`CacheTrace::result`] records what was found.
    pub fn cache_lookup(&self) -> CacheTrace {
        let Some(r) = &self.0 else { return CacheTrace(None) };
        let parent = Context::new().with_remote_span_context(r.context.clone());
        let builder = SpanBuilder { span_kind: Some(SpanKind::Internal), ..SpanBuilder::from_name("cache lookup") };
        CacheTrace(Some(r.tracer.build_with_context(builder, &parent)))
    }

    /// Whether the request is traced (tracing is on and this is not an empty trace).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Records what the whole answer of a non-streamed request says: its choices'
    /// `finish_reasons` and the model the upstream says answered (read by the caller in
    /// the pass that reads its usage) and, with `--trace-content`, the completion.
    pub fn answered(&self, body: &[u8], finish_reasons: Vec<String>, model: Option<&str>) {
        let Some(r) = &self.0 else { return };
        let mut span = lock(&r.span);
        response_model(&mut span, model);
        if !finish_reasons.is_empty() {
            let reasons = finish_reasons.into_iter().map(StringValue::from).collect();
            span.set_attribute(KeyValue::new("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons))));
        }
        if r.content
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
            && let Some(choices) = v.get("choices").filter(|c| c.is_array())
        {
            span.set_attribute(KeyValue::new("gen_ai.output.messages", choices.to_string()));
        }
    }

    /// Records the finish reason the client saw at the end of a stream (none when it
    /// broke) and the model its first chunk named.
    pub fn stream_finished(&self, reason: Option<&str>, model: Option<&str>) {
        let Some(r) = &self.0 else { return };
        let mut span = lock(&r.span);
        response_model(&mut span, model);
        if let Some(reason) = reason {
            let reasons = vec![StringValue::from(reason.to_string())];
            span.set_attribute(KeyValue::new("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons))));
        }
    }

    /// Records how the request ended, and which candidate served it (its upstream and
    /// price); the span ends when this trace is dropped.
    pub fn end(&self, status: u16, served: Option<(&UpstreamConfig, &CandidateConfig)>, usage: Option<&Usage>) {
        let Some(r) = &self.0 else { return };
        let mut span = lock(&r.span);
        span.set_attribute(KeyValue::new("http.response.status_code", i64::from(status)));
        if let Some((upstream, candidate)) = served {
            span.set_attribute(KeyValue::new("gen_ai.provider.name", provider_name(upstream.protocol)));
            span.set_attribute(KeyValue::new("sluice.upstream", upstream.name.clone()));
            if let Some(u) = usage {
                span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", saturating_i64(u.prompt_tokens)));
                span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", saturating_i64(u.completion_tokens)));
                let cost = candidate.price.map_or(0, |p| p.cost_of(&u.metered()));
                span.set_attribute(KeyValue::new("sluice.cost.nanodollars", saturating_i64(cost)));
            }
        }
        if status >= 500 || status == 429 {
            span.set_status(Status::error(format!("answered {status}")));
        }
    }
}

/// `gen_ai.response.model`: the model the upstream's answer names (a dated version such
/// as `gpt-4o-2024-08-06` where the request said `gpt-4o`), never the one configured; an
/// answer that names none leaves it out.
fn response_model(span: &mut Span, model: Option<&str>) {
    if let Some(m) = model.filter(|m| !m.is_empty()) {
        span.set_attribute(KeyValue::new("gen_ai.response.model", m.to_owned()));
    }
}

/// The span of a cache lookup; empty when tracing is off.
pub struct CacheTrace(Option<Span>);

impl CacheTrace {
    /// Records the lookup's result (`sluice.cache.result`: `hit` or `miss`) and ends it.
    pub fn result(self, result: &'static str) {
        if let Some(mut span) = self.0 {
            span.set_attribute(KeyValue::new("sluice.cache.result", result));
        }
    }
}

/// The span of one upstream attempt; empty when tracing is off. Ends when dropped.
pub struct AttemptTrace(Option<Mutex<Span>>);

impl AttemptTrace {
    /// An attempt that is not traced.
    pub fn none() -> Self {
        Self(None)
    }

    /// The W3C `traceparent` naming this attempt's span, for the upstream request.
    pub fn traceparent(&self) -> Option<HeaderValue> {
        let span = self.0.as_ref()?;
        let span = lock(span);
        let sc = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        // `00-{trace id}-{span id}-{flags}`, lowercase hex.
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex(&sc.trace_id().to_bytes(), &mut out[3..35]);
        out[35] = b'-';
        hex(&sc.span_id().to_bytes(), &mut out[36..52]);
        out[52] = b'-';
        hex(&[sc.trace_flags().to_u8()], &mut out[53..55]);
        HeaderValue::from_bytes(&out).ok()
    }

    /// Records the attempt's outcome (the metric's label); a failed attempt that the
    /// request failed over from also says why (`sluice.failover.reason`).
    pub fn outcome(&self, outcome: Outcome, failed_over: bool) {
        let Some(span) = &self.0 else { return };
        let mut span = lock(span);
        span.set_attribute(KeyValue::new("sluice.attempt.outcome", outcome.as_str()));
        if outcome != Outcome::Ok {
            if failed_over {
                span.set_attribute(KeyValue::new("sluice.failover.reason", outcome.as_str()));
            }
            span.set_status(Status::error(outcome.as_str()));
        }
    }
}

/// Lowercase hex of `bytes` into `out` (twice as long).
fn hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_padded() {
        let mut out = [0u8; 6];
        hex(&[0x00, 0x0a, 0xff], &mut out);
        assert_eq!(&out, b"000aff");
    }
}
