//! The Messages request body (without `model`, `stream` and `anthropic_version`, which
//! depend on direct vs Vertex).

use serde_json::{Map, Value, json};

use crate::request::{reject_openai_only, reject_penalties};
use crate::{ChatRequest, Content, ContentPart, Message, Role, Target, ToolChoice, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    reject_penalties(req)?;
    let mut body = Map::new();
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
                system.push(json!({ "type": "text", "text": text }));
            }
            Role::User => push(&mut messages, "user", user_blocks(i, m)?),
            Role::Assistant => push(&mut messages, "assistant", assistant_blocks(i, m)?),
            // Consecutive tool results go into ONE user message (parallel tool calls).
            Role::Tool => push(&mut messages, "user", vec![tool_result(i, m)?]),
        }
    }
    body.insert(
        "max_tokens".into(),
        json!(req.max_output_tokens(target.default_max_tokens)),
    );
    body.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let stop = req.stop_sequences();
    if !stop.is_empty() {
        body.insert("stop_sequences".into(), json!(stop));
    }
    if let Some(t) = req.temperature {
        // Anthropic's range is 0–1, OpenAI's 0–2: clamping would change the answer.
        if t > 1.0 {
            return Err(TranslateError::unsupported(
                "temperature",
                "this upstream accepts 0 to 1",
            ));
        }
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(user) = req.rest.get("user").and_then(Value::as_str) {
        body.insert("metadata".into(), json!({ "user_id": user }));
    }
    if let Some(rf) = &req.response_format
        && rf["type"] != "text"
    {
        return Err(TranslateError::unsupported(
            "response_format",
            "this upstream has no JSON mode",
        ));
    }
    tools(req, &mut body)?;
    Ok(Value::Object(body))
}

fn tools(req: &ChatRequest, body: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if let Some(tools) = req.tools.as_ref().filter(|t| !t.is_empty()) {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "name": t.function.name,
                    "input_schema": t.function.parameters.clone()
                        .unwrap_or_else(|| json!({ "type": "object", "properties": {} })),
                });
                if let Some(d) = &t.function.description {
                    tool["description"] = json!(d);
                }
                tool
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut choice = match &req.tool_choice {
        None => None,
        Some(ToolChoice::Mode(m)) => Some(match m.as_str() {
            "auto" => json!({ "type": "auto" }),
            "required" => json!({ "type": "any" }),
            "none" => json!({ "type": "none" }),
            _ => {
                return Err(TranslateError::invalid(
                    "tool_choice",
                    format!("unknown mode `{m}`"),
                ));
            }
        }),
        Some(ToolChoice::Named(n)) => Some(json!({ "type": "tool", "name": n.function.name })),
    };
    if req.parallel_tool_calls == Some(false) && body.contains_key("tools") {
        let c = choice.get_or_insert_with(|| json!({ "type": "auto" }));
        if c["type"] != "none" {
            c["disable_parallel_tool_use"] = json!(true);
        }
    }
    if let Some(c) = choice {
        body.insert("tool_choice".into(), c);
    }
    Ok(())
}

/// Appends `blocks` as a `role` message, merging into the previous message when it has
/// the same role (Anthropic wants alternating turns).
fn push(messages: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    // Anthropic rejects a message with empty content (e.g. an assistant turn with "").
    if blocks.is_empty() {
        return;
    }
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
        Some(Content::Text(t)) => Ok(vec![json!({ "type": "text", "text": t })]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match p {
                ContentPart::Text { text } => Ok(json!({ "type": "text", "text": text })),
                ContentPart::ImageUrl { image_url } => Ok(match image_url.data_url() {
                    Some((media_type, data)) => json!({ "type": "image",
                        "source": { "type": "base64", "media_type": media_type, "data": data } }),
                    None => json!({ "type": "image", "source": { "type": "url", "url": image_url.url } }),
                }),
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
        if !text.is_empty() {
            blocks.push(json!({ "type": "text", "text": text }));
        }
    }
    for (j, call) in m.tool_calls.iter().flatten().enumerate() {
        let input = call.function.arguments_value().map_err(|e| {
            TranslateError::invalid(
                format!("messages[{i}].tool_calls[{j}].function.arguments"),
                e.to_string(),
            )
        })?;
        blocks.push(json!({ "type": "tool_use", "id": call.id, "name": call.function.name, "input": input }));
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
    Ok(json!({ "type": "tool_result", "tool_use_id": id, "content": text }))
}
