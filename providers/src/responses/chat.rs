//! A Responses request as an OpenAI chat request, for candidates that do not speak the
//! Responses API. Each member is translated, refused naming it, or — for the hints
//! docs/gateway.md lists — left out and reported in [`Translated::dropped`].

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::{ToChat, TranslateError, Translated};

/// Members that only steer OpenAI's service (storage, caching, tiers, telemetry) or
/// the model's effort; a candidate without them answers the same conversation.
const HINTS: &[&str] = &[
    "reasoning",
    "include",
    "prompt_cache_key",
    "prompt_cache_retention",
    "metadata",
    "service_tier",
    "truncation",
    "safety_identifier",
    "client_metadata",
    "stream_options",
    "text.verbosity",
];

/// Members that need state sluice does not keep (docs/gateway.md: no response store).
const STATEFUL: &[&str] = &["previous_response_id", "conversation", "prompt"];

/// Items that record a hosted tool's call in an earlier turn: the provider ran it, and
/// its findings are in the text that follows.
const HOSTED_CALLS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
];

/// Whether a tool type is one the provider runs itself (OpenAI's hosted tools), as
/// opposed to a function the client runs.
fn is_hosted(kind: &str) -> bool {
    is_web_search(kind) || matches!(kind, "file_search" | "code_interpreter" | "image_generation" | "mcp")
}

/// OpenAI's hosted web search, under any of its names (`web_search`,
/// `web_search_preview`, and their dated versions).
fn is_web_search(kind: &str) -> bool {
    kind.starts_with("web_search")
}

struct Out {
    messages: Vec<Value>,
    dropped: Vec<Cow<'static, str>>,
    namespaces: Vec<String>,
    options: ToChat,
    /// The hosted web search as chat's `web_search_options`, which a candidate with a
    /// web search of its own (Anthropic's) serves, and the others refuse.
    web_search: Option<Value>,
}

/// Joins a namespace and a tool name into the one function name a chat candidate sees.
pub(super) const NAMESPACE_SEPARATOR: &str = "__";

/// The chat function name of a Responses tool or call, `{namespace}__{name}` when it
/// belongs to a namespace.
fn function_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}{NAMESPACE_SEPARATOR}{name}"),
        _ => name.to_owned(),
    }
}

impl Out {
    fn drop_hint(&mut self, name: impl Into<Cow<'static, str>>) {
        let name = name.into();
        if !self.dropped.contains(&name) {
            self.dropped.push(name);
        }
    }

    /// The assistant message tool calls join: the last message when it is an
    /// assistant's (a function call item follows the text of the same turn), else a new one.
    fn assistant(&mut self) -> &mut Map<String, Value> {
        let last_is_assistant = self.messages.last().is_some_and(|m| m["role"] == "assistant");
        if !last_is_assistant {
            self.messages.push(json!({"role": "assistant", "content": null}));
        }
        match self.messages.last_mut() {
            Some(Value::Object(m)) => m,
            _ => unreachable!("an assistant message was just pushed"),
        }
    }
}

