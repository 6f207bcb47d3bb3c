//! The native protocols of the chaos upstream: Anthropic, Claude and Gemini
//! on Vertex AI, Gemini, Bedrock Converse (docs/design.md §6, §9), and
//! OpenAI's Responses API (`/v1/responses`, counted under `openai`).
//!
//! Every call goes the way of the OpenAI path, with the protocol's own
//! shapes: count → plan → read the body → check auth → check the body →
//! delay before headers → hang → reset before headers → scripted error →
//! answer (a native body, cut or whole, or a native stream).
//!
//! Formats are written from the providers' documentation, never from the
//! gateway's translation code, so that tests through the gateway check it.

mod anthropic;
mod bedrock;
mod count;
pub(crate) mod errors;
mod google;
mod request;
mod responses;
mod stream;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use serde_json::Value;

use super::ChaosState;
use super::conn::ConnHandle;
use super::endpoints::BODY_LIMIT;
use super::plan::{Plan, json_response};
use super::protocol::{self, Call, Family, NoCall, Protocol};
use super::stream::{BodyCtx, Cut, cut_body, sleep};
use super::{tools, wire};

pub(crate) use google::error_info as google_error_info;
use request::NativeRequest;
use stream::NativeStream;

/// How an answer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    Length,
    Tool,
}

/// Token counts in the form every protocol reports them from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NativeUsage {
    /// Uncached prompt tokens.
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
}

/// Everything a native body or stream is rendered from.
pub(crate) struct Answer {
    pub(crate) id: String,
    pub(crate) seq: u64,
    pub(crate) model: String,
    /// Content pieces: words, or pieces of the tool call's input JSON.
    pub(crate) pieces: Vec<String>,
    /// The tool called, if the answer is a tool call.
    pub(crate) tool: Option<String>,
    pub(crate) finish: Finish,
    pub(crate) usage: NativeUsage,
    /// When the answer was made, in Unix seconds (Responses `created_at`).
    pub(crate) created: u64,
    /// The request's settings the answer repeats (Responses API).
    pub(crate) echo: serde_json::Map<String, Value>,
    /// Gemini streams: SSE (`alt=sse`) or a JSON array.
    pub(crate) sse: bool,
    /// Native name of the in-stream error (the script's `error_code`).
    pub(crate) error_name: Option<String>,
    /// Anthropic: the answer searched the web first (the request declared the
    /// server-side web search tool and the answer is text): a `server_tool_use` block,
    /// its `web_search_tool_result`, then the text citing the one result.
    pub(crate) web_search: bool,
}

impl Answer {
    /// The tool call's input as an object (`{}` when it has no arguments or
    /// was cut short).
    pub(crate) fn tool_input(&self) -> Value {
        serde_json::from_str::<Value>(&self.pieces.concat())
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()))
    }
}

/// `POST /v1/messages` and `/messages`.
pub(crate) async fn messages(State(state): State<ChaosState>, request: Request) -> Response {
    let call = Call::new(Protocol::Anthropic, None, false);
    inference(state, Ok(call), request).await
}

/// `POST /v1/responses` and `/responses`: OpenAI's Responses API, counted
/// under `openai` and checked with its key, as the chat path is.
pub(crate) async fn responses(State(state): State<ChaosState>, request: Request) -> Response {
    let call = Call { family: Family::Responses, ..Call::new(Protocol::OpenAi, None, false) };
    inference(state, Ok(call), request).await
}

/// `POST /openai/responses?api-version=…` (and `/responses` under a base that ends in
/// `/openai`): Azure OpenAI's Responses API, the deployment as the body's `model`,
/// checked with the `api-key` header and counted under `azure-openai`; without
/// `api-version` Azure answers 404.
pub(crate) async fn azure_responses(State(state): State<ChaosState>, request: Request) -> Response {
    let query = request.uri().query().unwrap_or_default();
    let versioned = query.split('&').any(|p| p.strip_prefix("api-version=").is_some_and(|v| !v.is_empty()));
    if !versioned {
        let body = serde_json::json!({"error": {"code": "404", "message": "Resource not found"}});
        return super::plan::json_response(http::StatusCode::NOT_FOUND, bytes::Bytes::from(body.to_string()));
    }
    let call = Call { family: Family::Responses, ..Call::new(Protocol::AzureOpenAi, None, false) };
    inference(state, Ok(call), request).await
}

