//! The `generateContent` request body.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::request::{
    Conversation, Dialect, SamplingNames, ToolUse, messages, reject_openai_only, reject_web_search, walk,
};
use crate::{ChatRequest, ImageUrl, Message, Target, ToolCall, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    reject_web_search(target, req)?;
    let Conversation { system, turns } = walk(req, &mut Contents::default())?;
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(messages(turns, "user", "model", "parts")));
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    tools(req, &mut body)?;
    body.insert("generationConfig".into(), Value::Object(generation_config(target, req)?));
    Ok(Value::Object(body))
}

fn generation_config(target: &Target<'_>, req: &ChatRequest) -> Result<Map<String, Value>, TranslateError> {
    let mut config = Map::new();
    req.write_sampling(
        target.default_max_tokens,
        &SamplingNames {
            max_tokens: "maxOutputTokens",
            temperature: "temperature",
            top_p: "topP",
            stop: "stopSequences",
        },
        &mut config,
    );
    for (openai, gemini) in [("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")] {
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
                return Err(TranslateError::unsupported("response_format", format!("`{other}` is not supported")));
            }
        }
    }
    Ok(config)
}

fn tools(req: &ChatRequest, body: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let tools = req.function_tools();
    if !tools.is_empty() {
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
    let Some(tool_use) = req.tool_use()? else {
        return Ok(());
    };
    let config = match tool_use {
        ToolUse::Auto => json!({ "mode": "AUTO" }),
        ToolUse::Required => json!({ "mode": "ANY" }),
        ToolUse::Forbidden => json!({ "mode": "NONE" }),
        ToolUse::Only(name) => json!({ "mode": "ANY", "allowedFunctionNames": [name] }),
    };
    body.insert("toolConfig".into(), json!({ "functionCallingConfig": config }));
    Ok(())
}

fn has_properties(schema: &Value) -> bool {
    schema["type"] != "object" || schema["properties"].as_object().is_some_and(|p| !p.is_empty())
}

/// Gemini's `parameters` is an OpenAPI subset: drop the JSON Schema keywords it rejects.
fn schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "additionalProperties" | "strict" | "$id"))
                .map(|(k, v)| (k.clone(), if k == "properties" { properties(v) } else { schema(v) }))
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

/// The image type a URL's extension names (`fileData` requires one).
fn image_mime(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url).to_ascii_lowercase();
    match path.rsplit('.').next() {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => "image/jpeg",
    }
}

/// Gemini parts. `functionResponse` needs the function's name, which OpenAI tool
/// messages do not carry: the walk's calls are remembered by id. Calls Gemini signed
/// (Gemini 3) are answered with their id too; older models reject ids, and an unsigned
/// call never came from a model that wants one.
#[derive(Default)]
struct Contents<'a> {
    /// Call id → (function name, signed).
    calls: HashMap<&'a str, (&'a str, bool)>,
}

impl<'a> Dialect<'a> for Contents<'a> {
    const DROPS_EMPTY_TURNS: bool = true;

    type Block = Value;

    fn text(&self, text: Cow<'a, str>) -> Value {
        json!({ "text": text })
    }

    fn image(&self, _i: usize, _j: usize, image: &'a ImageUrl) -> Result<Value, TranslateError> {
        Ok(match image.data_url() {
            Some((mime, data)) => json!({ "inlineData": { "mimeType": mime, "data": data } }),
            None => {
                json!({ "fileData": { "mimeType": image_mime(&image.url), "fileUri": image.url } })
            }
        })
    }

    fn tool_call(&mut self, call: &'a ToolCall, args: Value) -> Value {
        let signature = call.thought_signature();
        self.calls.insert(&call.id, (&call.function.name, signature.is_some()));
        let mut part = json!({ "functionCall": { "name": call.function.name, "args": args } });
        if let Some(signature) = signature {
            part["functionCall"]["id"] = json!(call.id);
            part["thoughtSignature"] = json!(signature);
        }
        part
    }

    fn tool_result(&mut self, i: usize, m: &'a Message) -> Result<Value, TranslateError> {
        let id = m.answered_call_id(i)?;
        let &(name, echo_id) = self.calls.get(id).ok_or_else(|| {
            TranslateError::invalid(
                format!("messages[{i}].tool_call_id"),
                format!("no earlier assistant tool call has id `{id}`"),
            )
        })?;
        let text = m.tool_result_text(i)?;
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
}
