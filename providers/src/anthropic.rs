//! Anthropic Messages, direct (`anthropic`) and on Vertex AI (`vertex-anthropic`).
//!
//! Vertex differs only in the envelope: no `model` in the body (it is in the path),
//! `anthropic_version: vertex-2023-10-16` in the body instead of the header, the
//! `:rawPredict`/`:streamRawPredict` paths, and Google's error envelope beside
//! Anthropic's own.

mod request;
mod stream;

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::de::{Deserialize, Deserializer, MapAccess};
use serde_json::Value;

use crate::error::{says_context_length, says_expired};
use crate::lenient::{self, Lenient, List, Str, U64, lenient_deserialize};
use crate::{
    Answer, AnswerOpts, AnswerToolCall, ChatRequest, Completion, ErrorKind, FinishReason, NativeRequest, Protocol,
    Target, TranslateError, UpstreamError, Usage, google, retry,
};

pub use request::WEB_SEARCH_MAX_USES;
pub(crate) use stream::Stream;

const DEFAULT_VERSION: &str = "2023-06-01";
pub(crate) const VERTEX_VERSION: &str = "vertex-2023-10-16";

pub(crate) fn build(target: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<NativeRequest, TranslateError> {
    let mut body = request::body(target, req)?;
    body.stream = stream.then_some(true);
    let (path, headers) = if target.protocol == Protocol::VertexAnthropic {
        body.anthropic_version = Some(VERTEX_VERSION);
        let verb = if stream { "streamRawPredict" } else { "rawPredict" };
        let path =
            format!("{}/publishers/anthropic/models/{}:{verb}", vertex_prefix(target)?, model_segment(target.model));
        (Cow::Owned(path), Vec::new())
    } else {
        body.model = Some(target.model);
        let version = target.anthropic_version.unwrap_or(DEFAULT_VERSION);
        let value = HeaderValue::from_str(version)
            .map_err(|_| TranslateError::invalid("anthropic.version", "not a valid header value"))?;
        (Cow::Borrowed("/messages"), vec![(HeaderName::from_static("anthropic-version"), value)])
    };
    Ok(NativeRequest { headers, ..NativeRequest::json(path, &body) })
}

/// `/projects/{p}/locations/{l}` for the Vertex targets.
pub(crate) fn vertex_prefix(target: &Target<'_>) -> Result<String, TranslateError> {
    let project = target.gcp_project.ok_or_else(|| TranslateError::invalid("gcp.project", "required for Vertex AI"))?;
    let location =
        target.gcp_location.ok_or_else(|| TranslateError::invalid("gcp.location", "required for Vertex AI"))?;
    Ok(format!("/projects/{}/locations/{}", model_segment(project), model_segment(location)))
}

/// A model id as one path segment; `@` (Vertex model versions) stays as it is.
pub(crate) fn model_segment(model: &str) -> String {
    crate::encode_segment(model).replace("%40", "@")
}

pub(crate) fn parse(target: &Target<'_>, body: &[u8], opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    let m: MessageIn<'_> = serde_json::from_slice(body).map_err(|e| UpstreamError::malformed(200, e))?;
    if m.kind.as_deref() == Some("error") || m.error {
        return Err(classify(200, &HeaderMap::new(), body, 0));
    }
    let mut answer = Answer {
        id: m.id.0.map(Cow::into_owned),
        model: m.model.as_deref().unwrap_or(target.model).to_owned(),
        finish_reason: m.stop_reason.as_deref().map(finish_reason),
        usage: usage_of(&m.usage, &mut Usage::default()),
        ..Answer::default()
    };
    let mut chars = 0;
    for block in m.content.0 {
        match block.kind.as_deref() {
            Some("text") => {
                let text = block.text.as_deref().unwrap_or("");
                let start = chars;
                chars += text.chars().count();
                answer.text.push_str(text);
                for c in block.citations.0.iter().filter_map(Citation::of) {
                    answer.annotations.push(c.annotation(start, chars));
                }
            }
            Some("tool_use") => answer.tool_calls.push(AnswerToolCall {
                id: block.id.0.map(Cow::into_owned),
                name: block.name.as_deref().unwrap_or("").to_owned(),
                arguments: match block.input {
                    None | Some(Value::Null) => String::new(),
                    Some(input) => input.to_string(),
                },
            }),
            // Thinking and server-tool blocks (a web search's call and results) have no
            // OpenAI chat equivalent: the search's sources come as the text's citations.
            _ => {}
        }
    }
    Ok(answer.into_completion(opts))
}

/// A web search result a text block cites (`web_search_result_location`).
pub(crate) struct Citation<'a> {
    url: &'a str,
    title: &'a str,
}

