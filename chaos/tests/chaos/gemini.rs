//! Gemini (AI Studio) and Gemini on Vertex AI, in Google's own framing.

use serde_json::{Value, json};
use sluice_chaos::Protocol;

use super::native::{parse_sse, read_body};
use super::{Headers, start};

const MODEL: &str = "/v1beta/models/gemini-2.5-pro";
const VERTEX: &str = "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro";

fn body() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
           "generationConfig": {"maxOutputTokens": 100}})
}

fn tool_body() -> Value {
    let mut b = body();
    b["tools"] = json!([{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]);
    b
}

fn text_of(chunks: &[Value]) -> String {
    chunks.iter().filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str()).collect()
}

#[tokio::test]
async fn generate_content_answers_in_gemini_shape() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-cache-read-tokens", "4")];
    let (status, v) = c.call_json(&format!("{MODEL}:generateContent"), &body(), h).await;
    assert_eq!(status, 200, "{v}");
    let candidate = &v["candidates"][0];
    assert_eq!(candidate["content"]["role"], "model");
    assert_eq!(candidate["content"]["parts"][0]["text"], "The upstream said hello and ");
    assert_eq!(candidate["finishReason"], "STOP");
    let usage = &v["usageMetadata"];
    assert_eq!(usage["candidatesTokenCount"], 5);
    assert_eq!(usage["cachedContentTokenCount"], 4);
    // promptTokenCount includes the cached tokens.
    assert!(usage["promptTokenCount"].as_u64().unwrap() > 4);
    assert_eq!(v["modelVersion"], "gemini-2.5-pro");
    let mut short = body();
    short["generationConfig"]["maxOutputTokens"] = json!(1);
    let (_, v) = c.call_json(&format!("{MODEL}:generateContent"), &short, &[]).await;
    assert_eq!(v["candidates"][0]["finishReason"], "MAX_TOKENS");
    // The stable API version (google-genai's default) answers the same way.
    let (status, v) = c.call_json("/v1/models/gemini-2.5-pro:generateContent", &body(), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(c.state.requests_for(Protocol::Gemini), 3);
}

#[tokio::test]
async fn streams_are_sse_with_alt_sse_and_a_json_array_without() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-chunks", "3")];
    let (status, resp) = c.call(&format!("{MODEL}:streamGenerateContent?alt=sse"), &body(), h).await;
    assert_eq!(status, 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let b = read_body(resp).await;
    b.end.unwrap();
    assert!(b.bytes.ends_with(b"\r\n\r\n"), "Google separates events with CRLF");
    let events = parse_sse(&b.bytes);
    let chunks: Vec<Value> = events.into_iter().map(|e| e.data).collect();
    assert_eq!(chunks.len(), 4);
    assert_eq!(text_of(&chunks), "The upstream said ");
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 3);

    let (_, resp) = c.call(&format!("{MODEL}:streamGenerateContent"), &body(), h).await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let array: Vec<Value> = serde_json::from_slice(&read_body(resp).await.bytes).unwrap();
    assert_eq!(text_of(&array), "The upstream said ");
}

#[tokio::test]
async fn errors_are_google_shaped_in_answers_and_streams() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-status", "429"), ("x-chaos-retry-after", "3")];
    let (status, v) = c.call_json(&format!("{MODEL}:generateContent"), &body(), h).await;
    assert_eq!(status, 429);
    assert_eq!(v["error"]["code"], 429);
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(v["error"]["details"][0]["retryDelay"], "3s");
    let (status, v) = c.call_json(&format!("{MODEL}:generateContent"), &body(), &[("x-chaos-status", "503")]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (503, Some("UNAVAILABLE")));

    let path = format!("{MODEL}:streamGenerateContent?alt=sse");
    for (after, texts) in [("0", 0), ("2", 2)] {
        let (status, resp) = c.call(&path, &body(), &[("x-chaos-error-after-chunks", after)]).await;
        assert_eq!(status, 200);
        let chunks: Vec<Value> = parse_sse(&read_body(resp).await.bytes).into_iter().map(|e| e.data).collect();
        assert_eq!(chunks.len(), texts + 1);
        let error = &chunks.last().unwrap()["error"];
        assert_eq!((error["code"].as_u64(), error["status"].as_str()), (Some(503), Some("UNAVAILABLE")));
    }

    // Fields Gemini does not know are refused.
    let mut extra = body();
    extra["stream_options"] = json!({});
    let (status, v) = c.call_json(&format!("{MODEL}:generateContent"), &extra, &[]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
    let (status, _) = c.call_json(&format!("{MODEL}:predict"), &body(), &[]).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn tool_calls_are_whole_function_calls_ending_with_stop() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-tool-call", "get_weather"), ("x-chaos-chunks", "2")];
    let path = format!("{MODEL}:streamGenerateContent?alt=sse");
    let (_, resp) = c.call(&path, &tool_body(), h).await;
    let chunks: Vec<Value> = parse_sse(&read_body(resp).await.bytes).into_iter().map(|e| e.data).collect();
    let call = &chunks[0]["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["args"], json!({"query": "The upstream "}));
    // Gemini reports STOP after a function call, never a tool reason.
    assert_eq!(chunks.last().unwrap()["candidates"][0]["finishReason"], "STOP");
    let (_, v) = c.call_json(&format!("{MODEL}:generateContent"), &tool_body(), h).await;
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["functionCall"]["name"], "get_weather");
}

#[tokio::test]
async fn vertex_gemini_uses_the_same_format() {
    let c = start().await;
    let (status, v) = c.call_json(&format!("{VERTEX}:generateContent"), &body(), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    let (_, resp) = c.call(&format!("{VERTEX}:streamGenerateContent?alt=sse"), &body(), &[]).await;
    let chunks: Vec<Value> = parse_sse(&read_body(resp).await.bytes).into_iter().map(|e| e.data).collect();
    assert_eq!(text_of(&chunks), "The upstream said hello and ");
    // The beta API version (google-genai's default on Vertex AI) answers the same way.
    let beta = VERTEX.replacen("/v1/", "/v1beta1/", 1);
    let (status, v) = c.call_json(&format!("{beta}:generateContent"), &body(), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(c.state.requests_for(Protocol::VertexGemini), 3);
    let counters = c.get("/_chaos").await["counters"].clone();
    assert_eq!(counters["by_protocol"], json!({"vertex-gemini": 3}));
}
