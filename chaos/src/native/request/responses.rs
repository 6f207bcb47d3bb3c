//! Reading an OpenAI Responses API request (`POST /v1/responses`) and
//! refusing it as OpenAI does, naming the member in `error.param`: a member
//! the API does not know (`max_tokens` too: the Responses API says
//! `max_output_tokens`), a missing `model` or `input`, a member of the wrong
//! type, an input item or content part of no known type, a function tool
//! without its `name` (a chat-shaped `{"function": {…}}` tool).

use serde_json::{Map, Value};

use super::{Invalid, NativeRequest, tokens, tool_result};

/// OpenAI's answer to a body that is not a JSON object.
pub(super) const UNPARSED: &str = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)";

/// The top-level members the Responses API knows.
const FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "include",
    "store",
    "stream",
    "max_output_tokens",
    "temperature",
    "top_p",
    "text",
    "metadata",
    "prompt_cache_key",
    "user",
    "truncation",
    "service_tier",
    "previous_response_id",
    "safety_identifier",
    "client_metadata",
    "stream_options",
    "background",
    "top_logprobs",
    "max_tool_calls",
    "prompt",
    "conversation",
];

/// Members the response object repeats from the request.
const ECHOED: &[&str] = &[
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
];

/// Input item types (a message may leave its type out).
const ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "item_reference",
    // Earlier turns' hosted tool calls, sent back as the API returned them.
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "computer_call",
    "computer_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
];

const ROLES: &[&str] = &["user", "assistant", "system", "developer"];

/// Content part types of an input message.
const PART_TYPES: &[&str] = &["input_text", "input_image", "input_file", "output_text", "refusal"];

/// Parses and checks a Responses API request.
pub(super) fn parse(map: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    if let Some(key) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Invalid::param(format!("Unknown parameter: '{key}'."), key, "unknown_parameter"));
    }
    let model = match required(map, "model")? {
        Value::String(m) => m.clone(),
        other => return Err(invalid_type("model", "a string", other)),
    };
    let input = required(map, "input")?;
    match input {
        Value::String(_) => {}
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| check_item(i, item))?,
        other => return Err(invalid_type("input", "a string or an array of input items", other)),
    }
    let max_tokens = match present(map, "max_output_tokens") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| invalid_type("max_output_tokens", "an integer", v))?),
    };
    let stream = match present(map, "stream") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| invalid_type("stream", "a boolean", v))?,
    };
    let tools = function_tools(map.get("tools"))?;
    let echo = ECHOED.iter().filter_map(|k| Some(((*k).to_owned(), present(map, k)?.clone()))).collect();
    Ok(NativeRequest {
        model,
        stream,
        max_tokens,
        prompt_tokens: tokens(&[map.get("instructions"), Some(input), map.get("tools")]),
        tools,
        prefill: None,
        answers_tool: tool_result::responses(input),
        echo,
        web_search: false,
    })
}

/// `map[key]`, unless absent or `null`.
fn present<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// `map[key]`, or OpenAI's refusal naming `path` (the member's full name).
fn required_at<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a Value, Invalid> {
    present(map, key).ok_or_else(|| {
        Invalid::param(format!("Missing required parameter: '{path}'."), path, "missing_required_parameter")
    })
}

fn required<'a>(map: &'a Map<String, Value>, key: &str) -> Result<&'a Value, Invalid> {
    required_at(map, key, key)
}

/// `map[key]` as a string.
fn required_str<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, Invalid> {
    let v = required_at(map, key, path)?;
    v.as_str().ok_or_else(|| invalid_type(path, "a string", v))
}

/// `input[i]`: a message (typed or not), a function call or its output, a
/// reasoning item, a hosted tool's call or an item reference.
fn check_item(i: usize, item: &Value) -> Result<(), Invalid> {
    let path = format!("input[{i}]");
    let Value::Object(item) = item else {
        return Err(invalid_type(&path, "an object", item));
    };
    let kind = match item.get("type") {
        None => "message",
        Some(Value::String(t)) => t.as_str(),
        Some(other) => return Err(invalid_type(&format!("{path}.type"), "a string", other)),
    };
    match kind {
        "message" => check_message(&path, item),
        "function_call" => {
            for key in ["call_id", "name", "arguments"] {
                required_str(item, key, &format!("{path}.{key}"))?;
            }
            Ok(())
        }
        // A custom (freeform) tool's call, as Codex's `apply_patch`: its `input` is text.
        "custom_tool_call" => {
            for key in ["call_id", "name", "input"] {
                required_str(item, key, &format!("{path}.{key}"))?;
            }
            Ok(())
        }
        "function_call_output" | "custom_tool_call_output" => {
            required_str(item, "call_id", &format!("{path}.call_id"))?;
            required_at(item, "output", &format!("{path}.output")).map(drop)
        }
        _ if ITEM_TYPES.contains(&kind) => Ok(()),
        other => Err(invalid_value(&format!("{path}.type"), other, ITEM_TYPES)),
    }
}

/// A message: a known role, and content that is a string or known parts.
fn check_message(path: &str, item: &Map<String, Value>) -> Result<(), Invalid> {
    let role = required_str(item, "role", &format!("{path}.role"))?;
    if !ROLES.contains(&role) {
        return Err(invalid_value(&format!("{path}.role"), role, ROLES));
    }
    let content_path = format!("{path}.content");
    match required_at(item, "content", &content_path)? {
        Value::String(_) => Ok(()),
        Value::Array(parts) => parts.iter().enumerate().try_for_each(|(j, part)| {
            let part_path = format!("{content_path}[{j}]");
            let Value::Object(part) = part else {
                return Err(invalid_type(&part_path, "an object", part));
            };
            let kind = required_str(part, "type", &format!("{part_path}.type"))?;
            if PART_TYPES.contains(&kind) {
                Ok(())
            } else {
                Err(invalid_value(&format!("{part_path}.type"), kind, PART_TYPES))
            }
        }),
        other => Err(invalid_type(&content_path, "a string or an array of content parts", other)),
    }
}

