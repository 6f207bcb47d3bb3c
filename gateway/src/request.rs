//! The client's request: validated once by reading only the members the gateway needs,
//! then sent to each candidate as the client's own bytes with only the members the
//! gateway owns spliced in (`model`, `max_tokens`, `stream_options`). No JSON tree is
//! built or re-serialised, so a large prompt costs a copy, not a parse and a print.
//!
//! A Messages request (`/v1/messages`) is read the same way and sent so to the
//! candidates that speak Messages; for the others it is translated once, on the first
//! such candidate, into the chat request they are sent ([`ClientRequest::as_chat`]).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use serde_json::value::RawValue;
use sluice_providers::{ToChat, TranslateError, WEB_SEARCH_MAX_USES};

use crate::endpoint::Endpoint;
use crate::error::ApiError;
use members::{Body, Kind};

mod members;

/// A validated client request: the client's bytes, kept as they came, and the few
/// fields the gateway reads. Nothing else of the body is parsed into a tree.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    /// Endpoint.
    pub endpoint: Endpoint,
    /// The model asked for.
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// The client asked for the usage chunk (`stream_options.include_usage`).
    pub wants_usage: bool,
    /// `max_tokens` / `max_completion_tokens`, if set.
    pub max_tokens: Option<u64>,
    /// Body size in bytes: an upper bound of the input tokens.
    pub input_bound: u64,
    /// The most web searches the request lets a provider run: its search tools'
    /// `max_uses`, [`WEB_SEARCH_MAX_USES`] for one without (and for chat's
    /// `web_search_options`), billed per search (docs/design.md §5).
    pub web_searches: u64,
    /// A chat request with OpenAI's hosted search (`web_search_options`): sent as it is
    /// to `openai` and `azure-openai` candidates, whose search models search once per
    /// request and whose usage does not say so (docs/design.md §5).
    pub chat_search: bool,
    /// The body as the client sent it.
    raw: Bytes,
    /// Where the `model` value sits in `raw`.
    model_at: Range<usize>,
    /// Just after the body's opening `{`, where members are added.
    open: usize,
    /// Where a `max_tokens: null` value sits (a default replaces it rather than being
    /// added next to it: a duplicate member's meaning depends on the parser).
    max_tokens_null: Option<Range<usize>>,
    /// Where the `stream_options` value sits in `raw` and, when it does not already ask
    /// for usage, the same object with `include_usage: true`.
    stream_options: Option<(Range<usize>, Option<String>)>,
    /// A Messages request's `anthropic-*` headers, forwarded to Messages candidates.
    pub anthropic_headers: Vec<(HeaderName, HeaderValue)>,
    /// A Messages or Responses request as a chat request, made on first use.
    chat: OnceLock<Result<Arc<AsChat>, TranslateError>>,
}

/// A header of the request as one the request's buffer does not back: a name or value
/// parsed from the request shares its buffer, and cloning it turns that buffer into a
/// shared one (an allocation and atomic counts for the request's life). The names every
/// Messages client sends are static, and the values (a date, a few betas) are copied.
fn owned_header(name: &HeaderName, value: &HeaderValue) -> (HeaderName, HeaderValue) {
    const VERSION: HeaderName = HeaderName::from_static("anthropic-version");
    const BETA: HeaderName = HeaderName::from_static("anthropic-beta");
    let name = match name.as_str() {
        "anthropic-version" => VERSION,
        "anthropic-beta" => BETA,
        _ => name.clone(),
    };
    let value = match value.as_bytes() {
        b"2023-06-01" => HeaderValue::from_static("2023-06-01"),
        bytes => HeaderValue::from_bytes(bytes).unwrap_or_else(|_| value.clone()),
    };
    (name, value)
}

/// A Messages or Responses request translated to chat.
#[derive(Debug)]
pub struct AsChat {
    /// The chat request.
    pub request: ClientRequest,
    /// The hints (and omitted hosted tools) left out (docs/gateway.md).
    pub dropped: Vec<std::borrow::Cow<'static, str>>,
    /// Responses: the tool namespaces flattened into function names.
    pub namespaces: Vec<String>,
    /// Responses: the hosted web search goes as chat's `web_search_options`.
    pub web_search: bool,
}

