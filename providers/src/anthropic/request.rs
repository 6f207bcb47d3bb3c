//! The Messages request body, written straight to bytes: no `Value` tree for the
//! conversation, which is most of what a translated request carries.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Value, json};

use crate::request::{Conversation, Dialect, ToolUse, reject_json_mode, reject_openai_only, reject_penalties, walk};
use crate::{ChatRequest, ImageUrl, Message, Target, ToolCall, TranslateError};

/// A Messages request body. `model`, `stream` and `anthropic_version` depend on direct vs
/// Vertex and are the caller's to set. The members are in alphabetical order, as a
/// `Value` object (a sorted map) wrote them.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<&'static str>,
    max_tokens: u32,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
}

/// One message: the blocks of consecutive messages from one side.
#[derive(Serialize)]
struct Turn<'a> {
    content: Vec<Block<'a>>,
    role: &'static str,
}

#[derive(Serialize)]
struct Metadata<'a> {
    user_id: &'a str,
}

/// A content block: text, the one on every request, typed; the others as `Value`s.
#[derive(Serialize)]
#[serde(untagged)]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Other(Value),
}

pub(super) fn body<'a>(target: &Target<'_>, req: &'a ChatRequest) -> Result<Body<'a>, TranslateError> {
    reject_openai_only(req)?;
    reject_penalties(req)?;
    let Conversation { system, turns } = walk(req, &mut Messages)?;
    let messages = turns
        .into_iter()
        .map(|t| Turn { content: t.blocks, role: if t.from_model { "assistant" } else { "user" } })
        .collect();
    // Anthropic's range is 0–1, OpenAI's 0–2: clamping would change the answer.
    if req.temperature.is_some_and(|t| t > 1.0) {
        return Err(TranslateError::unsupported("temperature", "this upstream accepts 0 to 1"));
    }
    reject_json_mode(req, "this upstream has no JSON mode")?;
    let (mut tools, tool_choice) = tools(req)?;
    if let Some(options) = req.web_search() {
        tools.push(web_search_tool(options));
    }
    Ok(Body {
        anthropic_version: None,
        max_tokens: req.max_output_tokens(target.default_max_tokens),
        messages,
        metadata: req.rest.get("user").and_then(Value::as_str).map(|user_id| Metadata { user_id }),
        model: None,
        stop_sequences: req.stop_sequences(),
        stream: None,
        system,
        temperature: req.temperature,
        tool_choice,
        tools,
        top_p: req.top_p,
    })
}

/// Chat's `web_search_options` as Anthropic's server-side web search tool: the user's
/// approximate location (flat in Anthropic's, under `approximate` in chat's) and the
/// allowed domains of a Responses tool's `filters`. `search_context_size` has no
/// equivalent (docs/gateway.md). At most [`WEB_SEARCH_MAX_USES`] searches: the bound
/// the reservation holds the search fees to (docs/design.md §5).
fn web_search_tool(options: &Value) -> Value {
    let mut tool = json!({ "type": WEB_SEARCH_TOOL, "name": "web_search", "max_uses": WEB_SEARCH_MAX_USES });
    if let Some(Value::Object(approximate)) = options.get("user_location").and_then(|l| l.get("approximate")) {
        let mut location = json!({ "type": "approximate" });
        for key in ["city", "region", "country", "timezone"] {
            if let Some(v) = approximate.get(key).filter(|v| v.is_string()) {
                location[key] = v.clone();
            }
        }
        tool["user_location"] = location;
    }
    if let Some(domains) = options.get("filters").and_then(|f| f.get("allowed_domains")).filter(|d| d.is_array()) {
        tool["allowed_domains"] = domains.clone();
    }
    tool
}

/// The version of Anthropic's web search tool a hosted web search is sent as.
pub(crate) const WEB_SEARCH_TOOL: &str = "web_search_20250305";

/// The most searches one answer runs when the request sets no bound: what a translated
/// search tool's `max_uses` says, and what the reservation counts for a web search tool
/// without one (docs/design.md §5).
pub const WEB_SEARCH_MAX_USES: u64 = 10;

/// The function tools, and `tool_choice` when the request sets one or forbids parallel calls.
fn tools(req: &ChatRequest) -> Result<(Vec<Value>, Option<Value>), TranslateError> {
    let tools: Vec<Value> = req
        .function_tools()
        .iter()
        .map(|t| {
            let mut tool = json!({ "name": t.function.name, "input_schema": t.function.schema_or_empty() });
            if let Some(d) = &t.function.description {
                tool["description"] = json!(d);
            }
            tool
        })
        .collect();
    let mut choice = req.tool_use()?.map(|u| match u {
        ToolUse::Auto => json!({ "type": "auto" }),
        ToolUse::Required => json!({ "type": "any" }),
        ToolUse::Forbidden => json!({ "type": "none" }),
        ToolUse::Only(name) => json!({ "type": "tool", "name": name }),
    });
    if req.parallel_tool_calls == Some(false) && !tools.is_empty() {
        let c = choice.get_or_insert_with(|| json!({ "type": "auto" }));
        if c["type"] != "none" {
            c["disable_parallel_tool_use"] = json!(true);
        }
    }
    Ok((tools, choice))
}

