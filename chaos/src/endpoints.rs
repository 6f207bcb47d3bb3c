//! HTTP handlers of the chaos upstream's OpenAI and Azure OpenAI paths, and
//! of its control endpoints.
//!
//! One inference path serves chat, completions and embeddings, in this
//! order: count → plan (headers over the default script) → read the body →
//! check auth → delay before headers → hang → reset before headers → scripted error →
//! answer (plain, cut, or SSE).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};

use super::ChaosState;
use super::conn::ConnHandle;
use super::inference::InferenceRequest;
use super::plan::{Plan, error_kind, json_response};
use super::protocol::{Protocol, query_param};
use super::script::{Script, ScriptError};
use super::stream::{self, BodyCtx, Cut, Sse};
use super::tools;
use super::wire::{self, Endpoint, Meta, ToolCall, Usage};

/// Largest request body read; prompts are only measured, never kept.
pub(crate) const BODY_LIMIT: usize = 64 * 1024 * 1024;

pub(crate) async fn chat(State(state): State<ChaosState>, request: Request) -> Response {
    inference(state, Endpoint::Chat, None, request).await
}

pub(crate) async fn completions(State(state): State<ChaosState>, request: Request) -> Response {
    inference(state, Endpoint::Completion, None, request).await
}

pub(crate) async fn embeddings(State(state): State<ChaosState>, request: Request) -> Response {
    inference(state, Endpoint::Embedding, None, request).await
}

/// Azure OpenAI's chat: the deployment names the model (the body's `model`
/// is ignored); without `api-version` Azure answers 404.
pub(crate) async fn azure(
    State(state): State<ChaosState>,
    Path(deployment): Path<String>,
    request: Request,
) -> Response {
    if query_param(request.uri().query(), "api-version").is_none_or(|v| v.is_empty()) {
        let body = serde_json::json!({"error": {"code": "404", "message": "Resource not found"}});
        return json_response(StatusCode::NOT_FOUND, Bytes::from(body.to_string()));
    }
    inference(state, Endpoint::Chat, Some(deployment), request).await
}

/// `POST /_chaos/expire-tokens`: every access token issued so far expires.
pub(crate) async fn expire_tokens(State(state): State<ChaosState>) -> Response {
    state.expire_tokens();
    control_view(&state)
}

/// `GET /models`: always healthy, so probes cannot see model-level chaos.
pub(crate) async fn models(State(state): State<ChaosState>) -> Response {
    state.inner.counters.model_list();
    json_response(StatusCode::OK, Bytes::from_static(wire::MODELS_BODY.as_bytes()))
}

/// `GET /_chaos`: the default script and the counters.
pub(crate) async fn show(State(state): State<ChaosState>) -> Response {
    control_view(&state)
}

/// `POST /_chaos`: replaces the default script (`{}` resets it).
pub(crate) async fn set(State(state): State<ChaosState>, body: Bytes) -> Response {
    match Script::from_json(&body).and_then(|s| state.set_script(s)) {
        Ok(()) => control_view(&state),
        Err(e) => client_error(&e.to_string(), "invalid_chaos_script"),
    }
}

/// Any other path: an OpenAI-shaped 404.
pub(crate) async fn not_found() -> Response {
    let body = wire::error_body("chaos upstream: no such endpoint", "invalid_request_error", "not_found");
    json_response(StatusCode::NOT_FOUND, body)
}

/// `deployment` is set for Azure OpenAI, `None` for OpenAI.
async fn inference(state: ChaosState, endpoint: Endpoint, deployment: Option<String>, request: Request) -> Response {
    let protocol = match deployment {
        Some(_) => Protocol::AzureOpenAi,
        None => Protocol::OpenAi,
    };
    let counters = Arc::clone(&state.inner.counters);
    let (seq, in_flight) = counters.begin(protocol);
    let (parts, body) = request.into_parts();
    let conn = parts.extensions.get::<ConnectInfo<ConnHandle>>().map(|ConnectInfo(handle)| handle.clone());

    let plan = match state.plan_for(&parts.headers) {
        Ok(plan) => plan,
        Err(e) => {
            counters.status(400);
            return client_error(&e.to_string(), "invalid_chaos_header");
        }
    };
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(body) => body,
        Err(e) => {
            counters.status(400);
            return client_error(&format!("cannot read request body: {e}"), "invalid_request");
        }
    };
    if let Some(refused) = state.refuse_auth(protocol, &parts, &body) {
        counters.status(refused.status().as_u16());
        return refused;
    }
    let mut req = match InferenceRequest::parse(&body) {
        Ok(req) => req,
        Err(e) => {
            counters.status(400);
            return client_error(&format!("invalid request body: {e}"), "invalid_request");
        }
    };

    if let Some(deployment) = deployment {
        req.model = deployment;
    }
    if endpoint == Endpoint::Embedding {
        counters.embedding_inputs(req.input_hashes.len() as u64);
    }
    let failure = plan.failure(req.answers_tool);
    let streaming = req.stream && endpoint != Endpoint::Embedding && failure.is_none();
    stream::sleep(plan.headers_delay).await;
    if !streaming {
        stream::sleep(plan.first_byte).await;
    }
    if plan.hang {
        counters.hang();
        return std::future::pending().await;
    }
    if plan.reset_after == Some(0) {
        counters.reset();
        return reset_before_headers(conn);
    }
    if let Some(reply) = failure {
        counters.status(reply.status.as_u16());
        return reply.response();
    }

    counters.status(plan.success_status.as_u16());
    let ctx = BodyCtx { counters: Arc::clone(&counters), conn, _in_flight: in_flight };
    answer(&plan, endpoint, seq, &req, streaming, ctx)
}