impl ClientRequest {
    /// The body as the client sent it (a translated request is built from it).
    pub fn body(&self) -> &[u8] {
        &self.raw
    }

    /// Keeps the client's `anthropic-*` headers (a Messages request forwards them).
    pub fn with_headers(mut self, headers: &HeaderMap) -> Self {
        if self.endpoint == Endpoint::Messages {
            self.anthropic_headers = headers
                .iter()
                .filter(|(name, _)| name.as_str().starts_with("anthropic-"))
                .map(|(name, value)| owned_header(name, value))
                .collect();
        }
        self
    }

    /// A Messages or Responses request as the chat request a candidate that does not
    /// speak its API is sent, with the hints left out (docs/gateway.md); why not, when
    /// a member has no chat equivalent. Made once, on the first such candidate, with
    /// the options of the request's one route ([`to_chat_options`]).
    pub fn as_chat(&self, options: ToChat) -> Result<&AsChat, TranslateError> {
        let translate = match self.endpoint {
            Endpoint::Messages => sluice_providers::messages::to_chat,
            Endpoint::Responses => sluice_providers::responses::to_chat,
            _ => return Err(TranslateError::invalid("endpoint", "only Messages and Responses are translated to chat")),
        };
        let chat = self.chat.get_or_init(|| {
            let t = translate(&self.raw, options)?;
            let request = ClientRequest::parse(Endpoint::Chat, &Bytes::from(t.body))
                .map_err(|e| TranslateError::invalid(self.endpoint.required_member(), e.to_string()))?;
            Ok(Arc::new(AsChat { request, dropped: t.dropped, namespaces: t.namespaces, web_search: t.web_search }))
        });
        chat.as_ref().map(Arc::as_ref).map_err(Clone::clone)
    }
}

/// How route `route` translates an inbound request to chat: hosted tools refused, or
/// omitted when it says `hostedTools: omit`.
pub fn to_chat_options(route: &sluice_crds::snapshot::RouteConfig) -> ToChat {
    ToChat { omit_hosted_tools: route.hosted_tools == sluice_crds::model_route::HostedTools::Omit }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

/// A Responses request that needs a response store is refused naming the member:
/// sluice keeps none (docs/gateway.md), so every request carries its whole conversation.
fn stateless(m: &members::Members<'_>) -> Result<(), ApiError> {
    let set = |raw: Option<&RawValue>| raw.is_some_and(|r| r.get() != "null");
    for (field, raw) in [("previous_response_id", m.previous_response_id), ("conversation", m.conversation)] {
        if set(raw) {
            let message = format!(
                "'{field}' is not supported: sluice does not store responses; send the whole conversation in 'input'"
            );
            return Err(ApiError::UnsupportedParameter { param: field, message });
        }
    }
    for (field, raw, why) in [
        ("store", m.store, "sluice does not store responses; send 'store': false"),
        ("background", m.background, "sluice answers in the foreground only"),
    ] {
        match value(raw) {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                let message = format!("'{field}': true is not supported: {why}");
                return Err(ApiError::UnsupportedParameter { param: field, message });
            }
            Some(_) => return Err(invalid(format!("'{field}' must be a boolean"))),
        }
    }
    Ok(())
}

/// A raw member's value as a `Value` (members the gateway reads are small).
fn value(raw: Option<&RawValue>) -> Option<Value> {
    raw.map(|r| serde_json::from_str(r.get()).unwrap_or(Value::Null))
}

/// Where a member's value sits in the body.
fn span(body: &[u8], raw: &RawValue) -> Range<usize> {
    let at = offset(body, raw.get());
    at..at + raw.get().len()
}

