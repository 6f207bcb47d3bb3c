//! Reading a native request body and refusing it where the real provider
//! would: missing required fields, fields the API does not know (such as
//! `stream_options` sent to a non-OpenAI target), the wrong version tag.
//! The Responses API's request is read in `request/responses.rs`; whether
//! the last turn carries a tool result in `request/tool_result.rs`.

pub(crate) mod count;
mod responses;
mod tool_result;

use serde_json::{Map, Value};

use crate::protocol::{Call, Family, Protocol};

/// `anthropic_version` that Claude on Vertex AI documents for the body (a
/// dated API version is accepted too).
pub(crate) const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The `anthropic_version` Claude on Bedrock's InvokeModel requires.
pub(crate) const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// What the answer depends on in a native request.
#[derive(Debug)]
pub(crate) struct NativeRequest {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) max_tokens: Option<u64>,
    /// Estimate: text bytes / 4, rounded up, at least 1.
    pub(crate) prompt_tokens: u64,
    /// Names of the tools the request declares.
    pub(crate) tools: Vec<String>,
    /// The text of a trailing assistant message (Anthropic): a turn to continue.
    pub(crate) prefill: Option<String>,
    /// The last turn carries a tool result (Anthropic `tool_result` block,
    /// Gemini `functionResponse` part, Bedrock `toolResult` block, Responses
    /// `function_call_output` item): answered in text, never with a tool call.
    pub(crate) answers_tool: bool,
    /// The request's settings that the answer repeats (Responses API); empty
    /// for the other protocols.
    pub(crate) echo: Map<String, Value>,
    /// Anthropic: the request declares the server-side web search tool
    /// (`web_search_20250305`, …), which the answer then uses.
    pub(crate) web_search: bool,
}

/// A request the provider refuses with a 400, in its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) message: String,
    /// The offending member and OpenAI's `error.code` for it (Responses API).
    pub(crate) param: Option<(String, &'static str)>,
}

impl Invalid {
    /// A refusal that names no member.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), param: None }
    }

    /// OpenAI's refusal of one member: `error.param` and `error.code`.
    pub(crate) fn param(message: impl Into<String>, param: impl Into<String>, code: &'static str) -> Self {
        Self { message: message.into(), param: Some((param.into(), code)) }
    }
}

const ANTHROPIC_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "cache_control",
];

/// Google's JSON parser takes both lowerCamel and snake_case names.
const GEMINI_FIELDS: &[&str] = &[
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
    "labels",
];

const BEDROCK_FIELDS: &[&str] = &[
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
];

impl NativeRequest {
    /// Parses and checks `body` for `call` (not for OpenAI's chat family).
    pub(crate) fn parse(call: &Call, body: &[u8]) -> Result<Self, Invalid> {
        let map: Map<String, Value> = serde_json::from_slice(body).map_err(|e| {
            Invalid::new(match call.family {
                Family::Gemini => format!("Invalid JSON payload received. {e}"),
                Family::Bedrock | Family::BedrockMessages => {
                    format!("Malformed input request: {e}, please reformat your input and try again.")
                }
                Family::Responses => responses::UNPARSED.to_owned(),
                Family::Anthropic | Family::OpenAi => format!("There was an error parsing the body: {e}"),
            })
        })?;
        match call.family {
            Family::Anthropic => anthropic(call, &map),
            Family::Gemini => gemini(call, &map),
            Family::Bedrock => bedrock(call, &map),
            Family::BedrockMessages => bedrock_messages(call, &map),
            Family::Responses => responses::parse(&map),
            Family::OpenAi => Err(Invalid::new("not a native protocol")),
        }
    }
}

