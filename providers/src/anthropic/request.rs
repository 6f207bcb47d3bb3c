//! The Messages request body (without `model`, `stream` and `anthropic_version`, which
//! depend on direct vs Vertex).

use serde_json::{Map, Value, json};

use crate::request::{
    Conversation, Dialect, SamplingNames, ToolUse, messages, reject_json_mode, reject_openai_only, reject_penalties,
    walk,
};
use crate::{ChatRequest, ImageUrl, Message, Target, ToolCall, TranslateError};

pub(super) fn body(target: &Target<'_>, req: &ChatRequest) -> Result<Value, TranslateError> {
    reject_openai_only(req)?;
    reject_penalties(req)?;
    let Conversation { system, turns } = walk(req, &mut Messages)?;
    let mut body = Map::new();
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages(turns, "user", "assistant", "content")));
    // Anthropic's range is 0–1, OpenAI's 0–2: clamping would change the answer.
    if req.temperature.is_some_and(|t| t > 1.0) {
        return Err(TranslateError::unsupported("temperature", "this upstream accepts 0 to 1"));
    }
    req.write_sampling(
        target.default_max_tokens,
        &SamplingNames { max_tokens: "max_tokens", temperature: "temperature", top_p: "top_p", stop: "stop_sequences" },
        &mut body,
    );
    if let Some(user) = req.rest.get("user").and_then(Value::as_str) {
        body.insert("metadata".into(), json!({ "user_id": user }));
    }
    reject_json_mode(req, "this upstream has no JSON mode")?;
    tools(req, &mut body)?;
    if let Some(options) = req.web_search() {
        let tools = body.entry("tools").or_insert_with(|| json!([]));
        if let Value::Array(tools) = tools {
            tools.push(web_search_tool(options));
        }
    }
    Ok(Value::Object(body))
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

fn tools(req: &ChatRequest, body: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let tools = req.function_tools();
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut tool = json!({ "name": t.function.name, "input_schema": t.function.schema_or_empty() });
                if let Some(d) = &t.function.description {
                    tool["description"] = json!(d);
                }
                tool
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
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
    if let Some(c) = choice {
        body.insert("tool_choice".into(), c);
    }
    Ok(())
}

/// Messages content blocks: every block is typed, a tool result is its own block.
struct Messages;

impl<'a> Dialect<'a> for Messages {
    // Anthropic rejects a message with empty content (e.g. an assistant turn with "").
    const DROPS_EMPTY_TURNS: bool = true;

    fn text(&self, text: &str) -> Value {
        json!({ "type": "text", "text": text })
    }

    fn image(&self, _i: usize, _j: usize, image: &ImageUrl) -> Result<Value, TranslateError> {
        Ok(match image.data_url() {
            Some((media_type, data)) => json!({ "type": "image",
                "source": { "type": "base64", "media_type": media_type, "data": data } }),
            None => json!({ "type": "image", "source": { "type": "url", "url": image.url } }),
        })
    }

    fn tool_call(&mut self, call: &'a ToolCall, input: Value) -> Value {
        json!({ "type": "tool_use", "id": call.id, "name": call.function.name, "input": input })
    }

    fn tool_result(&mut self, i: usize, m: &'a Message) -> Result<Value, TranslateError> {
        let id = m.answered_call_id(i)?;
        let text = m.tool_result_text(i)?;
        Ok(json!({ "type": "tool_result", "tool_use_id": id, "content": text }))
    }
}
