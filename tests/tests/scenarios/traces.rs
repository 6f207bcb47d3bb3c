//! docs/design.md §11 traces: a failover exported over OTLP (http/protobuf, and gRPC) to
//! a local receiver that decodes the protobuf, and the span tree checked — one SERVER
//! span for the request, continuing the client's trace, and one CLIENT span per attempt,
//! each named upstream in the `traceparent` it was sent.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::post;
use http_body::Frame;
use http_body_util::StreamBody;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use serde_json::json;
use sluice_gateway::telemetry::traces::TraceArgs;
use sluice_ledger::testing::eventually;
use sluice_tests::{GatewayOptions, TestGateway, route, upstream_doc, yaml};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What a local server received: decoded spans (receiver) or `traceparent`s (upstream).
#[derive(Clone, Default)]
struct Seen<T>(Arc<Mutex<Vec<T>>>);

impl<T: Clone> Seen<T> {
    fn push(&self, item: T) {
        if let Ok(mut v) = self.0.lock() {
            v.push(item);
        }
    }

    fn all(&self) -> Vec<T> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Serves `app` on 127.0.0.1:0; returns its base URL and the task (aborted on drop).
async fn serve(app: Router) -> anyhow::Result<(String, AbortOnDrop)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((format!("http://{addr}"), AbortOnDrop(task)))
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with an `ExportTraceServiceRequest`.
async fn receiver() -> anyhow::Result<(String, Seen<Span>, AbortOnDrop)> {
    let seen = Seen::<Span>::default();
    async fn export(
        State(seen): State<Seen<Span>>,
        body: Bytes,
    ) -> (StatusCode, [(&'static str, &'static str); 1], Vec<u8>) {
        let Ok(req) = ExportTraceServiceRequest::decode(body) else {
            return (
                StatusCode::BAD_REQUEST,
                [("content-type", "text/plain")],
                b"not an ExportTraceServiceRequest".to_vec(),
            );
        };
        for span in req.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans) {
            seen.push(span);
        }
        // An empty ExportTraceServiceResponse.
        (StatusCode::OK, [("content-type", "application/x-protobuf")], Vec::new())
    }
    let app = Router::new().route("/v1/traces", post(export)).with_state(seen.clone());
    let (base, task) = serve(app).await?;
    Ok((base, seen, task))
}

/// An OTLP/gRPC receiver: `TraceService/Export` over HTTP/2 cleartext, each message
/// length-prefixed (gRPC framing), answered with an empty response and `grpc-status: 0`.
async fn grpc_receiver() -> anyhow::Result<(String, Seen<Span>, AbortOnDrop)> {
    let seen = Seen::<Span>::default();
    async fn export(State(seen): State<Seen<Span>>, body: Bytes) -> Response {
        // One uncompressed message: flag byte 0, a big-endian u32 length, the message.
        let decoded = match body.get(..5) {
            Some([0, a, b, c, d]) if body.len() == 5 + u32::from_be_bytes([*a, *b, *c, *d]) as usize => {
                ExportTraceServiceRequest::decode(body.slice(5..)).ok()
            }
            _ => None,
        };
        let status = match decoded {
            Some(req) => {
                for span in req.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans) {
                    seen.push(span);
                }
                "0"
            }
            None => "3", // INVALID_ARGUMENT
        };
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static(status));
        let frames: Vec<Result<Frame<Bytes>, Infallible>> =
            vec![Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))), Ok(Frame::trailers(trailers))];
        let mut response = Response::new(axum::body::Body::new(StreamBody::new(futures::stream::iter(frames))));
        response.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
        response
    }
    let app = Router::new()
        .route("/opentelemetry.proto.collector.trace.v1.TraceService/Export", post(export))
        .with_state(seen.clone());
    let (base, task) = serve(app).await?;
    Ok((base, seen, task))
}

/// The model the test upstreams say answered: a dated version of the `chat-model`
/// the route sends, as OpenAI answers `gpt-4o-2024-08-06` for `gpt-4o`.
const ANSWERED_MODEL: &str = "chat-model-2026-11-01";

/// An OpenAI upstream answering `status` (a completion when 200), recording the
/// `traceparent` of each request.
async fn upstream(status: u16) -> anyhow::Result<(String, Seen<String>, AbortOnDrop)> {
    let seen = Seen::<String>::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(move |State(seen): State<Seen<String>>, headers: HeaderMap| async move {
                seen.push(headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("").to_string());
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = if status.is_success() {
                    json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": ANSWERED_MODEL,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "the completion text"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                    })
                } else {
                    json!({"error": {"message": "overloaded", "type": "server_error"}})
                };
                (status, axum::Json(body))
            }),
        )
        .with_state(seen.clone());
    let (base, task) = serve(app).await?;
    Ok((base, seen, task))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attributes, as JSON values (arrays of strings as JSON arrays).
