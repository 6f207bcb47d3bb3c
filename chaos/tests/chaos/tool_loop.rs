//! The agent's tool loop in every protocol family: request 1 declares a tool
//! and gets a call to it with the scripted arguments (`tool_arguments`);
//! request 2 carries the tool's result and gets text, though it declares the
//! tool too; `fail_on_tool_result` fails request 2 only, in the protocol's
//! own error shape, counted by status like any scripted failure.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::native::{aws_error_type, decode_frames, parse_sse, read_body};
use super::{CHAT, Chaos, Headers, start};

/// The scripted arguments, as an agent's tool wants them.
const ARGS: &str = r#"{"command": ["ls", "-l"], "path": "src/é.rs", "limit": 2}"#;
const TOOL: (&str, &str) = ("x-chaos-tool-call", "get_weather");
const ARGUMENTS: (&str, &str) = ("x-chaos-tool-arguments", ARGS);
const CHUNKS: (&str, &str) = ("x-chaos-chunks", "3");
const FAIL: (&str, &str) = ("x-chaos-fail-on-tool-result", "true");
const ANTHROPIC_VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

fn args() -> Value {
    serde_json::from_str(ARGS).unwrap()
}

/// `{200: ok, status: failed}`: the first request answered, the second failed.
fn one_each(c: &Chaos, status: u16) {
    assert_eq!(c.state.counters().by_status, BTreeMap::from([(200, 1), (status, 1)]));
}

mod openai_chat {
    use super::*;

    fn first(stream: bool) -> Value {
        json!({"model": "gpt-test", "stream": stream,
               "messages": [{"role": "user", "content": "weather?"}],
               "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})
    }

    fn follow_up(stream: bool) -> Value {
        let mut b = first(stream);
        let messages = b["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
        b
    }

    #[tokio::test]
    async fn tool_call_carries_the_scripted_arguments() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        let s = c.stream(&first(true), h).await;
        s.end.as_ref().unwrap();
        let events = s.json();
        assert_eq!(events.len(), 4, "3 argument pieces + finish: {:?}", s.texts());
        let opening = &events[0]["choices"][0]["delta"];
        assert_eq!(opening["role"], "assistant");
        let call = &opening["tool_calls"][0];
        assert_eq!((call["id"].as_str(), call["type"].as_str()), (Some("call_chaos_1"), Some("function")));
        assert_eq!(call["function"]["name"], "get_weather");
        let streamed: String = events[..3]
            .iter()
            .map(|e| e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, ARGS);
        assert_eq!(events[3]["choices"][0]["finish_reason"], "tool_calls");

        let v = c.send(CHAT, &first(false), h).await.unwrap().json::<Value>().await.unwrap();
        let choice = &v["choices"][0];
        assert_eq!((&choice["finish_reason"], &choice["message"]["content"]), (&json!("tool_calls"), &Value::Null));
        assert_eq!(choice["message"]["tool_calls"][0]["function"]["arguments"], ARGS);
        assert_eq!(v["usage"]["completion_tokens"], 3, "output tokens are still the chunks");
        // Unset arguments: today's `{"query": …}`; no chunk: the call opens in the finish chunk.
        let v = c.send(CHAT, &first(false), &[TOOL, CHUNKS]).await.unwrap().json::<Value>().await.unwrap();
        let sent = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(sent).unwrap(), json!({"query": "The upstream said "}));
        let s = c.stream(&first(true), &[TOOL, ("x-chaos-chunks", "0")]).await;
        let finish = &s.json()[0]["choices"][0];
        assert_eq!(finish["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(finish["finish_reason"], "tool_calls");
    }

    #[tokio::test]
    async fn a_tool_result_is_answered_in_text() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        let v = c.send(CHAT, &follow_up(false), h).await.unwrap().json::<Value>().await.unwrap();
        let choice = &v["choices"][0];
        assert_eq!(
            (&choice["message"]["content"], &choice["finish_reason"]),
            (&json!("The upstream said "), &json!("stop"))
        );
        assert!(choice["message"].get("tool_calls").is_none());
        let s = c.stream(&follow_up(true), h).await;
        assert_eq!(s.json()[0]["choices"][0]["delta"]["content"], "The ");
    }

    #[tokio::test]
    async fn fail_on_tool_result_fails_only_the_follow_up() {
        let c = start().await;
        // The default script, with the arguments given as the object itself.
        let script =
            json!({"tool_call": "get_weather", "tool_arguments": args(), "fail_on_tool_result": true, "status": 429});
        assert_eq!(c.control(&script.to_string()).await.0, 200);
        let resp = c.send(CHAT, &first(false), &[]).await.unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        let sent = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(sent).unwrap(), args());
        let resp = c.send(CHAT, &follow_up(true), &[]).await.unwrap();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["content-type"], "application/json", "a JSON error, not a stream");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        one_each(&c, 429);
    }
}

