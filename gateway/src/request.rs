//! The client's request: validated once, then re-serialised per candidate with only the
//! fields the gateway owns changed (`model`, `max_tokens`, `stream_options`).

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Which OpenAI endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `/v1/embeddings`.
    Embeddings,
}

impl Endpoint {
    /// Path after the upstream base URL.
    pub fn upstream_path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
        }
    }
}

/// A validated client request.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    /// Endpoint.
    pub endpoint: Endpoint,
    /// The model asked for.
    pub model: String,
    /// The JSON body.
    pub body: Map<String, Value>,
    /// `stream: true`.
    pub stream: bool,
    /// The client asked for the usage chunk (`stream_options.include_usage`).
    pub wants_usage: bool,
    /// `max_tokens` / `max_completion_tokens`, if set.
    pub max_tokens: Option<u64>,
    /// Body size in bytes: an upper bound of the input tokens.
    pub input_bound: u64,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

impl ClientRequest {
    /// Parses and validates a body.
    pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| invalid(format!("request body is not valid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(invalid("request body must be a JSON object"));
        };
        let model = match map.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(_) => return Err(invalid("'model' must be a non-empty string")),
            None => return Err(invalid("you must provide a 'model' parameter")),
        };
        let required = match endpoint {
            Endpoint::Chat => ("messages", "an array of messages"),
            Endpoint::Completions => ("prompt", "a string or an array"),
            Endpoint::Embeddings => ("input", "a string or an array"),
        };
        match (endpoint, map.get(required.0)) {
            (_, None) => return Err(invalid(format!("you must provide a '{}' parameter", required.0))),
            (Endpoint::Chat, Some(Value::Array(a))) if !a.is_empty() => {}
            (Endpoint::Chat, Some(Value::Array(_))) => return Err(invalid("'messages' must not be empty")),
            (Endpoint::Completions | Endpoint::Embeddings, Some(Value::String(_) | Value::Array(_))) => {}
            (_, Some(_)) => return Err(invalid(format!("'{}' must be {}", required.0, required.1))),
        }
        let stream = match map.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("'stream' must be a boolean")),
        };
        if stream && endpoint == Endpoint::Embeddings {
            return Err(invalid("'stream' is not supported for embeddings"));
        }
        let mut max_tokens = None;
        for field in ["max_tokens", "max_completion_tokens"] {
            match map.get(field) {
                None | Some(Value::Null) => {}
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => max_tokens = Some(max_tokens.map_or(n, |m: u64| m.max(n))),
                    _ => return Err(invalid(format!("'{field}' must be a positive integer"))),
                },
            }
        }
        let wants_usage = match map.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(Value::Object(o)) => match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(invalid("'stream_options.include_usage' must be a boolean")),
            },
            Some(_) => return Err(invalid("'stream_options' must be an object")),
        };
        Ok(Self { endpoint, model, body: map, stream, wants_usage, max_tokens, input_bound: body.len() as u64 })
    }

    /// `max_tokens` for the reservation: the request's, else the route default.
    pub fn reserved_output(&self, route_default: u32) -> u64 {
        match self.endpoint {
            Endpoint::Embeddings => 0,
            _ => self.max_tokens.unwrap_or(u64::from(route_default)),
        }
    }

    /// The body sent to one candidate.
    pub fn upstream_body(&self, model: &str, route_default_max_tokens: u32) -> Bytes {
        let mut body = self.body.clone();
        body.insert("model".into(), Value::String(model.to_string()));
        if self.endpoint != Endpoint::Embeddings && self.max_tokens.is_none() {
            // The reservation assumed this bound, so the upstream must honour it too.
            body.insert("max_tokens".into(), Value::from(route_default_max_tokens));
        }
        if self.stream {
            // Usage is needed for billing; the extra chunk is stripped again if the
            // client did not ask for it (DESIGN §4.4).
            let options = body.entry("stream_options").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(o) = options {
                o.insert("include_usage".into(), Value::Bool(true));
            }
        }
        Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(endpoint: Endpoint, body: &str) -> String {
        match ClientRequest::parse(endpoint, body.as_bytes()) {
            Err(e) => e.to_string(),
            Ok(_) => "accepted".into(),
        }
    }

    #[test]
    fn refuses_bad_requests_naming_the_field() {
        assert!(err(Endpoint::Chat, "{").starts_with("request body is not valid JSON"));
        assert_eq!(err(Endpoint::Chat, "[]"), "request body must be a JSON object");
        assert_eq!(err(Endpoint::Chat, r#"{"messages":[{}]}"#), "you must provide a 'model' parameter");
        assert_eq!(err(Endpoint::Chat, r#"{"model":1,"messages":[{}]}"#), "'model' must be a non-empty string");
        assert_eq!(err(Endpoint::Chat, r#"{"model":"m"}"#), "you must provide a 'messages' parameter");
        assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":"hi"}"#), "'messages' must be an array of messages");
        assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"stream":"yes"}"#), "'stream' must be a boolean");
        assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"max_tokens":-1}"#), "'max_tokens' must be a positive integer");
        assert_eq!(err(Endpoint::Embeddings, r#"{"model":"m","input":"x","stream":true}"#), "'stream' is not supported for embeddings");
        assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[{}]}"#), "accepted");
    }

    #[test]
    fn upstream_body_sets_model_max_tokens_and_usage() {
        let r = ClientRequest::parse(Endpoint::Chat, br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#).unwrap();
        let body: Value = serde_json::from_slice(&r.upstream_body("m-2025", 4096)).unwrap();
        assert_eq!(body["model"], "m-2025");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(!r.wants_usage);
    }
}
