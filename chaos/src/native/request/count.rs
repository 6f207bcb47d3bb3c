//! The body of a token count, read as each provider reads it: Anthropic's
//! `/v1/messages/count_tokens` and Claude's `count-tokens:rawPredict` on Vertex AI (a
//! Messages body without `max_tokens`; Vertex's names the model and may carry its
//! `anthropic_version`), and Bedrock's CountTokens (`{"input": …}` holding either an
//! InvokeModel body, base64, in `invokeModel.body`, or a Converse request in
//! `converse`; only foundation models are counted).
//!
//! The count is the estimate the same request's answer bills: text bytes of `system`,
//! `messages` and the tools, / 4.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value};

use super::{Invalid, NativeRequest, tokens, tool_result, vertex_version};
use crate::protocol::{Call, Family, Protocol};

/// What a count request comes to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Counted {
    /// The input tokens the request would be billed.
    pub(crate) input_tokens: u64,
    /// The last turn carries a tool result (what `fail_on_tool_result` fails).
    pub(crate) answers_tool: bool,
}

/// The members Anthropic's count endpoint takes (`max_tokens` and `stream` are not
/// among them: a count generates nothing).
const COUNT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
    "cache_control",
];

/// The members of CountTokens' `input.converse` (ConverseTokensRequest).
const CONVERSE_FIELDS: &[&str] = &["messages", "system", "toolConfig", "additionalModelRequestFields"];

impl Counted {
    /// Reads and checks the count request `body` of `call` (`call.count_tokens`).
    pub(crate) fn parse(call: &Call, body: &[u8]) -> Result<Self, Invalid> {
        match call.protocol {
            Protocol::Bedrock => bedrock(call, body),
            _ => messages(call.protocol == Protocol::VertexAnthropic, body),
        }
    }
}

fn messages(vertex: bool, body: &[u8]) -> Result<Counted, Invalid> {
    let map: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| Invalid::new(format!("There was an error parsing the body: {e}")))?;
    for key in map.keys() {
        let known = COUNT_FIELDS.contains(&key.as_str()) || (vertex && key == "anthropic_version");
        if !known {
            return Err(Invalid::new(format!("{key}: Extra inputs are not permitted")));
        }
    }
    if vertex {
        vertex_version(map.get("anthropic_version"), false)?;
    }
    if map.get("model").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(Invalid::new("model: Field required"));
    }
    if !map.get("messages").is_some_and(Value::is_array) {
        return Err(Invalid::new("messages: Field required"));
    }
    Ok(Counted {
        input_tokens: tokens(&[map.get("system"), map.get("messages"), map.get("tools")]),
        answers_tool: tool_result::anthropic(map.get("messages")),
    })
}

/// AWS's words for a member that is missing.
fn null_at(path: &str) -> Invalid {
    Invalid::new(format!(
        "1 validation error detected: Value null at '{path}' failed to satisfy constraint: Member must not be null"
    ))
}