mod responses {
    use super::*;

    const RESPONSES: &str = "/v1/responses";

    fn first(stream: bool) -> Value {
        json!({"model": "gpt-5", "stream": stream,
               "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]}],
               "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})
    }

    fn follow_up(output_type: &str) -> Value {
        let mut b = first(false);
        let input = b["input"].as_array_mut().unwrap();
        input.push(json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ARGS}));
        input.push(json!({"type": output_type, "call_id": "call_1", "output": "sunny"}));
        b
    }

    #[tokio::test]
    async fn tool_call_carries_the_scripted_arguments() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        let (status, resp) = c.call(RESPONSES, &first(true), h).await;
        assert_eq!(status, 200);
        let events = parse_sse(&read_body(resp).await.bytes);
        let deltas: Vec<&str> = events
            .iter()
            .filter(|e| e.name.as_deref() == Some("response.function_call_arguments.delta"))
            .map(|e| e.data["delta"].as_str().unwrap())
            .collect();
        assert_eq!((deltas.len(), deltas.concat()), (3, ARGS.to_owned()));
        let done = events.iter().find(|e| e.name.as_deref() == Some("response.function_call_arguments.done"));
        assert_eq!(done.unwrap().data["arguments"], ARGS);

        let (_, v) = c.call_json(RESPONSES, &first(false), h).await;
        assert_eq!((&v["output"][0]["type"], &v["output"][0]["arguments"]), (&json!("function_call"), &json!(ARGS)));
        assert_eq!(v["usage"]["output_tokens"], 3);
    }

    #[tokio::test]
    async fn a_tool_result_is_answered_in_text() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        for output in ["function_call_output", "custom_tool_call_output"] {
            let (status, v) = c.call_json(RESPONSES, &follow_up(output), h).await;
            assert_eq!(status, 200, "{v}");
            let item = &v["output"][0];
            assert_eq!((&item["type"], &item["content"][0]["text"]), (&json!("message"), &json!("The upstream said ")));
        }
    }

    #[tokio::test]
    async fn fail_on_tool_result_fails_only_the_follow_up() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, FAIL];
        let (status, v) = c.call_json(RESPONSES, &first(false), h).await;
        assert_eq!((status, &v["output"][0]["type"]), (200, &json!("function_call")));
        let (status, v) = c.call_json(RESPONSES, &follow_up("function_call_output"), h).await;
        assert_eq!((status, &v["error"]["code"]), (503, &json!("service_unavailable")), "503 without a status");
        one_each(&c, 503);
    }
}

mod anthropic {
    use super::*;

    const MESSAGES: &str = "/v1/messages";
    const VERTEX: &str = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude@1:rawPredict";

