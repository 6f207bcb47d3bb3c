//! What every native (non-OpenAI) translator reads from a [`ChatRequest`] the same
//! way: the fields none of them can express, the sampling settings they all take under
//! their own names, and what `tools`/`tool_choice` allow.

use serde_json::{Map, Value, json};

use crate::{ChatRequest, FunctionDef, Target, Tool, ToolChoice, TranslateError};

/// The names a native protocol gives the sampling settings they all take.
pub(crate) struct SamplingNames {
    pub max_tokens: &'static str,
    pub temperature: &'static str,
    pub top_p: &'static str,
    pub stop: &'static str,
}

impl ChatRequest {
    /// Writes the output token limit (always: see [`Self::max_output_tokens`]), and
    /// `temperature`, `top_p` and the stop sequences when set, under `names`.
    pub(crate) fn write_sampling(&self, default_max_tokens: u32, names: &SamplingNames, into: &mut Map<String, Value>) {
        into.insert(names.max_tokens.into(), json!(self.max_output_tokens(default_max_tokens)));
        if let Some(t) = self.temperature {
            into.insert(names.temperature.into(), json!(t));
        }
        if let Some(p) = self.top_p {
            into.insert(names.top_p.into(), json!(p));
        }
        let stop = self.stop_sequences();
        if !stop.is_empty() {
            into.insert(names.stop.into(), json!(stop));
        }
    }

    /// The hosted web search asked for (`web_search_options`), if any.
    pub(crate) fn web_search(&self) -> Option<&Value> {
        self.rest.get("web_search_options").filter(|v| !v.is_null())
    }

    /// The function tools declared; empty when `tools` is absent.
    pub(crate) fn function_tools(&self) -> &[Tool] {
        self.tools.as_deref().unwrap_or_default()
    }

    /// `tool_choice` read, `None` when the client sets none; an unknown mode is invalid.
    pub(crate) fn tool_use(&self) -> Result<Option<ToolUse<'_>>, TranslateError> {
        Ok(match &self.tool_choice {
            None => None,
            Some(ToolChoice::Mode(m)) => Some(match m.as_str() {
                "auto" => ToolUse::Auto,
                "required" => ToolUse::Required,
                "none" => ToolUse::Forbidden,
                _ => {
                    return Err(TranslateError::invalid("tool_choice", format!("unknown mode `{m}`")));
                }
            }),
            Some(ToolChoice::Named(n)) => Some(ToolUse::Only(&n.function.name)),
        })
    }
}

/// What `tool_choice` allows the model; each protocol writes it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolUse<'a> {
    /// `"auto"`: the model decides.
    Auto,
    /// `"required"`: some tool must be called.
    Required,
    /// `"none"`: no tool may be called.
    Forbidden,
    /// A named function: this one must be called.
    Only(&'a str),
}

impl FunctionDef {
    /// The parameters schema; a function without one takes an empty object.
    pub(crate) fn schema_or_empty(&self) -> Value {
        self.parameters.clone().unwrap_or_else(empty_object_schema)
    }
}

/// The schema of a function without parameters, for targets that require one.
pub(crate) fn empty_object_schema() -> Value {
    json!({ "type": "object", "properties": {} })
}

/// Rejects a `response_format` other than `text` for a target without a JSON mode.
pub(crate) fn reject_json_mode(req: &ChatRequest, reason: &str) -> Result<(), TranslateError> {
    match &req.response_format {
        Some(rf) if rf["type"] != "text" => Err(TranslateError::unsupported("response_format", reason)),
        _ => Ok(()),
    }
}

/// Rejects what no native (non-OpenAI) target can express without changing the
/// answer: several choices, log probabilities, logit biases, audio output, predicted
/// outputs and tools that are not functions. Unset, `null`, `false` and empty values pass.
pub(crate) fn reject_openai_only(req: &ChatRequest) -> Result<(), TranslateError> {
    if req.n.is_some_and(|n| n > 1) {
        return Err(TranslateError::unsupported("n", "this upstream returns one choice"));
    }
    for (field, reason) in [
        ("logprobs", "this upstream returns no log probabilities"),
        ("top_logprobs", "this upstream returns no log probabilities"),
        ("logit_bias", "this upstream takes no logit bias"),
        ("audio", "this upstream returns no audio"),
        ("prediction", "this upstream takes no predicted output"),
    ] {
        if req.rest.get(field).is_some_and(is_set) {
            return Err(TranslateError::unsupported(field, reason));
        }
    }
    for (i, tool) in req.tools.iter().flatten().enumerate() {
        if tool.kind != "function" {
            return Err(TranslateError::unsupported(format!("tools[{i}].type"), "only function tools are supported"));
        }
    }
    Ok(())
}

/// Rejects a hosted web search (`web_search_options`) for a target without one, unless
/// the target leaves such tools out ([`Target::omit_hosted_tools`]).
pub(crate) fn reject_web_search(target: &Target<'_>, req: &ChatRequest) -> Result<(), TranslateError> {
    match req.web_search() {
        Some(_) if !target.omit_hosted_tools => Err(TranslateError::unsupported(
            "web_search_options",
            "this candidate has no hosted web search (Anthropic-family candidates search with Anthropic's \
             web search tool; a route with hostedTools: omit sends Responses requests without it)",
        )),
        _ => Ok(()),
    }
}

/// Rejects non-zero `presence_penalty`/`frequency_penalty` for a target without them.
pub(crate) fn reject_penalties(req: &ChatRequest) -> Result<(), TranslateError> {
    for field in ["presence_penalty", "frequency_penalty"] {
        if req.rest.get(field).and_then(Value::as_f64).is_some_and(|p| p != 0.0) {
            return Err(TranslateError::unsupported(field, "this upstream has no penalties"));
        }
    }
    Ok(())
}

fn is_set(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Bool(true) | Value::String(_) => true,
    }
}
