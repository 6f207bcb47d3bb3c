//! The Converse request body (the same for `converse` and `converse-stream`).

use serde_json::{Map, Value, json};

use crate::request::reject_openai_only;
use crate::{ChatRequest, Content, ContentPart, Message, Role, Target, ToolChoice, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        match m.role {
            Role::System | Role::Developer => {
                let text = m
                    .content
                    .as_ref()
                    .and_then(Content::text_only)
                    .ok_or_else(|| {
                        TranslateError::unsupported(
                            format!("messages[{i}].content"),
                            "a system message must be text",
                        )
                    })?;
                system.push(json!({ "text": text }));
            }
            Role::User => push(&mut messages, "user", user_blocks(i, m)?),
            Role::Assistant => push(&mut messages, "assistant", assistant_blocks(i, m)?),
            // Consecutive tool results go into ONE user message (parallel tool calls).
            Role::Tool => push(&mut messages, "user", vec![tool_result(i, m)?]),
        }
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    inference.insert(
        "maxTokens".into(),
        json!(req.max_output_tokens(target.default_max_tokens)),
    );
    if let Some(t) = req.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        inference.insert("topP".into(), json!(p));
    }
    let stop = req.stop_sequences();
    if !stop.is_empty() {
        inference.insert("stopSequences".into(), json!(stop));
    }
    body.insert("inferenceConfig".into(), Value::Object(inference));
    if let Some(rf) = &req.response_format
        && rf["type"] != "text"
    {
        return Err(TranslateError::unsupported(
            "response_format",
            "Bedrock Converse has no JSON mode",
        ));
    }
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
fn tool_config(
    req: &ChatRequest,
    body: &Map<String, Value>,
) -> Result<Option<Value>, TranslateError> {
    let has_tool_history = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
    let tools = req.tools.as_deref().unwrap_or_default();
    let choice = match &req.tool_choice {
        None => None,
        Some(ToolChoice::Mode(m)) => match m.as_str() {
            "auto" => Some(json!({ "auto": {} })),
            "required" => Some(json!({ "any": {} })),
            "none" if has_tool_history => {
                return Err(TranslateError::unsupported(
                    "tool_choice",
                    "Bedrock Converse cannot forbid tool calls in a conversation that has tool calls",
                ));
            }
            "none" => return Ok(None),
            _ => {
                return Err(TranslateError::invalid(
                    "tool_choice",
                    format!("unknown mode `{m}`"),
                ));
            }
        },
        Some(ToolChoice::Named(n)) => Some(json!({ "tool": { "name": n.function.name } })),
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
                    "inputSchema": { "json": { "type": "object", "properties": {} } },
                }})
            })
            .collect()
    } else {
        tools
            .iter()
            .map(|t| {
                let mut spec = json!({
                    "name": t.function.name,
                    "inputSchema": { "json": t.function.parameters.clone()
                        .unwrap_or_else(|| json!({ "type": "object", "properties": {} })) },
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

/// Appends `blocks` as a `role` message, merging into the previous message when it has
/// the same role (Converse wants alternating turns).
fn push(messages: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    if let Some(last) = messages.last_mut()
        && last["role"] == role
        && let Some(content) = last["content"].as_array_mut()
    {
        content.extend(blocks);
        return;
    }
    messages.push(json!({ "role": role, "content": blocks }));
}

fn user_blocks(i: usize, m: &Message) -> Result<Vec<Value>, TranslateError> {
    match &m.content {
        None => Ok(Vec::new()),
        Some(Content::Text(t)) => Ok(vec![json!({ "text": t })]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match p {
                ContentPart::Text { text } => Ok(json!({ "text": text })),
                ContentPart::ImageUrl { image_url } => {
                    let field = || format!("messages[{i}].content[{j}].image_url");
                    let (media_type, data) = image_url.data_url().ok_or_else(|| {
                        TranslateError::unsupported(
                            field(),
                            "Bedrock takes images as data: URLs only",
                        )
                    })?;
                    let format = match media_type {
                        "image/png" => "png",
                        "image/jpeg" | "image/jpg" => "jpeg",
                        "image/gif" => "gif",
                        "image/webp" => "webp",
                        other => {
                            return Err(TranslateError::unsupported(
                                field(),
                                format!("image type `{other}`"),
                            ));
                        }
                    };
                    Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
                }
                ContentPart::Other => Err(TranslateError::unsupported(
                    format!("messages[{i}].content[{j}]"),
                    "only text and image parts are supported by this upstream",
                )),
            })
            .collect(),
    }
}

fn assistant_blocks(i: usize, m: &Message) -> Result<Vec<Value>, TranslateError> {
    let mut blocks = Vec::new();
    if let Some(content) = &m.content {
        let text = content.text_only().ok_or_else(|| {
            TranslateError::unsupported(
                format!("messages[{i}].content"),
                "an assistant message must be text",
            )
        })?;
        // Converse refuses blank text blocks.
        if !text.is_empty() {
            blocks.push(json!({ "text": text }));
        }
    }
    for (j, call) in m.tool_calls.iter().flatten().enumerate() {
        let input = call.function.arguments_value().map_err(|e| {
            TranslateError::invalid(
                format!("messages[{i}].tool_calls[{j}].function.arguments"),
                e.to_string(),
            )
        })?;
        blocks.push(json!({ "toolUse": { "toolUseId": call.id, "name": call.function.name, "input": input } }));
    }
    Ok(blocks)
}

fn tool_result(i: usize, m: &Message) -> Result<Value, TranslateError> {
    let id = m.tool_call_id.as_deref().ok_or_else(|| {
        TranslateError::invalid(
            format!("messages[{i}].tool_call_id"),
            "a tool message needs one",
        )
    })?;
    let text = m
        .content
        .as_ref()
        .map_or(Some(String::new()), Content::text_only)
        .ok_or_else(|| {
            TranslateError::unsupported(
                format!("messages[{i}].content"),
                "a tool result must be text",
            )
        })?;
    Ok(json!({ "toolResult": { "toolUseId": id, "content": [{ "text": text }] } }))
}
