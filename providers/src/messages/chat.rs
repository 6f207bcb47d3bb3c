//! A Messages request as an OpenAI chat request, for candidates that do not speak the
//! Messages API. Each member is translated, refused naming it, or — for the hints
//! docs/gateway.md lists — left out and reported in [`Translated::dropped`].

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::{ToChat, TranslateError, Translated};

/// Members that only steer Anthropic's service or the model's effort; a candidate
/// without them answers the same conversation.
const HINTS: &[&str] = &["thinking", "context_management", "service_tier", "cache_control", "output_config.effort"];

/// Whether a tool type is a server tool Anthropic runs itself (web search, web fetch,
/// code execution), as opposed to one the client runs.
pub(super) fn is_server_tool(kind: &str) -> bool {
    ["web_search_", "web_fetch_", "code_execution_"].iter().any(|p| kind.starts_with(p))
}

/// Whether an assistant block records a server tool's call or result (its findings
/// are in the text that follows).
pub(super) fn is_server_block(kind: &str) -> bool {
    kind == "server_tool_use" || (kind.ends_with("_tool_result") && kind != "tool_result")
}

struct Out {
    messages: Vec<Value>,
    dropped: Vec<Cow<'static, str>>,
    options: ToChat,
    /// Names of the server tools left out (a `tool_choice` may not name one).
    omitted_tools: Vec<String>,
}

impl Out {
    fn drop_hint(&mut self, name: impl Into<Cow<'static, str>>) {
        let name = name.into();
        if !self.dropped.contains(&name) {
            self.dropped.push(name);
        }
    }
}

fn unsupported(field: impl Into<String>, reason: impl Into<String>) -> TranslateError {
    TranslateError::unsupported(field, reason)
}

/// Translates a Messages request body into an OpenAI chat request.
pub fn to_chat(body: &[u8], options: ToChat) -> Result<Translated, TranslateError> {
    let Value::Object(req) =
        serde_json::from_slice::<Value>(body).map_err(|e| TranslateError::invalid("body", e.to_string()))?
    else {
        return Err(TranslateError::invalid("body", "must be a JSON object"));
    };
    let mut chat = Map::new();
    let mut out = Out { messages: Vec::new(), dropped: Vec::new(), options, omitted_tools: Vec::new() };
    if let Some(system) = req.get("system") {
        let text = system_text(system, "system", &mut out)?;
        out.messages.push(json!({"role": "system", "content": text}));
    }
    for (key, value) in &req {
        match key.as_str() {
            "model" | "max_tokens" | "temperature" | "top_p" | "stream" => {
                chat.insert(key.clone(), value.clone());
            }
            "system" => {}
            "messages" => messages(value, &mut out)?,
            "stop_sequences" => {
                chat.insert("stop".into(), value.clone());
            }
            "metadata" => {
                if let Some(user) = value.get("user_id").and_then(Value::as_str) {
                    chat.insert("user".into(), json!(user));
                }
            }
            "tools" => {
                let tools = tools(value, &mut out)?;
                if !tools.is_empty() {
                    chat.insert("tools".into(), Value::Array(tools));
                }
            }
            "tool_choice" => tool_choice(value, &mut chat)?,
            "output_config" => output_config(value, &mut chat, &mut out)?,
            "thinking" => {
                if value.get("type").and_then(Value::as_str) != Some("disabled") {
                    out.drop_hint("thinking");
                }
            }
            "context_management" => out.drop_hint("context_management"),
            "service_tier" => out.drop_hint("service_tier"),
            "cache_control" => out.drop_hint("cache_control"),
            "top_k" => return Err(unsupported("top_k", "this candidate's protocol has no top-k sampling")),
            other => {
                return Err(unsupported(other, "this candidate's protocol has no equivalent"));
            }
        }
    }
    omitted_choice(&req, &mut chat, &out.omitted_tools)?;
    chat.insert("messages".into(), Value::Array(out.messages));
    debug_assert!(out.dropped.iter().all(|d| HINTS.contains(&d.as_ref()) || options.omit_hosted_tools));
    Ok(Translated {
        body: serde_json::to_vec(&Value::Object(chat)).unwrap_or_default(),
        dropped: out.dropped,
        namespaces: Vec::new(),
        web_search: false,
    })
}

/// A system prompt (string or text blocks) as one string; `cache_control` on a block is
/// a hint.
fn system_text(system: &Value, field: &str, out: &mut Out) -> Result<String, TranslateError> {
    match system {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(unsupported(format!("{field}[{j}]"), "only text blocks can be translated"));
                }
                if b.get("cache_control").is_some() {
                    out.drop_hint("cache_control");
                }
                text.push(b.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Ok(text.join("\n\n"))
        }
        _ => Err(TranslateError::invalid(field, "must be a string or text blocks")),
    }
}

