//! The `generateContent` request body.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::request::reject_openai_only;
use crate::{ChatRequest, Content, ContentPart, Message, Role, Target, ToolChoice, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    let mut system = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    // functionResponse needs the function's name; OpenAI tool messages carry only the id.
    // Calls Gemini signed (Gemini 3) are answered with their id too; older models
    // reject ids, and an unsigned call never came from a model that wants one.
    let mut call_names: HashMap<&str, (&str, bool)> = HashMap::new();
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
            Role::User => push(&mut contents, "user", user_parts(i, m)?),
            Role::Assistant => {
                for call in m.tool_calls.iter().flatten() {
                    let signed = call.thought_signature().is_some();
                    call_names.insert(&call.id, (&call.function.name, signed));
                }
                push(&mut contents, "model", model_parts(i, m)?);
            }
            // Consecutive tool results share one user turn (parallel function calls).
            Role::Tool => push(
                &mut contents,
                "user",
                vec![function_response(i, m, &call_names)?],
            ),
        }
    }
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    tools(req, &mut body)?;
    body.insert(
        "generationConfig".into(),
        Value::Object(generation_config(target, req)?),
    );
    Ok(Value::Object(body))
}

fn generation_config(
    target: &Target<'_>,
    req: &ChatRequest,
) -> Result<Map<String, Value>, TranslateError> {
    let mut config = Map::new();
    config.insert(
        "maxOutputTokens".into(),
        json!(req.max_output_tokens(target.default_max_tokens)),
    );
    if let Some(t) = req.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        config.insert("topP".into(), json!(p));
    }
    let stop = req.stop_sequences();
    if !stop.is_empty() {
        config.insert("stopSequences".into(), json!(stop));
    }
    for (openai, gemini) in [
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(p) = req.rest.get(openai).filter(|p| p.is_number()) {
            config.insert(gemini.into(), p.clone());
        }
    }
    if let Some(seed) = req.rest.get("seed").filter(|s| s.is_i64() || s.is_u64()) {
        config.insert("seed".into(), seed.clone());
    }
    if let Some(rf) = &req.response_format {
        match rf["type"].as_str() {
            Some("text") | None => {}
            Some("json_object") => {
                config.insert("responseMimeType".into(), json!("application/json"));
            }
            Some("json_schema") => {
                config.insert("responseMimeType".into(), json!("application/json"));
                if let Some(schema) = rf["json_schema"].get("schema") {
                    config.insert("responseJsonSchema".into(), schema.clone());
                }
            }
            Some(other) => {
                return Err(TranslateError::unsupported(
                    "response_format",
                    format!("`{other}` is not supported"),
                ));
            }
        }
    }
    Ok(config)
}

fn tools(req: &ChatRequest, body: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if let Some(tools) = req.tools.as_ref().filter(|t| !t.is_empty()) {
        let decls: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut decl = json!({ "name": t.function.name });
                if let Some(d) = &t.function.description {
                    decl["description"] = json!(d);
                }
                // Gemini rejects an OBJECT schema with no properties: a tool without
                // parameters is declared without `parameters`.
                if let Some(p) = t.function.parameters.as_ref().filter(|p| has_properties(p)) {
                    decl["parameters"] = schema(p);
                }
                decl
            })
            .collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
    }
    let config = match &req.tool_choice {
        None => return Ok(()),
        Some(ToolChoice::Mode(m)) => match m.as_str() {
            "auto" => json!({ "mode": "AUTO" }),
            "required" => json!({ "mode": "ANY" }),
            "none" => json!({ "mode": "NONE" }),
            _ => {
                return Err(TranslateError::invalid(
                    "tool_choice",
                    format!("unknown mode `{m}`"),
                ));
            }
        },
        Some(ToolChoice::Named(n)) => {
            json!({ "mode": "ANY", "allowedFunctionNames": [n.function.name] })
        }
    };
    body.insert(
        "toolConfig".into(),
        json!({ "functionCallingConfig": config }),
    );
    Ok(())
}

