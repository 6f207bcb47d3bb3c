//! Whether a native request's last turn carries a tool result, in each
//! protocol's own shape: the turn a model answers in text once its tool has
//! answered (`tool_call`), and the one `fail_on_tool_result` fails.
//! OpenAI chat's (a last message of role `tool`) is read in `inference.rs`.

use serde_json::Value;

/// Anthropic Messages: the last message is the user's and holds a
/// `tool_result` block.
pub(super) fn anthropic(messages: Option<&Value>) -> bool {
    last_user_blocks(messages).any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
}

/// Bedrock Converse: the last message is the user's and holds a
/// `toolResult` block.
pub(super) fn bedrock(messages: Option<&Value>) -> bool {
    last_user_blocks(messages).any(|b| b.get("toolResult").is_some())
}

/// Gemini: the last content holds a `functionResponse` part (Google's
/// parser takes `function_response` too).
pub(super) fn gemini(contents: Option<&Value>) -> bool {
    let last = contents.and_then(Value::as_array).and_then(|c| c.last());
    let parts = last.and_then(|c| c.get("parts")).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    parts.iter().any(|p| p.get("functionResponse").or_else(|| p.get("function_response")).is_some())
}

/// Responses API: the last input item is a `function_call_output` or a
/// `custom_tool_call_output` (a string `input` is a user message).
pub(super) fn responses(input: &Value) -> bool {
    let last = input.as_array().and_then(|items| items.last());
    let kind = last.and_then(|item| item.get("type")).and_then(Value::as_str);
    matches!(kind, Some("function_call_output" | "custom_tool_call_output"))
}

/// The content blocks of the last message when it is the user's (none when
/// its content is a string).
fn last_user_blocks(messages: Option<&Value>) -> impl Iterator<Item = &Value> {
    let last = messages.and_then(Value::as_array).and_then(|m| m.last());
    let user = last.filter(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let blocks = user.and_then(|m| m.get("content")).and_then(Value::as_array);
    blocks.into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_last_turn_with_a_tool_result_counts() {
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]});
        let result = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "42"}, {"type": "text", "text": "go on"}]});
        assert!(anthropic(Some(&json!([{"role": "user", "content": "hi"}, call, result]))));
        assert!(!anthropic(Some(&json!([result, call]))), "a tool result earlier does not count");
        assert!(!anthropic(Some(&json!([{"role": "user", "content": "tool_result"}]))));
        assert!(!anthropic(None));

        let result =
            json!({"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "42"}]}}]});
        assert!(bedrock(Some(&json!([result]))));
        assert!(!bedrock(Some(&json!([result, {"role": "assistant", "content": [{"text": "ok"}]}]))));

        let response = json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]});
        assert!(gemini(Some(&json!([{"role": "user", "parts": [{"text": "hi"}]}, response]))));
        assert!(gemini(Some(&json!([{"parts": [{"function_response": {"name": "f"}}]}]))));
        assert!(!gemini(Some(&json!([response, {"role": "user", "parts": [{"text": "and?"}]}]))));

        assert!(responses(&json!([{"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "c", "output": "42"}])));
        assert!(responses(&json!([{"type": "custom_tool_call_output", "call_id": "c", "output": "ok"}])));
        assert!(!responses(&json!([{"type": "function_call_output", "call_id": "c", "output": "42"},
            {"role": "user", "content": "thanks"}])));
        assert!(!responses(&json!("function_call_output")));
    }
}