impl<'a> Citation<'a> {
    /// The citation if it names a web page; citations of documents have no chat form.
    pub(crate) fn of(c: &'a Value) -> Option<Self> {
        (c["type"] == "web_search_result_location")
            .then(|| Self { url: c["url"].as_str().unwrap_or(""), title: c["title"].as_str().unwrap_or("") })
    }

    /// Chat's annotation for the text from character `start` to `end`.
    pub(crate) fn annotation(&self, start: usize, end: usize) -> Value {
        crate::url_citation(start, end, self.url, self.title)
    }
}

/// The members of a Messages answer that [`parse`] reads, read as `Value`'s accessors
/// would (see [`lenient`]) without building one.
#[derive(Default)]
struct MessageIn<'a> {
    kind: Str<'a>,
    /// Whether there is an `error` member at all.
    error: bool,
    id: Str<'a>,
    model: Str<'a>,
    stop_reason: Str<'a>,
    usage: UsageIn,
    content: List<BlockIn<'a>>,
}

impl<'de> Lenient<'de> for MessageIn<'de> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut m = Self::default();
        lenient::members(map, |key, map| {
            match key {
                "type" => m.kind = map.next_value()?,
                "error" => {
                    lenient::skip(map)?;
                    m.error = true;
                }
                "id" => m.id = map.next_value()?,
                "model" => m.model = map.next_value()?,
                "stop_reason" => m.stop_reason = map.next_value()?,
                "usage" => m.usage = map.next_value()?,
                "content" => m.content = map.next_value()?,
                _ => lenient::skip(map)?,
            }
            Ok(())
        })?;
        Ok(m)
    }
}

/// One content block.
#[derive(Default)]
struct BlockIn<'a> {
    kind: Str<'a>,
    text: Str<'a>,
    id: Str<'a>,
    name: Str<'a>,
    input: Option<Value>,
    /// A text block's citations (a web search's sources).
    citations: List<Value>,
}

impl<'de> Lenient<'de> for BlockIn<'de> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut b = Self::default();
        lenient::members(map, |key, map| {
            match key {
                "type" => b.kind = map.next_value()?,
                "text" => b.text = map.next_value()?,
                "id" => b.id = map.next_value()?,
                "name" => b.name = map.next_value()?,
                "input" => b.input = Some(map.next_value()?),
                "citations" => b.citations = map.next_value()?,
                _ => lenient::skip(map)?,
            }
            Ok(())
        })?;
        Ok(b)
    }
}

/// An Anthropic usage object's counts.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct UsageIn {
    input: U64,
    read: U64,
    write: U64,
    output: U64,
    /// `server_tool_use.web_search_requests`.
    searches: U64,
}

impl UsageIn {
    /// From a usage object already parsed (the stream's events).
    fn of(u: &Value) -> Self {
        let get = |k: &str| U64(u[k].as_u64());
        Self {
            input: get("input_tokens"),
            read: get("cache_read_input_tokens"),
            write: get("cache_creation_input_tokens"),
            output: get("output_tokens"),
            searches: U64(u["server_tool_use"]["web_search_requests"].as_u64()),
        }
    }
}

