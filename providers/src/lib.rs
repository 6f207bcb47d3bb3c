//! sluice-providers: the provider protocols of docs/design.md §9, without I/O.
//!
//! Clients always speak the OpenAI API to sluice. For each Upstream's `protocol` this
//! crate builds the native request, parses a native response, transcodes a native
//! stream incrementally into OpenAI chunks, and classifies a native error by its name
//! before its status. It never opens a socket, reads a clock or spawns a task: the
//! gateway's attempt drives it.
//!
//! An attempt uses four functions, each dispatching on [`Target::protocol`]:
//! 1. [`build`] turns the client's [`ChatRequest`] into a [`NativeRequest`] (path to
//!    append to the base URL, JSON body, extra headers; never auth headers).
//! 2. On a non-2xx answer, [`classify`] turns the body and headers into an
//!    [`UpstreamError`] whose [`ErrorKind`] says whether another candidate may be tried.
//! 3. On a 2xx non-streamed answer, [`parse`] returns the OpenAI `chat.completion`
//!    body and its [`Usage`].
//! 4. On a 2xx stream, a [`transcoder`] is fed the body bytes as they arrive, split
//!    anywhere, and returns OpenAI SSE events ([`Out`]). It always ends with the usage
//!    chunk (`choices: []`) and `data: [DONE]`, or with an [`Out::Error`] that says
//!    whether any content was emitted before it.
//!
//! Shared pieces: [`ChunkWriter`] writes the OpenAI stream side for every protocol,
//! [`Answer`] the non-streamed side, [`sse::SseFramer`] frames SSE bodies (and
//! `SseTranscoder` drives the SSE protocols' streams), `request`'s conversation walk
//! reads the client's messages for every native protocol and [`retry`] reads retry
//! hints.

mod anthropic;
pub mod auth;
mod bedrock;
mod chunk;
mod completion;
mod date;
mod error;
pub mod eventstream;
mod gemini;
mod google;
pub mod lenient;
pub mod member;
pub mod messages;
mod openai;
mod request;
pub mod responses;
pub mod retry;
pub mod sse;
mod usage;

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::sse::SseTranscoder;

pub use anthropic::WEB_SEARCH_MAX_USES;
pub use chunk::{ChunkWriter, FinishReason};
pub use completion::{Answer, AnswerToolCall, url_citation};
pub use error::{ErrorKind, TranslateError, UpstreamError};
pub use request::{
    ChatRequest, Content, ContentPart, FunctionCall, FunctionDef, ImageUrl, Message, NamedFunction, NamedToolChoice,
    Role, Stop, Tool, ToolCall, ToolChoice,
};
pub use usage::Usage;

/// The wire format of an Upstream (its `spec.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    OpenAi,
    AzureOpenAi,
    Anthropic,
    Bedrock,
    VertexAnthropic,
    VertexGemini,
    Gemini,
}

impl Protocol {
    /// Whether a chat request's hosted web search (`web_search_options`) is served by
    /// this protocol's own search when translated (Anthropic's web search tool); the
    /// others refuse it, or leave it out ([`Target::omit_hosted_tools`]). OpenAI's
    /// protocols take it natively.
    pub fn translates_web_search(self) -> bool {
        matches!(self, Self::Anthropic | Self::VertexAnthropic)
    }

    /// The name used in `spec.protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::AzureOpenAi => "azure-openai",
            Self::Anthropic => "anthropic",
            Self::Bedrock => "bedrock",
            Self::VertexAnthropic => "vertex-anthropic",
            Self::VertexGemini => "vertex-gemini",
            Self::Gemini => "gemini",
        }
    }
}

/// What the candidate fixes about a call.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub protocol: Protocol,
    /// The model (Azure: the deployment), sent as given.
    pub model: &'a str,
    /// The output token limit when the client sets none (Anthropic requires one).
    pub default_max_tokens: u32,
    /// The `anthropic-version` header; `2023-06-01` when `None`.
    pub anthropic_version: Option<&'a str>,
    /// Azure's `api-version` query parameter.
    pub azure_api_version: Option<&'a str>,
    pub gcp_project: Option<&'a str>,
    pub gcp_location: Option<&'a str>,
    /// A hosted tool this target has no equivalent for (chat's `web_search_options`,
    /// made from a Responses request's hosted search) is left out rather than refused:
    /// the route says `hostedTools: omit`.
    pub omit_hosted_tools: bool,
}