fn anthropic(call: &Call, map: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    let vertex = call.protocol == Protocol::VertexAnthropic;
    for key in map.keys() {
        let known = ANTHROPIC_FIELDS.contains(&key.as_str()) || (vertex && key == "anthropic_version");
        if !known || (vertex && key == "model") {
            return Err(Invalid::new(format!("{key}: Extra inputs are not permitted")));
        }
    }
    if vertex {
        vertex_version(map.get("anthropic_version"), true)?;
    }
    let model = match (&call.model, map.get("model")) {
        (Some(m), _) => m.clone(),
        (None, Some(Value::String(m))) => m.clone(),
        (None, _) => return Err(Invalid::new("model: Field required")),
    };
    if !map.get("messages").is_some_and(Value::is_array) {
        return Err(Invalid::new("messages: Field required"));
    }
    let Some(max_tokens) = map.get("max_tokens") else {
        return Err(Invalid::new("max_tokens: Field required"));
    };
    let max_tokens = max_tokens
        .as_u64()
        .filter(|n| *n >= 1)
        .ok_or_else(|| Invalid::new("max_tokens: Input should be greater than or equal to 1"))?;
    let stream = map.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if vertex && stream != call.stream {
        let method = if call.stream { "streamRawPredict" } else { "rawPredict" };
        return Err(Invalid::new(format!("stream: must be {} for {method}", call.stream)));
    }
    let tools = names(map.get("tools"), &["name"]);
    let web_search = map
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| tools.iter().any(|t| t["type"].as_str().is_some_and(|k| k.starts_with("web_search_"))));
    Ok(NativeRequest {
        model,
        stream,
        max_tokens: Some(max_tokens),
        prompt_tokens: tokens(&[map.get("system"), map.get("messages"), map.get("tools")]),
        tools,
        prefill: prefill(map.get("messages")),
        answers_tool: tool_result::anthropic(map.get("messages")),
        echo: Map::new(),
        web_search,
    })
}

/// Claude's Messages body on Bedrock's InvokeModel: Bedrock's `anthropic_version`, betas
/// as an `anthropic_beta` list, no `model` (it is in the path) and no `stream` (the
/// operation says), then what Anthropic checks.
fn bedrock_messages(call: &Call, map: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    match map.get("anthropic_version").and_then(Value::as_str) {
        Some(BEDROCK_ANTHROPIC_VERSION) => {}
        Some(other) => return Err(Invalid::new(format!("invalid anthropic_version: {other}"))),
        None => return Err(Invalid::new("required key [anthropic_version] not found")),
    }
    for key in ["model", "stream"] {
        if map.contains_key(key) {
            return Err(Invalid::new(format!("extraneous key [{key}] is not permitted")));
        }
    }
    if map.get("anthropic_beta").is_some_and(|b| !b.as_array().is_some_and(|l| l.iter().all(Value::is_string))) {
        return Err(Invalid::new("anthropic_beta: expected a list of strings"));
    }
    let mut anthropic_body = map.clone();
    anthropic_body.remove("anthropic_version");
    anthropic_body.remove("anthropic_beta");
    let req = anthropic(call, &anthropic_body)?;
    // Claude on Bedrock has no server-side web search: the answer does not search.
    Ok(NativeRequest { stream: call.stream, web_search: false, ..req })
}

/// The text of the last message when it is the assistant's: a string, or its text blocks.
fn prefill(messages: Option<&Value>) -> Option<String> {
    let last = messages?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    match last.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect()),
        _ => None,
    }
}