impl<'de> Lenient<'de> for UsageIn {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut u = Self::default();
        lenient::members(map, |key, map| {
            match key {
                "input_tokens" => u.input = map.next_value()?,
                "cache_read_input_tokens" => u.read = map.next_value()?,
                "cache_creation_input_tokens" => u.write = map.next_value()?,
                "output_tokens" => u.output = map.next_value()?,
                "server_tool_use" => {
                    u.searches = U64(map.next_value::<Value>()?["web_search_requests"].as_u64());
                }
                _ => lenient::skip(map)?,
            }
            Ok(())
        })?;
        Ok(u)
    }
}

impl<'de> Deserialize<'de> for UsageIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::deserialize(d)
    }
}

lenient_deserialize!(MessageIn, BlockIn);

/// Anthropic's stop reasons onto OpenAI's finish reasons.
fn finish_reason(stop: &str) -> FinishReason {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

/// Updates `acc` from an Anthropic usage object (counts are cumulative: a field
/// present replaces, a field absent keeps) and returns it.
fn usage(u: &Value, acc: &mut Usage) -> Usage {
    usage_of(&UsageIn::of(u), acc)
}

impl UsageIn {
    /// The counts in OpenAI's accounting, `acc` updated as [`usage_of`] does.
    pub(crate) fn to_usage(self, acc: &mut Usage) -> Usage {
        usage_of(&self, acc)
    }
}

/// [`usage`] of counts already read.
fn usage_of(u: &UsageIn, acc: &mut Usage) -> Usage {
    let (input, read, write) = (u.input.0, u.read.0, u.write.0);
    if input.is_some() || read.is_some() || write.is_some() {
        let old_input = acc.prompt_tokens.saturating_sub(acc.cached_tokens + acc.cache_write_tokens);
        let (input, read, write) =
            (input.unwrap_or(old_input), read.unwrap_or(acc.cached_tokens), write.unwrap_or(acc.cache_write_tokens));
        *acc = Usage {
            web_searches: acc.web_searches,
            ..Usage::from_exclusive(input, acc.completion_tokens, read, write)
        };
    }
    if let Some(out) = u.output.0 {
        acc.completion_tokens = out;
    }
    if let Some(searches) = u.searches.0 {
        acc.web_searches = searches;
    }
    *acc
}

pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    let hinted = retry::from_headers(headers, now_unix_ms);
    let Some(v) = google::error_body(body) else {
        return crate::generic_error(status, headers, body, now_unix_ms);
    };
    let err = &v["error"];
    if let Some(g) = google::read(status, err) {
        // Vertex may carry Anthropic's own error as a JSON string in `message`.
        if let Ok(inner) = serde_json::from_str::<Value>(&g.message)
            && let Some(e) = anthropic_error(status, &inner["error"])
        {
            return e.with_retry_after(hinted.or(g.retry_after));
        }
        return g.into_upstream(status, hinted);
    }
    match anthropic_error(status, err) {
        Some(e) => e.with_retry_after(hinted),
        None => crate::generic_error(status, headers, body, now_unix_ms),
    }
}

/// Anthropic's `{"type": "...", "message": "..."}` error object, classified by its type.
fn anthropic_error(status: u16, err: &Value) -> Option<UpstreamError> {
    let name = err["type"].as_str()?;
    let message = err["message"].as_str().unwrap_or("").to_owned();
    let kind = match name {
        "overloaded_error" => ErrorKind::Overloaded,
        "rate_limit_error" => ErrorKind::RateLimited,
        "api_error" => ErrorKind::Server,
        "timeout_error" => ErrorKind::Timeout,
        "authentication_error" if says_expired(&message) => ErrorKind::AuthExpired,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        "not_found_error" => ErrorKind::NotFound,
        "invalid_request_error" | "request_too_large" if says_context_length(&message) => ErrorKind::ContextLength,
        "invalid_request_error" | "request_too_large" => ErrorKind::InvalidRequest,
        "billing_error" => ErrorKind::Client,
        _ if status == 401 && says_expired(&message) => ErrorKind::AuthExpired,
        _ => ErrorKind::from_status(status),
    };
    let code = match kind {
        ErrorKind::InvalidRequest | ErrorKind::Client | ErrorKind::Server => Some(name),
        _ => None,
    };
    Some(UpstreamError::new(kind, status, message, code))
}