fn attributes(span: &Span) -> HashMap<String, serde_json::Value> {
    fn value(v: Option<&Value>) -> serde_json::Value {
        match v {
            Some(Value::StringValue(s)) => json!(s),
            Some(Value::IntValue(i)) => json!({"int": i}),
            Some(Value::BoolValue(b)) => json!(b),
            Some(Value::DoubleValue(d)) => json!({"double": d}),
            Some(Value::ArrayValue(a)) => a.values.iter().map(|v| value(v.value.as_ref())).collect(),
            _ => serde_json::Value::Null,
        }
    }
    span.attributes.iter().map(|kv| (kv.key.clone(), value(kv.value.as_ref().and_then(|v| v.value.as_ref())))).collect()
}

#[tokio::test]
async fn a_failover_is_one_request_span_with_two_attempt_spans() -> anyhow::Result<()> {
    let (otlp, spans, _receiver) = receiver().await?;
    failover_trace(TraceArgs { otlp_endpoint: Some(otlp), ..TraceArgs::default() }, &spans).await
}

#[tokio::test]
async fn prompt_and_completion_text_only_when_asked_for() -> anyhow::Result<()> {
    let (otlp, spans, _receiver) = receiver().await?;
    failover_trace(TraceArgs { otlp_endpoint: Some(otlp), trace_content: true, ..TraceArgs::default() }, &spans).await
}

#[tokio::test]
async fn traces_go_over_grpc_too() -> anyhow::Result<()> {
    let (otlp, spans, _receiver) = grpc_receiver().await?;
    failover_trace(
        TraceArgs { otlp_endpoint: Some(otlp), otlp_protocol: Some("grpc".into()), ..TraceArgs::default() },
        &spans,
    )
    .await
}

/// Drives a failover (primary 503, backup 200) through a gateway exporting as `traces`
/// says, and checks the span tree `spans` received (with prompt and completion text only
/// if `traces.trace_content`).
async fn failover_trace(traces: TraceArgs, spans: &Seen<Span>) -> anyhow::Result<()> {
    let content = traces.trace_content;
    let (primary, primary_seen, _p) = upstream(503).await?;
    let (backup, backup_seen, _b) = upstream(200).await?;
    let manifests = yaml(&[
        upstream_doc("primary", &format!("{primary}/v1")),
        upstream_doc("backup", &format!("{backup}/v1")),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]),
    ]);
    let opts = GatewayOptions { traces: Some(traces), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&manifests, opts).await?;

    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .post(format!("{}/v1/chat/completions", gw.base))
        .header("traceparent", format!("00-{client_trace}-{client_span}-01"))
        .json(&json!({"model": "chat-model", "messages": [{"role": "user", "content": "the prompt text"}]}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("x-sluice-failover").and_then(|v| v.to_str().ok()), Some("http_5xx"));

    // Batches leave every few seconds; a flush sends this one now.
    gw.state.books.traces.as_ref().context("tracing is on")?.flush().await;
    assert!(
        eventually(Duration::from_secs(10), async || spans.all().len() >= 3).await,
        "spans received: {:?}",
        spans.all().iter().map(|s| (s.name.clone(), s.kind)).collect::<Vec<_>>()
    );
    let all = spans.all();
    assert_eq!(
        all.len(),
        3,
        "one request span and two attempt spans: {:?}",
        all.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    let request: Vec<&Span> = all.iter().filter(|s| s.kind == SpanKind::Server as i32).collect();
    let [request] = request.as_slice() else { anyhow::bail!("one SERVER span, got {}", request.len()) };
    assert_eq!(request.name, "chat chat-model");
    assert_eq!(hex(&request.trace_id), client_trace, "the client's trace is continued");
    assert_eq!(hex(&request.parent_span_id), client_span, "the request span is the child of the client's");
    let a = attributes(request);
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "chat-model");
    assert_eq!(a["gen_ai.response.model"], ANSWERED_MODEL, "the model the upstream answered, not the one configured");
    assert_eq!(a["gen_ai.usage.input_tokens"], json!({"int": 7}));
    assert_eq!(a["gen_ai.usage.output_tokens"], json!({"int": 3}));
    assert_eq!(a["gen_ai.response.finish_reasons"], json!(["stop"]));
    assert_eq!(a["sluice.route"], "chat");
    assert_eq!(a["sluice.cost.nanodollars"], json!({"int": 0}), "no price configured");
    if content {
        let text = |key: &str| a.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        assert!(text("gen_ai.input.messages").contains("the prompt text"), "{a:?}");
        assert!(text("gen_ai.output.messages").contains("the completion text"), "{a:?}");
    } else {
        // No prompt or completion text unless asked for.
        let text = format!("{:?}", all);
        assert!(!text.contains("the prompt text") && !text.contains("the completion text"), "{text}");
    }

    let mut attempts: Vec<&Span> = all.iter().filter(|s| s.kind == SpanKind::Client as i32).collect();
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    let [first, second] = attempts.as_slice() else { anyhow::bail!("two CLIENT spans, got {}", attempts.len()) };
    for s in [first, second] {
        assert_eq!(s.trace_id, request.trace_id);
        assert_eq!(s.parent_span_id, request.span_id, "an attempt span is the request span's child");
    }
    let (a1, a2) = (attributes(first), attributes(second));
    assert_eq!(
        (&a1["sluice.upstream"], &a1["sluice.attempt.outcome"], &a1["sluice.failover.reason"]),
        (&json!("primary"), &json!("http_5xx"), &json!("http_5xx"))
    );
    assert_eq!((&a2["sluice.upstream"], &a2["sluice.attempt.outcome"]), (&json!("backup"), &json!("ok")));
    assert!(!a2.contains_key("sluice.failover.reason"), "the serving attempt did not fail over");

    // Each upstream was told its attempt's span.
    assert_eq!(primary_seen.all(), vec![format!("00-{client_trace}-{}-01", hex(&first.span_id))]);
    assert_eq!(backup_seen.all(), vec![format!("00-{client_trace}-{}-01", hex(&second.span_id))]);
    Ok(())
}