fn unsupported(field: impl Into<String>, reason: impl Into<String>) -> TranslateError {
    TranslateError::unsupported(field, reason)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Translates a Responses request body into an OpenAI chat request.
pub fn to_chat(body: &[u8], options: ToChat) -> Result<Translated, TranslateError> {
    let Value::Object(req) =
        serde_json::from_slice::<Value>(body).map_err(|e| TranslateError::invalid("body", e.to_string()))?
    else {
        return Err(TranslateError::invalid("body", "must be a JSON object"));
    };
    let mut chat = Map::new();
    let mut out = Out { messages: Vec::new(), dropped: Vec::new(), namespaces: Vec::new(), options, web_search: None };
    match req.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(unsupported("instructions", "only a string can be translated")),
    }
    for (key, value) in &req {
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "model" | "temperature" | "top_p" | "stream" | "parallel_tool_calls" | "user" => {
                chat.insert(key.clone(), value.clone());
            }
            "instructions" => {}
            "input" => input(value, &mut out)?,
            "max_output_tokens" => {
                chat.insert("max_tokens".into(), value.clone());
            }
            "tools" => {
                let tools = tools(value, &mut out)?;
                if !tools.is_empty() {
                    chat.insert("tools".into(), Value::Array(tools));
                }
            }
            "tool_choice" => {
                chat.insert("tool_choice".into(), tool_choice(value)?);
            }
            "text" => text(value, &mut chat, &mut out)?,
            "store" => {
                if value.as_bool() == Some(true) {
                    return Err(unsupported("store", "sluice does not store responses; send store: false"));
                }
            }
            "background" => {
                if value.as_bool() == Some(true) {
                    return Err(unsupported("background", "sluice answers in the foreground only"));
                }
            }
            k if STATEFUL.contains(&k) => {
                return Err(unsupported(k, "sluice does not store responses; send the whole conversation in 'input'"));
            }
            k => match HINTS.iter().find(|h| **h == k) {
                Some(hint) => out.drop_hint(*hint),
                None => return Err(unsupported(k, "this candidate's protocol has no equivalent")),
            },
        }
    }
    // Every function tool left out (the route omits hosted tools, or web search is all).
    if req.get("tools").is_some_and(|t| !t.is_null()) && !chat.contains_key("tools") {
        without_tools(&mut chat)?;
    }
    let web_search = out.web_search.is_some();
    if let Some(options) = out.web_search.take() {
        chat.insert("web_search_options".into(), options);
    }
    chat.insert("messages".into(), Value::Array(out.messages));
    debug_assert!(
        out.dropped
            .iter()
            .all(|d| { HINTS.contains(&d.as_ref()) || options.omit_hosted_tools || d == "input.web_search_call" })
    );
    Ok(Translated {
        body: serde_json::to_vec(&Value::Object(chat)).unwrap_or_default(),
        dropped: out.dropped,
        namespaces: out.namespaces,
        web_search,
    })
}

/// `input`: a string (one user message) or a list of items.
fn input(value: &Value, out: &mut Out) -> Result<(), TranslateError> {
    let items = match value {
        Value::String(s) => {
            out.messages.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => return Err(TranslateError::invalid("input", "must be a string or an array of items")),
    };
    for (i, item) in items.iter().enumerate() {
        let field = format!("input[{i}]");
        // A bare `{role, content}` is a message.
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
        match kind {
            "message" => message(item, &field, out)?,
            "function_call" => {
                let name = function_name(item.get("namespace").and_then(Value::as_str), str_of(item, "name"));
                let call = json!({
                    "id": str_of(item, "call_id"),
                    "type": "function",
                    "function": {"name": name, "arguments": str_of(item, "arguments")},
                });
                let assistant = out.assistant();
                match assistant.get_mut("tool_calls") {
                    Some(Value::Array(calls)) => calls.push(call),
                    _ => {
                        assistant.insert("tool_calls".into(), json!([call]));
                    }
                }
            }
            "function_call_output" => {
                let output = tool_output(item.get("output"), &field)?;
                out.messages.push(json!({"role": "tool", "tool_call_id": str_of(item, "call_id"), "content": output}));
            }
            // Reasoning is the minting provider's own (its encrypted content cannot be
            // read elsewhere), and earlier turns' reasoning does not reach the model.
            "reasoning" => out.drop_hint("reasoning"),
            // An earlier search, run by the provider that answered that turn: its
            // findings are in the text that follows, and no other provider can replay
            // the record (Anthropic's needs its own encrypted results).
            k if HOSTED_CALLS.contains(&k) && (out.options.omit_hosted_tools || k == "web_search_call") => {
                out.drop_hint(format!("input.{k}"))
            }
            k if HOSTED_CALLS.contains(&k) => {
                return Err(unsupported(
                    field,
                    format!(
                        "a {k:?} item records a hosted tool this candidate lacks \
                         (a route with hostedTools: omit sends the request without it)"
                    ),
                ));
            }
            "item_reference" => {
                return Err(unsupported(field, "sluice does not store responses; send the item itself"));
            }
            other => {
                return Err(unsupported(field, format!("a {other:?} item cannot be translated for this candidate")));
            }
        }
    }
    Ok(())
}

/// A message item: `developer` and `system` become the system role.
fn message(item: &Value, field: &str, out: &mut Out) -> Result<(), TranslateError> {
    let role = match str_of(item, "role") {
        "developer" | "system" => "system",
        r @ ("user" | "assistant") => r,
        _ => {
            return Err(TranslateError::invalid(
                format!("{field}.role"),
                "must be user, assistant, system or developer",
            ));
        }
    };
    let content = match item.get("content") {
        Some(Value::String(s)) => json!(s),
        Some(Value::Array(parts)) => parts_of(parts, role, field)?,
        _ => return Err(TranslateError::invalid(format!("{field}.content"), "must be a string or an array of parts")),
    };
    // An assistant's text: the function call items that follow join this message.
    out.messages.push(json!({"role": role, "content": content}));
    Ok(())
}

/// A message's parts: text only for system and assistant turns (one string), text and
/// images for a user turn.
fn parts_of(parts: &[Value], role: &str, field: &str) -> Result<Value, TranslateError> {
    let mut chat_parts = Vec::with_capacity(parts.len());
    let mut text = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{field}.content[{j}]");
        match str_of(p, "type") {
            "input_text" | "output_text" | "text" => {
                text.push(str_of(p, "text"));
                chat_parts.push(json!({"type": "text", "text": str_of(p, "text")}));
            }
            "refusal" => {
                text.push(str_of(p, "refusal"));
                chat_parts.push(json!({"type": "text", "text": str_of(p, "refusal")}));
            }
            "input_image" if role == "user" => {
                let Some(url) = p.get("image_url").and_then(Value::as_str) else {
                    return Err(unsupported(at, "only images given by image_url can be translated"));
                };
                let mut image = json!({"url": url});
                if let Some(detail) = p.get("detail").filter(|d| !d.is_null()) {
                    image["detail"] = detail.clone();
                }
                chat_parts.push(json!({"type": "image_url", "image_url": image}));
            }
            other => {
                return Err(unsupported(at, format!("a {other:?} part cannot be translated for this candidate")));
            }
        }
    }
    if chat_parts.len() == text.len() {
        return Ok(json!(text.concat()));
    }
    Ok(Value::Array(chat_parts))
}

