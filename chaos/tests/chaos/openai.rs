//! The OpenAI protocol as the chaos upstream speaks it: JSON answers with usage on
//! every endpoint, streams with their cadence, usage chunk and `[DONE]`, and errors
//! shaped as OpenAI shapes them (JSON and in-stream).

use serde_json::{Value, json};
use sluice_chaos as chaos;

use super::{CHAT, Headers, MS, chat_body, start};

#[tokio::test]
async fn json_answers_carry_usage_on_every_endpoint() {
    let c = start().await;
    for path in [CHAT, "/chat/completions"] {
        let v = c.json(path, chat_body(false)).await;
        assert_eq!((&v["object"], &v["model"]), (&json!("chat.completion"), &json!("gpt-test")));
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        // "user" + "hello there" = 15 bytes → 4 tokens; 5 chunks → 5 tokens.
        let usage = json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9});
        assert_eq!(v["usage"], usage);
    }
    let v = c.json(CHAT, json!({"model": "m", "max_tokens": 2})).await;
    assert_eq!(v["usage"]["completion_tokens"], 2);
    assert_eq!(v["choices"][0]["finish_reason"], "length");

    let v = c.json("/completions", json!({"model": "c", "prompt": "abcd"})).await;
    assert_eq!((&v["object"], &v["usage"]["prompt_tokens"]), (&json!("text_completion"), &json!(1)));
    let v = c.json("/v1/embeddings", json!({"model": "e", "input": ["a", "b"]})).await;
    assert_eq!((v["data"].as_array().unwrap().len(), &v["model"]), (2, &json!("e")));

    for path in ["/models", "/v1/models"] {
        assert_eq!(c.get(path).await["object"], "list");
    }
    assert_eq!(c.state.requests(), 5, "model listings are not inference requests");
    assert_eq!(c.state.counters().models, 2);
}

#[tokio::test]
async fn stream_keeps_its_cadence_and_ends_with_done() {
    let c = start().await;
    let h = [("x-chaos-chunks", "4"), ("x-chaos-chunk-ms", "100")];
    let s = c.stream(&chat_body(true), &h).await;
    s.end.as_ref().unwrap();
    assert_eq!(s.events.len(), 6, "4 content + finish + [DONE]: {:?}", s.texts());
    assert_eq!(*s.texts().last().unwrap(), "data: [DONE]");
    let json = s.json();
    for e in &json {
        assert_eq!((&e["object"], &e["model"]), (&json!("chat.completion.chunk"), &json!("gpt-test")));
        assert!(e.get("usage").is_none(), "usage only when asked");
    }
    assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(json[4]["choices"][0]["finish_reason"], "stop");
    for pair in s.events[..4].windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= MS(70) && gap < MS(1000), "gap {gap:?}");
    }
}

#[tokio::test]
async fn include_usage_adds_a_final_usage_chunk() {
    let c = start().await;
    let mut body = chat_body(true);
    body["stream_options"] = json!({"include_usage": true});
    let s = c.stream(&body, &[("x-chaos-chunks", "3")]).await;
    s.end.as_ref().unwrap();
    let json = s.json();
    assert_eq!(json.len(), 5, "3 content + finish + usage");
    assert_eq!(json[4]["choices"], json!([]));
    let usage = json!({"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7});
    assert_eq!(json[4]["usage"], usage);
    assert_eq!(*s.texts().last().unwrap(), "data: [DONE]");
}

#[tokio::test]
async fn no_done_ends_cleanly_after_the_finish_chunk() {
    let c = start().await;
    let s = c.stream(&chat_body(true), &[("x-chaos-no-done", "true")]).await;
    s.end.as_ref().unwrap();
    assert!(!s.texts().contains(&"data: [DONE]"));
    assert_eq!(s.json().last().unwrap()["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn errors_are_openai_shaped_with_retry_after() {
    let c = start().await;
    let h = [("x-chaos-status", "429"), ("x-chaos-retry-after", "7"), ("x-chaos-retry-after-ms", "1500")];
    let resp = c.chat(&h).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    assert_eq!(resp.headers()["retry-after-ms"], "1500");
    let v: Value = resp.json().await.unwrap();
    let want = json!({"type": "rate_limit_error", "code": "rate_limit_exceeded"});
    assert_eq!((&v["error"]["type"], &v["error"]["code"]), (&want["type"], &want["code"]));

    let h = [("x-chaos-status", "400"), ("x-chaos-error-code", "context_length_exceeded")];
    let resp = c.chat(&h).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("context_length_exceeded"));

    // A failing streaming request gets a JSON error, not an SSE stream.
    let resp = c.send(CHAT, &chat_body(true), &[("x-chaos-status", "503")]).await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert!(resp.headers().get("retry-after").is_none());

    let resp = c.chat(&[("x-chaos-chunks", "many")]).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    let want = r#"x-chaos-chunks: invalid type: string "many", expected u32"#;
    assert_eq!(v["error"]["message"], want);
}

#[tokio::test]
async fn malformed_chunk_replaces_one_event() {
    let c = start().await;
    let s = c.stream(&chat_body(true), &[("x-chaos-malformed-chunk", "2")]).await;
    s.end.as_ref().unwrap();
    let texts = s.texts();
    assert_eq!(texts.len(), 7, "5 content + finish + [DONE]");
    assert_eq!((texts[1], texts[6]), ("data: {not json", "data: [DONE]"));
    for (i, t) in texts[..6].iter().enumerate().filter(|(i, _)| *i != 1) {
        let parsed = serde_json::from_str::<Value>(t.strip_prefix("data: ").unwrap());
        assert!(parsed.is_ok(), "event {i}: {t}");
    }
}

#[tokio::test]
async fn error_event_ends_an_openai_stream() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-error-after-chunks", "2")];
    let ev = c.stream(&chat_body(true), h).await;
    assert!(ev.end.is_ok());
    let texts = ev.texts();
    assert_eq!(texts.len(), 3, "{texts:?}");
    let last: Value = serde_json::from_str(texts[2].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error");
    assert_eq!(c.state.counters().by_protocol.len(), 1);
    assert_eq!(c.state.requests_for(chaos::Protocol::OpenAi), 1);
}
