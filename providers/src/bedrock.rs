//! AWS Bedrock Converse (`bedrock`): `POST /model/{model}/converse` and
//! `/converse-stream` (docs/design.md §9).
//!
//! - The model id (base id, inference profile or ARN) is ONE percent-encoded path
//!   segment, so the `/` and `:` of ARNs survive; `auth::sigv4` signs that path.
//! - Streams are `application/vnd.amazon.eventstream` frames ([`crate::eventstream`]);
//!   an exception frame before any content fails over like an HTTP error.
//! - Errors are classified by their name (`x-amzn-errortype`, `__type`, or an
//!   exception frame's `:exception-type`) before their status: AWS documents
//!   `ThrottlingException` as both 400 and 429.
//! - Usage: `inputTokens` excludes cache reads and writes; `prompt_tokens` includes them.

mod request;
mod stream;

use http::HeaderMap;
use serde_json::Value;

use crate::error::{says_context_length, says_expired};
use crate::{
    Answer, AnswerOpts, AnswerToolCall, ChatRequest, Completion, ErrorKind, FinishReason, NativeRequest, Target,
    TranslateError, UpstreamError, Usage, retry,
};

pub(crate) use stream::StreamTranscoder;

pub(crate) fn build(target: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<NativeRequest, TranslateError> {
    let body = request::body(target, req)?;
    let verb = if stream { "converse-stream" } else { "converse" };
    let path = format!("/model/{}/{verb}", crate::encode_segment(target.model));
    Ok(NativeRequest::json(path, &body))
}

pub(crate) fn parse(target: &Target<'_>, body: &[u8], opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    let v = crate::answer_json(body)?;
    let Some(content) = v["output"]["message"]["content"].as_array() else {
        if error_name(&HeaderMap::new(), &v).is_some() {
            return Err(classify(200, &HeaderMap::new(), body, 0));
        }
        return Err(UpstreamError::malformed(200, "a Converse answer without output.message"));
    };
    let mut answer = Answer {
        model: target.model.to_owned(),
        finish_reason: v["stopReason"].as_str().map(finish_reason),
        usage: usage(&v["usage"]),
        ..Answer::default()
    };
    for block in content {
        if let Some(text) = block["text"].as_str() {
            answer.text.push_str(text);
        } else if let Some(tool) = block.get("toolUse") {
            answer.tool_calls.push(AnswerToolCall {
                id: tool["toolUseId"].as_str().map(str::to_owned),
                name: tool["name"].as_str().unwrap_or("").to_owned(),
                arguments: match &tool["input"] {
                    Value::Null => String::new(),
                    input => input.to_string(),
                },
            });
        }
        // Reasoning and other blocks have no OpenAI chat equivalent.
    }
    Ok(answer.into_completion(opts))
}

/// Converse's stop reasons onto OpenAI's finish reasons (unknown ones are `stop`).
fn finish_reason(stop: &str) -> FinishReason {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "content_filtered" | "guardrail_intervened" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

/// A Converse `usage` object (`inputTokens` excludes cache reads and writes).
fn usage(u: &Value) -> Usage {
    let get = |k: &str| u[k].as_u64().unwrap_or(0);
    Usage::from_exclusive(
        get("inputTokens"),
        get("outputTokens"),
        get("cacheReadInputTokens"),
        get("cacheWriteInputTokens"),
    )
}

pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(name) = error_name(headers, &v) else {
        return crate::generic_error(status, headers, body, now_unix_ms);
    };
    let message = ["message", "Message"].iter().find_map(|k| v[*k].as_str()).unwrap_or("").to_owned();
    classify_named(status, &name, message).with_retry_after(retry::from_headers(headers, now_unix_ms))
}

/// The error's name, bare (`ThrottlingException`): from `x-amzn-errortype`
/// (`Name:namespace-uri`), else the body's `__type` (`namespace#Name`) or `code`.
fn error_name(headers: &HeaderMap, v: &Value) -> Option<String> {
    let raw = headers
        .get("x-amzn-errortype")
        .and_then(|h| h.to_str().ok())
        .or_else(|| ["__type", "code", "Code"].iter().find_map(|k| v[*k].as_str()))?;
    let name = raw.split(':').next().unwrap_or(raw);
    let name = name.rsplit('#').next().unwrap_or(name).trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// Classifies an error by its name, PascalCase (HTTP) or camelCase (stream frames).
pub(crate) fn classify_named(status: u16, name: &str, message: String) -> UpstreamError {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    let kind = if is("ThrottlingException") || is("TooManyRequestsException") {
        ErrorKind::RateLimited
    } else if is("ServiceUnavailableException") || is("ModelNotReadyException") {
        ErrorKind::Unavailable
    } else if is("ModelStreamErrorException")
        || is("ModelErrorException")
        || is("InternalServerException")
        || is("InternalFailure")
    {
        // AWS on modelStreamErrorException (a 424): "Retry your request".
        ErrorKind::Server
    } else if is("ModelTimeoutException") {
        ErrorKind::Timeout
    } else if is("ExpiredTokenException") || (is("UnrecognizedClientException") && says_expired(&message)) {
        ErrorKind::AuthExpired
    } else if is("AccessDeniedException")
        || is("UnrecognizedClientException")
        || is("InvalidSignatureException")
        || is("IncompleteSignatureException")
        || is("MissingAuthenticationTokenException")
    {
        ErrorKind::Auth
    } else if is("ResourceNotFoundException") {
        ErrorKind::NotFound
    } else if is("ValidationException") {
        let m = message.to_ascii_lowercase();
        if says_context_length(&message) || m.contains("input is too long") {
            ErrorKind::ContextLength
        } else {
            ErrorKind::InvalidRequest
        }
    } else if is("ServiceQuotaExceededException") {
        // An account-level quota, not a transient limit: retrying will not help.
        ErrorKind::Client
    } else if (200..300).contains(&status) {
        // An unknown exception inside a 2xx stream: the attempt failed, not the request.
        ErrorKind::Server
    } else {
        ErrorKind::from_status(status)
    };
    let code = match kind {
        ErrorKind::InvalidRequest | ErrorKind::Client | ErrorKind::Server | ErrorKind::Unavailable => Some(name),
        _ => None,
    };
    let message = if message.is_empty() { name.to_owned() } else { message };
    UpstreamError::new(kind, status, message, code)
}
