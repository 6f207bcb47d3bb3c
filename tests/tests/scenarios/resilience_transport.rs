//! Resilience, one transport fault per test (docs/design.md §4.2, §4.3): a reset before any
//! header, an upstream that never answers (bounded by the first-byte watchdog for
//! streams and by the candidate budget otherwise, and never retried in the same
//! request), and a slow first token (failed over only when the watchdog says so).
//! Each checks what the client sees, the metrics, and the ledger's rollups.

use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, TestGateway, ms, route, serial, yaml};

/// A primary with a 200 ms first-byte watchdog and a backup, fresh health each time.
async fn pair(
    primary: serde_json::Value,
    backup: serde_json::Value,
    backoff: serde_json::Value,
) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [p, b] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    p.script(primary)?;
    b.script(backup)?;
    let docs = [
        p.doc().with("spec.timeouts.firstByte", "200ms"),
        b.doc().with("spec.timeouts.firstByte", "2s"),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
            .with("spec.deadline", "4s")
            .with("spec.backoff", backoff),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    Ok((p, b, gw))
}

fn attempts(gw: &TestGateway, upstream: &str, outcome: &str) -> f64 {
    gw.count("sluice_upstream_attempts_total", &[("upstream", upstream), ("outcome", outcome)])
}

#[tokio::test]
async fn a_reset_before_headers_fails_over() -> anyhow::Result<()> {
    for stream in [false, true] {
        let (primary, backup, gw) = pair(json!({"reset_after_chunks": 0}), json!({}), json!({})).await?;
        let client = gw.client()?;
        let (status, upstream, failover) = if stream {
            let s = client.chat_stream("chat-model", json!({})).await?;
            assert!(s.complete(), "{:?}", s.datas());
            (
                s.status,
                s.header("x-sluice-upstream").map(str::to_string),
                s.header("x-sluice-failover").map(str::to_string),
            )
        } else {
            let r = client.chat("chat-model", json!({})).await?;
            (
                r.status,
                r.header("x-sluice-upstream").map(str::to_string),
                r.header("x-sluice-failover").map(str::to_string),
            )
        };
        assert_eq!(
            (status, upstream.as_deref(), failover.as_deref()),
            (200, Some("backup"), Some("reset")),
            "stream: {stream}"
        );
        assert_eq!((primary.state.resets(), backup.requests()), (1, 1));
        assert_eq!(attempts(&gw, "primary", "reset"), 1.0);
        assert!(
            eventually(Duration::from_secs(2), async || gw
                .count("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", "ok")])
                == 1.0)
            .await
        );
        let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
        assert_eq!(roll.route("chat"), (1, 0), "stream: {stream}");
        assert_eq!(roll.route_failovers("chat"), 1);
        assert_eq!((roll.attempts("primary", "reset"), roll.attempts("backup", "ok")), (1, 1));
    }
    Ok(())
}

#[tokio::test]
async fn a_silent_stream_upstream_is_cut_by_the_watchdog_and_not_retried() -> anyhow::Result<()> {
    let _serial = serial().await;
    // The backup fails too, so the dispatcher walks again: without the primary.
    let (primary, backup, gw) =
        pair(json!({"hang": true}), json!({"status": 503}), json!({"maxAttempts": 3, "base": "10ms"})).await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 503, "{}", s.body);
    assert_eq!(s.header("x-sluice-failover"), Some("first_byte_timeout,http_5xx,http_5xx,http_5xx"));
    assert_eq!((primary.requests(), backup.requests()), (1, 3), "a silent upstream is not retried in the same request");
    // 200 ms of watchdog plus three fast 503s and two waits of at most 10/20 ms.
    eprintln!("silent stream upstream: 503 after {:.0} ms", ms(s.ended_at));
    assert!(s.ended_at < Duration::from_millis(1000), "took {:?}", s.ended_at);
    assert!(
        eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await,
        "the silent attempt was not cancelled"
    );
    assert_eq!(attempts(&gw, "primary", "first_byte_timeout"), 1.0);
    assert_eq!(attempts(&gw, "backup", "http_5xx"), 3.0);
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (1, 1));
    assert_eq!((roll.attempts("primary", "first_byte_timeout"), roll.attempts("backup", "http_5xx")), (1, 3));
    drop(gw);

    // With a healthy backup, the client is served after the watchdog.
    let (primary, backup, gw) = pair(json!({"hang": true}), json!({"first_byte_ms": 20}), json!({})).await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete(), "{:?}", s.datas());
    assert_eq!(
        (s.header("x-sluice-upstream"), s.header("x-sluice-failover")),
        (Some("backup"), Some("first_byte_timeout"))
    );
    let first = s.first_event_at().unwrap_or(Duration::MAX);
    eprintln!("silent stream upstream, healthy backup: first byte at {:.0} ms", ms(first));
    assert!(first >= Duration::from_millis(220) && first < Duration::from_millis(700), "first byte at {first:?}");
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (1, 0));
    assert_eq!(roll.attempts("primary", "first_byte_timeout"), 1);
    Ok(())
}

