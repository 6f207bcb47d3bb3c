//! Anthropic Messages and Claude on Vertex AI, in Anthropic's own framing.

use serde_json::{Value, json};
use sluice_chaos::Protocol;

use super::native::{names, parse_sse, read_body};
use super::{Headers, io_kind, start};

const MESSAGES: &str = "/v1/messages";
const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");
const VERTEX: &str = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4@1";

fn body(stream: bool) -> Value {
    json!({"model": "claude-opus-4", "max_tokens": 100, "stream": stream,
           "messages": [{"role": "user", "content": "hello there"}]})
}

fn tool_body(stream: bool) -> Value {
    let mut b = body(stream);
    b["tools"] = json!([{"name": "get_weather", "description": "d",
                         "input_schema": {"type": "object", "properties": {}}}]);
    b
}

fn text_of(events: &[super::native::Event]) -> String {
    events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .map(|e| e.data["delta"]["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn messages_answer_in_anthropic_shape_with_cache_usage() {
    let c = start().await;
    let h: Headers<'_> = &[VERSION, ("x-chaos-cache-read-tokens", "7"), ("x-chaos-cache-write-tokens", "3")];
    let (status, v) = c.call_json(MESSAGES, &body(false), h).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], "claude-opus-4");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][0]["text"], "The upstream said hello and ");
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 5);
    assert_eq!(v["usage"]["cache_read_input_tokens"], 7);
    assert_eq!(v["usage"]["cache_creation_input_tokens"], 3);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // max_tokens cuts the answer, as Anthropic's stop reason says.
    let mut short = body(false);
    short["max_tokens"] = json!(2);
    let (_, v) = c.call_json("/messages", &short, &[VERSION]).await;
    assert_eq!((v["stop_reason"].as_str(), v["usage"]["output_tokens"].as_u64()), (Some("max_tokens"), Some(2)));
    assert_eq!(c.state.requests_for(Protocol::Anthropic), 2);
}

