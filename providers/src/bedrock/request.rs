//! The Converse request body (the same for `converse` and `converse-stream`).

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::request::{
    Conversation, Dialect, SamplingNames, ToolUse, empty_object_schema, messages, reject_json_mode, reject_openai_only,
    reject_web_search, walk,
};
use crate::{ChatRequest, ImageUrl, Message, Target, ToolCall, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    reject_web_search(target, req)?;
    let Conversation { system, turns } = walk(req, &mut Converse)?;
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages(turns, "user", "assistant", "content")));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    req.write_sampling(
        target.default_max_tokens,
        &SamplingNames { max_tokens: "maxTokens", temperature: "temperature", top_p: "topP", stop: "stopSequences" },
        &mut inference,
    );
    body.insert("inferenceConfig".into(), Value::Object(inference));
    reject_json_mode(req, "Bedrock Converse has no JSON mode")?;
    if let Some(config) = tool_config(req, &body)? {
        body.insert("toolConfig".into(), config);
    }
    Ok(Value::Object(body))
}

/// `toolConfig`, or `None` to omit it. Converse has no `tool_choice: none`: without
/// tool blocks in the history the tools are left out (same answer); with them Bedrock
/// demands a `toolConfig`, so `none` cannot be expressed and is refused. A follow-up
/// turn that sends no tools while its history has tool blocks declares the tools the
/// history names (Bedrock refuses the request otherwise).
fn tool_config(req: &ChatRequest, body: &Map<String, Value>) -> Result<Option<Value>, TranslateError> {
    let has_tool_history = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
    let tools = req.function_tools();
    let choice = match req.tool_use()? {
        None => None,
        Some(ToolUse::Auto) => Some(json!({ "auto": {} })),
        Some(ToolUse::Required) => Some(json!({ "any": {} })),
        Some(ToolUse::Forbidden) if has_tool_history => {
            return Err(TranslateError::unsupported(
                "tool_choice",
                "Bedrock Converse cannot forbid tool calls in a conversation that has tool calls",
            ));
        }
        Some(ToolUse::Forbidden) => return Ok(None),
        Some(ToolUse::Only(name)) => Some(json!({ "tool": { "name": name } })),
    };
    if req.parallel_tool_calls == Some(false) && !tools.is_empty() {
        return Err(TranslateError::unsupported(
            "parallel_tool_calls",
            "Bedrock Converse cannot limit tool calls to one",
        ));
    }
    let specs: Vec<Value> = if tools.is_empty() {
        if !has_tool_history {
            return Ok(None);
        }
        history_tool_names(body)
            .into_iter()
            .map(|name| {
                json!({ "toolSpec": {
                    "name": name,
                    "description": "A tool used earlier in this conversation.",
                    "inputSchema": { "json": empty_object_schema() },
                }})
            })
            .collect()
    } else {
        tools
            .iter()
            .map(|t| {
                let mut spec = json!({
                    "name": t.function.name,
                    "inputSchema": { "json": t.function.schema_or_empty() },
                });
                if let Some(d) = t.function.description.as_deref().filter(|d| !d.is_empty()) {
                    spec["description"] = json!(d);
                }
                json!({ "toolSpec": spec })
            })
            .collect()
    };
    let mut config = json!({ "tools": specs });
    if let Some(choice) = choice {
        config["toolChoice"] = choice;
    }
    Ok(Some(config))
}

/// The distinct tool names of the history's `toolUse` blocks, in order.
fn history_tool_names(body: &Map<String, Value>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if let Some(name) = b["toolUse"]["name"].as_str()
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Converse content blocks: keyed by kind (`text`, `image`, `toolUse`, `toolResult`).
struct Converse;

impl<'a> Dialect<'a> for Converse {
    const DROPS_EMPTY_TURNS: bool = false;

    type Block = Value;

    fn text(&self, text: Cow<'a, str>) -> Value {
        json!({ "text": text })
    }

    fn image(&self, i: usize, j: usize, image: &'a ImageUrl) -> Result<Value, TranslateError> {
        let field = || format!("messages[{i}].content[{j}].image_url");
        let (media_type, data) = image
            .data_url()
            .ok_or_else(|| TranslateError::unsupported(field(), "Bedrock takes images as data: URLs only"))?;
        let format = match media_type {
            "image/png" => "png",
            "image/jpeg" | "image/jpg" => "jpeg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            other => {
                return Err(TranslateError::unsupported(field(), format!("image type `{other}`")));
            }
        };
        Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
    }

    fn tool_call(&mut self, call: &'a ToolCall, input: Value) -> Value {
        json!({ "toolUse": { "toolUseId": call.id, "name": call.function.name, "input": input } })
    }

    fn tool_result(&mut self, i: usize, m: &'a Message) -> Result<Value, TranslateError> {
        let id = m.answered_call_id(i)?;
        let text = m.tool_result_text(i)?;
        Ok(json!({ "toolResult": { "toolUseId": id, "content": [{ "text": text }] } }))
    }
}