fn gemini(call: &Call, map: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    for key in map.keys() {
        if !GEMINI_FIELDS.contains(&key.as_str()) {
            return Err(Invalid::new(format!(
                "Invalid JSON payload received. Unknown name \"{key}\": Cannot find field."
            )));
        }
    }
    let contents = map.get("contents").and_then(Value::as_array);
    if contents.is_none_or(|c| c.is_empty()) {
        return Err(Invalid::new("* GenerateContentRequest.contents: contents is not specified\n"));
    }
    let config = map.get("generationConfig").or_else(|| map.get("generation_config"));
    let max_tokens =
        config.and_then(|c| c.get("maxOutputTokens").or_else(|| c.get("max_output_tokens"))).and_then(Value::as_u64);
    let mut tools = Vec::new();
    for tool in map.get("tools").and_then(Value::as_array).into_iter().flatten() {
        let decls = tool.get("functionDeclarations").or_else(|| tool.get("function_declarations"));
        tools.extend(names(decls, &["name"]));
    }
    let system = map.get("systemInstruction").or_else(|| map.get("system_instruction"));
    Ok(NativeRequest {
        model: call.model.clone().unwrap_or_default(),
        stream: call.stream,
        max_tokens,
        prompt_tokens: tokens(&[system, map.get("contents"), map.get("tools")]),
        tools,
        prefill: None,
        answers_tool: tool_result::gemini(map.get("contents")),
        echo: Map::new(),
        web_search: false,
    })
}