#[tokio::test]
async fn a_silent_upstream_of_a_whole_answer_is_cut_by_its_budget() -> anyhow::Result<()> {
    let _serial = serial().await;
    // Deadline 4 s over two candidates: the primary's share is 2 s.
    let (primary, backup, gw) = pair(json!({"hang": true}), json!({}), json!({})).await?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(
        (r.status, r.header("x-sluice-upstream"), r.header("x-sluice-failover")),
        (200, Some("backup"), Some("budget"))
    );
    eprintln!("silent upstream, whole answer: served after {:.0} ms (budget 2000 ms)", ms(r.elapsed));
    assert!(r.elapsed >= Duration::from_millis(1950) && r.elapsed < Duration::from_millis(2500), "{:?}", r.elapsed);
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    assert!(eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await);
    assert_eq!(attempts(&gw, "primary", "budget"), 1.0);
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (1, 0));
    assert_eq!((roll.attempts("primary", "budget"), roll.attempts("backup", "ok")), (1, 1));
    Ok(())
}

#[tokio::test]
async fn a_slow_first_token_fails_over_only_past_the_watchdog() -> anyhow::Result<()> {
    let _serial = serial().await;
    // 400 ms to the first token against a 200 ms watchdog: failed over.
    let (primary, backup, gw) = pair(json!({"first_byte_ms": 400}), json!({"first_byte_ms": 20}), json!({})).await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete());
    assert_eq!(
        (s.header("x-sluice-upstream"), s.header("x-sluice-failover")),
        (Some("backup"), Some("first_byte_timeout"))
    );
    let first = s.first_event_at().unwrap_or(Duration::MAX);
    assert!(first < Duration::from_millis(400), "waited for the slow primary: first byte at {first:?}");
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!((roll.route("chat"), roll.attempts("primary", "first_byte_timeout")), ((1, 0), 1));
    drop(gw);

    // 100 ms is within the watchdog: the primary serves, slowly but whole.
    let (primary, backup, gw) = pair(json!({"first_byte_ms": 100}), json!({}), json!({})).await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete());
    assert_eq!((s.header("x-sluice-upstream"), s.header("x-sluice-failover")), (Some("primary"), None));
    assert!(s.first_event_at().unwrap_or_default() >= Duration::from_millis(100));
    assert_eq!((primary.requests(), backup.requests()), (1, 0));
    assert!(eventually(Duration::from_secs(2), async || attempts(&gw, "primary", "ok") == 1.0).await);
    assert_eq!(gw.count("sluice_upstream_first_byte_seconds_count", &[("upstream", "primary")]), 1.0);
    let roll = gw.rollups(&["chat"], &["primary"]).await?;
    assert_eq!((roll.route("chat"), roll.attempts("primary", "ok")), ((1, 0), 1));
    assert_eq!(roll.first_bytes.get("primary"), Some(&1), "the first-byte time is rolled up");
    Ok(())
}