#[tokio::test]
async fn a_streamed_answer_records_the_finish_reason_the_client_saw_and_the_model_that_answered() -> anyhow::Result<()>
{
    let (otlp, spans, _receiver) = receiver().await?;
    let stream = format!(
        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"{ANSWERED_MODEL}\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"hi\"}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"{ANSWERED_MODEL}\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
         data: [DONE]\n\n"
    );
    let app = Router::new()
        .route("/v1/chat/completions", post(move || async move { ([("content-type", "text/event-stream")], stream) }));
    let (base, _upstream) = serve(app).await?;
    let manifests = yaml(&[upstream_doc("only", &format!("{base}/v1")), route("chat", "chat-model", &[("only", 100)])]);
    let traces = TraceArgs { otlp_endpoint: Some(otlp), ..TraceArgs::default() };
    let gw = TestGateway::start_with(&manifests, GatewayOptions { traces: Some(traces), ..GatewayOptions::default() })
        .await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.events.last().is_some_and(|e| e.is_done()), "{}", s.body);
    gw.state.books.traces.as_ref().context("tracing is on")?.flush().await;
    let server = async || spans.all().iter().any(|s| s.kind == SpanKind::Server as i32);
    assert!(eventually(Duration::from_secs(10), server).await, "no request span arrived");
    let all = spans.all();
    let request = all.iter().find(|s| s.kind == SpanKind::Server as i32).context("the request span")?;
    let a = attributes(request);
    assert_eq!(a["gen_ai.response.finish_reasons"], json!(["stop"]));
    assert_eq!(a["gen_ai.request.model"], "chat-model");
    assert_eq!(a["gen_ai.response.model"], ANSWERED_MODEL, "the model the stream's first chunk names");
    Ok(())
}

/// A gateway with tracing on, exporting to a local receiver, serving `docs`.
async fn traced_gateway(docs: &[sluice_tests::Doc]) -> anyhow::Result<(TestGateway, Seen<Span>, AbortOnDrop)> {
    let (otlp, spans, receiver) = receiver().await?;
    let traces = TraceArgs { otlp_endpoint: Some(otlp), ..TraceArgs::default() };
    let gw = TestGateway::start_with(&yaml(docs), GatewayOptions { traces: Some(traces), ..GatewayOptions::default() })
        .await?;
    Ok((gw, spans, receiver))
}