fn has_properties(schema: &Value) -> bool {
    schema["type"] != "object"
        || schema["properties"]
            .as_object()
            .is_some_and(|p| !p.is_empty())
}

/// Gemini's `parameters` is an OpenAPI subset: drop the JSON Schema keywords it rejects.
fn schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "$schema" | "additionalProperties" | "strict" | "$id"
                    )
                })
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if k == "properties" {
                            properties(v)
                        } else {
                            schema(v)
                        },
                    )
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(schema).collect()),
        other => other.clone(),
    }
}

// Property names are user data, not keywords: keep them all.
fn properties(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), schema(v))).collect()),
        other => other.clone(),
    }
}

fn push(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut()
        && last["role"] == role
        && let Some(p) = last["parts"].as_array_mut()
    {
        p.extend(parts);
        return;
    }
    contents.push(json!({ "role": role, "parts": parts }));
}

fn user_parts(i: usize, m: &Message) -> Result<Vec<Value>, TranslateError> {
    match &m.content {
        None => Ok(Vec::new()),
        Some(Content::Text(t)) => Ok(vec![json!({ "text": t })]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match p {
                ContentPart::Text { text } => Ok(json!({ "text": text })),
                ContentPart::ImageUrl { image_url } => match image_url.data_url() {
                    Some((mime, data)) => Ok(json!({ "inlineData": { "mimeType": mime, "data": data } })),
                    None => Ok(json!({ "fileData": { "mimeType": image_mime(&image_url.url), "fileUri": image_url.url } })),
                },
                ContentPart::Other => Err(TranslateError::unsupported(
                    format!("messages[{i}].content[{j}]"),
                    "only text and image parts are supported by this upstream",
                )),
            })
            .collect(),
    }
}

/// The image type a URL's extension names (`fileData` requires one).
fn image_mime(url: &str) -> &'static str {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    match path.rsplit('.').next() {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => "image/jpeg",
    }
}

fn model_parts(i: usize, m: &Message) -> Result<Vec<Value>, TranslateError> {
    let mut parts = Vec::new();
    if let Some(content) = &m.content {
        let text = content.text_only().ok_or_else(|| {
            TranslateError::unsupported(
                format!("messages[{i}].content"),
                "an assistant message must be text",
            )
        })?;
        if !text.is_empty() {
            parts.push(json!({ "text": text }));
        }
    }
    for (j, call) in m.tool_calls.iter().flatten().enumerate() {
        let args = call.function.arguments_value().map_err(|e| {
            TranslateError::invalid(
                format!("messages[{i}].tool_calls[{j}].function.arguments"),
                e.to_string(),
            )
        })?;
        let mut part = json!({ "functionCall": { "name": call.function.name, "args": args } });
        if let Some(signature) = call.thought_signature() {
            part["functionCall"]["id"] = json!(call.id);
            part["thoughtSignature"] = json!(signature);
        }
        parts.push(part);
    }
    Ok(parts)
}

fn function_response(
    i: usize,
    m: &Message,
    names: &HashMap<&str, (&str, bool)>,
) -> Result<Value, TranslateError> {
    let field = || format!("messages[{i}].tool_call_id");
    let id = m
        .tool_call_id
        .as_deref()
        .ok_or_else(|| TranslateError::invalid(field(), "a tool message needs one"))?;
    let &(name, echo_id) = names.get(id).ok_or_else(|| {
        TranslateError::invalid(
            field(),
            format!("no earlier assistant tool call has id `{id}`"),
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
    // `response` must be an object: a JSON object result goes as is, anything else wrapped.
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "output": text }),
    };
    let mut part = json!({ "functionResponse": { "name": name, "response": response } });
    if echo_id {
        part["functionResponse"]["id"] = json!(id);
    }
    Ok(part)
}