fn messages(value: &Value, out: &mut Out) -> Result<(), TranslateError> {
    let Value::Array(list) = value else {
        return Err(TranslateError::invalid("messages", "must be an array"));
    };
    for (i, m) in list.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m.get("content").unwrap_or(&Value::Null);
        let field = format!("messages[{i}]");
        match role {
            "system" => {
                let text = system_text(content, &format!("{field}.content"), out)?;
                out.messages.push(json!({"role": "system", "content": text}));
            }
            "user" => user(content, &field, out)?,
            "assistant" => assistant(content, &field, out)?,
            _ => return Err(TranslateError::invalid(format!("{field}.role"), "must be user or assistant")),
        }
    }
    Ok(())
}

/// The blocks of a content value (a string is one text block).
fn blocks<'a>(content: &'a Value, field: &str) -> Result<Vec<std::borrow::Cow<'a, Value>>, TranslateError> {
    match content {
        Value::String(s) => Ok(vec![std::borrow::Cow::Owned(json!({"type": "text", "text": s}))]),
        Value::Array(list) => Ok(list.iter().map(std::borrow::Cow::Borrowed).collect()),
        _ => Err(TranslateError::invalid(format!("{field}.content"), "must be a string or content blocks")),
    }
}

fn kind(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A user turn: tool results become `tool` messages (first, answering the calls of the
/// turn before), the rest one user message.
fn user(content: &Value, field: &str, out: &mut Out) -> Result<(), TranslateError> {
    let mut parts = Vec::new();
    for (j, b) in blocks(content, field)?.iter().enumerate() {
        let at = format!("{field}.content[{j}]");
        if b.get("cache_control").is_some() {
            out.drop_hint("cache_control");
        }
        match kind(b) {
            "text" => parts.push(json!({"type": "text", "text": b.get("text").and_then(Value::as_str).unwrap_or("")})),
            "image" => parts.push(image(b, &at)?),
            "tool_result" => {
                let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                let mut text = tool_result_text(b.get("content"), &at, out)?;
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    text.insert_str(0, "Error: ");
                }
                out.messages.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            other => {
                return Err(unsupported(at, format!("a {other:?} block cannot be translated for this candidate")));
            }
        }
    }
    if !parts.is_empty() {
        let content = match parts.as_slice() {
            [only] if kind(only) == "text" => only["text"].clone(),
            _ => Value::Array(parts),
        };
        out.messages.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

fn image(b: &Value, at: &str) -> Result<Value, TranslateError> {
    let source = b.get("source").unwrap_or(&Value::Null);
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str).unwrap_or("image/png"),
            source.get("data").and_then(Value::as_str).unwrap_or("")
        ),
        Some("url") => source.get("url").and_then(Value::as_str).unwrap_or("").to_owned(),
        _ => return Err(unsupported(format!("{at}.source"), "only base64 and url images can be translated")),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn tool_result_text(content: Option<&Value>, at: &str, out: &mut Out) -> Result<String, TranslateError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(list)) => {
            let mut text = Vec::new();
            for (k, b) in list.iter().enumerate() {
                if kind(b) != "text" {
                    return Err(unsupported(
                        format!("{at}.content[{k}]"),
                        "a tool result can be translated as text only",
                    ));
                }
                if b.get("cache_control").is_some() {
                    out.drop_hint("cache_control");
                }
                text.push(b.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Ok(text.join("\n"))
        }
        Some(_) => Err(TranslateError::invalid(format!("{at}.content"), "must be a string or content blocks")),
    }
}

/// An assistant turn: text and tool calls; thinking from earlier turns is left out (a
/// candidate of another protocol cannot check its signature, and earlier turns'
/// thinking does not reach the model on Anthropic either).
fn assistant(content: &Value, field: &str, out: &mut Out) -> Result<(), TranslateError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks(content, field)?.iter().enumerate() {
        if b.get("cache_control").is_some() {
            out.drop_hint("cache_control");
        }
        match kind(b) {
            "text" => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            "tool_use" => {
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": b.get("id").and_then(Value::as_str).unwrap_or(""),
                    "type": "function",
                    "function": {"name": b.get("name").and_then(Value::as_str).unwrap_or(""), "arguments": input.to_string()},
                }));
            }
            "thinking" | "redacted_thinking" => out.drop_hint("thinking"),
            server if is_server_block(server) && out.options.omit_hosted_tools => {
                out.drop_hint(format!("content.{server}"));
            }
            server if is_server_block(server) => {
                return Err(unsupported(
                    format!("{field}.content[{j}]"),
                    format!(
                        "a {server:?} block records a server tool this candidate lacks \
                         (a route with hostedTools: omit sends the request without it)"
                    ),
                ));
            }
            other => {
                return Err(unsupported(
                    format!("{field}.content[{j}]"),
                    format!("a {other:?} block cannot be translated for this candidate"),
                ));
            }
        }
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    out.messages.push(m);
    Ok(())
}

