//! sluice-chaos, the chaos upstream: a scriptable fake provider (docs/design.md §6) for
//! tests, the demo and game days, speaking every protocol of §9 in its own
//! framing on one listener.
//!
//! Start here: [`serve`] a [`ChaosState`] on a listener (or run it from the
//! CLI, `sluice-gateway chaos`), point an Upstream's `baseUrl` at it, and
//! choose faults per request with `x-chaos-*` headers or for every request
//! with `POST /_chaos` (see [`Script`] for the fields). [`ChaosState`]'s
//! counters tell exactly how often the upstream was called, per protocol.
//!
//! | protocol | paths |
//! |---|---|
//! | `openai` | `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/v1/models` (also without `/v1`) |
//! | `openai` (Responses API) | `/v1/responses`, `/responses`: a `response` object, or `event:`-named SSE with `sequence_number` (`response.created` … `response.completed`/`response.incomplete`); unknown members (`max_tokens` too) refused with `unknown_parameter` |
//! | `azure-openai` | `/openai/deployments/{deployment}/chat/completions?api-version=…` (also without `/openai`; no `api-version`: Azure's 404); its Responses API at `/openai/responses?api-version=…`, the deployment as `model` |
//! | `anthropic` | `/v1/messages`, `/messages` (`anthropic-version` header and `max_tokens` required); `…/messages/count_tokens` (`{"input_tokens": N}`, no `max_tokens` or `stream`) |
//! | `vertex-anthropic` | `/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict`, `:streamRawPredict` (body `anthropic_version: vertex-2023-10-16`, no `model`); the token count `…/models/count-tokens:rawPredict` (the `model` in the body, `anthropic_version` optional) |
//! | `vertex-gemini` | `/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent`, `:streamGenerateContent[?alt=sse]` (both Vertex protocols also under `/v1beta1/`, which `google-genai` calls) |
//! | `gemini` | `/v1beta/models/{m}:generateContent`, `:streamGenerateContent[?alt=sse]` (also `/v1/models/…`, the stable version `google-genai` calls by default) |
//! | `bedrock` | `/model/{percent-encoded id}/converse`, `/converse-stream` (event-stream frames); Claude's Messages through `/invoke`, `/invoke-with-response-stream` (Anthropic's events base64 in `chunk` frames); CountTokens at `/count-tokens` (`{"input": {"invokeModel": {"body": base64}}}` or `{"input": {"converse": …}}`, validated as that call; foundation-model ids of Claude only: a profile such as `us.anthropic.claude-…` is refused) answering `{"inputTokens": N}` |
//! | Google auth | `POST /token` (JWT-bearer grant), `GET /computeMetadata/v1/instance/service-accounts/default/token` |
//!
//! Fields a provider does not know are refused with its 400, as the real
//! API does (so `stream_options` sent to Anthropic fails). Credentials are
//! checked as [`ChaosAuth`] says; by default nothing is checked. A token count
//! counts what the same request's answer bills (text bytes of `system`, `messages`
//! and the tools / 4); it takes the script's delays, hangs, resets and failures as a
//! whole answer does, but is not counted as an inference request. An Anthropic or
//! Vertex AI request that declares Anthropic's web search tool (`web_search_…`) and is
//! answered in text searches first, as the real service does: a `server_tool_use`
//! block, its `web_search_tool_result` (one page), then the text citing that page
//! (`citations`, streamed as a `citations_delta`) and `usage.server_tool_use`.
//!
//! | header | effect |
//! |---|---|
//! | `x-chaos-status` | answer with this status; ≥ 400 gives the protocol's error body (Anthropic `{"type":"error",…}`, 529 `overloaded_error`; Google `{"error":{"code","message","status"}}`; Bedrock `x-amzn-errortype` + `{"message"}`; OpenAI/Azure `{"error":{…}}`) |
//! | `x-chaos-error-code` | the error's name: OpenAI `error.code` (e.g. `context_length_exceeded`), Anthropic `error.type`, Google `status`, Bedrock exception (e.g. `ThrottlingException` with status 400); also names the in-stream error |
//! | `x-chaos-first-byte-ms` | delay before headers; for streams, `200` (and Anthropic's `message_start`, Bedrock's `messageStart`, Responses' `response.created` … `response.content_part.added`) at once, then the delay before the first content event |
//! | `x-chaos-headers-first-byte-ms` | delay before headers, streams included |
//! | `x-chaos-chunks` / `x-chaos-chunk-ms` | content chunks (default 5) and the gap between them |
//! | `x-chaos-hang` | never answer; `x-chaos-hang-after-chunks: N` stalls after N chunks |
//! | `x-chaos-reset-after-chunks` | 0: TCP reset before headers; N: reset after N chunks |
//! | `x-chaos-retry-after` / `x-chaos-retry-after-ms` | `Retry-After` / `retry-after-ms` on errors (Google: a `RetryInfo` detail) |
//! | `x-chaos-malformed-chunk` | the Nth event (Bedrock: frame) of a stream is not JSON |
//! | `x-chaos-no-done` | end streams without their end marker (`[DONE]`, `message_stop`, Bedrock `metadata`, Gemini's last chunk, `response.completed`) |
//! | `x-chaos-fail-rate` | this fraction of requests fails with the status (or 503) |
//! | `x-chaos-error-after-chunks` | after N content chunks (0: before any), the in-stream error: OpenAI `data: {"error"}`, Responses `response.failed` (`error.code` `server_error`), Anthropic `event: error` (`overloaded_error`), Gemini an error object (`UNAVAILABLE`), Bedrock an exception frame (`serviceUnavailableException`) |
//! | `x-chaos-tool-call` | when the request declares this tool (same name, case-sensitive), call it: OpenAI chat `tool_calls` with `delta.tool_calls` pieces (`finish_reason: tool_calls`), Anthropic `tool_use` with `input_json_delta` pieces, Responses `function_call` with `response.function_call_arguments.delta` pieces, Gemini `functionCall`, Bedrock `toolUse`; `{"query": …}` arguments, one piece per chunk (0 chunks: no arguments). A request whose last turn carries a tool result (chat: a last message of role `tool`; Responses: a last `function_call_output` or `custom_tool_call_output` item; Anthropic: a last user message with a `tool_result` block; Gemini: a last content with a `functionResponse` part; Bedrock: a last user message with a `toolResult` block) is answered in text, as a model does once its tool has answered |
//! | `x-chaos-tool-arguments` | the tool call's arguments, the text of a JSON object (taken verbatim, UTF-8; `POST /_chaos` also takes the object itself), split across the chunks as the `{"query": …}` pieces are (Gemini: whole); Anthropic and Bedrock `input` and Gemini `args` are the object, chat and Responses `arguments` the text; output tokens are still the chunks |
//! | `x-chaos-fail-on-tool-result` | only a request whose last turn carries a tool result fails, with the status (or 503; at the fail rate if set), in the protocol's error shape; others are answered normally: a provider that fails mid-conversation |
//! | `x-chaos-refuse-prefill` | refuse a trailing assistant message (Anthropic, Bedrock) with the protocol's 400; without it such a turn is continued where it stops (the words it holds are skipped) |
//! | `x-chaos-cache-read-tokens` / `x-chaos-cache-write-tokens` | prompt-cache usage: Anthropic `cache_read_input_tokens` / `cache_creation_input_tokens`, Responses `input_tokens_details.cached_tokens` (read only), Bedrock `cacheRead/WriteInputTokens`, Gemini `cachedContentTokenCount` |
//!
//! `GET /models` ignores the script (a probe cannot see a model outage) and is
//! counted apart from inference requests. `POST /_chaos/expire-tokens`
//! expires every access token issued so far.

