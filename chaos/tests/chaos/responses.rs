//! OpenAI's Responses API (`/v1/responses`), counted under `openai`: the
//! `response` object, its named SSE events numbered by `sequence_number`,
//! function calls, refusals naming the member, and the scripted faults.

use std::time::Instant;

use serde_json::{Value, json};
use sluice_chaos::{ChaosAuth, Protocol};

use super::native::{Event, names, parse_sse, read_body};
use super::{Headers, MS, io_kind, read_events, start};

const RESPONSES: &str = "/v1/responses";

fn body(stream: bool) -> Value {
    json!({"model": "gpt-5", "stream": stream, "instructions": "Be brief.",
           "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello there"}]}]})
}

fn tool_body(stream: bool) -> Value {
    let mut b = body(stream);
    b["tools"] = json!([{"type": "function", "name": "get_weather", "description": "d",
                         "parameters": {"type": "object", "properties": {}}, "strict": true}]);
    b
}

/// Each event's `data.type` names it; `sequence_number` counts from 0.
fn check_numbering(events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.data["type"].as_str(), e.name.as_deref(), "data.type names the event");
        assert_eq!(e.data["sequence_number"], json!(i), "{e:?}");
    }
}

/// The events of a streamed answer, which must end cleanly.
async fn stream(c: &super::Chaos, body: &Value, h: Headers<'_>) -> Vec<Event> {
    let (status, resp) = c.call(RESPONSES, body, h).await;
    assert_eq!(status, 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let b = read_body(resp).await;
    b.end.unwrap();
    assert!(!String::from_utf8_lossy(&b.bytes).contains("[DONE]"), "no [DONE] in the Responses API");
    let events = parse_sse(&b.bytes);
    check_numbering(&events);
    events
}

#[tokio::test]
async fn answer_is_a_response_object_with_cached_usage() {
    let c = start().await;
    let (status, v) = c.call_json(RESPONSES, &body(false), &[("x-chaos-cache-read-tokens", "7")]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")));
    assert_eq!(v["model"], "gpt-5");
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("resp_chaos_"), "{id}");
    assert!(v["created_at"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!((&v["error"], &v["incomplete_details"]), (&Value::Null, &Value::Null));
    assert_eq!(v["instructions"], "Be brief.", "the request's settings are repeated");
    let seq = id.trim_start_matches("resp_chaos_");
    assert_eq!(
        v["output"],
        json!([{"id": format!("msg_chaos_{seq}"), "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "The upstream said hello and ",
                             "annotations": [], "logprobs": []}]}])
    );
    // "Be brief." + "user" + "input_text" + "hello there" = 34 bytes → 9 tokens, plus 7 cached.
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 16, "input_tokens_details": {"cached_tokens": 7}, "output_tokens": 5,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 21})
    );

    // The un-prefixed twin, input as a string: OpenAI's defaults.
    let (status, v) = c.call_json("/responses", &json!({"model": "m", "input": "hi"}), &[]).await;
    assert_eq!(status, 200, "{v}");
    for (key, want) in [
        ("instructions", json!(null)),
        ("max_output_tokens", json!(null)),
        ("parallel_tool_calls", json!(true)),
        ("previous_response_id", json!(null)),
        ("reasoning", json!({"effort": null, "summary": null})),
        ("store", json!(false)),
        ("temperature", json!(1.0)),
        ("text", json!({"format": {"type": "text"}})),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("top_p", json!(1.0)),
        ("truncation", json!("disabled")),
        ("user", json!(null)),
        ("metadata", json!({})),
    ] {
        assert_eq!(v[key], want, "{key}");
    }
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(c.state.requests_for(Protocol::OpenAi), 2);
    assert_eq!(c.state.counters().by_protocol.len(), 1, "counted under openai only");
}

#[tokio::test]
async fn stream_is_named_events_numbered_in_sequence() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-chunks", "3"), ("x-chaos-cache-read-tokens", "2")];
    let events = stream(&c, &body(true), h).await;
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &events[0].data["response"];
    assert_eq!((created["status"].as_str(), &created["output"]), (Some("in_progress"), &json!([])));
    assert_eq!(created["usage"], Value::Null);
    let added = &events[2].data;
    assert_eq!(added["output_index"], 0);
    assert_eq!((added["item"]["status"].as_str(), &added["item"]["content"]), (Some("in_progress"), &json!([])));
    let item_id = added["item"]["id"].as_str().unwrap();
    assert_eq!(events[3].data["part"], json!({"type": "output_text", "text": "", "annotations": []}));
    let mut text = String::new();
    for e in &events[4..7] {
        assert_eq!((e.data["item_id"].as_str(), &e.data["content_index"]), (Some(item_id), &json!(0)));
        text.push_str(e.data["delta"].as_str().unwrap());
    }
    assert_eq!(text, "The upstream said ");
    assert_eq!(events[7].data["text"], text);
    assert_eq!(events[8].data["part"]["text"], text);
    let item = &events[9].data["item"];
    assert_eq!((item["status"].as_str(), &item["content"][0]["text"]), (Some("completed"), &json!(text)));
    let done = &events[10].data["response"];
    assert_eq!((done["status"].as_str(), &done["id"]), (Some("completed"), &created["id"]));
    assert_eq!(done["output"], json!([item]));
    let usage = &done["usage"];
    assert_eq!((&usage["output_tokens"], &usage["input_tokens_details"]["cached_tokens"]), (&json!(3), &json!(2)));
    let input = usage["input_tokens"].as_u64().unwrap();
    assert!(input > 2, "input_tokens includes the cached ones");
    assert_eq!(usage["total_tokens"], input + 3);

    // Without its end marker: no response.completed.
    let events = stream(&c, &body(true), &[("x-chaos-no-done", "true")]).await;
    assert_eq!(names(&events).last(), Some(&"response.output_item.done"));
}