/// The client's tools as chat function tools; a server tool is refused, or left out
/// when the route omits hosted tools.
fn tools(value: &Value, out: &mut Out) -> Result<Vec<Value>, TranslateError> {
    let Value::Array(list) = value else {
        return Err(TranslateError::invalid("tools", "must be an array"));
    };
    let mut tools = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(server) if is_server_tool(server) && out.options.omit_hosted_tools => {
                out.drop_hint(format!("tools.{server}"));
                out.omitted_tools.push(t.get("name").and_then(Value::as_str).unwrap_or("").to_owned());
                continue;
            }
            Some(server) if is_server_tool(server) => {
                return Err(unsupported(
                    format!("tools[{i}]"),
                    format!(
                        "the server tool {server:?} has no equivalent on this candidate \
                         (a route with hostedTools: omit sends the request without it)"
                    ),
                ));
            }
            Some(other) => {
                return Err(unsupported(
                    format!("tools[{i}]"),
                    format!("the server tool {other:?} has no equivalent on this candidate"),
                ));
            }
        }
        let mut function = json!({
            "name": t.get("name").and_then(Value::as_str).unwrap_or(""),
            "parameters": t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"})),
        });
        if let Some(d) = t.get("description") {
            function["description"] = d.clone();
        }
        if let Some(s) = t.get("strict") {
            function["strict"] = s.clone();
        }
        tools.push(json!({"type": "function", "function": function}));
    }
    Ok(tools)
}

/// With server tools left out, a `tool_choice` may no longer be served: one naming a
/// left-out tool, or requiring a call when no tool is left, is refused; with no tool
/// left, any other choice is moot and not sent.
fn omitted_choice(
    req: &Map<String, Value>,
    chat: &mut Map<String, Value>,
    omitted: &[String],
) -> Result<(), TranslateError> {
    if omitted.is_empty() {
        return Ok(());
    }
    let choice = req.get("tool_choice");
    let kind = choice.and_then(|c| c.get("type")).and_then(Value::as_str);
    let named = choice.and_then(|c| c.get("name")).and_then(Value::as_str);
    if kind == Some("tool") && named.is_some_and(|n| omitted.iter().any(|o| o == n)) {
        return Err(unsupported("tool_choice.name", "names a server tool this candidate lacks"));
    }
    if !chat.contains_key("tools") {
        if kind == Some("any") {
            return Err(unsupported(
                "tool_choice",
                "requires a tool call, and only server tools were given, which this candidate lacks",
            ));
        }
        chat.remove("tool_choice");
        chat.remove("parallel_tool_calls");
    }
    Ok(())
}

fn tool_choice(value: &Value, chat: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let choice = match value.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            json!({"type": "function", "function": {"name": value.get("name").and_then(Value::as_str).unwrap_or("")}})
        }
        _ => return Err(TranslateError::invalid("tool_choice.type", "must be auto, any, tool or none")),
    };
    chat.insert("tool_choice".into(), choice);
    if value.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
        chat.insert("parallel_tool_calls".into(), json!(false));
    }
    Ok(())
}

/// `output_config`: `format` (structured output) becomes a JSON-schema response format;
/// `effort` is a hint.
fn output_config(value: &Value, chat: &mut Map<String, Value>, out: &mut Out) -> Result<(), TranslateError> {
    let Value::Object(config) = value else {
        return Err(TranslateError::invalid("output_config", "must be an object"));
    };
    for (key, v) in config {
        match key.as_str() {
            "effort" => out.drop_hint("output_config.effort"),
            "format" => match v.get("type").and_then(Value::as_str) {
                Some("json_schema") => {
                    let schema = v.get("schema").cloned().unwrap_or_else(|| json!({}));
                    chat.insert(
                        "response_format".into(),
                        json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}}),
                    );
                }
                _ => return Err(unsupported("output_config.format", "only json_schema formats can be translated")),
            },
            other => return Err(unsupported(format!("output_config.{other}"), "no equivalent on this candidate")),
        }
    }
    Ok(())
}