mod auth;
mod conn;
mod counters;
mod endpoints;
mod inference;
mod native;
mod plan;
mod protocol;
mod script;
mod stream;
mod tools;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use auth::{AwsKeys, ChaosAuth, DEFAULT_TOKEN_TTL, GoogleAuth, ServiceAccount};
pub use counters::CounterSnapshot;
pub use protocol::Protocol;
pub use script::{HEADER_PREFIX, Script, ScriptError};

use auth::Tokens;

use conn::{ChaosListener, ConnHandle};
use counters::Counters;
use plan::Plan;

/// Shared state of one chaos upstream: counters and the default script.
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ChaosState {
    inner: Arc<Inner>,
}

struct Inner {
    counters: Arc<Counters>,
    defaults: RwLock<Arc<Defaults>>,
    auth: RwLock<Arc<ChaosAuth>>,
    /// Whether `auth` checks anything: the default upstream skips the lock.
    auth_on: AtomicBool,
    tokens: Tokens,
}

/// The default script and its plan, swapped together.
struct Defaults {
    script: Script,
    plan: Arc<Plan>,
}

impl ChaosState {
    /// A healthy upstream with zeroed counters.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                counters: Arc::new(Counters::new()),
                defaults: RwLock::new(Arc::new(Defaults::new(Script::default()))),
                auth: RwLock::new(Arc::new(ChaosAuth::default())),
                auth_on: AtomicBool::new(false),
                tokens: Tokens::default(),
            }),
        }
    }

    /// A healthy upstream that checks credentials as `auth` says.
    pub fn with_auth(auth: ChaosAuth) -> Self {
        let state = Self::new();
        state.set_auth(auth);
        state
    }

    /// The credentials checked from now on.
    pub fn set_auth(&self, auth: ChaosAuth) {
        let on = auth.api_key.is_some() || auth.aws.is_some() || auth.google.is_some();
        self.inner.auth_on.store(on, Ordering::SeqCst);
        *self.inner.auth.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(auth);
    }

    /// The credentials checked.
    pub fn auth(&self) -> Arc<ChaosAuth> {
        Arc::clone(&self.inner.auth.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every access token issued so far expires now (as after an hour).
    pub fn expire_tokens(&self) {
        self.inner.tokens.expire_all();
    }

    /// Whether any credentials are checked (read without the lock).
    pub(crate) fn auth_on(&self) -> bool {
        self.inner.auth_on.load(Ordering::Relaxed)
    }

    pub(crate) fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// A state whose default script is `script` (validated).
    pub fn with_script(script: Script) -> Result<Self, ScriptError> {
        let state = Self::new();
        state.set_script(script)?;
        Ok(state)
    }

    /// The default script, applied to requests without `x-chaos-*` headers.
    pub fn script(&self) -> Script {
        self.defaults().script.clone()
    }

    /// Replaces the default script, as `POST /_chaos` does.
    pub fn set_script(&self, script: Script) -> Result<(), ScriptError> {
        script.validate()?;
        let defaults = Arc::new(Defaults::new(script));
        *self.inner.defaults.write().unwrap_or_else(PoisonError::into_inner) = defaults;
        Ok(())
    }

    /// Back to a healthy upstream (`POST /_chaos` with `{}`).
    pub fn reset_script(&self) {
        let defaults = Arc::new(Defaults::new(Script::default()));
        *self.inner.defaults.write().unwrap_or_else(PoisonError::into_inner) = defaults;
    }

    /// All counters at once, as in `GET /_chaos`.
    pub fn counters(&self) -> CounterSnapshot {
        self.inner.counters.snapshot()
    }

    /// Zeroes the counters (but `in_flight`).
    pub fn clear_counters(&self) {
        self.inner.counters.clear();
    }

    /// Inference requests received, faulty ones included.
    pub fn requests(&self) -> u64 {
        self.inner.counters.requests()
    }

    /// Inference requests received on `protocol`'s paths.
    pub fn requests_for(&self, protocol: Protocol) -> u64 {
        self.inner.counters.requests_for(protocol)
    }

    /// Responses sent with `status`.
    pub fn requests_with_status(&self, status: u16) -> u64 {
        self.inner.counters.requests_with_status(status)
    }

    /// SSE streams started.
    pub fn streams_started(&self) -> u64 {
        self.counters().streams_started
    }

    /// TCP connections accepted.
    pub fn connections(&self) -> u64 {
        self.counters().connections
    }

    /// Connections reset on purpose.
    pub fn resets(&self) -> u64 {
        self.counters().resets
    }

    /// Requests or streams hung on purpose.
    pub fn hangs(&self) -> u64 {
        self.counters().hangs
    }

    /// Inference requests not finished yet.
    pub fn in_flight(&self) -> u64 {
        self.inner.counters.in_flight()
    }

    fn defaults(&self) -> Arc<Defaults> {
        let guard = self.inner.defaults.read().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&guard)
    }
}