#[tokio::test]
async fn opening_events_come_at_once_and_content_after_the_first_byte_delay() {
    let c = start().await;
    let t0 = Instant::now();
    let resp = c.send(RESPONSES, &body(true), &[("x-chaos-first-byte-ms", "400")]).await.unwrap();
    assert!(t0.elapsed() < MS(300), "stream headers came after {:?}", t0.elapsed());
    let s = read_events(resp, t0).await;
    s.end.unwrap();
    let delta = s.events.iter().position(|(_, e)| e.starts_with("event: response.output_text.delta")).unwrap();
    assert_eq!(delta, 4, "four opening events");
    assert!(s.events[3].0 < MS(300), "opening events at {:?}", s.events[3].0);
    assert!(s.events[4].0 >= MS(380), "first delta at {:?}", s.events[4].0);
}

#[tokio::test]
async fn tool_calls_are_function_call_items() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "2")];
    let events = stream(&c, &tool_body(true), h).await;
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &events[2].data["item"];
    assert_eq!((added["type"].as_str(), added["name"].as_str()), (Some("function_call"), Some("get_weather")));
    assert_eq!((added["status"].as_str(), added["arguments"].as_str()), (Some("in_progress"), Some("")));
    assert!(added["call_id"].as_str().unwrap().starts_with("call_chaos_"));
    assert!(added["id"].as_str().unwrap().starts_with("fc_chaos_"));
    let args: String = events[3..5].iter().map(|e| e.data["delta"].as_str().unwrap()).collect();
    assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"query": "The upstream "}));
    assert_eq!(
        (events[5].data["arguments"].as_str(), events[5].data["name"].as_str()),
        (Some(&*args), Some("get_weather"))
    );
    let done = &events[7].data["response"];
    assert_eq!(done["output"][0]["arguments"], args);
    assert_eq!(done["output"][0]["call_id"], added["call_id"]);

    let (_, v) = c.call_json(RESPONSES, &tool_body(false), h).await;
    let item = &v["output"][0];
    assert_eq!((item["type"].as_str(), item["status"].as_str()), (Some("function_call"), Some("completed")));
    assert_eq!(item["arguments"], r#"{"query": "The upstream "}"#);
    assert_eq!(v["tools"][0]["name"], "get_weather", "tools are repeated");
    // No arguments: `{}`, and no delta at all.
    let h: Headers<'_> = &[("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "0")];
    let (_, v) = c.call_json(RESPONSES, &tool_body(false), h).await;
    assert_eq!(v["output"][0]["arguments"], "{}");
    let events = stream(&c, &tool_body(true), h).await;
    assert!(!names(&events).contains(&"response.function_call_arguments.delta"));
    // A tool the request does not declare is never called.
    let (_, v) = c.call_json(RESPONSES, &body(false), h).await;
    assert_eq!(v["output"][0]["type"], "message");
}

#[tokio::test]
async fn unknown_members_and_missing_ones_are_refused_naming_them() {
    let c = start().await;
    let unknown = |key: &str| {
        json!({"error": {"message": format!("Unknown parameter: '{key}'."), "type": "invalid_request_error",
                         "param": key, "code": "unknown_parameter"}})
    };
    let mut extra = body(false);
    extra["x"] = json!(1);
    assert_eq!(c.call_json(RESPONSES, &extra, &[]).await, (400, unknown("x")));
    let mut chat_max = body(false);
    chat_max["max_tokens"] = json!(10);
    assert_eq!(c.call_json(RESPONSES, &chat_max, &[]).await, (400, unknown("max_tokens")));

    for missing in ["model", "input"] {
        let mut b = body(false);
        b.as_object_mut().unwrap().remove(missing);
        let (status, v) = c.call_json(RESPONSES, &b, &[]).await;
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some(missing)));
        assert_eq!(v["error"]["code"], "missing_required_parameter");
        assert_eq!(v["error"]["message"], format!("Missing required parameter: '{missing}'."));
    }
    // A chat-shaped tool and a chat-shaped content part.
    let mut b = body(false);
    b["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    let (status, v) = c.call_json(RESPONSES, &b, &[]).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("tools[0].name")));
    let mut b = body(false);
    b["input"][0]["content"][0]["type"] = json!("text");
    let (status, v) = c.call_json(RESPONSES, &b, &[]).await;
    assert_eq!((status, v["error"]["code"].as_str()), (400, Some("invalid_value")));
    assert_eq!(v["error"]["param"], "input[0].content[0].type");
    assert_eq!(c.state.requests_with_status(400), 6);
    assert_eq!(c.state.requests_for(Protocol::OpenAi), 6);
}