/// Messages content blocks: every block is typed, a tool result is its own block.
struct Messages;

impl<'a> Dialect<'a> for Messages {
    // Anthropic rejects a message with empty content (e.g. an assistant turn with "").
    const DROPS_EMPTY_TURNS: bool = true;

    type Block = Block<'a>;

    fn text(&self, text: Cow<'a, str>) -> Block<'a> {
        Block::Text { text, kind: "text" }
    }

    fn image(&self, _i: usize, _j: usize, image: &'a ImageUrl) -> Result<Block<'a>, TranslateError> {
        Ok(Block::Other(match image.data_url() {
            Some((media_type, data)) => json!({ "type": "image",
                "source": { "type": "base64", "media_type": media_type, "data": data } }),
            None => json!({ "type": "image", "source": { "type": "url", "url": image.url } }),
        }))
    }

    fn tool_call(&mut self, call: &'a ToolCall, input: Value) -> Block<'a> {
        Block::Other(json!({ "type": "tool_use", "id": call.id, "name": call.function.name, "input": input }))
    }

    fn tool_result(&mut self, i: usize, m: &'a Message) -> Result<Block<'a>, TranslateError> {
        let id = m.answered_call_id(i)?;
        let text = m.tool_result_text(i)?;
        Ok(Block::Other(json!({ "type": "tool_result", "tool_use_id": id, "content": text })))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{ChatRequest, Protocol, Target};

    /// The typed body writes the bytes the `Value` tree it replaced wrote: every member
    /// in alphabetical order, numbers and strings as `Value` writes them.
    #[test]
    fn the_typed_body_writes_what_a_value_tree_wrote() -> Result<(), Box<dyn std::error::Error>> {
        let schema = json!({ "type": "object", "properties": { "cmd": { "type": "string" } } });
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [
                { "role": "system", "content": "Be brief." },
                { "role": "developer", "content": [{ "type": "text", "text": "Two " }, { "type": "text", "text": "parts." }] },
                { "role": "user", "content": [
                    { "type": "text", "text": "Look: \"quoted\"\n" },
                    { "type": "image_url", "image_url": { "url": "data:image/png;base64,AAAA" } },
                    { "type": "image_url", "image_url": { "url": "https://example.com/a.png" } },
                ] },
                { "role": "assistant", "content": "Running it.", "tool_calls": [
                    { "id": "call_1", "type": "function", "function": { "name": "sh", "arguments": "{\"cmd\":\"ls\"}" } },
                ] },
                { "role": "tool", "tool_call_id": "call_1", "content": "a.txt" },
                { "role": "user", "content": "And now? ü" },
            ],
            "max_completion_tokens": 300,
            "temperature": 0.25,
            "top_p": 0.9,
            "stop": ["END", "STOP"],
            "user": "u-1",
            "tools": [{ "type": "function", "function": { "name": "sh", "description": "Runs.", "parameters": schema } }],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "web_search_options": { "user_location": { "type": "approximate", "approximate": { "city": "Oslo" } } },
        }))?;
        let plain: ChatRequest = serde_json::from_value(json!({
            "model": "m", "messages": [{ "role": "user", "content": "Hi" }],
        }))?;
        let direct = Target::new(Protocol::Anthropic, "claude", 1024);
        let vertex = Target {
            gcp_project: Some("p"),
            gcp_location: Some("l"),
            ..Target::new(Protocol::VertexAnthropic, "claude@1", 1024)
        };
        for (target, req) in [(&direct, &req), (&vertex, &req), (&direct, &plain)] {
            for stream in [false, true] {
                let built = crate::build(target, req, stream)?;
                let tree: Value = serde_json::from_slice(&built.body)?;
                assert_eq!(built.body, serde_json::to_vec(&tree)?, "{}", String::from_utf8_lossy(&built.body));
            }
        }
        let built = crate::build(&direct, &req, true)?;
        let body: Value = serde_json::from_slice(&built.body)?;
        assert_eq!(
            body["system"],
            json!([{ "type": "text", "text": "Be brief." }, { "type": "text", "text": "Two parts." }])
        );
        assert_eq!(body["messages"][0]["content"][0], json!({ "type": "text", "text": "Look: \"quoted\"\n" }));
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(3), "the tool result joins the next user turn");
        assert_eq!(
            (body["model"].as_str(), body["stream"].as_bool(), body["max_tokens"].as_u64()),
            (Some("claude"), Some(true), Some(300))
        );
        assert_eq!(body["metadata"], json!({ "user_id": "u-1" }));
        assert_eq!(body["tool_choice"], json!({ "type": "any", "disable_parallel_tool_use": true }));
        assert_eq!(body["tools"][1]["user_location"], json!({ "type": "approximate", "city": "Oslo" }));
        let plain = crate::build(&direct, &plain, false)?;
        assert_eq!(&plain.body[..], br#"{"max_tokens":1024,"messages":[{"content":[{"text":"Hi","type":"text"}],"role":"user"}],"model":"claude"}"#);
        Ok(())
    }
}