impl Default for ChaosState {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ChaosState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosState").field("script", &self.script()).field("counters", &self.counters()).finish()
    }
}

impl Defaults {
    fn new(script: Script) -> Self {
        let plan = Arc::new(Plan::new(&script));
        Self { script, plan }
    }
}

/// The chaos upstream's routes. Resets before headers need the connection
/// handles that [`serve`] installs; under a plain `axum::serve` they degrade
/// to a body broken right after the headers.
pub fn router(state: ChaosState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(endpoints::chat))
        .route("/chat/completions", post(endpoints::chat))
        .route("/v1/completions", post(endpoints::completions))
        .route("/completions", post(endpoints::completions))
        .route("/v1/embeddings", post(endpoints::embeddings))
        .route("/embeddings", post(endpoints::embeddings))
        .route("/v1/models", get(endpoints::models))
        .route("/models", get(endpoints::models))
        .route("/openai/deployments/{deployment}/chat/completions", post(endpoints::azure))
        .route("/deployments/{deployment}/chat/completions", post(endpoints::azure))
        .route("/openai/responses", post(native::azure_responses))
        .route("/v1/responses", post(native::responses))
        .route("/responses", post(native::responses))
        .route("/v1/messages", post(native::messages))
        .route("/messages", post(native::messages))
        .route("/v1/messages/count_tokens", post(native::count_tokens))
        .route("/messages/count_tokens", post(native::count_tokens))
        .route("/v1/projects/{*rest}", post(native::vertex))
        .route("/v1beta1/projects/{*rest}", post(native::vertex))
        .route("/v1beta/models/{*rest}", post(native::gemini))
        .route("/v1/models/{*rest}", post(native::gemini))
        .route("/model/{*rest}", post(native::bedrock))
        .route("/token", post(auth::token))
        .route("/computeMetadata/v1/instance/service-accounts/default/token", get(auth::metadata_token))
        .route("/computeMetadata/v1/project/project-id", get(auth::metadata_project))
        .route("/_chaos", get(endpoints::show).post(endpoints::set))
        .route("/_chaos/expire-tokens", post(endpoints::expire_tokens))
        .fallback(endpoints::not_found)
        .with_state(state)
}

/// Serves the chaos upstream on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: ChaosState) -> std::io::Result<()> {
    let counters = Arc::clone(&state.inner.counters);
    let app = router(state).into_make_service_with_connect_info::<ConnHandle>();
    axum::serve(ChaosListener::new(listener, counters), app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_script_validates_and_reset_clears() {
        let state = ChaosState::new();
        let bad = Script { fail_rate: Some(-1.0), ..Script::default() };
        let err = state.set_script(bad).unwrap_err();
        assert_eq!(err.to_string(), "fail_rate: must be from 0 to 1, got -1");
        let good = Script { status: Some(503), ..Script::default() };
        state.set_script(good.clone()).unwrap();
        assert_eq!(state.script(), good);
        state.reset_script();
        assert_eq!(state.script(), Script::default());
    }
}