fn bedrock(call: &Call, map: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    for key in map.keys() {
        if !BEDROCK_FIELDS.contains(&key.as_str()) {
            return Err(Invalid::new(format!(
                "Malformed input request: extraneous key [{key}] is not permitted, please reformat your input and try again."
            )));
        }
    }
    if !map.get("messages").is_some_and(Value::is_array) {
        return Err(Invalid::new(
            "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null",
        ));
    }
    let max_tokens = map.get("inferenceConfig").and_then(|c| c.get("maxTokens")).and_then(Value::as_u64);
    let specs: Vec<Value> = map
        .get("toolConfig")
        .and_then(|c| c.get("tools"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("toolSpec").cloned())
        .collect();
    let tools = names(Some(&Value::Array(specs)), &["name"]);
    Ok(NativeRequest {
        model: call.model.clone().unwrap_or_default(),
        stream: call.stream,
        max_tokens,
        prompt_tokens: tokens(&[map.get("system"), map.get("messages"), map.get("toolConfig")]),
        tools,
        prefill: prefill(map.get("messages")),
        answers_tool: tool_result::bedrock(map.get("messages")),
        echo: Map::new(),
        web_search: false,
    })
}

/// Checks a Vertex body's `anthropic_version`: Vertex's own tag, or a dated API version
/// (what Anthropic's current Vertex SDK sends); none at all only when not `required`.
fn vertex_version(value: Option<&Value>, required: bool) -> Result<(), Invalid> {
    match value.and_then(Value::as_str) {
        Some(v) if v == VERTEX_ANTHROPIC_VERSION || is_dated_version(v) => Ok(()),
        Some(other) => {
            Err(Invalid::new(format!("anthropic_version: Input should be '{VERTEX_ANTHROPIC_VERSION}', got {other:?}")))
        }
        None if required || value.is_some() => Err(Invalid::new("anthropic_version: Field required")),
        None => Ok(()),
    }
}

/// `YYYY-MM-DD`.
fn is_dated_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// The string at `path` in every item of the array `list`.
fn names(list: Option<&Value>, path: &[&str]) -> Vec<String> {
    let items = list.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    items
        .iter()
        .filter_map(|item| path.iter().try_fold(item, |v, key| v.get(key)).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Bytes of every string in `values` / 4, rounded up, at least 1.
fn tokens(values: &[Option<&Value>]) -> u64 {
    fn bytes(v: &Value) -> u64 {
        match v {
            Value::String(s) => u64::try_from(s.len()).unwrap_or(u64::MAX),
            Value::Number(_) => 4,
            Value::Array(a) => a.iter().map(bytes).fold(0, u64::saturating_add),
            Value::Object(o) => o.values().map(bytes).fold(0, u64::saturating_add),
            Value::Bool(_) | Value::Null => 0,
        }
    }
    let total = values.iter().flatten().map(|v| bytes(v)).fold(0, u64::saturating_add);
    total.div_ceil(4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(protocol: Protocol, model: Option<&str>, stream: bool) -> Call {
        Call::new(protocol, model.map(str::to_owned), stream)
    }

    #[test]
    fn providers_refuse_what_they_would_refuse() {
        let anthropic = call(Protocol::Anthropic, None, false);
        let ok = br#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"abcdefgh"}],
            "tools":[{"name":"get_weather","input_schema":{}}]}"#;
        let r = NativeRequest::parse(&anthropic, ok).unwrap();
        assert_eq!((r.model.as_str(), r.max_tokens, r.tools.len()), ("c", Some(5), 1));
        let err = NativeRequest::parse(&anthropic, br#"{"model":"c","messages":[]}"#).unwrap_err();
        assert_eq!(err.message, "max_tokens: Field required");
        let err =
            NativeRequest::parse(&anthropic, br#"{"model":"c","max_tokens":1,"messages":[],"stream_options":{}}"#)
                .unwrap_err();
        assert_eq!(err.message, "stream_options: Extra inputs are not permitted");

        let vertex = call(Protocol::VertexAnthropic, Some("claude@1"), true);
        let err = NativeRequest::parse(
            &vertex,
            br#"{"anthropic_version":"vertex-2023-10-16","model":"x","max_tokens":1,"messages":[],"stream":true}"#,
        )
        .unwrap_err();
        assert_eq!(err.message, "model: Extra inputs are not permitted");
        let r = NativeRequest::parse(
            &vertex,
            br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":1,"messages":[],"stream":true}"#,
        )
        .unwrap();
        assert_eq!(r.model, "claude@1");
        let dated = br#"{"anthropic_version":"2026-10-21","max_tokens":1,"messages":[],"stream":true}"#;
        assert!(NativeRequest::parse(&vertex, dated).is_ok());
        let bad = br#"{"anthropic_version":"2023-06-01x","max_tokens":1,"messages":[],"stream":true}"#;
        assert!(NativeRequest::parse(&vertex, bad).is_err());

        let gemini = call(Protocol::Gemini, Some("g"), false);
        let err = NativeRequest::parse(&gemini, br#"{"contents":[{}],"max_tokens":3}"#).unwrap_err();
        assert!(err.message.contains("Unknown name \"max_tokens\""), "{}", err.message);
        let r = NativeRequest::parse(
            &gemini,
            br#"{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":3},
                "tools":[{"functionDeclarations":[{"name":"f"}]}]}"#,
        )
        .unwrap();
        assert_eq!((r.max_tokens, r.tools), (Some(3), vec!["f".to_owned()]));

        let bedrock = call(Protocol::Bedrock, Some("b"), false);
        let err = NativeRequest::parse(&bedrock, br#"{"messages":[],"model":"b"}"#).unwrap_err();
        assert!(err.message.contains("extraneous key [model]"), "{}", err.message);
        let r = NativeRequest::parse(
            &bedrock,
            br#"{"messages":[],"inferenceConfig":{"maxTokens":9},"toolConfig":{"tools":[{"toolSpec":{"name":"t"}}]}}"#,
        )
        .unwrap();
        assert_eq!((r.max_tokens, r.tools), (Some(9), vec!["t".to_owned()]));
    }

    #[test]
    fn a_trailing_assistant_message_is_a_prefill() {
        let anthropic = call(Protocol::Anthropic, None, true);
        let body = br#"{"model":"c","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"text","text":"The upstream"}]}]}"#;
        let r = NativeRequest::parse(&anthropic, body).unwrap();
        assert_eq!(r.prefill.as_deref(), Some("The upstream"));
        let body = br#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(NativeRequest::parse(&anthropic, body).unwrap().prefill, None);
        let bedrock = call(Protocol::Bedrock, Some("b"), false);
        let body = br#"{"messages":[{"role":"user","content":[{"text":"hi"}]},{"role":"assistant","content":[{"text":"So"}]}]}"#;
        assert_eq!(NativeRequest::parse(&bedrock, body).unwrap().prefill.as_deref(), Some("So"));
    }
}
