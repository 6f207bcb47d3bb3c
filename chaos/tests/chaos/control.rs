//! The control endpoint (`/_chaos`): the default script, the fail rate, and the
//! counters the tests of other crates read.

use serde_json::json;
use sluice_chaos::Script;
use sluice_ledger::testing::eventually;

use super::{CHAT, MS, chat_body, start};

#[tokio::test]
async fn control_endpoint_sets_and_resets_the_default_script() {
    let c = start().await;
    let (status, v) = c.control(r#"{"status":503,"retry_after":2}"#).await;
    assert_eq!((status, &v["script"]), (200, &json!({"status": 503, "retry_after": 2})));
    let resp = c.chat(&[]).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "2");
    let resp = c.chat(&[("x-chaos-status", "200")]).await;
    assert_eq!(resp.status(), 200, "a header wins over the default script");

    assert_eq!(c.control("{}").await.0, 200);
    assert_eq!(c.chat(&[]).await.status(), 200);
    assert_eq!(c.state.script(), Script::default());

    let (status, v) = c.control(r#"{"statuss":503}"#).await;
    assert_eq!(status, 400);
    let msg = v["error"]["message"].as_str().unwrap();
    let want = "statuss: unknown field, expected one of: status, error_code, first_byte_ms";
    assert!(msg.starts_with(want), "{msg}");
    let (status, v) = c.control(r#"{"fail_rate":2}"#).await;
    assert_eq!((status, &v["error"]["code"]), (400, &json!("invalid_chaos_script")));
    assert_eq!(v["error"]["message"], "fail_rate: must be from 0 to 1, got 2");
}

#[tokio::test]
async fn fail_rate_fails_that_fraction() {
    let c = start().await;
    c.control(r#"{"fail_rate":1}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 503);
    c.control(r#"{"fail_rate":1,"status":429}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 429);
    c.control(r#"{"fail_rate":0,"status":429}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 200);
    c.control(r#"{"fail_rate":0.5}"#).await;
    for _ in 0..200 {
        c.chat(&[]).await;
    }
    let failed = c.state.requests_with_status(503) - 1;
    assert!((50..=150).contains(&failed), "{failed} of 200 failed");
}

#[tokio::test]
async fn counters_are_exact() {
    let c = start().await;
    for _ in 0..3 {
        c.chat(&[]).await.bytes().await.unwrap();
    }
    for _ in 0..2 {
        c.chat(&[("x-chaos-status", "503")]).await;
    }
    c.stream(&chat_body(true), &[]).await.end.unwrap();
    let h = [("x-chaos-reset-after-chunks", "0")];
    c.send(CHAT, &chat_body(false), &h).await.unwrap_err();
    assert!(eventually(MS(2000), async || c.state.in_flight() == 0).await, "all requests finished");
    let v = c.get("/_chaos").await;
    assert_eq!(v["script"], json!({}));
    let want = json!({"requests": 7, "by_status": {"200": 4, "503": 2}, "streams_started": 1,
                      "resets": 1, "hangs": 0, "in_flight": 0, "models": 0,
                      "by_protocol": {"openai": 7}, "tokens_issued": 0, "embedding_inputs": 0,
                      "web_searches": 0});
    let mut counters = v["counters"].clone();
    // Connections depend on the client's pool, but the reset one is not reused.
    let connections = counters.as_object_mut().and_then(|o| o.remove("connections")).and_then(|n| n.as_u64());
    assert!(connections.is_some_and(|n| (2..=8).contains(&n)), "{connections:?} connections for 8 requests");
    assert_eq!(counters, want);
    assert_eq!((c.state.requests(), c.state.requests_with_status(200)), (7, 4));
    c.state.clear_counters();
    assert_eq!(c.state.requests(), 0);
}
