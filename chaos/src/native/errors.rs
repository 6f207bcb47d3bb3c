//! Error answers in each provider's own shape: scripted failures, refused
//! requests, and the in-stream error events.

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::Value;

use super::request::Invalid;
use super::{anthropic, bedrock as aws, google};
use crate::plan::{ErrorReply, json_response};
use crate::protocol::{Family, Protocol};
use crate::wire;

const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
const AMZN_ERROR_TYPE: HeaderName = HeaderName::from_static("x-amzn-errortype");
const AMZN_REQUEST_ID: HeaderName = HeaderName::from_static("x-amzn-requestid");

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Anthropic's `{"type":"error",…}` with a `request-id` header.
pub(crate) fn anthropic(code: u16, kind: &str, message: &str) -> Response {
    let mut v = anthropic::error_json(kind, message);
    v["request_id"] = Value::from("req_chaos");
    let mut response = json_response(status(code), Bytes::from(v.to_string()));
    response.headers_mut().insert(REQUEST_ID, HeaderValue::from_static("req_chaos"));
    response
}

/// Google's `{"error":{"code","message","status"}}`; `details` are added
/// as given.
pub(crate) fn google(code: u16, message: &str, details: Vec<Value>, retry_after_s: Option<u64>) -> Response {
    let name = google::status_name(code);
    let mut v = google::error_json(code, name, message, retry_after_s);
    if !details.is_empty() {
        let mut all = v["error"]["details"].as_array().cloned().unwrap_or_default();
        all.extend(details);
        v["error"]["details"] = Value::Array(all);
    }
    json_response(status(code), Bytes::from(v.to_string()))
}

/// AWS's `{"message"}` with `x-amzn-errortype: Name:…` and a request id.
pub(crate) fn bedrock(code: u16, name: &str, message: &str) -> Response {
    let body = serde_json::json!({"message": message});
    let mut response = json_response(status(code), Bytes::from(body.to_string()));
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("{name}{}", aws::ERROR_TYPE_SUFFIX)) {
        headers.insert(AMZN_ERROR_TYPE, v);
    }
    headers.insert(AMZN_REQUEST_ID, HeaderValue::from_static("00000000-0000-4000-8000-00000000c4a0"));
    response
}

/// OpenAI's (and Azure's) error shape.
pub(crate) fn openai(code: u16, message: &str, kind: &str, err_code: &str) -> Response {
    json_response(status(code), wire::error_body(message, kind, err_code))
}

/// OpenAI's 400 with `error.param` and a `code` (`null` when not given), as
/// the Responses API refuses a request.
fn openai_param(message: &str, param: Option<&str>, err_code: Option<&str>) -> Response {
    let v = serde_json::json!({"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": err_code,
    }});
    json_response(StatusCode::BAD_REQUEST, Bytes::from(v.to_string()))
}

/// The scripted failure (`x-chaos-status` ≥ 400) in the protocol's shape.
/// `x-chaos-error-code`, when set, names the native error (Anthropic
/// `error.type`, Google `status`, Bedrock exception).
pub(crate) fn scripted(protocol: Protocol, reply: &ErrorReply) -> Response {
    let code = reply.status.as_u16();
    let name = reply.code.as_deref();
    let retry = reply.retry_after_s;
    match protocol {
        Protocol::OpenAi | Protocol::AzureOpenAi => reply.response(),
        // Vertex reports quota (and its own auth) errors in Google's shape.
        Protocol::VertexAnthropic if code == 429 && name.is_none() => {
            google(code, google::message_of("RESOURCE_EXHAUSTED"), Vec::new(), retry)
        }
        Protocol::Anthropic | Protocol::VertexAnthropic => {
            let kind = name.unwrap_or_else(|| anthropic::error_kind(code));
            let message = match kind {
                "context_length_exceeded" => "prompt is too long: 208310 tokens > 200000 maximum",
                _ => anthropic::error_message(kind),
            };
            let kind = if kind == "context_length_exceeded" { "invalid_request_error" } else { kind };
            reply.with_retry_headers(anthropic(code, kind, message))
        }
        Protocol::Gemini | Protocol::VertexGemini => {
            let status_name = name.unwrap_or_else(|| google::status_name(code));
            let message = google::message_of(status_name);
            let v = google::error_json(code, status_name, message, retry);
            json_response(reply.status, Bytes::from(v.to_string()))
        }
        Protocol::Bedrock => {
            let name = name.unwrap_or_else(|| aws::error_name(code));
            bedrock(code, name, aws::error_message(name))
        }
    }
}

/// A request the provider refuses with a 400, in the family's shape.
pub(crate) fn invalid(family: Family, message: &str) -> Response {
    match family {
        Family::OpenAi => openai(400, message, "invalid_request_error", "invalid_request"),
        Family::Responses => openai_param(message, None, None),
        Family::Anthropic => anthropic(400, "invalid_request_error", message),
        Family::Gemini => google(400, message, Vec::new(), None),
        Family::Bedrock | Family::BedrockMessages => bedrock(400, "ValidationException", message),
    }
}

/// A body the provider refuses, naming the offending member where OpenAI does.
pub(crate) fn refuse(family: Family, invalid: &Invalid) -> Response {
    match (family, &invalid.param) {
        (Family::Responses, Some((param, code))) => openai_param(&invalid.message, Some(param), Some(code)),
        _ => self::invalid(family, &invalid.message),
    }
}

/// The in-stream error of a family: its native name (the script's
/// `error_code` or a default meaning "overloaded") and message.
pub(crate) fn stream_error(family: Family, name: Option<&str>) -> (String, &'static str) {
    match family {
        Family::OpenAi | Family::Responses => {
            let name = name.unwrap_or("server_error");
            (name.to_owned(), "The server had an error while processing your request.")
        }
        Family::Anthropic => {
            let kind = name.unwrap_or("overloaded_error");
            (kind.to_owned(), anthropic::error_message(kind))
        }
        Family::Gemini => {
            let status = name.unwrap_or("UNAVAILABLE");
            (status.to_owned(), google::message_of(status))
        }
        Family::Bedrock | Family::BedrockMessages => {
            let exception = name.unwrap_or("ServiceUnavailableException");
            (exception.to_owned(), aws::error_message(exception))
        }
    }
}