/// Names of the function tools; each needs its `name` (other tool types,
/// OpenAI's built-in ones, are taken as they come).
fn function_tools(tools: Option<&Value>) -> Result<Vec<String>, Invalid> {
    let Some(tools) = tools.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Array(list) = tools else {
        return Err(invalid_type("tools", "an array", tools));
    };
    let mut functions = Vec::new();
    for (j, tool) in list.iter().enumerate() {
        let path = format!("tools[{j}]");
        let Value::Object(tool) = tool else {
            return Err(invalid_type(&path, "an object", tool));
        };
        if required_str(tool, "type", &format!("{path}.type"))? == "function" {
            functions.push(required_str(tool, "name", &format!("{path}.name"))?.to_owned());
        }
    }
    Ok(functions)
}

/// `Invalid type for 'x': expected …, but got … instead.`
fn invalid_type(path: &str, expected: &str, got: &Value) -> Invalid {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a decimal",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Invalid::param(
        format!("Invalid type for '{path}': expected {expected}, but got {got} instead."),
        path,
        "invalid_type",
    )
}

/// `Invalid value: 'x'. Supported values are: 'a', 'b', and 'c'.`
fn invalid_value(path: &str, got: &str, supported: &[&str]) -> Invalid {
    let quoted: Vec<String> = supported.iter().map(|s| format!("'{s}'")).collect();
    let list = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{}, and {last}", rest.join(", ")),
        _ => quoted.concat(),
    };
    Invalid::param(format!("Invalid value: '{got}'. Supported values are: {list}."), path, "invalid_value")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse_json(v: Value) -> Result<NativeRequest, Invalid> {
        let Value::Object(map) = v else { panic!("not an object") };
        parse(&map)
    }

    fn refused(v: Value) -> (String, String, &'static str) {
        let err = parse_json(v).unwrap_err();
        let (param, code) = err.param.unwrap();
        (err.message, param, code)
    }

    #[test]
    fn reads_what_the_answer_depends_on() {
        let r = parse_json(json!({
            "model": "gpt-5", "instructions": "be brief", "max_output_tokens": 32, "stream": true,
            "input": [
                {"role": "user", "content": "abcdefgh"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {"type": "reasoning", "summary": []},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {}}, {"type": "web_search"}],
            "temperature": 0.2, "user": null,
        }))
        .unwrap();
        assert_eq!((r.model.as_str(), r.stream, r.max_tokens), ("gpt-5", true, Some(32)));
        assert_eq!(r.tools, ["f"]);
        assert!(r.prompt_tokens > 1);
        assert_eq!(r.echo.get("temperature"), Some(&json!(0.2)));
        assert_eq!(r.echo.get("instructions"), Some(&json!("be brief")));
        assert!(!r.echo.contains_key("user"), "null is not echoed");
        assert!(!r.echo.contains_key("stream"), "not a response member");
        assert!(!r.answers_tool, "the last item is not a tool's output");

        // Codex's freeform tools: a custom call and its output, the last turn.
        let r = parse_json(json!({"model": "gpt-5", "input": [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
        ]}))
        .unwrap();
        assert!(r.answers_tool);
    }

    #[test]
    fn refuses_what_openai_refuses() {
        let (message, param, code) = refused(json!({"model": "m", "input": "hi", "max_tokens": 5}));
        assert_eq!(
            (message.as_str(), param.as_str(), code),
            ("Unknown parameter: 'max_tokens'.", "max_tokens", "unknown_parameter")
        );
        let (message, param, code) = refused(json!({"input": "hi"}));
        assert_eq!(
            (message.as_str(), param.as_str(), code),
            ("Missing required parameter: 'model'.", "model", "missing_required_parameter")
        );
        assert_eq!(refused(json!({"model": "m"})).1, "input");
        let (message, _, code) = refused(json!({"model": "m", "input": {"role": "user"}}));
        assert_eq!(code, "invalid_type");
        assert!(message.ends_with("but got an object instead."), "{message}");
        let (_, param, code) = refused(json!({"model": "m", "input": "hi", "max_output_tokens": "9"}));
        assert_eq!((param.as_str(), code), ("max_output_tokens", "invalid_type"));

        // Chat-shaped content parts and tools, as a careless translation sends them.
        let (message, param, code) =
            refused(json!({"model": "m", "input": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}));
        assert_eq!((param.as_str(), code), ("input[0].content[0].type", "invalid_value"));
        assert!(message.starts_with("Invalid value: 'text'. Supported values are: 'input_text', "), "{message}");
        let chat_tool = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
        let (_, param, _) = refused(json!({"model": "m", "input": "hi", "tools": [chat_tool]}));
        assert_eq!(param, "tools[0].name");
        let (_, param, _) = refused(json!({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}));
        assert_eq!(param, "input[0].call_id");
        let (_, param, _) = refused(json!({"model": "m", "input": [{"type": "custom_tool_call", "call_id": "c"}]}));
        assert_eq!(param, "input[0].name");
        let (_, param, _) = refused(json!({"model": "m", "input": [{"type": "tool_result"}]}));
        assert_eq!(param, "input[0].type");
        let (_, param, _) = refused(json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}));
        assert_eq!(param, "input[0].role");
    }
}