    fn first(stream: bool) -> Value {
        json!({"model": "claude-opus-4", "max_tokens": 100, "stream": stream,
               "messages": [{"role": "user", "content": "weather?"}],
               "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]})
    }

    fn follow_up() -> Value {
        let mut b = first(false);
        let messages = b["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": args()}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "text", "text": "<system-reminder>be brief</system-reminder>"}]}));
        b
    }

    /// The same body for Claude on Vertex AI: its version tag, no `model`.
    /// The count request of a conversation: no `max_tokens` or `stream`, which a count
    /// refuses.
    fn to_count(mut b: Value) -> Value {
        let map = b.as_object_mut().unwrap();
        map.remove("max_tokens");
        map.remove("stream");
        b
    }

    fn on_vertex(mut b: Value) -> Value {
        let map = b.as_object_mut().unwrap();
        map.remove("model");
        map.insert("anthropic_version".to_owned(), json!("vertex-2023-10-16"));
        b
    }

    #[tokio::test]
    async fn tool_call_carries_the_scripted_arguments() {
        let c = start().await;
        let h: Headers<'_> = &[ANTHROPIC_VERSION, TOOL, ARGUMENTS, CHUNKS];
        let (_, resp) = c.call(MESSAGES, &first(true), h).await;
        let events = parse_sse(&read_body(resp).await.bytes);
        let pieces: Vec<&str> = events
            .iter()
            .filter(|e| e.name.as_deref() == Some("content_block_delta"))
            .map(|e| e.data["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!((pieces.len(), pieces.concat()), (3, ARGS.to_owned()));

        let (_, v) = c.call_json(MESSAGES, &first(false), h).await;
        assert_eq!((&v["content"][0]["type"], &v["content"][0]["input"]), (&json!("tool_use"), &args()));
        assert_eq!((&v["stop_reason"], &v["usage"]["output_tokens"]), (&json!("tool_use"), &json!(3)));
        let (_, v) = c.call_json(VERTEX, &on_vertex(first(false)), h).await;
        assert_eq!(v["content"][0]["input"], args());
    }

    #[tokio::test]
    async fn a_tool_result_is_answered_in_text() {
        let c = start().await;
        let h: Headers<'_> = &[ANTHROPIC_VERSION, TOOL, ARGUMENTS, CHUNKS];
        for (path, body) in [(MESSAGES, follow_up()), (VERTEX, on_vertex(follow_up()))] {
            let (status, v) = c.call_json(path, &body, h).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(
                (&v["content"][0]["text"], &v["stop_reason"]),
                (&json!("The upstream said "), &json!("end_turn"))
            );
        }
    }

    #[tokio::test]
    async fn fail_on_tool_result_fails_only_the_follow_up() {
        let c = start().await;
        let h: Headers<'_> = &[ANTHROPIC_VERSION, TOOL, FAIL, ("x-chaos-status", "529")];
        let (status, v) = c.call_json(MESSAGES, &first(false), h).await;
        assert_eq!((status, &v["content"][0]["type"]), (200, &json!("tool_use")));
        let (status, v) = c.call_json(MESSAGES, &follow_up(), h).await;
        assert_eq!((status, &v["error"]["type"]), (529, &json!("overloaded_error")));
        one_each(&c, 529);
        // count_tokens of the same conversation fails the same way (and is not counted).
        let (status, _) = c.call_json("/v1/messages/count_tokens", &to_count(follow_up()), h).await;
        assert_eq!(status, 529);
        let (status, v) = c.call_json("/v1/messages/count_tokens", &to_count(first(false)), h).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(c.state.requests(), 2);
    }
}

mod gemini {
    use super::*;

    const MODEL: &str = "/v1beta/models/gemini-2.5-pro";
    const VERTEX: &str = "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro";

    fn first() -> Value {
        json!({"contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
               "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]})
    }

    fn follow_up() -> Value {
        let mut b = first();
        let contents = b["contents"].as_array_mut().unwrap();
        contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": args()}}]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}]}));
        b
    }

    #[tokio::test]
    async fn tool_call_carries_the_scripted_arguments_whole() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        let (_, resp) = c.call(&format!("{MODEL}:streamGenerateContent?alt=sse"), &first(), h).await;
        let chunks: Vec<Value> = parse_sse(&read_body(resp).await.bytes).into_iter().map(|e| e.data).collect();
        let calls: Vec<&Value> =
            chunks.iter().filter_map(|c| c["candidates"][0]["content"]["parts"][0].get("functionCall")).collect();
        assert_eq!(calls.len(), 1, "a function call comes whole");
        assert_eq!((&calls[0]["name"], &calls[0]["args"]), (&json!("get_weather"), &args()));
        assert_eq!(chunks.last().unwrap()["usageMetadata"]["candidatesTokenCount"], 3);

        let (_, v) = c.call_json(&format!("{VERTEX}:generateContent"), &first(), h).await;
        assert_eq!(v["candidates"][0]["content"]["parts"][0]["functionCall"]["args"], args());
    }

    #[tokio::test]
    async fn a_tool_result_is_answered_in_text() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        for path in [MODEL, VERTEX] {
            let (status, v) = c.call_json(&format!("{path}:generateContent"), &follow_up(), h).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "The upstream said ");
        }
    }

    #[tokio::test]
    async fn fail_on_tool_result_fails_only_the_follow_up() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, FAIL, ("x-chaos-status", "429")];
        let (status, _) = c.call_json(&format!("{MODEL}:generateContent"), &first(), h).await;
        assert_eq!(status, 200);
        let (status, v) = c.call_json(&format!("{MODEL}:streamGenerateContent?alt=sse"), &follow_up(), h).await;
        assert_eq!((status, &v["error"]["status"]), (429, &json!("RESOURCE_EXHAUSTED")));
        one_each(&c, 429);
    }
}

