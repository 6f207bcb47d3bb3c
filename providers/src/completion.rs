//! Builds the OpenAI `chat.completion` body of a non-streamed answer.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::usage::OpenAiUsage;
use crate::{AnswerOpts, Completion, FinishReason, Usage};

/// A non-streamed answer in provider-neutral form; `parse` fills one per protocol.
#[derive(Debug, Default)]
pub struct Answer {
    /// The upstream's response id, if it gives one.
    pub id: Option<String>,
    /// The model as the upstream reports it.
    pub model: String,
    pub text: String,
    pub tool_calls: Vec<AnswerToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub usage: Usage,
    /// Vendor fields merged into the tool call at an index (see
    /// [`crate::ChunkWriter::tool_start_extra`]).
    pub tool_call_extras: Vec<(usize, Value)>,
    /// The sources of a searched answer, as chat's `url_citation` annotations.
    pub annotations: Vec<Value>,
}

/// Chat's `url_citation` annotation: `url` (titled `title`) backs the answer's text
/// from character `start` to `end` (Unicode scalar values, end exclusive).
pub fn url_citation(start: usize, end: usize, url: &str, title: &str) -> Value {
    json!({
        "type": "url_citation",
        "url_citation": { "start_index": start, "end_index": end, "url": url, "title": title },
    })
}

/// One tool call of an [`Answer`].
#[derive(Debug)]
pub struct AnswerToolCall {
    /// `None` when the provider gives no id (Gemini): one is generated, unique per response.
    pub id: Option<String>,
    pub name: String,
    /// The arguments as JSON text; empty becomes `"{}"`.
    pub arguments: String,
}

impl Answer {
    /// The `chat.completion` body. `finish_reason` is `tool_calls` whenever the answer
    /// calls a tool and the provider said only "stop" (Gemini `STOP`).
    pub fn into_completion(self, opts: &AnswerOpts) -> Completion {
        let id = self.id.filter(|id| !id.is_empty()).unwrap_or_else(|| opts.id.clone());
        let finish = self.finish_reason.unwrap_or(FinishReason::Stop).after_tool_calls(!self.tool_calls.is_empty());
        let content = if self.text.is_empty() && !self.tool_calls.is_empty() { None } else { Some(self.text.as_str()) };
        let tool_calls = (!self.tool_calls.is_empty()).then(|| {
            let mut calls: Vec<Value> = self
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let arguments = if c.arguments.trim().is_empty() { "{}".to_owned() } else { c.arguments };
                    json!({
                        "id": c.id.filter(|s| !s.is_empty()).unwrap_or_else(|| format!("call_{id}_{i}")),
                        "type": "function",
                        "function": { "name": c.name, "arguments": arguments },
                    })
                })
                .collect();
            for (i, extra) in self.tool_call_extras {
                if let (Some(Value::Object(call)), Value::Object(extra)) = (calls.get_mut(i), extra) {
                    call.extend(extra);
                }
            }
            calls
        });
        let body = Body {
            choices: [Choice {
                finish_reason: finish.as_str(),
                index: 0,
                message: MessageOut {
                    annotations: (!self.annotations.is_empty()).then_some(self.annotations),
                    content,
                    role: "assistant",
                    tool_calls,
                },
            }],
            created: opts.created,
            id: &id,
            model: &self.model,
            object: "chat.completion",
            usage: self.usage.openai(),
        };
        // Room for the text and the envelope around it (about 300 bytes) from the start,
        // so that writing it does not grow the buffer twice.
        let mut out = Vec::with_capacity(self.text.len() + 384);
        // Serialising these types cannot fail (no map has a non-string key).
        let _ = serde_json::to_writer(&mut out, &body);
        Completion { body: Bytes::from(out), usage: self.usage }
    }
}

// The `chat.completion` body, written straight to bytes: no `Value` tree is built. The
// members are in alphabetical order, as a `Value` object (a sorted map) wrote them.

#[derive(Serialize)]
struct Body<'a> {
    choices: [Choice<'a>; 1],
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    usage: OpenAiUsage,
}

#[derive(Serialize)]
struct Choice<'a> {
    finish_reason: &'static str,
    index: u32,
    message: MessageOut<'a>,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<Vec<Value>>,
    /// `null` for an answer that only calls tools.
    content: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
}
