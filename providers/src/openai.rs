//! OpenAI and Azure OpenAI. The gateway relays these natively on its fast path; this
//! module gives the same four functions so every protocol can be driven alike: the
//! request is the client's own (model and stream set, usage always requested), answers
//! pass through, and `classify` reads OpenAI's and Azure's error names and retry hints.

use std::borrow::Cow;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Value, json};

use crate::sse::SseEvents;
use crate::{
    AnswerOpts, ChatRequest, Completion, ErrorKind, NativeRequest, Out, Protocol, Target, TranslateError,
    UpstreamError, Usage, encode_segment, retry,
};

pub(crate) fn build(target: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<NativeRequest, TranslateError> {
    let path = match target.protocol {
        Protocol::AzureOpenAi => {
            let version = target
                .azure_api_version
                .ok_or_else(|| TranslateError::invalid("azure.apiVersion", "azure-openai needs an api-version"))?;
            Cow::Owned(format!(
                "/deployments/{}/chat/completions?api-version={}",
                encode_segment(target.model),
                encode_segment(version)
            ))
        }
        _ => Cow::Borrowed("/chat/completions"),
    };
    let mut req = req.clone();
    req.model = Some(target.model.to_owned());
    req.stream = stream.then_some(true);
    // The transcoder contract is that a stream always ends with usage: ask for it; the
    // gateway strips the usage chunk when the client did not.
    req.stream_options = stream.then(|| json!({ "include_usage": true }));
    let body = serde_json::to_vec(&req).map_err(|e| TranslateError::invalid("messages", e.to_string()))?;
    Ok(NativeRequest { path, body: Bytes::from(body), headers: Vec::new(), client_headers: false })
}

pub(crate) fn parse(_target: &Target<'_>, body: &[u8], _opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    let v = crate::answer_json(body)?;
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify(200, &HeaderMap::new(), body, 0));
    }
    Ok(Completion { body: Bytes::copy_from_slice(body), usage: usage(&v["usage"]) })
}

/// Reads an OpenAI `usage` object (`prompt_tokens` already includes cached tokens).
fn usage(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Usage::from_inclusive(
        n(&u["prompt_tokens"]),
        n(&u["completion_tokens"]),
        n(&u["prompt_tokens_details"]["cached_tokens"]),
    )
}

pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    let retry_after = retry::from_headers(headers, now_unix_ms);
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return crate::generic_error(status, headers, body, now_unix_ms);
    };
    let err = &v["error"];
    let code = err["code"].as_str().unwrap_or("");
    let kind_name = err["type"].as_str().unwrap_or("");
    let inner = err["innererror"]["code"].as_str().unwrap_or("");
    let message = err["message"].as_str().map_or_else(|| String::from_utf8_lossy(body).into_owned(), str::to_owned);
    let lower = message.to_ascii_lowercase();
    let kind = match (code, kind_name, inner) {
        ("context_length_exceeded", ..) | ("string_above_max_length", ..) => ErrorKind::ContextLength,
        ("content_filter" | "content_policy_violation", ..) | (_, _, "ResponsibleAIPolicyViolation") => {
            ErrorKind::ContentFilter
        }
        ("rate_limit_exceeded" | "insufficient_quota" | "429", ..) | (_, "rate_limit_error" | "tokens", _) => {
            ErrorKind::RateLimited
        }
        ("model_not_found" | "DeploymentNotFound", ..) => ErrorKind::NotFound,
        _ if status == 401 && lower.contains("expired") => ErrorKind::AuthExpired,
        ("invalid_api_key", ..) | (_, "authentication_error", _) => ErrorKind::Auth,
        _ if lower.contains("maximum context length") => ErrorKind::ContextLength,
        _ if status == 200 => ErrorKind::Server,
        _ => ErrorKind::from_status(status),
    };
    let code = (!code.is_empty()).then_some(code);
    let mut e = UpstreamError::new(kind, status, message, None);
    // Keep the provider's own body for passthrough when it is already OpenAI-shaped.
    if err.is_object() && code.is_some() {
        e.openai_body = Bytes::copy_from_slice(body);
    }
    e.with_retry_after(retry_after)
}

/// Passes OpenAI SSE through, noting content and ending at `[DONE]`.
pub(crate) struct Passthrough {
    content: bool,
    done: bool,
}

impl Passthrough {
    pub(crate) fn new(_opts: AnswerOpts) -> Self {
        Self { content: false, done: false }
    }

    fn fail(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        self.done = true;
        out.push(Out::Error { error, before_content: !self.content });
    }
}

impl SseEvents for Passthrough {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        if data == "[DONE]" {
            self.done = true;
            out.push(Out::Event { bytes: Bytes::from_static(b"data: [DONE]\n\n"), content: false });
            out.push(Out::Done);
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return self.fail(UpstreamError::malformed(200, "a stream event is not JSON"), out);
        };
        if v.get("error").is_some_and(|e| !e.is_null()) {
            return self.fail(classify(200, &HeaderMap::new(), data.as_bytes(), 0), out);
        }
        // Azure interleaves prompt-filter chunks (`choices: []`, no usage) and, with the
        // asynchronous filter, annotation chunks without `delta`: typed clients choke on
        // both and neither carries content, so they are dropped.
        let choices = v["choices"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let annotation = match choices.first() {
            None => v["usage"].is_null(),
            Some(c) => c.get("delta").is_none() && c["finish_reason"].is_null(),
        };
        if annotation {
            return;
        }
        let delta = &v["choices"][0]["delta"];
        let content = delta["content"].as_str().is_some_and(|s| !s.is_empty())
            || delta["tool_calls"].as_array().is_some_and(|a| !a.is_empty());
        self.content |= content;
        out.push(Out::Event { bytes: Bytes::from(format!("data: {data}\n\n")), content });
    }

    fn end(&mut self, out: &mut Vec<Out>) {
        if !self.done {
            self.fail(UpstreamError::malformed(200, "the stream ended before [DONE]"), out);
        }
    }
}