/// The successful answer: SSE, a plain body, or a plain body cut short.
fn answer(
    plan: &Arc<Plan>,
    endpoint: Endpoint,
    seq: u64,
    req: &InferenceRequest,
    streaming: bool,
    ctx: BodyCtx,
) -> Response {
    let chunks = req.completion_chunks(plan.chunks);
    let tool = tool_call(plan, endpoint, seq, req, chunks);
    let finish = match (chunks < plan.chunks, &tool) {
        (true, _) => "length",
        (false, Some(_)) => "tool_calls",
        (false, None) => "stop",
    };
    let completion = match endpoint {
        Endpoint::Embedding => 0,
        Endpoint::Chat | Endpoint::Completion => u64::from(chunks),
    };
    let usage = Usage { prompt: req.prompt_tokens, completion };
    let meta = Meta { endpoint, seq, created: unix_now(), model: &req.model };

    if streaming {
        ctx.counters.stream_started();
        let sse = Sse {
            prefix: wire::event_prefix(&meta),
            ctx,
            plan: Arc::clone(plan),
            endpoint,
            chunks,
            finish,
            usage: req.include_usage.then_some(usage),
            tool,
        };
        let mut response = Response::new(sse.into_body());
        *response.status_mut() = plan.success_status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }

    let full = match &tool {
        Some(call) => wire::tool_call_body(&meta, call, usage, finish),
        None => {
            let text = if chunks < plan.chunks { wire::truncate(&plan.content, chunks) } else { plan.content.clone() };
            wire::full_body(&meta, &text, usage, finish, &req.input_hashes)
        }
    };
    let cut = match (plan.reset_after, plan.hang_after) {
        (Some(_), _) => Some(Cut::Reset),
        (None, Some(_)) => Some(Cut::Hang),
        (None, None) => None,
    };
    let mut response = json_response(plan.success_status, Bytes::new());
    *response.body_mut() = match cut {
        Some(cut) => stream::cut_body(full, cut, ctx),
        None => Body::from(full),
    };
    response
}

/// The chat answer's call of the scripted tool, if it makes one: its
/// arguments in one piece per content chunk.
fn tool_call(plan: &Plan, endpoint: Endpoint, seq: u64, req: &InferenceRequest, chunks: u32) -> Option<ToolCall> {
    if endpoint != Endpoint::Chat {
        return None;
    }
    let name = tools::called(plan, &req.tools, req.answers_tool)?;
    let words = (0..chunks).map(|i| wire::word(i).to_owned()).collect();
    let pieces = tools::arguments(plan.tool_arguments.as_deref(), 0..chunks, plan.chunks, words, false);
    Some(ToolCall { id: format!("call_chaos_{seq}"), name, pieces })
}

/// Resets the connection instead of answering. The response returned is
/// never written: the aborted connection fails hyper's first write.
pub(crate) fn reset_before_headers(conn: Option<ConnHandle>) -> Response {
    match conn {
        Some(conn) => conn.abort(),
        // Served by a plain `axum::serve` (not [`super::serve`]): the best
        // left is a body that breaks right after the headers.
        None => tracing::warn!("chaos: reset before headers needs chaos::serve; breaking the body"),
    }
    let body = Body::from_stream(futures::stream::once(async { Err::<Bytes, _>(stream::ResetError) }));
    Response::new(body)
}

fn control_view(state: &ChaosState) -> Response {
    let view = serde_json::json!({
        "script": state.script(),
        "counters": state.counters(),
    });
    json_response(StatusCode::OK, Bytes::from(view.to_string()))
}

/// A 400 made by the chaos upstream itself (bad script, bad request).
fn client_error(message: &str, code: &str) -> Response {
    let (kind, _) = error_kind(StatusCode::BAD_REQUEST);
    json_response(StatusCode::BAD_REQUEST, wire::error_body(message, kind, code))
}

/// Now, in Unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl ChaosState {
    /// The plan for one request: the default one unless `x-chaos-*` headers
    /// are present, then those laid over the default script.
    pub(crate) fn plan_for(&self, headers: &http::HeaderMap) -> Result<Arc<Plan>, ScriptError> {
        let defaults = self.defaults();
        match Script::from_headers(headers)? {
            None => Ok(Arc::clone(&defaults.plan)),
            Some(script) => Ok(Arc::new(Plan::new(&script.over(&defaults.script)))),
        }
    }
}
