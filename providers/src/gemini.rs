//! Gemini `generateContent`, on Google AI Studio (`gemini`) and Vertex AI
//! (`vertex-gemini`): the same body and SSE stream of `GenerateContentResponse`
//! objects, different paths.

mod request;
mod stream;

use http::HeaderMap;
use serde_json::Value;

use crate::anthropic::{model_segment, vertex_prefix};
use crate::{
    Answer, AnswerOpts, AnswerToolCall, ChatRequest, Completion, FinishReason, NativeRequest, Protocol, Target,
    TranslateError, UpstreamError, Usage, google, retry,
};

pub(crate) use stream::Stream;

pub(crate) fn build(target: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<NativeRequest, TranslateError> {
    let body = request::body(target, req)?;
    let verb = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    let model = model_segment(target.model);
    let path = if target.protocol == Protocol::VertexGemini {
        format!("{}/publishers/google/models/{model}:{verb}", vertex_prefix(target)?)
    } else {
        format!("/models/{model}:{verb}")
    };
    Ok(NativeRequest::json(path, &body))
}

pub(crate) fn parse(target: &Target<'_>, body: &[u8], opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    let v = crate::answer_json(body)?;
    if v.get("error").is_some() {
        return Err(classify(200, &HeaderMap::new(), body, 0));
    }
    let mut answer = Answer {
        id: v["responseId"].as_str().map(str::to_owned),
        model: v["modelVersion"].as_str().unwrap_or(target.model).to_owned(),
        usage: usage(&v["usageMetadata"]).unwrap_or_default(),
        ..Answer::default()
    };
    let candidate = &v["candidates"][0];
    for part in parts(candidate) {
        match Part::of(part) {
            Part::Text(t) => answer.text.push_str(t),
            Part::Call { id, name, args, extra } => {
                if let Some(extra) = extra {
                    answer.tool_call_extras.push((answer.tool_calls.len(), extra));
                }
                answer.tool_calls.push(AnswerToolCall {
                    id: id.map(str::to_owned),
                    name: name.to_owned(),
                    arguments: args,
                });
            }
            Part::Skip => {}
        }
    }
    answer.finish_reason = finish_reason(&v);
    Ok(answer.into_completion(opts))
}

fn parts(candidate: &Value) -> &[Value] {
    candidate["content"]["parts"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// What a response part means on the OpenAI side.
enum Part<'a> {
    Text(&'a str),
    /// A function call; `args` is JSON text, empty when the call has no arguments.
    /// Gemini 3 signs its calls: the signature must come back with the call next turn,
    /// so it goes out in `extra`, the vendor fields of the OpenAI tool call.
    Call {
        id: Option<&'a str>,
        name: &'a str,
        args: String,
        extra: Option<Value>,
    },
    Skip,
}

impl<'a> Part<'a> {
    fn of(part: &'a Value) -> Self {
        if let Some(call) = part.get("functionCall") {
            let args = match &call["args"] {
                Value::Object(m) if !m.is_empty() => call["args"].to_string(),
                _ => String::new(),
            };
            return Self::Call {
                id: call["id"].as_str(),
                name: call["name"].as_str().unwrap_or(""),
                args,
                extra: part["thoughtSignature"].as_str().map(signature_extra),
            };
        }
        // Thought summaries are not part of the answer.
        if part["thought"] == true {
            return Self::Skip;
        }
        part["text"].as_str().map_or(Self::Skip, Self::Text)
    }
}

/// The vendor field that carries a thought signature through an OpenAI tool call, as
/// Google's own OpenAI endpoint does; [`crate::ToolCall::thought_signature`] reads it back.
fn signature_extra(signature: &str) -> Value {
    serde_json::json!({ "extra_content": { "google": { "thought_signature": signature } } })
}

/// The OpenAI finish reason of a response, if it has one. `STOP` stays `stop` here;
/// the caller turns it into `tool_calls` when a function was called.
fn finish_reason(v: &Value) -> Option<FinishReason> {
    if v["promptFeedback"]["blockReason"].is_string() && v["candidates"][0].is_null() {
        return Some(FinishReason::ContentFilter);
    }
    let reason = v["candidates"][0]["finishReason"].as_str()?;
    Some(match reason {
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION"
        | "LANGUAGE" => FinishReason::ContentFilter,
        // STOP, OTHER, MALFORMED_FUNCTION_CALL, FINISH_REASON_UNSPECIFIED, …
        _ => FinishReason::Stop,
    })
}

/// `usageMetadata` → usage; `promptTokenCount` already includes cached tokens.
fn usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Some(Usage::from_inclusive(
        n("promptTokenCount"),
        n("candidatesTokenCount") + n("thoughtsTokenCount"),
        n("cachedContentTokenCount"),
    ))
}

pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    let hinted = retry::from_headers(headers, now_unix_ms);
    match google::error_body(body).and_then(|v| google::read(status, &v["error"])) {
        Some(g) => g.into_upstream(status, hinted),
        None => crate::generic_error(status, headers, body, now_unix_ms),
    }
}