impl<'a> Target<'a> {
    /// A target with no optional settings.
    pub fn new(protocol: Protocol, model: &'a str, default_max_tokens: u32) -> Self {
        Self {
            protocol,
            model,
            default_max_tokens,
            anthropic_version: None,
            azure_api_version: None,
            gcp_project: None,
            gcp_location: None,
            omit_hosted_tools: false,
        }
    }
}

/// A native request: the path (and query) to append to the upstream's base URL, the
/// JSON body and extra headers. Auth headers are the gateway's to add.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRequest {
    /// Static where it names no model (`/messages`, `/chat/completions`).
    pub path: Cow<'static, str>,
    pub body: Bytes,
    /// Headers of the envelope's own.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether the client's `anthropic-*` headers go too, as they came (a Messages
    /// request to `anthropic`): sent from the client's list rather than copied here, on
    /// the path of every such request.
    pub client_headers: bool,
}

impl NativeRequest {
    /// A request whose body is `body` as JSON, without extra headers.
    pub(crate) fn json(path: impl Into<Cow<'static, str>>, body: &impl serde::Serialize) -> Self {
        Self {
            path: path.into(),
            // `to_vec`, not `to_string`: the latter writes through `fmt::Display`, a few
            // times slower. A `Value` always serialises, and so do the bodies written
            // without one (no map of theirs has a key that is not a string).
            body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
            headers: Vec::new(),
            client_headers: false,
        }
    }

    /// Every header the request is sent with but the gateway's own (request id,
    /// credentials): the client's `client` headers where [`Self::client_headers`] says
    /// so, then the envelope's.
    pub fn all_headers<'a>(
        &'a self,
        client: &'a [(HeaderName, HeaderValue)],
    ) -> impl Iterator<Item = &'a (HeaderName, HeaderValue)> {
        let client = if self.client_headers { client } else { &[] };
        client.iter().chain(&self.headers)
    }
}

/// A parsed non-streamed answer: the OpenAI `chat.completion` JSON and its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub body: Bytes,
    pub usage: Usage,
}

/// What the gateway fixes about an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerOpts {
    /// The response id, used when the provider gives none.
    pub id: String,
    /// Unix seconds, for `created`.
    pub created: u64,
}

/// An inbound request (Messages, Responses) translated into an OpenAI chat request for
/// a candidate that does not speak its API: the chat body and the members left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The OpenAI chat request (JSON).
    pub body: Vec<u8>,
    /// Hints left out (`thinking`, `cache_control`, …), and hosted tools when
    /// [`ToChat::omit_hosted_tools`] (`tools.web_search`, …), each named once.
    pub dropped: Vec<std::borrow::Cow<'static, str>>,
    /// Responses: the tool namespaces flattened into function names
    /// (`{namespace}__{name}`), to be split again in the answer.
    pub namespaces: Vec<String>,
    /// Responses: the hosted web search went as chat's `web_search_options`, which a
    /// candidate without a search refuses, or leaves out when its
    /// [`Target::omit_hosted_tools`].
    pub web_search: bool,
}

/// How an inbound request is translated to chat ([`messages::to_chat`],
/// [`responses::to_chat`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToChat {
    /// Hosted tools (run by the provider: OpenAI's `web_search`, `file_search`, …,
    /// Anthropic's server tools) and the records of their calls in earlier turns are
    /// left out and named in [`Translated::dropped`]; otherwise (the default) the
    /// request is refused naming the tool.
    pub omit_hosted_tools: bool,
}