#[tokio::test]
async fn max_output_tokens_makes_the_answer_incomplete() {
    let c = start().await;
    let mut b = body(false);
    b["max_output_tokens"] = json!(2);
    let (status, v) = c.call_json(RESPONSES, &b, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["status"].as_str(), &v["incomplete_details"]),
        (Some("incomplete"), &json!({"reason": "max_output_tokens"}))
    );
    assert_eq!((&v["max_output_tokens"], &v["usage"]["output_tokens"]), (&json!(2), &json!(2)));
    assert_eq!(v["output"][0]["status"], "incomplete");
    assert_eq!(v["output"][0]["content"][0]["text"], "The upstream ");
    // A bound above the answer changes nothing.
    b["max_output_tokens"] = json!(64);
    assert_eq!(c.call_json(RESPONSES, &b, &[]).await.1["status"], "completed");

    b["max_output_tokens"] = json!(2);
    b["stream"] = json!(true);
    let events = stream(&c, &b, &[]).await;
    assert_eq!(names(&events).iter().filter(|n| **n == "response.output_text.delta").count(), 2);
    let last = events.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("response.incomplete"));
    assert_eq!(last.data["response"]["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(last.data["response"]["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn scripted_errors_are_openai_shaped() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-status", "429"), ("x-chaos-retry-after", "7")];
    let (status, resp) = c.call(RESPONSES, &body(false), h).await;
    assert_eq!((status, resp.headers()["retry-after"].to_str().unwrap()), (429, "7"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (Some("rate_limit_error"), Some("rate_limit_exceeded"))
    );

    // A failing streamed request gets a JSON error, not a stream.
    let (status, resp) = c.call(RESPONSES, &body(true), &[("x-chaos-status", "500")]).await;
    assert_eq!((status, resp.headers()["content-type"].to_str().unwrap()), (500, "application/json"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!((v["error"]["type"].as_str(), v["error"]["code"].as_str()), (Some("api_error"), Some("server_error")));
    assert_eq!((c.state.requests_with_status(429), c.state.requests_with_status(500)), (1, 1));
}

#[tokio::test]
async fn in_stream_errors_are_response_failed() {
    let c = start().await;
    let events = stream(&c, &body(true), &[("x-chaos-error-after-chunks", "0")]).await;
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.failed"
        ]
    );
    let failed = &events[4].data["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "server_error");
    assert!(failed["error"]["message"].as_str().unwrap().contains("server had an error"));

    let h: Headers<'_> = &[("x-chaos-error-after-chunks", "2"), ("x-chaos-error-code", "rate_limit_exceeded")];
    let events = stream(&c, &body(true), h).await;
    assert_eq!(names(&events)[4..], ["response.output_text.delta", "response.output_text.delta", "response.failed"]);
    assert_eq!(events[6].data["response"]["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn resets_malformed_events_and_the_bearer_key_work_as_for_chat() {
    let c = start().await;
    let (_, resp) = c.call(RESPONSES, &body(true), &[("x-chaos-reset-after-chunks", "2")]).await;
    let b = read_body(resp).await;
    let err = b.end.unwrap_err();
    assert!(io_kind(&err).is_some() || err.is_body() || err.is_decode(), "{err:?}");
    let text = String::from_utf8(b.bytes).unwrap();
    assert_eq!(text.matches("event: response.output_text.delta").count(), 2, "{text}");

    let (_, resp) = c.call(RESPONSES, &body(true), &[("x-chaos-malformed-chunk", "5")]).await;
    let text = String::from_utf8(read_body(resp).await.bytes).unwrap();
    let fifth = text.split("\n\n").nth(4).unwrap();
    assert_eq!(fifth, "event: response.output_text.delta\ndata: {not json");
    assert!(text.contains(r#""sequence_number":5"#), "numbering goes on after it");

    c.state.set_auth(ChaosAuth { api_key: Some("sk-chaos".to_owned()), ..ChaosAuth::default() });
    let (status, v) = c.call_json(RESPONSES, &body(false), &[]).await;
    assert_eq!((status, v["error"]["code"].as_str()), (401, Some("missing_api_key")));
    let (status, _) = c.call_json(RESPONSES, &body(false), &[("authorization", "Bearer sk-chaos")]).await;
    assert_eq!(status, 200);
}