/// The attempt spans under `request`, as (upstream, outcome).
fn attempts_under(all: &[Span], request: &Span) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = all
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32 && s.parent_span_id == request.span_id)
        .map(|s| {
            let a = attributes(s);
            let text = |k: &str| a.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            (text("sluice.upstream"), text("sluice.attempt.outcome"))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_resumed_streams_continuation_is_an_attempt_like_any_other() -> anyhow::Result<()> {
    let [primary, backup] = sluice_tests::ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        primary.doc(),
        backup.doc(),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]).with("spec.failover.midStream", "resume"),
    ];
    let (gw, spans, _receiver) = traced_gateway(&docs).await?;
    primary.script(json!({"chunks": 8, "reset_after_chunks": 3, "chunk_ms": 5}))?;
    backup.script(json!({"chunks": 8}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete(), "resumed to its end: {:?}", s.datas());
    assert_eq!(backup.requests(), 1, "one continuation");

    // The continuation's first byte is in the histogram, as the first attempt's is.
    for upstream in ["primary", "backup"] {
        let n = gw.count("sluice_upstream_first_byte_seconds_count", &[("upstream", upstream)]);
        assert_eq!(n, 1.0, "{upstream}'s first byte:\n{}", gw.metrics());
    }
    // And its span is an attempt under the request's, with its outcome, when the stream ends.
    gw.state.books.traces.as_ref().context("tracing is on")?.flush().await;
    let three = async || spans.all().len() >= 3;
    assert!(eventually(Duration::from_secs(10), three).await, "spans: {:?}", spans.all().len());
    let all = spans.all();
    let request = all.iter().find(|s| s.kind == SpanKind::Server as i32).context("the request span")?;
    let attempts = attempts_under(&all, request);
    assert_eq!(attempts, [("backup".into(), "ok".into()), ("primary".into(), "reset".into())], "{attempts:?}");
    Ok(())
}

#[tokio::test]
async fn a_synthetic_check_is_traced_and_timed_like_a_client_request() -> anyhow::Result<()> {
    let only = sluice_tests::ChaosUpstream::start("only").await?;
    let docs =
        [only.doc(), route("chat", "chat-model", &[("only", 100)]).with("spec.synthetic", json!({"interval": "1s"}))];
    let (gw, spans, _receiver) = traced_gateway(&docs).await?;
    let checked = async || {
        gw.count("sluice_synthetic_checks_total", &[("route", "chat"), ("upstream", "only"), ("outcome", "ok")]) >= 1.0
    };
    assert!(eventually(Duration::from_secs(10), checked).await, "no check:\n{}", gw.metrics());
    assert!(gw.count("sluice_upstream_first_byte_seconds_count", &[("upstream", "only")]) >= 1.0, "{}", gw.metrics());

    gw.state.books.traces.as_ref().context("tracing is on")?.flush().await;
    let two = async || spans.all().len() >= 2;
    assert!(eventually(Duration::from_secs(10), two).await, "spans: {:?}", spans.all().len());
    let all = spans.all();
    let request = all.iter().find(|s| s.kind == SpanKind::Server as i32).context("the check's span")?;
    assert_eq!(request.name, "chat chat-model");
    assert_eq!(attributes(request)["http.response.status_code"], json!({"int": 200}));
    let attempts = attempts_under(&all, request);
    assert_eq!(attempts.first(), Some(&("only".to_string(), "ok".to_string())), "{attempts:?}");
    Ok(())
}

#[tokio::test]
async fn a_cache_lookup_is_a_span_under_the_request_with_its_result() -> anyhow::Result<()> {
    let only = sluice_tests::ChaosUpstream::start("only").await?;
    let docs =
        [only.doc(), route("chat", "chat-model", &[("only", 100)]).with("spec.cache.completions", "deterministic")];
    let (gw, spans, _receiver) = traced_gateway(&docs).await?;
    let client = gw.client()?;
    for _ in 0..2 {
        assert_eq!(client.chat("chat-model", json!({"temperature": 0})).await?.status, 200);
    }
    gw.state.books.traces.as_ref().context("tracing is on")?.flush().await;
    let lookups = async || spans.all().iter().filter(|s| s.name == "cache lookup").count() == 2;
    assert!(eventually(Duration::from_secs(10), lookups).await, "spans: {:?}", spans.all().len());
    let all = spans.all();
    let mut results = Vec::new();
    for lookup in all.iter().filter(|s| s.name == "cache lookup") {
        assert_eq!(lookup.kind, SpanKind::Internal as i32);
        let parent = all.iter().find(|s| s.span_id == lookup.parent_span_id).context("the lookup's parent")?;
        assert_eq!(parent.kind, SpanKind::Server as i32, "a lookup is under its request's span");
        results.push(attributes(lookup)["sluice.cache.result"].as_str().unwrap_or_default().to_string());
        // The request answered from the cache made no attempt.
        if results.last().map(String::as_str) == Some("hit") {
            assert!(attempts_under(&all, parent).is_empty());
        }
    }
    results.sort();
    assert_eq!(results, ["hit", "miss"]);
    Ok(())
}