/// Incrementally turns a native 2xx stream body into OpenAI SSE events.
pub trait Transcoder {
    /// Feeds the next body bytes, split anywhere, and returns the events they complete.
    fn feed(&mut self, bytes: &[u8]) -> Vec<Out>;
    /// The body ended. A stream that ended without its native end marker is an error.
    fn finish(&mut self) -> Vec<Out>;
}

/// One output of a [`Transcoder`].
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// One OpenAI SSE event, `data: {chunk}\n\n`; `content` when it carries text or
    /// tool-call content (the stream commits on the first such event).
    Event { bytes: Bytes, content: bool },
    /// The final usage chunk and `data: [DONE]` were emitted; nothing follows.
    Done,
    /// An error event or exception frame; nothing follows. `before_content` tells the
    /// attempt that no content was emitted, so it may still fail over.
    Error { error: UpstreamError, before_content: bool },
}

/// Builds the native request for `target`; `stream` selects the streaming endpoint.
pub fn build(target: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<NativeRequest, TranslateError> {
    match target.protocol {
        Protocol::OpenAi | Protocol::AzureOpenAi => openai::build(target, req, stream),
        Protocol::Anthropic | Protocol::VertexAnthropic => anthropic::build(target, req, stream),
        Protocol::Gemini | Protocol::VertexGemini => gemini::build(target, req, stream),
        Protocol::Bedrock => bedrock::build(target, req, stream),
    }
}

/// Parses a 2xx non-streamed answer. An error object in a 2xx body is classified.
pub fn parse(target: &Target<'_>, body: &[u8], opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    match target.protocol {
        Protocol::OpenAi | Protocol::AzureOpenAi => openai::parse(target, body, opts),
        Protocol::Anthropic | Protocol::VertexAnthropic => anthropic::parse(target, body, opts),
        Protocol::Gemini | Protocol::VertexGemini => gemini::parse(target, body, opts),
        Protocol::Bedrock => bedrock::parse(target, body, opts),
    }
}

/// Classifies an error answer by the provider's error name first, then its status.
/// `now_unix_ms` resolves retry hints given as dates.
pub fn classify(target: &Target<'_>, status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    match target.protocol {
        Protocol::OpenAi | Protocol::AzureOpenAi => openai::classify(status, headers, body, now_unix_ms),
        Protocol::Anthropic | Protocol::VertexAnthropic => anthropic::classify(status, headers, body, now_unix_ms),
        Protocol::Gemini | Protocol::VertexGemini => gemini::classify(status, headers, body, now_unix_ms),
        Protocol::Bedrock => bedrock::classify(status, headers, body, now_unix_ms),
    }
}

/// A transcoder for a 2xx stream from `target`.
pub fn transcoder(target: &Target<'_>, opts: AnswerOpts) -> Box<dyn Transcoder + Send> {
    match target.protocol {
        Protocol::OpenAi | Protocol::AzureOpenAi => Box::new(SseTranscoder::new(openai::Passthrough::new(opts))),
        Protocol::Anthropic | Protocol::VertexAnthropic => Box::new(SseTranscoder::new(anthropic::Stream::new(opts))),
        Protocol::Gemini | Protocol::VertexGemini => Box::new(SseTranscoder::new(gemini::Stream::new(opts))),
        Protocol::Bedrock => Box::new(bedrock::StreamTranscoder::new(target.model, opts)),
    }
}

/// The JSON of a 2xx answer; a body that is not JSON is malformed.
pub(crate) fn answer_json(body: &[u8]) -> Result<serde_json::Value, UpstreamError> {
    serde_json::from_slice(body).map_err(|e| UpstreamError::malformed(200, e))
}

/// An error answer classified by status alone, with the raw body as its message.
pub(crate) fn generic_error(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    let message = String::from_utf8_lossy(body).chars().take(1000).collect::<String>();
    UpstreamError::new(ErrorKind::from_status(status), status, message, None)
        .with_retry_after(retry::from_headers(headers, now_unix_ms))
}

/// Percent-encodes `s` as ONE path segment (or query value): everything but RFC 3986
/// unreserved characters is encoded, so `/` and `:` in model ids survive.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