/// `POST /v1/messages/count_tokens` and `/messages/count_tokens`.
pub(crate) async fn count_tokens(State(state): State<ChaosState>, request: Request) -> Response {
    let call = Call { count_tokens: true, ..Call::new(Protocol::Anthropic, None, false) };
    count::count(state, &call, request).await
}

/// `POST /v1/projects/…` or `/v1beta1/projects/…` (Vertex AI, stable and
/// beta API versions).
pub(crate) async fn vertex(State(state): State<ChaosState>, request: Request) -> Response {
    let path = request.uri().path();
    let rest = path.strip_prefix("/v1/").or_else(|| path.strip_prefix("/v1beta1/")).unwrap_or_default().to_owned();
    inference(state, protocol::vertex(&rest), request).await
}

/// `POST /v1beta/models/…` or `/v1/models/…` (Gemini on AI Studio, beta and
/// stable API versions).
pub(crate) async fn gemini(State(state): State<ChaosState>, request: Request) -> Response {
    let path = request.uri().path();
    let tail = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))
        .unwrap_or_default()
        .to_owned();
    inference(state, protocol::gemini(&tail), request).await
}

/// `POST /model/{id}/converse|converse-stream|invoke|invoke-with-response-stream|count-tokens`
/// (Bedrock).
pub(crate) async fn bedrock(State(state): State<ChaosState>, request: Request) -> Response {
    let rest = request.uri().path().strip_prefix("/model/").unwrap_or_default().to_owned();
    inference(state, protocol::bedrock(&rest), request).await
}

async fn inference(state: ChaosState, call: Result<Call, NoCall>, request: Request) -> Response {
    let Ok(call) = call else {
        return no_operation(request.uri().path());
    };
    if call.count_tokens {
        return count::count(state, &call, request).await;
    }
    let (protocol, family) = (call.protocol, call.family);
    let counters = Arc::clone(&state.inner.counters);
    let (seq, in_flight) = counters.begin(protocol);
    let (parts, body) = request.into_parts();
    let conn = parts.extensions.get::<ConnectInfo<ConnHandle>>().map(|ConnectInfo(handle)| handle.clone());
    let refuse = |response: Response| {
        counters.status(response.status().as_u16());
        response
    };

    let plan = match state.plan_for(&parts.headers) {
        Ok(plan) => plan,
        Err(e) => return refuse(errors::invalid(family, &e.to_string())),
    };
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(body) => body,
        Err(e) => {
            return refuse(errors::invalid(family, &format!("cannot read request body: {e}")));
        }
    };
    if let Some(response) = state.refuse_auth(protocol, &parts, &body) {
        return refuse(response);
    }
    if protocol == Protocol::Anthropic && !parts.headers.contains_key("anthropic-version") {
        return refuse(errors::invalid(family, "anthropic-version: header is required"));
    }
    let req = match NativeRequest::parse(&call, &body) {
        Ok(req) => req,
        Err(invalid) => return refuse(errors::refuse(family, &invalid)),
    };
    if plan.refuse_prefill && req.prefill.is_some() {
        return refuse(errors::invalid(
            family,
            "This model does not support assistant message prefill. The conversation must end with a user message.",
        ));
    }

    let failure = plan.failure(req.answers_tool);
    let streaming = req.stream && failure.is_none();
    sleep(plan.headers_delay).await;
    if !streaming {
        sleep(plan.first_byte).await;
    }
    if plan.hang {
        counters.hang();
        return std::future::pending().await;
    }
    if plan.reset_after == Some(0) {
        counters.reset();
        return super::endpoints::reset_before_headers(conn);
    }
    if let Some(reply) = failure {
        counters.status(reply.status.as_u16());
        return errors::scripted(protocol, reply);
    }

    counters.status(plan.success_status.as_u16());
    let ctx = BodyCtx { counters: Arc::clone(&counters), conn, _in_flight: in_flight };
    let sse = protocol::query_param(parts.uri.query(), "alt").as_deref() == Some("sse");
    let answer = answer(&plan, &call, seq, &req, sse);
    if answer.web_search {
        counters.web_search();
    }
    respond(&plan, family, answer, streaming, ctx)
}

