//! Bedrock Converse in AWS's own framing (event-stream frames decoded by
//! hand), and Azure OpenAI's deployment URLs.

use serde_json::{Value, json};
use sluice_chaos::Protocol;

use std::time::Instant;

use super::native::{aws_error_type, decode_frames, read_body, timed_frames};
use super::{Headers, MS, start};

const MODEL: &str = "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0";
const AZURE: &str = "/openai/deployments/my-gpt4o/chat/completions";

fn body() -> Value {
    json!({"messages": [{"role": "user", "content": [{"text": "hello there"}]}],
           "inferenceConfig": {"maxTokens": 100}})
}

fn tool_body() -> Value {
    let mut b = body();
    b["toolConfig"] = json!({"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]});
    b
}

#[tokio::test]
async fn converse_answers_in_bedrock_shape() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-cache-read-tokens", "6"), ("x-chaos-cache-write-tokens", "2")];
    let (status, v) = c.call_json(&format!("{MODEL}/converse"), &body(), h).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["output"]["message"]["role"], "assistant");
    assert_eq!(v["output"]["message"]["content"][0]["text"], "The upstream said hello and ");
    assert_eq!(v["stopReason"], "end_turn");
    let usage = &v["usage"];
    assert_eq!((usage["outputTokens"].as_u64(), usage["cacheReadInputTokens"].as_u64()), (Some(5), Some(6)));
    let input = usage["inputTokens"].as_u64().unwrap();
    assert_eq!(usage["totalTokens"].as_u64(), Some(input + 6 + 2 + 5));
    assert_eq!(c.state.requests_for(Protocol::Bedrock), 1);
}

#[tokio::test]
async fn converse_stream_is_event_stream_frames() {
    let c = start().await;
    let (status, resp) = c.call(&format!("{MODEL}/converse-stream"), &body(), &[("x-chaos-chunks", "2")]).await;
    assert_eq!(status, 200);
    assert_eq!(resp.headers()["content-type"], "application/vnd.amazon.eventstream");
    let b = read_body(resp).await;
    b.end.unwrap();
    let frames = decode_frames(&b.bytes);
    let kinds: Vec<String> = frames.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        ["messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]
    );
    assert!(frames.iter().all(|f| f.headers[":content-type"] == "application/json"));
    let text: String = frames[1..3].iter().map(|f| f.json()["delta"]["text"].as_str().unwrap().to_owned()).collect();
    assert_eq!(text, "The upstream ");
    assert_eq!(frames[4].json()["stopReason"], "end_turn");
    assert_eq!(frames[5].json()["usage"]["outputTokens"], 2);
}

#[tokio::test]
async fn message_start_comes_at_once_then_content_keeps_its_cadence() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-first-byte-ms", "300"), ("x-chaos-chunk-ms", "100"), ("x-chaos-chunks", "3")];
    let t0 = Instant::now();
    let (_, resp) = c.call(&format!("{MODEL}/converse-stream"), &body(), h).await;
    let frames = timed_frames(resp, t0).await;
    let at = |kind: &str| frames.iter().filter(|(_, f)| f.kind() == kind).map(|(t, _)| *t).collect::<Vec<_>>();
    assert!(at("messageStart")[0] < MS(250), "messageStart before the first-byte delay: {frames:?}");
    let deltas = at("contentBlockDelta");
    assert_eq!(deltas.len(), 3);
    assert!(deltas[0] >= MS(300), "{deltas:?}");
    assert!(deltas[2] - deltas[0] >= MS(200), "{deltas:?}");

    // A hang after one chunk stalls the stream until the client gives up.
    let h: Headers<'_> = &[("x-chaos-hang-after-chunks", "1")];
    let (_, mut resp) = c.call(&format!("{MODEL}/converse-stream"), &body(), h).await;
    let mut got = Vec::new();
    let stalled = tokio::time::timeout(MS(300), async {
        while let Some(chunk) = resp.chunk().await.unwrap() {
            got.extend_from_slice(&chunk);
        }
    })
    .await;
    assert!(stalled.is_err(), "the stream must stall");
    let kinds: Vec<String> = decode_frames(&got).iter().map(|f| f.kind()).collect();
    assert_eq!(kinds, ["messageStart", "contentBlockDelta"]);
    assert_eq!(c.state.hangs(), 1);
}