mod bedrock {
    use super::*;

    const MODEL: &str = "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0";

    fn first() -> Value {
        json!({"messages": [{"role": "user", "content": [{"text": "weather?"}]}],
               "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]}})
    }

    fn follow_up() -> Value {
        let mut b = first();
        let messages = b["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": args()}}]}));
        messages.push(json!({"role": "user", "content": [
            {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "sunny"}]}}]}));
        b
    }

    #[tokio::test]
    async fn tool_call_carries_the_scripted_arguments() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, ARGUMENTS, CHUNKS];
        let (_, resp) = c.call(&format!("{MODEL}/converse-stream"), &first(), h).await;
        let frames = decode_frames(&read_body(resp).await.bytes);
        let pieces: String = frames
            .iter()
            .filter(|f| f.kind() == "contentBlockDelta")
            .map(|f| f.json()["delta"]["toolUse"]["input"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(pieces, ARGS);
        let (_, v) = c.call_json(&format!("{MODEL}/converse"), &first(), h).await;
        assert_eq!(v["output"]["message"]["content"][0]["toolUse"]["input"], args());
        assert_eq!((&v["stopReason"], &v["usage"]["outputTokens"]), (&json!("tool_use"), &json!(3)));
    }

    #[tokio::test]
    async fn a_tool_result_is_answered_in_text() {
        let c = start().await;
        let (status, v) = c.call_json(&format!("{MODEL}/converse"), &follow_up(), &[TOOL, ARGUMENTS, CHUNKS]).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["output"]["message"]["content"][0]["text"], "The upstream said ");
        assert_eq!(v["stopReason"], "end_turn");
    }

    #[tokio::test]
    async fn fail_on_tool_result_fails_only_the_follow_up() {
        let c = start().await;
        let h: Headers<'_> = &[TOOL, FAIL];
        let (status, _) = c.call_json(&format!("{MODEL}/converse"), &first(), h).await;
        assert_eq!(status, 200);
        let (status, resp) = c.call(&format!("{MODEL}/converse-stream"), &follow_up(), h).await;
        assert_eq!(status, 503);
        assert!(aws_error_type(&resp).starts_with("ServiceUnavailableException:"), "{}", aws_error_type(&resp));
        one_each(&c, 503);
    }
}