/// A function call's output: a string, or text parts joined.
fn tool_output(output: Option<&Value>, field: &str) -> Result<String, TranslateError> {
    match output {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = Vec::with_capacity(parts.len());
            for (k, p) in parts.iter().enumerate() {
                if !matches!(str_of(p, "type"), "input_text" | "output_text") {
                    return Err(unsupported(
                        format!("{field}.output[{k}]"),
                        "a tool output can be translated as text only",
                    ));
                }
                text.push(str_of(p, "text"));
            }
            Ok(text.join("\n"))
        }
        Some(_) => Err(TranslateError::invalid(format!("{field}.output"), "must be a string or an array of parts")),
    }
}

/// A request whose tools were all left out: a chat request may not choose among no
/// tools, and one that requires a call cannot be served.
fn without_tools(chat: &mut Map<String, Value>) -> Result<(), TranslateError> {
    match chat.get("tool_choice") {
        Some(Value::String(s)) if s == "required" => Err(unsupported(
            "tool_choice",
            "requires a tool call, and only hosted tools were given, which this candidate lacks",
        )),
        _ => {
            chat.remove("tool_choice");
            chat.remove("parallel_tool_calls");
            Ok(())
        }
    }
}

/// Function tools, and the function tools of a namespace (named
/// `{namespace}__{name}`); the hosted web search as chat's `web_search_options`; any
/// other hosted tool (`file_search`, …) has no equivalent on a candidate of another
/// protocol: refused, or left out when the route omits hosted tools.
fn tools(value: &Value, out: &mut Out) -> Result<Vec<Value>, TranslateError> {
    let Value::Array(list) = value else {
        return Err(TranslateError::invalid("tools", "must be an array"));
    };
    let mut tools = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match str_of(t, "type") {
            "function" => tools.push(function(t, None)),
            "namespace" => {
                let ns = str_of(t, "name");
                if ns.is_empty() {
                    return Err(TranslateError::invalid(format!("tools[{i}].name"), "a namespace needs a name"));
                }
                let inner = t.get("tools").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                for (j, f) in inner.iter().enumerate() {
                    if str_of(f, "type") != "function" {
                        return Err(unsupported(
                            format!("tools[{i}].tools[{j}]"),
                            format!("the {:?} tool has no equivalent on this candidate", str_of(f, "type")),
                        ));
                    }
                    tools.push(function(f, Some(ns)));
                }
                out.namespaces.push(ns.to_owned());
            }
            // Kept for the candidates with a search of their own; left out by the others
            // when the route omits hosted tools (`Target::omit_hosted_tools`).
            search if is_web_search(search) => match web_search_options(t, i) {
                Ok(options) => out.web_search = Some(options),
                Err(_) if out.options.omit_hosted_tools => out.drop_hint(format!("tools.{search}")),
                Err(e) => return Err(e),
            },
            hosted if is_hosted(hosted) && out.options.omit_hosted_tools => out.drop_hint(format!("tools.{hosted}")),
            hosted if is_hosted(hosted) => {
                return Err(unsupported(
                    format!("tools[{i}]"),
                    format!(
                        "the hosted {hosted:?} tool has no equivalent on this candidate \
                         (a route with hostedTools: omit sends the request without it)"
                    ),
                ));
            }
            other => {
                return Err(unsupported(
                    format!("tools[{i}]"),
                    format!("the {other:?} tool has no equivalent on this candidate"),
                ));
            }
        }
    }
    Ok(tools)
}

