//! docs/design.md §4.2 failover rules: retryable statuses move on to the next candidate,
//! other 4xx are passed through unchanged and nobody else is asked.

use serde_json::json;
use sluice_tests::{ChaosUpstream, TestGateway, route, yaml};

async fn pair() -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let manifests =
        yaml(&[primary.doc(), backup.doc(), route("chat", "chat-model", &[("primary", 100), ("backup", 50)])]);
    let gw = TestGateway::start(&manifests).await?;
    Ok((primary, backup, gw))
}

#[tokio::test]
async fn a_503_on_the_primary_is_answered_by_the_backup() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair().await?;
    primary.script(json!({"status": 503}))?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(r.header("x-sluice-attempts"), Some("2"));
    assert_eq!(r.header("x-sluice-failover"), Some("http_5xx"));
    assert!(r.header("x-request-id").is_some_and(|id| !id.is_empty()));
    // The body is the backup's own answer; its model is the id at that upstream.
    assert_eq!(r.json()["object"], "chat.completion");
    assert_eq!(r.json()["model"], "chat-model");
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    assert_eq!(primary.state.requests_with_status(503), 1);
    assert_eq!(gw.count("sluice_failovers_total", &[("route", "chat"), ("reason", "http_5xx")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_400_on_the_primary_is_passed_through_and_the_backup_never_called() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair().await?;
    primary.script(json!({"status": 400, "error_code": "context_length_exceeded"}))?;
    // What the primary says, asked directly, is what the client must get.
    let direct = reqwest::Client::builder().no_proxy().build()?;
    let want = direct
        .post(format!("{}/v1/chat/completions", primary.base))
        .json(&json!({"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await?;
    assert_eq!(want.status(), 400);
    let want_type = want.headers().get("content-type").cloned();
    let want_body = want.bytes().await?;
    primary.state.clear_counters();

    let r = gw.client()?.chat("chat-model", json!({"x_request_tag": "passthrough"})).await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body, want_body, "the upstream's 400 body, unchanged");
    assert_eq!(r.headers.get("content-type"), want_type.as_ref());
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    assert_eq!(r.header("x-sluice-failover"), None, "a 400 is not a failover");
    assert_eq!(r.header("x-sluice-attempts"), Some("1"));
    assert_eq!(primary.requests(), 1);
    assert_eq!(backup.requests(), 0, "the backup must never be called on a 400");
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "http_4xx")]), 1.0);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "400")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_healthy_primary_serves_alone() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair().await?;
    let client = gw.client()?;
    for _ in 0..5 {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-sluice-upstream"), Some("primary"));
        assert_eq!(r.header("x-sluice-attempts"), Some("1"));
        assert_eq!(r.header("x-sluice-failover"), None);
    }
    assert_eq!((primary.requests(), backup.requests()), (5, 0));
    Ok(())
}

#[tokio::test]
async fn a_reset_before_the_first_byte_fails_over_for_streams_too() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair().await?;
    // TCP reset before any header: nothing reached the client, so the backup may answer.
    primary.script(json!({"reset_after_chunks": 0}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(s.header("x-sluice-failover"), Some("reset"));
    assert!(s.done());
    assert_eq!(s.contents().len(), 5);
    assert_eq!((primary.state.resets(), backup.requests()), (1, 1));
    drop(gw);

    // A 503 on a streaming request: the client only ever sees the backup's stream.
    let (primary, backup, gw) = pair().await?;
    primary.script(json!({"status": 503}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200);
    assert_eq!(s.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(s.header("x-sluice-failover"), Some("http_5xx"));
    assert!(s.done());
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    Ok(())
}