#[tokio::test]
async fn errors_carry_the_exception_name() {
    let c = start().await;
    let (status, resp) = c.call(&format!("{MODEL}/converse"), &body(), &[("x-chaos-status", "429")]).await;
    assert_eq!(status, 429);
    let kind = aws_error_type(&resp).to_owned();
    assert!(kind.starts_with("ThrottlingException:"), "{kind}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v, json!({"message": "Too many requests, please wait before trying again."}));
    // AWS documents ThrottlingException with 400 too.
    let h: Headers<'_> = &[("x-chaos-status", "400"), ("x-chaos-error-code", "ThrottlingException")];
    let (status, resp) = c.call(&format!("{MODEL}/converse-stream"), &body(), h).await;
    assert_eq!(status, 400);
    assert!(aws_error_type(&resp).starts_with("ThrottlingException:"));

    for (after, content) in [("0", 0), ("1", 1)] {
        let h: Headers<'_> = &[("x-chaos-error-after-chunks", after)];
        let (status, resp) = c.call(&format!("{MODEL}/converse-stream"), &body(), h).await;
        assert_eq!(status, 200);
        let frames = decode_frames(&read_body(resp).await.bytes);
        let kinds: Vec<String> = frames.iter().map(|f| f.kind()).collect();
        let mut expected = vec!["messageStart".to_owned()];
        expected.extend((0..content).map(|_| "contentBlockDelta".to_owned()));
        expected.push("!serviceUnavailableException".to_owned());
        assert_eq!(kinds, expected);
        assert!(frames.last().unwrap().json()["message"].is_string());
    }
    // Converse has no `model` in the body.
    let mut extra = body();
    extra["model"] = json!("x");
    let (status, resp) = c.call(&format!("{MODEL}/converse"), &extra, &[]).await;
    assert_eq!(status, 400);
    assert!(aws_error_type(&resp).starts_with("ValidationException:"));
}

#[tokio::test]
async fn model_ids_are_one_percent_encoded_segment() {
    let c = start().await;
    let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fabc";
    let (status, _) = c.call_json(&format!("/model/{arn}/converse"), &body(), &[]).await;
    assert_eq!(status, 200);
    // The same ARN with a literal '/' names no operation.
    let raw = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc";
    let (status, resp) = c.call(&format!("/model/{raw}/converse"), &body(), &[]).await;
    assert_eq!(status, 404);
    assert!(aws_error_type(&resp).starts_with("UnknownOperationException"));
}

#[tokio::test]
async fn tool_calls_are_tool_use_blocks() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "3")];
    let (_, resp) = c.call(&format!("{MODEL}/converse-stream"), &tool_body(), h).await;
    let frames = decode_frames(&read_body(resp).await.bytes);
    assert_eq!(frames[1].kind(), "contentBlockStart");
    assert_eq!(frames[1].json()["start"]["toolUse"]["name"], "get_weather");
    let input: String = frames
        .iter()
        .filter(|f| f.kind() == "contentBlockDelta")
        .map(|f| f.json()["delta"]["toolUse"]["input"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"query": "The upstream said "}));
    let stop = frames.iter().find(|f| f.kind() == "messageStop").unwrap();
    assert_eq!(stop.json()["stopReason"], "tool_use");
    let (_, v) = c.call_json(&format!("{MODEL}/converse"), &tool_body(), h).await;
    assert_eq!(v["output"]["message"]["content"][0]["toolUse"]["input"], json!({"query": "The upstream said "}));
}

#[tokio::test]
async fn azure_deployments_need_an_api_version() {
    let c = start().await;
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "stream": false});
    let (status, v) = c.call_json(&format!("{AZURE}?api-version=2024-10-21"), &chat, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "my-gpt4o");
    let (status, _) = c.call_json("/deployments/d/chat/completions?api-version=2024-10-21", &chat, &[]).await;
    assert_eq!(status, 200);
    let (status, v) = c.call_json(AZURE, &chat, &[]).await;
    assert_eq!(status, 404);
    assert_eq!(v, json!({"error": {"code": "404", "message": "Resource not found"}}));
    let h: Headers<'_> = &[("x-chaos-status", "429"), ("x-chaos-retry-after-ms", "250")];
    let (status, resp) = c.call(&format!("{AZURE}?api-version=2024-10-21"), &chat, h).await;
    assert_eq!((status, resp.headers()["retry-after-ms"].to_str().unwrap()), (429, "250"));
    assert_eq!(c.state.requests_for(Protocol::AzureOpenAi), 3);
    assert_eq!(c.state.requests_for(Protocol::OpenAi), 0);
}