/// The hosted `web_search` tool as chat's `web_search_options`: its
/// `search_context_size`, its `user_location` (flat in Responses, under `approximate`
/// in chat) and its `filters` (`allowed_domains`, which chat lacks: carried for the
/// candidates whose search takes them).
/// A search limited to cached pages (`external_web_access: false`, Codex's default)
/// is refused: the searches a candidate of another protocol has read the live web.
fn web_search_options(tool: &Value, i: usize) -> Result<Value, TranslateError> {
    if tool.get("external_web_access").and_then(Value::as_bool) == Some(false) {
        return Err(unsupported(
            format!("tools[{i}].external_web_access"),
            "a web search of cached pages only has no equivalent on this candidate, whose search reads the \
             live web (Codex: web_search = \"live\"; a route with hostedTools: omit sends the request without it)",
        ));
    }
    let mut options = Map::new();
    if let Some(size) = tool.get("search_context_size").filter(|v| !v.is_null()) {
        options.insert("search_context_size".into(), size.clone());
    }
    if let Some(Value::Object(location)) = tool.get("user_location") {
        let approximate: Map<String, Value> = location
            .iter()
            .filter(|(k, v)| *k != "type" && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        options.insert("user_location".into(), json!({"type": "approximate", "approximate": approximate}));
    }
    if let Some(filters) = tool.get("filters").filter(|v| v.is_object()) {
        options.insert("filters".into(), filters.clone());
    }
    Ok(Value::Object(options))
}

/// A Responses function tool as a chat function tool.
fn function(t: &Value, namespace: Option<&str>) -> Value {
    let mut function = json!({
        "name": function_name(namespace, str_of(t, "name")),
        "parameters": t.get("parameters").filter(|p| !p.is_null()).cloned().unwrap_or_else(|| json!({"type": "object"})),
    });
    for key in ["description", "strict"] {
        if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
            function[key] = v.clone();
        }
    }
    json!({"type": "function", "function": function})
}

fn tool_choice(value: &Value) -> Result<Value, TranslateError> {
    match value {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(value.clone()),
        Value::Object(_) if str_of(value, "type") == "function" => {
            let name = function_name(value.get("namespace").and_then(Value::as_str), str_of(value, "name"));
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        Value::Object(_) => Err(unsupported(
            "tool_choice",
            format!("a {:?} tool choice has no equivalent on this candidate", str_of(value, "type")),
        )),
        _ => Err(TranslateError::invalid("tool_choice", "must be auto, none, required or a function")),
    }
}

/// `text`: the format becomes chat's `response_format`; `verbosity` is a hint.
fn text(value: &Value, chat: &mut Map<String, Value>, out: &mut Out) -> Result<(), TranslateError> {
    let Value::Object(text) = value else {
        return Err(TranslateError::invalid("text", "must be an object"));
    };
    for (key, v) in text {
        match key.as_str() {
            "verbosity" => out.drop_hint("text.verbosity"),
            "format" => match str_of(v, "type") {
                "text" => {}
                "json_object" => {
                    chat.insert("response_format".into(), json!({"type": "json_object"}));
                }
                "json_schema" => {
                    let mut schema = json!({
                        "name": v.get("name").and_then(Value::as_str).unwrap_or("output"),
                        "schema": v.get("schema").cloned().unwrap_or_else(|| json!({})),
                    });
                    for key in ["description", "strict"] {
                        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
                            schema[key] = x.clone();
                        }
                    }
                    chat.insert("response_format".into(), json!({"type": "json_schema", "json_schema": schema}));
                }
                other => return Err(unsupported("text.format", format!("a {other:?} format cannot be translated"))),
            },
            other => return Err(unsupported(format!("text.{other}"), "no equivalent on this candidate")),
        }
    }
    Ok(())
}
