//! docs/design.md §4.2/§4.4: once a byte reached the client there is no failover; a stream that
//! breaks (reset, stall past `timeouts.idle`) ends with an SSE error event
//! `upstream_stream_broken` and no `[DONE]`.

use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, GatewayOptions, SseReply, TestGateway, route, yaml};

async fn single(idle: &str) -> anyhow::Result<(ChaosUpstream, TestGateway)> {
    single_with(idle, GatewayOptions::default()).await
}

async fn single_with(idle: &str, opts: GatewayOptions) -> anyhow::Result<(ChaosUpstream, TestGateway)> {
    let only = ChaosUpstream::start("only").await?;
    let docs = [only.doc().with("spec.timeouts.idle", idle), route("chat", "chat-model", &[("only", 100)])];
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    Ok((only, gw))
}

/// The stream ended with exactly one error event, last, and no `[DONE]`.
fn assert_broken(s: &SseReply, contents: usize) {
    assert_eq!(s.status, 200);
    assert!(s.end.is_ok(), "the gateway ends the body cleanly after the error event: {:?}", s.end);
    assert_eq!(s.contents().len(), contents, "content so far: {:?}", s.datas());
    assert!(!s.done(), "a broken stream must not end with [DONE]: {:?}", s.datas());
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["error"]["code"], "upstream_stream_broken", "last event: {last}");
    assert_eq!(last["error"]["type"], "api_error");
    assert!(last["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(s.events.iter().filter(|e| e.error_code().is_some()).count(), 1);
}

#[tokio::test]
async fn a_reset_mid_stream_ends_with_an_error_event() -> anyhow::Result<()> {
    let (only, gw) = single("60s").await?;
    only.script(json!({"reset_after_chunks": 3, "chunk_ms": 10}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_broken(&s, 3);
    assert_eq!(only.state.resets(), 1);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "reset")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_primary_that_breaks_after_its_first_byte_is_not_failed_over() -> anyhow::Result<()> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    primary.script(json!({"reset_after_chunks": 2, "chunk_ms": 10}))?;
    let docs = [primary.doc(), backup.doc(), route("chat", "chat-model", &[("primary", 100), ("backup", 50)])];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
    assert_broken(&s, 2);
    assert_eq!(backup.requests(), 0, "bytes reached the client: no failover");
    Ok(())
}

/// On tokio's paused clock: a stall ends exactly one idle timeout after the last chunk,
/// for the quick start's 30 s, the contract's 60 s and a short 1 s alike.
#[tokio::test]
async fn a_stall_is_ended_by_the_idle_timeout() -> anyhow::Result<()> {
    for idle in [30, 60, 1] {
        let (only, gw) = single_with(&format!("{idle}s"), GatewayOptions::paused()).await?;
        let idle = Duration::from_secs(idle);
        tokio::time::pause();
        only.script(json!({"hang_after_chunks": 2}))?;
        let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
        assert_broken(&s, 2);
        let last_content = s.contents().last().map(|e| e.at).unwrap_or_default();
        let gap = s.events.last().map(|e| e.at).unwrap_or_default().saturating_sub(last_content);
        assert!(
            gap >= idle && gap < idle + Duration::from_millis(50),
            "ended {gap:?} after the last chunk, idle {idle:?}"
        );
        assert_eq!(only.state.hangs(), 1);
        let timeouts = [("upstream", "only"), ("outcome", "idle_timeout")];
        assert_eq!(gw.count("sluice_upstream_attempts_total", &timeouts), 1.0);
        // The stalled upstream connection is given up.
        assert!(eventually(Duration::from_secs(2), async || only.state.in_flight() == 0).await);
        tokio::time::resume();
    }
    Ok(())
}

#[tokio::test]
async fn a_client_that_leaves_a_stalled_stream_releases_the_upstream() -> anyhow::Result<()> {
    let (only, gw) = single("30s").await?;
    only.script(json!({"hang_after_chunks": 2}))?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let body = sluice_tests::client::chat_body("chat-model", true, json!({}));
    let mut resp = http.post(format!("{}/v1/chat/completions", gw.base)).json(&body).send().await?;
    assert_eq!(resp.status(), 200);
    assert!(resp.chunk().await?.is_some(), "the first chunk arrives");
    assert_eq!(only.state.in_flight(), 1);
    // The client goes away while the upstream is stalled.
    drop(resp);
    drop(http);
    let released = eventually(Duration::from_secs(3), async || only.state.in_flight() == 0).await;
    assert!(released, "the stalled upstream stream is held until the 30 s idle timeout after the client left");
    Ok(())
}