/// The endpoint's required member (`messages`, `prompt` or `input`) is there and of its
/// kind.
fn required(endpoint: Endpoint, m: &members::Members<'_>) -> Result<(), ApiError> {
    let (kind, what) = match endpoint {
        Endpoint::Chat | Endpoint::Messages => (m.messages, "an array of messages"),
        Endpoint::Completions => (m.prompt, "a string or an array"),
        Endpoint::Embeddings | Endpoint::Responses => (m.input, "a string or an array"),
    };
    let name = endpoint.required_member();
    match (endpoint, kind) {
        (_, None) => Err(invalid(format!("you must provide a '{name}' parameter"))),
        (Endpoint::Chat | Endpoint::Messages, Some(Kind::Array { empty: true })) => {
            Err(invalid("'messages' must not be empty"))
        }
        (Endpoint::Chat | Endpoint::Messages, Some(Kind::Array { .. }))
        | (
            Endpoint::Completions | Endpoint::Embeddings | Endpoint::Responses,
            Some(Kind::String | Kind::Array { .. }),
        ) => Ok(()),
        _ => Err(invalid(format!("'{name}' must be {what}"))),
    }
}

/// The output limit the request sets (the larger of `max_tokens` and
/// `max_completion_tokens`; Responses' `max_output_tokens`), required on Messages.
fn output_limit(endpoint: Endpoint, m: &members::Members<'_>) -> Result<Option<u64>, ApiError> {
    let limits = match endpoint {
        Endpoint::Responses => [("max_output_tokens", m.max_output_tokens), ("", None)],
        _ => [("max_tokens", m.max_tokens), ("max_completion_tokens", m.max_completion_tokens)],
    };
    let mut max_tokens = None;
    for (field, raw) in limits {
        match value(raw) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => max_tokens = Some(max_tokens.map_or(n, |m: u64| m.max(n))),
                _ => return Err(invalid(format!("'{field}' must be a positive integer"))),
            },
        }
    }
    if endpoint == Endpoint::Messages && max_tokens.is_none() {
        return Err(invalid("'max_tokens' is required: a positive integer"));
    }
    Ok(max_tokens)
}