fn bedrock(call: &Call, body: &[u8]) -> Result<Counted, Invalid> {
    let model = call.model.as_deref().unwrap_or_default();
    // Bare foundation-model ids of Claude only: an inference profile (`us.anthropic…`)
    // or its ARN is refused, as CountTokens does.
    if !model.starts_with("anthropic.claude") {
        return Err(Invalid::new("The provided model doesn't support counting tokens."));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        Invalid::new(format!("Malformed input request: {e}, please reformat your input and try again."))
    })?;
    let input = v.get("input").and_then(Value::as_object).ok_or_else(|| null_at("input"))?;
    match (input.get("invokeModel"), input.get("converse"), input.len()) {
        (Some(invoke), None, 1) => {
            let encoded =
                invoke.get("body").and_then(Value::as_str).ok_or_else(|| null_at("input.invokeModel.body"))?;
            let decoded = B64
                .decode(encoded)
                .map_err(|e| Invalid::new(format!("input.invokeModel.body: not valid base64: {e}")))?;
            let invoke = Call { family: Family::BedrockMessages, stream: false, count_tokens: false, ..call.clone() };
            let req = NativeRequest::parse(&invoke, &decoded)?;
            Ok(Counted { input_tokens: req.prompt_tokens, answers_tool: req.answers_tool })
        }
        (None, Some(Value::Object(converse)), 1) => {
            if let Some(key) = converse.keys().find(|k| !CONVERSE_FIELDS.contains(&k.as_str())) {
                return Err(Invalid::new(format!(
                    "Malformed input request: extraneous key [{key}] is not permitted, please reformat your input and try again."
                )));
            }
            let converse_call = Call { family: Family::Bedrock, stream: false, count_tokens: false, ..call.clone() };
            let body = Value::Object(converse.clone()).to_string();
            let req = NativeRequest::parse(&converse_call, body.as_bytes())?;
            Ok(Counted { input_tokens: req.prompt_tokens, answers_tool: req.answers_tool })
        }
        _ => Err(Invalid::new("input: exactly one of invokeModel and converse must be set")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(protocol: Protocol, model: Option<&str>) -> Call {
        Call { count_tokens: true, ..Call::new(protocol, model.map(str::to_owned), false) }
    }

    fn invoke(body: &str) -> Vec<u8> {
        serde_json::json!({"input": {"invokeModel": {"body": B64.encode(body)}}}).to_string().into_bytes()
    }

    #[test]
    fn a_messages_count_is_what_the_answer_bills() {
        let anthropic = call(Protocol::Anthropic, None);
        let body = br#"{"model":"c","system":"abcd","messages":[{"role":"user","content":"abcdefgh"}],
            "tools":[{"name":"look","input_schema":{}}]}"#;
        let billed = br#"{"model":"c","max_tokens":9,"system":"abcd","messages":[{"role":"user","content":"abcdefgh"}],
            "tools":[{"name":"look","input_schema":{}}]}"#;
        let counted = Counted::parse(&anthropic, body).unwrap();
        let req = NativeRequest::parse(&Call::new(Protocol::Anthropic, None, false), billed).unwrap();
        assert_eq!(counted, Counted { input_tokens: req.prompt_tokens, answers_tool: false });
        let err = Counted::parse(&anthropic, br#"{"model":"c","max_tokens":5,"messages":[]}"#).unwrap_err();
        assert_eq!(err.message, "max_tokens: Extra inputs are not permitted");
        let err = Counted::parse(&anthropic, br#"{"model":"c","anthropic_version":"vertex-2023-10-16","messages":[]}"#)
            .unwrap_err();
        assert_eq!(err.message, "anthropic_version: Extra inputs are not permitted", "Anthropic's own has none");
    }

    #[test]
    fn vertex_counts_with_the_model_in_the_body() {
        let vertex = call(Protocol::VertexAnthropic, None);
        let ok = br#"{"anthropic_version":"vertex-2023-10-16","model":"claude@1","messages":[]}"#;
        assert_eq!(Counted::parse(&vertex, ok).unwrap().input_tokens, 1);
        assert!(Counted::parse(&vertex, br#"{"model":"claude@1","messages":[]}"#).is_ok(), "the version is optional");
        let err = Counted::parse(&vertex, br#"{"anthropic_version":"vertex-2023-10-16","messages":[]}"#).unwrap_err();
        assert_eq!(err.message, "model: Field required");
        let err = Counted::parse(&vertex, br#"{"anthropic_version":"bedrock-2023-05-31","model":"m","messages":[]}"#)
            .unwrap_err();
        assert!(err.message.starts_with("anthropic_version: Input should be"), "{}", err.message);
    }

    #[test]
    fn bedrock_counts_an_invoke_model_body_or_a_converse_request() {
        let bedrock = call(Protocol::Bedrock, Some("anthropic.claude-x-v1:0"));
        let body = r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[{"role":"user","content":"abcdefgh"}]}"#;
        let counted = Counted::parse(&bedrock, &invoke(body)).unwrap();
        assert_eq!(counted.input_tokens, 3, "\"user\" + \"abcdefgh\"");
        let err = Counted::parse(&bedrock, &invoke(r#"{"anthropic_version":"bedrock-2023-05-31","messages":[]}"#))
            .unwrap_err();
        assert_eq!(err.message, "max_tokens: Field required", "validated as InvokeModel would");
        let err = Counted::parse(&bedrock, &invoke(r#"{"max_tokens":1,"messages":[]}"#)).unwrap_err();
        assert_eq!(err.message, "required key [anthropic_version] not found");
        let converse = br#"{"input":{"converse":{"messages":[{"role":"user","content":[{"text":"abcd"}]}]}}}"#;
        assert_eq!(Counted::parse(&bedrock, converse).unwrap().input_tokens, 2);
        let err = Counted::parse(&bedrock, br#"{"inputs":{}}"#).unwrap_err();
        assert!(err.message.contains("Value null at 'input'"), "{}", err.message);
        let err = Counted::parse(&bedrock, br#"{"input":{"invokeModel":{"body":"%%%"}}}"#).unwrap_err();
        assert!(err.message.starts_with("input.invokeModel.body: not valid base64"), "{}", err.message);

        let profile = call(Protocol::Bedrock, Some("us.anthropic.claude-x-v1:0"));
        let err = Counted::parse(&profile, &invoke(body)).unwrap_err();
        assert_eq!(err.message, "The provided model doesn't support counting tokens.");
    }
}