/// The answer's content and usage.
fn answer(plan: &Plan, call: &Call, seq: u64, req: &NativeRequest, sse: bool) -> Answer {
    let chunks = match req.max_tokens {
        Some(max) => u32::try_from(max).map_or(plan.chunks, |max| plan.chunks.min(max)),
        None => plan.chunks,
    };
    let tool = tools::called(plan, &req.tools, req.answers_tool);
    // A trailing assistant message is continued where it stops, as a model does: the
    // words it already holds are skipped and the next one starts with the space that
    // a prefill (trailing whitespace trimmed) lacks.
    let from = req.prefill.as_deref().map_or(0, |p| continued_from(p, chunks));
    let words: Vec<String> = (from..chunks)
        .map(|i| {
            let word = wire::word(i);
            if i == from && from > 0 { format!(" {word}") } else { word.to_owned() }
        })
        .collect();
    let pieces = match &tool {
        None => words,
        // Gemini sends a function call whole, in one chunk.
        Some(_) => {
            let whole = call.family == Family::Gemini;
            tools::arguments(plan.tool_arguments.as_deref(), from..chunks, plan.chunks, words, whole)
        }
    };
    let web_search = req.web_search && tool.is_none();
    let finish = match (&tool, chunks < plan.chunks) {
        (_, true) => Finish::Length,
        (Some(_), false) => Finish::Tool,
        (None, false) => Finish::Stop,
    };
    let prefix = match call.family {
        Family::Anthropic => "msg_chaos_",
        Family::BedrockMessages => "msg_bdrk_chaos_",
        Family::Responses => "resp_chaos_",
        Family::Bedrock | Family::Gemini | Family::OpenAi => "chaos-",
    };
    Answer {
        id: format!("{prefix}{seq}"),
        seq,
        model: req.model.clone(),
        pieces,
        tool,
        finish,
        usage: NativeUsage {
            prompt: req.prompt_tokens,
            completion: u64::from(chunks - from),
            cache_read: plan.cache_read,
            cache_write: plan.cache_write,
        },
        created: super::endpoints::unix_now(),
        echo: req.echo.clone(),
        sse,
        error_name: plan.error_code.clone(),
        web_search,
    }
}

/// How many of the answer's words a prefill already holds: the most whose text, trailing
/// whitespace trimmed, is the prefill's (0 when it holds none of them).
fn continued_from(prefill: &str, chunks: u32) -> u32 {
    let prefill = prefill.trim_end();
    let mut text = String::new();
    let mut held = 0;
    for i in 0..chunks {
        text.push_str(wire::word(i));
        if text.trim_end() == prefill {
            held = i + 1;
        }
        if text.len() > prefill.len() + 1 {
            break;
        }
    }
    held
}

fn respond(plan: &Arc<Plan>, family: Family, answer: Answer, streaming: bool, ctx: BodyCtx) -> Response {
    if streaming {
        ctx.counters.stream_started();
        let content_type = match family {
            Family::Bedrock | Family::BedrockMessages => "application/vnd.amazon.eventstream",
            Family::Gemini if !answer.sse => "application/json",
            _ => "text/event-stream",
        };
        let body = NativeStream { ctx, plan: Arc::clone(plan), answer, family }.into_body();
        let mut response = Response::new(body);
        *response.status_mut() = plan.success_status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }
    let full = match family {
        Family::Anthropic | Family::BedrockMessages => anthropic::body(&answer),
        Family::Gemini => google::body(&answer),
        Family::Responses => responses::body(&answer),
        Family::Bedrock | Family::OpenAi => bedrock::body(&answer),
    };
    let cut = match (plan.reset_after, plan.hang_after) {
        (Some(_), _) => Some(Cut::Reset),
        (None, Some(_)) => Some(Cut::Hang),
        (None, None) => None,
    };
    let mut response = json_response(plan.success_status, Bytes::new());
    *response.body_mut() = match cut {
        Some(cut) => cut_body(full, cut, ctx),
        None => Body::from(full),
    };
    response
}

/// A path under a native prefix that names no operation, answered the way
/// the provider would.
fn no_operation(path: &str) -> Response {
    if path.starts_with("/model/") {
        return errors::bedrock(404, "UnknownOperationException", "");
    }
    let message = format!("The requested URL {path} was not found on this server.");
    errors::google(StatusCode::NOT_FOUND.as_u16(), &message, Vec::new(), None)
}