/// Whether `stream_options` asks for usage, and where it sits with, when it does not,
/// the same object asking for it.
#[expect(clippy::type_complexity, reason = "the two fields of ClientRequest it fills, as they are declared")]
fn stream_options(
    body: &[u8],
    raw: Option<&RawValue>,
) -> Result<(bool, Option<(Range<usize>, Option<String>)>), ApiError> {
    let Some(raw) = raw else { return Ok((false, None)) };
    match value(Some(raw)) {
        None => Ok((false, None)),
        Some(Value::Null) => Ok((false, Some((span(body, raw), Some(r#"{"include_usage":true}"#.to_string()))))),
        Some(Value::Object(mut o)) => {
            let wants = match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(invalid("'stream_options.include_usage' must be a boolean")),
            };
            let rewritten = (!wants).then(|| {
                o.insert("include_usage".into(), Value::Bool(true));
                Value::Object(o).to_string()
            });
            Ok((wants, Some((span(body, raw), rewritten))))
        }
        Some(_) => Err(invalid("'stream_options' must be an object")),
    }
}

/// The most web searches the request lets a provider run (docs/design.md §5).
fn web_searches(m: &members::Members<'_>) -> u64 {
    let tools = m.tools.unwrap_or_default().web_searches;
    tools.saturating_add(if chat_search(m) { WEB_SEARCH_MAX_USES } else { 0 })
}

/// Whether the request asks for chat's hosted search (`web_search_options`, not null).
fn chat_search(m: &members::Members<'_>) -> bool {
    m.web_search_options.is_some_and(|r| r.get() != "null")
}

/// Where `part` (a slice of `whole`) starts in `whole`.
fn offset(whole: &[u8], part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

impl ClientRequest {
    /// Parses and validates a body.
    pub fn parse(endpoint: Endpoint, body: &Bytes) -> Result<Self, ApiError> {
        // Checked as UTF-8 once, whole: the parse then reads its strings without
        // checking each again.
        let text = std::str::from_utf8(body).map_err(|e| invalid(format!("request body is not valid JSON: {e}")))?;
        let parsed: Body<'_> =
            serde_json::from_str(text).map_err(|e| invalid(format!("request body is not valid JSON: {e}")))?;
        let Body::Object(m) = parsed else {
            return Err(invalid("request body must be a JSON object"));
        };
        let (model, model_at) = match m.model {
            Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
                Ok(Value::String(s)) if !s.is_empty() => (s, span(body, raw)),
                _ => return Err(invalid("'model' must be a non-empty string")),
            },
            None => return Err(invalid("you must provide a 'model' parameter")),
        };
        required(endpoint, &m)?;
        let stream = match value(m.stream) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(_) => return Err(invalid("'stream' must be a boolean")),
        };
        if stream && endpoint == Endpoint::Embeddings {
            return Err(invalid("'stream' is not supported for embeddings"));
        }
        if endpoint == Endpoint::Responses {
            stateless(&m)?;
        }
        let max_tokens = output_limit(endpoint, &m)?;
        let limit_raw = if endpoint == Endpoint::Responses { m.max_output_tokens } else { m.max_tokens };
        let max_tokens_null = limit_raw.filter(|r| r.get() == "null").map(|r| span(body, r));
        let (wants_usage, stream_options) = stream_options(body, m.stream_options)?;
        Ok(Self {
            endpoint,
            model,
            stream,
            wants_usage,
            max_tokens,
            input_bound: body.len() as u64,
            web_searches: web_searches(&m),
            chat_search: endpoint == Endpoint::Chat && chat_search(&m),
            raw: body.clone(),
            model_at,
            open: body.len() - body.trim_ascii_start().len() + 1,
            max_tokens_null,
            stream_options,
            anthropic_headers: Vec::new(),
            chat: OnceLock::new(),
        })
    }

    /// `max_tokens` for the reservation: the request's, else the route default.
    pub fn reserved_output(&self, route_default: u32) -> u64 {
        match self.endpoint {
            Endpoint::Embeddings => 0,
            _ => self.max_tokens.unwrap_or(u64::from(route_default)),
        }
    }

    /// The body sent to one candidate: the client's bytes with only the members the
    /// gateway owns changed, and the very same bytes when nothing changes.
    pub fn upstream_body(&self, model: &str, route_default_max_tokens: u32) -> Bytes {
        let mut added = String::new();
        let mut max_tokens = None;
        if let Some(member) = self.endpoint.output_limit()
            && self.max_tokens.is_none()
        {
            // The reservation assumed this bound, so the upstream must honour it too.
            match &self.max_tokens_null {
                Some(at) => max_tokens = Some((at.clone(), route_default_max_tokens.to_string())),
                None => added.push_str(&format!("\"{member}\":{route_default_max_tokens},")),
            }
        }
        // Usage is needed for billing; the extra chunk is stripped again if the client
        // did not ask for it (docs/design.md §4.4). Messages and Responses streams
        // always carry their usage.
        let mut options = None;
        if self.stream && !self.endpoint.is_inbound_format() {
            match &self.stream_options {
                None => added.push_str("\"stream_options\":{\"include_usage\":true},"),
                Some((at, Some(rewritten))) => options = Some((at.clone(), rewritten.as_str())),
                Some((_, None)) => {}
            }
        }
        let new_model = (model != self.model).then(|| Value::String(model.to_string()).to_string());
        if added.is_empty() && options.is_none() && new_model.is_none() && max_tokens.is_none() {
            return self.raw.clone();
        }
        // Edits in body order: members added after `{`, then the two replaced values.
        let mut edits: Vec<(Range<usize>, &str)> = vec![(self.open..self.open, added.as_str())];
        if let Some(m) = &new_model {
            edits.push((self.model_at.clone(), m.as_str()));
        }
        edits.extend(options);
        if let Some((at, n)) = &max_tokens {
            edits.push((at.clone(), n.as_str()));
        }
        edits.sort_by_key(|(at, _)| at.start);
        let mut out = Vec::with_capacity(self.raw.len() + added.len() + model.len() + 32);
        let mut at = 0;
        for (range, text) in edits {
            out.extend_from_slice(self.raw.get(at..range.start).unwrap_or_default());
            out.extend_from_slice(text.as_bytes());
            at = range.end;
        }
        out.extend_from_slice(self.raw.get(at..).unwrap_or_default());
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests;
