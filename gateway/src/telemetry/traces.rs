//! OpenTelemetry traces of requests (docs/design.md §11), with the GenAI semantic
//! conventions: one SERVER span per client request (`chat <model>`) and one CLIENT span
//! per upstream attempt under it.
//!
//! Tracing is off unless an OTLP endpoint is configured ([`TraceArgs`]); a gateway
//! without one has no [`Tracing`], every [`RequestTrace`] is empty and no span is made
//! or attribute computed. When on, the spans are `tracing` spans owned by the gateway's
//! own dispatcher (a registry with the `tracing-opentelemetry` layer, [`export`]), not
//! by the process's log subscriber: log lines stay as they were, and each gateway (a
//! test's, say) exports where it was told to.
//!
//! Prompt and completion text is never recorded unless `--trace-content` is given.

use http::{HeaderMap, HeaderValue};
use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry::{Array, StringValue, Value};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry::propagation::TextMapPropagator;
use sluice_crds::snapshot::Protocol;
use tracing::{Dispatch, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::attempt::outcome::Outcome;
use crate::config::Route;
use crate::relay::sse::Usage;
use crate::request::Endpoint;

pub mod export;

pub use export::TraceArgs;

/// A gateway's tracer: the dispatcher its spans belong to and the provider that
/// exports them.
pub struct Tracing {
    dispatch: Dispatch,
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    content: bool,
}

impl Tracing {
    /// Exports what was batched so far; waits for the export.
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        // The batch processor's flush blocks until its task (on this runtime) answers.
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
        Endpoint::Chat => "chat",
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

/// The span of one client request; empty when tracing is off. It ends when the last
/// clone is dropped: whatever makes attempts for the request after the dispatch (a
/// stream's resume) holds a clone to parent them.
#[derive(Default, Clone)]
pub struct RequestTrace {
    span: Option<Span>,
    content: bool,
}

impl RequestTrace {
    /// Starts the request span, a child of the client's `traceparent` if it sent one.
    pub fn start(tracing: Option<&Tracing>, headers: &HeaderMap, endpoint: Endpoint, model: &str, route: &Route, body: &[u8]) -> Self {
        let Some(t) = tracing else { return Self::default() };
        let op = operation(endpoint);
        let span = tracing::dispatcher::with_default(&t.dispatch, || {
            tracing::info_span!(
                target: "sluice::trace",
                parent: None,
                "request",
                otel.name = %format_args!("{op} {model}"),
                otel.kind = "server",
                gen_ai.operation.name = op,
                gen_ai.request.model = model,
                sluice.route = route.cfg.name.as_str(),
            )
        });
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
        if t.content
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
            && let Some(input) = v.get("messages").or_else(|| v.get("prompt")).or_else(|| v.get("input"))
        {
            span.set_attribute("gen_ai.input.messages", input.to_string());
        }
        Self { span: Some(span), content: t.content }
    }

    /// Starts the span of an attempt at `upstream`.
    pub fn attempt(&self, upstream: &str) -> AttemptTrace {
        let Some(parent) = &self.span else { return AttemptTrace(None) };
        // The OpenTelemetry parent is set, not the `tracing` one: the registry closes a
        // `tracing` parent through the thread's default dispatcher, which is the log
        // subscriber here, so the request span would never end.
        let child = parent
            .with_subscriber(|(_, dispatch)| {
                tracing::dispatcher::with_default(dispatch, || {
                    tracing::info_span!(
                        target: "sluice::trace",
                        parent: None,
                        "attempt",
                        otel.name = %format_args!("attempt {upstream}"),
                        otel.kind = "client",
                        sluice.upstream = upstream,
                    )
                })
            })
            .unwrap_or_else(Span::none);
        let _ = child.set_parent(parent.context());
        AttemptTrace(Some(child))
    }

    /// Records what the whole answer of a non-streamed request says (finish reasons and,
    /// with `--trace-content`, the completion).
    pub fn answered(&self, body: &[u8]) {
        let Some(span) = &self.span else { return };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else { return };
        let Some(choices) = v.get("choices").and_then(|c| c.as_array()) else { return };
        let reasons: Vec<StringValue> =
            choices.iter().filter_map(|c| c.get("finish_reason")?.as_str()).map(|r| StringValue::from(r.to_string())).collect();
        if !reasons.is_empty() {
            span.set_attribute("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons)));
        }
        if self.content {
            span.set_attribute("gen_ai.output.messages", serde_json::Value::Array(choices.clone()).to_string());
        }
    }

    /// Records the finish reason the client saw at the end of a stream (none when it broke).
    pub fn stream_finished(&self, reason: Option<&str>) {
        let (Some(span), Some(reason)) = (&self.span, reason) else { return };
        let reasons = vec![StringValue::from(reason.to_string())];
        span.set_attribute("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons)));
    }

    /// Records how the request ended; the span ends when this trace is dropped.
    pub fn end(&self, route: &Route, status: u16, candidate: Option<usize>, usage: Option<&Usage>) {
        let Some(span) = &self.span else { return };
        span.set_attribute("http.response.status_code", i64::from(status));
        if let Some(c) = candidate.and_then(|i| route.candidates.get(i)) {
            span.set_attribute("gen_ai.provider.name", provider_name(c.upstream.cfg.protocol));
            span.set_attribute("gen_ai.response.model", c.cfg.model.clone());
            span.set_attribute("sluice.upstream", c.upstream.cfg.name.clone());
            if let Some(u) = usage {
                span.set_attribute("gen_ai.usage.input_tokens", saturating_i64(u.prompt_tokens));
                span.set_attribute("gen_ai.usage.output_tokens", saturating_i64(u.completion_tokens));
                let (uncached, cache_read, cache_write, output) = u.priced_parts();
                let cost = c.cfg.price.map_or(0, |p| p.cost_nanos_usage(uncached, cache_read, cache_write, output));
                span.set_attribute("sluice.cost.nanodollars", saturating_i64(cost));
            }
        }
        if status >= 500 || status == 429 {
            span.set_status(Status::error(format!("answered {status}")));
        }
    }
}

/// The span of one upstream attempt; empty when tracing is off. Ends when dropped.
pub struct AttemptTrace(Option<Span>);

impl AttemptTrace {
    /// An attempt that is not traced.
    pub fn none() -> Self {
        Self(None)
    }

    /// The W3C `traceparent` naming this attempt's span, for the upstream request.
    pub fn traceparent(&self) -> Option<HeaderValue> {
        let span = self.0.as_ref()?;
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        if !sc.is_valid() {
            return None;
        }
        HeaderValue::from_str(&format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8())).ok()
    }

    /// Records the attempt's outcome (the metric's label); a failed attempt that the
    /// request failed over from also says why (`sluice.failover.reason`).
    pub fn outcome(&self, outcome: Outcome, failed_over: bool) {
        let Some(span) = &self.0 else { return };
        span.set_attribute("sluice.attempt.outcome", outcome.as_str());
        if outcome != Outcome::Ok {
            if failed_over {
                span.set_attribute("sluice.failover.reason", outcome.as_str());
            }
            span.set_status(Status::error(outcome.as_str()));
        }
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
