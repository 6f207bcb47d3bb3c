//! docs/design.md §4.2 backoff on throttling: when every candidate of a walk answered 429, the
//! gateway waits (honouring `Retry-After`) and walks again, up to `maxAttempts` walks
//! and `maxTotal` of waiting; then it answers 429 with `Retry-After`.
//!
//! On tokio's paused clock (`GatewayOptions::paused`): the waits are virtual, so a test
//! of three 1 s waits takes milliseconds and a busy machine cannot stretch them.

use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, yaml};
use tokio::time::Instant;

const THROTTLED: fn(u64) -> serde_json::Value = |secs| json!({"status": 429, "retry_after": secs});

async fn start(backoff: serde_json::Value) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [a, b] = ChaosUpstream::start_all(["a", "b"]).await?;
    let docs = [a.doc(), b.doc(), route("chat", "chat-model", &[("a", 100), ("b", 50)]).with("spec.backoff", backoff)];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    Ok((a, b, gw))
}

#[tokio::test]
async fn a_throttled_first_walk_waits_for_retry_after_and_walks_again() -> anyhow::Result<()> {
    let (a, b, gw) = start(json!({"maxAttempts": 3, "base": "50ms", "maxTotal": "10s"})).await?;
    a.script(THROTTLED(1))?;
    b.script(THROTTLED(1))?;
    let client = gw.client()?;
    let t0 = Instant::now();
    let request = tokio::spawn(async move { client.chat("chat-model", json!({})).await });
    // Once both answered their 429 (counted when the status is decided), they recover.
    let first_walk_done = eventually(Duration::from_secs(5), async || {
        a.state.requests_with_status(429) == 1 && b.state.requests_with_status(429) == 1
    })
    .await;
    assert!(first_walk_done, "the first walk did not reach both candidates");
    a.healthy();
    b.healthy();
    let r = request.await??;
    let elapsed = t0.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(elapsed >= Duration::from_secs(1), "walked again after {elapsed:?}, before Retry-After: 1");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert_eq!(r.header("x-sluice-upstream"), Some("a"));
    assert_eq!(r.header("x-sluice-attempts"), Some("3"));
    assert_eq!(r.header("x-sluice-failover"), Some("http_429,http_429"));
    assert_eq!((a.requests(), b.requests()), (2, 1), "one more walk, served by the first candidate");
    Ok(())
}

#[tokio::test]
async fn persistent_throttling_is_a_429_with_retry_after_within_max_attempts() -> anyhow::Result<()> {
    // 3 walks, two 1 s waits (Retry-After beats the 50–100 ms jitter): ~2 s.
    let (a, b, gw) = start(json!({"maxAttempts": 3, "base": "50ms", "maxTotal": "5s"})).await?;
    a.script(THROTTLED(1))?;
    b.script(THROTTLED(1))?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error_kind(), ("rate_limit_error".into(), "rate_limited".into()));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!((a.requests(), b.requests()), (3, 3), "maxAttempts 3 walks over 2 candidates");
    assert!(r.elapsed >= Duration::from_secs(2), "two waits of Retry-After: 1 took only {:?}", r.elapsed);
    assert!(r.elapsed < Duration::from_secs(5) + Duration::from_millis(500), "over maxTotal: {:?}", r.elapsed);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "429")]), 1.0);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "a"), ("outcome", "http_429")]), 3.0);
    Ok(())
}

#[tokio::test]
async fn max_total_bounds_the_waiting() -> anyhow::Result<()> {
    // Up to 10 walks, but only 2.5 s of waiting: waits of 1 s, 1 s, then the third
    // would pass maxTotal, so 3 walks.
    let (a, b, gw) = start(json!({"maxAttempts": 10, "base": "50ms", "maxTotal": "2500ms"})).await?;
    a.script(THROTTLED(1))?;
    b.script(THROTTLED(1))?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!((a.requests(), b.requests()), (3, 3));
    assert!(r.elapsed < Duration::from_millis(2500 + 500), "over maxTotal: {:?}", r.elapsed);

    // A Retry-After longer than maxTotal is not waited for at all.
    a.script(THROTTLED(30))?;
    b.script(THROTTLED(30))?;
    a.state.clear_counters();
    b.state.clear_counters();
    // Both are cooling down after the last 429s (1 s); let that pass first.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("30"));
    assert!(r.elapsed < Duration::from_millis(500), "waited {:?} for a hint it could never honour", r.elapsed);
    assert_eq!((a.requests(), b.requests()), (1, 1));
    Ok(())
}