#[tokio::test]
async fn stream_is_anthropic_sse_events() {
    let c = start().await;
    let (status, resp) = c.call(MESSAGES, &body(true), &[VERSION, ("x-chaos-chunks", "3")]).await;
    assert_eq!(status, 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let b = read_body(resp).await;
    b.end.unwrap();
    let events = parse_sse(&b.bytes);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for e in &events {
        assert_eq!(e.data["type"].as_str(), e.name.as_deref(), "data.type names the event");
    }
    assert_eq!(events[0].data["message"]["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(text_of(&events), "The upstream said ");
    assert_eq!(events[7].data["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[7].data["usage"]["output_tokens"], 3);
    // Without its end marker: no message_stop.
    let (_, resp) = c.call(MESSAGES, &body(true), &[VERSION, ("x-chaos-no-done", "true")]).await;
    let events = parse_sse(&read_body(resp).await.bytes);
    assert_eq!(names(&events).last(), Some(&"message_delta"));
}

#[tokio::test]
async fn errors_are_anthropic_shaped() {
    let c = start().await;
    let (status, resp) = c.call(MESSAGES, &body(false), &[VERSION, ("x-chaos-status", "529")]).await;
    assert_eq!(status, 529);
    assert_eq!(resp.headers()["request-id"], "req_chaos");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"], json!({"type": "overloaded_error", "message": "Overloaded"}));

    let h: Headers<'_> = &[VERSION, ("x-chaos-status", "429"), ("x-chaos-retry-after", "7")];
    let (status, resp) = c.call(MESSAGES, &body(true), h).await;
    assert_eq!((status, resp.headers()["retry-after"].to_str().unwrap()), (429, "7"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");

    let h: Headers<'_> = &[VERSION, ("x-chaos-status", "400"), ("x-chaos-error-code", "context_length_exceeded")];
    let (status, v) = c.call_json(MESSAGES, &body(false), h).await;
    assert_eq!((status, v["error"]["type"].as_str()), (400, Some("invalid_request_error")));
    assert!(v["error"]["message"].as_str().unwrap().starts_with("prompt is too long"));

    // What Anthropic itself refuses.
    let mut no_max = body(false);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let (status, v) = c.call_json(MESSAGES, &no_max, &[VERSION]).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"], json!({"type": "invalid_request_error", "message": "max_tokens: Field required"}));
    let (status, v) = c.call_json(MESSAGES, &body(false), &[]).await;
    assert_eq!((status, v["error"]["message"].as_str()), (400, Some("anthropic-version: header is required")));
    let mut extra = body(true);
    extra["stream_options"] = json!({"include_usage": true});
    let (status, v) = c.call_json(MESSAGES, &extra, &[VERSION]).await;
    assert_eq!((status, v["error"]["message"].as_str()), (400, Some("stream_options: Extra inputs are not permitted")));
}

#[tokio::test]
async fn error_event_comes_before_or_after_content() {
    let c = start().await;
    let h: Headers<'_> = &[VERSION, ("x-chaos-error-after-chunks", "0")];
    let (status, resp) = c.call(MESSAGES, &body(true), h).await;
    assert_eq!(status, 200);
    let events = parse_sse(&read_body(resp).await.bytes);
    assert_eq!(names(&events), ["message_start", "content_block_start", "ping", "error"]);
    assert_eq!(events[3].data["error"], json!({"type": "overloaded_error", "message": "Overloaded"}));

    let h: Headers<'_> = &[VERSION, ("x-chaos-error-after-chunks", "2"), ("x-chaos-error-code", "api_error")];
    let (_, resp) = c.call(MESSAGES, &body(true), h).await;
    let b = read_body(resp).await;
    b.end.unwrap();
    let events = parse_sse(&b.bytes);
    assert_eq!(names(&events)[3..], ["content_block_delta", "content_block_delta", "error"]);
    assert_eq!(events[5].data["error"]["type"], "api_error");
}

#[tokio::test]
async fn resets_and_malformed_events_work_as_for_openai() {
    let c = start().await;
    let h: Headers<'_> = &[VERSION, ("x-chaos-reset-after-chunks", "2")];
    let (_, resp) = c.call(MESSAGES, &body(true), h).await;
    let b = read_body(resp).await;
    let err = b.end.unwrap_err();
    assert!(io_kind(&err).is_some() || err.is_body() || err.is_decode(), "{err:?}");
    let text = String::from_utf8(b.bytes).unwrap();
    assert_eq!(text.matches("event: content_block_delta").count(), 2, "{text}");

    let h: Headers<'_> = &[VERSION, ("x-chaos-malformed-chunk", "4")];
    let (_, resp) = c.call(MESSAGES, &body(true), h).await;
    let text = String::from_utf8(read_body(resp).await.bytes).unwrap();
    assert!(text.contains("event: content_block_delta\ndata: {not json\n\n"), "{text}");
}

#[tokio::test]
async fn tool_calls_are_tool_use_blocks() {
    let c = start().await;
    let h: Headers<'_> = &[VERSION, ("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "2")];
    let (_, resp) = c.call(MESSAGES, &tool_body(true), h).await;
    let events = parse_sse(&read_body(resp).await.bytes);
    let block = &events[1].data["content_block"];
    assert_eq!((block["type"].as_str(), block["name"].as_str()), (Some("tool_use"), Some("get_weather")));
    let args: String = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .map(|e| {
            assert_eq!(e.data["delta"]["type"], "input_json_delta");
            e.data["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    let args: Value = serde_json::from_str(&args).unwrap();
    assert_eq!(args, json!({"query": "The upstream "}));
    let delta = events.iter().find(|e| e.name.as_deref() == Some("message_delta")).unwrap();
    assert_eq!(delta.data["delta"]["stop_reason"], "tool_use");

    // No arguments: no input_json_delta at all, and `{}` when not streamed.
    let h: Headers<'_> = &[VERSION, ("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "0")];
    let (_, resp) = c.call(MESSAGES, &tool_body(true), h).await;
    let events = parse_sse(&read_body(resp).await.bytes);
    assert!(!names(&events).contains(&"content_block_delta"));
    let (_, v) = c.call_json(MESSAGES, &tool_body(false), h).await;
    assert_eq!(v["content"][0]["input"], json!({}));
    // A tool the request does not declare is never called.
    let (_, v) = c.call_json(MESSAGES, &body(false), h).await;
    assert_eq!(v["content"][0]["type"], "text");
}

#[tokio::test]
async fn vertex_wants_its_version_tag_and_no_model() {
    let c = start().await;
    let vertex = |stream: bool| {
        json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 50, "stream": stream,
               "messages": [{"role": "user", "content": "hi"}]})
    };
    let (status, v) = c.call_json(&format!("{VERTEX}:rawPredict"), &vertex(false), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["type"].as_str(), v["model"].as_str()), (Some("message"), Some("claude-opus-4@1")));

    let (status, resp) = c.call(&format!("{VERTEX}:streamRawPredict"), &vertex(true), &[]).await;
    assert_eq!(status, 200);
    let events = parse_sse(&read_body(resp).await.bytes);
    assert_eq!(names(&events).last(), Some(&"message_stop"));

    let mut with_model = vertex(false);
    with_model["model"] = json!("claude-opus-4");
    let (status, v) = c.call_json(&format!("{VERTEX}:rawPredict"), &with_model, &[]).await;
    assert_eq!((status, v["error"]["message"].as_str()), (400, Some("model: Extra inputs are not permitted")));
    let mut untagged = vertex(false);
    untagged.as_object_mut().unwrap().remove("anthropic_version");
    let (status, _) = c.call_json(&format!("{VERTEX}:rawPredict"), &untagged, &[]).await;
    assert_eq!(status, 400);
    // Quota errors come in Google's shape on Vertex; overload in Anthropic's.
    let (status, v) = c.call_json(&format!("{VERTEX}:rawPredict"), &vertex(false), &[("x-chaos-status", "429")]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (429, Some("RESOURCE_EXHAUSTED")));
    let (status, v) = c.call_json(&format!("{VERTEX}:rawPredict"), &vertex(false), &[("x-chaos-status", "529")]).await;
    assert_eq!((status, v["error"]["type"].as_str()), (529, Some("overloaded_error")));
    assert_eq!(c.state.requests_for(Protocol::VertexAnthropic), 6);
}

#[tokio::test]
async fn a_request_with_the_web_search_tool_searches_then_cites_its_result() {
    let c = start().await;
    let mut searching = body(false);
    searching["tools"] = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    let (status, v) = c.call_json(MESSAGES, &searching, &[VERSION]).await;
    assert_eq!(status, 200, "{v}");
    let kinds: Vec<&str> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["server_tool_use", "web_search_tool_result", "text"]);
    assert_eq!(v["content"][1]["tool_use_id"], v["content"][0]["id"]);
    let result_url = &v["content"][1]["content"][0]["url"];
    assert_eq!(&v["content"][2]["citations"][0]["url"], result_url);
    assert_eq!(v["content"][2]["citations"][0]["type"], "web_search_result_location");
    assert_eq!(v["usage"]["server_tool_use"]["web_search_requests"], 1);

    // On Vertex AI too, streamed.
    searching["stream"] = json!(true);
    searching["anthropic_version"] = json!("vertex-2023-10-16");
    searching.as_object_mut().unwrap().remove("model");
    let (_, resp) = c.call(&format!("{VERTEX}:streamRawPredict"), &searching, &[]).await;
    let b = read_body(resp).await;
    b.end.unwrap();
    let events = parse_sse(&b.bytes);
    let starts: Vec<&str> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_start"))
        .map(|e| e.data["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(starts, ["server_tool_use", "web_search_tool_result", "text"]);
    let citation = events.iter().find(|e| e.data["delta"]["type"] == "citations_delta").expect("a citations_delta");
    assert_eq!((&citation.data["index"], &citation.data["delta"]["citation"]["url"]), (&json!(2), result_url));
    assert_eq!(events.iter().filter(|e| e.data["delta"]["type"] == "text_delta").count(), 5);
    assert_eq!(c.state.counters().web_searches, 2);
    // Without the tool nothing is searched.
    c.call_json(MESSAGES, &body(false), &[VERSION]).await;
    assert_eq!(c.state.counters().web_searches, 2);
}
