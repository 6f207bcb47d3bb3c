//! The client's OpenAI chat request: typed where a translator reads it, the rest kept
//! verbatim in `rest` so that nothing is dropped silently.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod native;
mod walk;

pub(crate) use native::{
    SamplingNames, ToolUse, empty_object_schema, reject_json_mode, reject_openai_only, reject_penalties,
    reject_web_search,
};
pub(crate) use walk::{Conversation, Dialect, messages, walk};

/// An OpenAI `POST /chat/completions` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// Every other field, verbatim (e.g. `user`, `seed`, `metadata`).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl ChatRequest {
    /// The output token limit: `max_completion_tokens` ?? `max_tokens` ?? `default`.
    /// A 0 from the client is treated as absent: no provider accepts it.
    pub fn max_output_tokens(&self, default: u32) -> u32 {
        self.max_completion_tokens.or(self.max_tokens).filter(|&n| n > 0).unwrap_or(default)
    }

    /// The stop sequences, as a list.
    pub fn stop_sequences(&self) -> Vec<String> {
        match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A tool message's answer to this call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// A message's content: a string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of all text parts joined, for places that only take text (system
    /// prompts, tool results); `None` if a part is not text. Borrowed unless it joins
    /// several parts.
    pub fn text_only(&self) -> Option<Cow<'_, str>> {
        match self {
            Self::Text(s) => Some(Cow::Borrowed(s)),
            Self::Parts(parts) => {
                let mut out = Cow::Borrowed("");
                for p in parts {
                    match p {
                        ContentPart::Text { text } if out.is_empty() => out = Cow::Borrowed(text),
                        ContentPart::Text { text } => out.to_mut().push_str(text),
                        _ => return None,
                    }
                }
                Some(out)
            }
        }
    }
}

/// One content part. Parts this crate cannot translate are `Other` and rejected by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: ImageUrl,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ImageUrl {
    /// `(media type, base64 data)` of a `data:` URL, `None` for any other URL.
    pub fn data_url(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (meta, data) = rest.split_once(',')?;
        let media = meta.strip_suffix(";base64")?;
        Some((media, data))
    }
}

/// An assistant's tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
    /// Vendor fields, verbatim (e.g. Gemini's `extra_content.google.thought_signature`).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl ToolCall {
    /// The Gemini thought signature this call carries, if any (see [`crate::ChunkWriter::tool_start_extra`]).
    pub fn thought_signature(&self) -> Option<&str> {
        self.rest.get("extra_content")?.get("google")?.get("thought_signature")?.as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text; may be empty for a call without arguments.
    #[serde(default)]
    pub arguments: String,
}

impl FunctionCall {
    /// The arguments as a JSON value; an empty string is `{}`.
    pub fn arguments_value(&self) -> Result<Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_str(&self.arguments)
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDef,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON schema; absent means "no parameters".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn function_type() -> String {
    "function".to_owned()
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"` or a named function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(String),
    Named(NamedToolChoice),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedToolChoice {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: NamedFunction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedFunction {
    pub name: String,
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}
