//! docs/design.md §2 `timeouts.idle: auto`: the idle limit follows the upstream's observed
//! gaps between chunks (10 × p99, at least 1 s): a paced stream never trips it, a stall
//! after it is noticed within max(1 s, 10 × p99 gap).
//!
//! On tokio's paused clock (`GatewayOptions::paused`): the gaps are the scripted 20 ms
//! to the timer's millisecond, so the learnt limit is the 1 s floor to the millisecond.

use std::time::Duration;

use serde_json::json;
use sluice_tests::{ChaosUpstream, GatewayOptions, SseReply, TestGateway, route, yaml};

/// The longest gap between two content events the client saw.
fn widest_gap(s: &SseReply) -> Duration {
    let at: Vec<Duration> = s.contents().iter().map(|e| e.at).collect();
    at.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or_default()
}

#[tokio::test]
async fn a_paced_stream_never_trips_idle_auto_and_a_stall_after_it_is_noticed_within_the_bound() -> anyhow::Result<()> {
    let only = ChaosUpstream::start("only").await?;
    let docs = [only.doc().with("spec.timeouts.idle", "auto"), route("chat", "chat-model", &[("only", 100)])];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    let client = gw.client()?;

    // Healthy paced streams teach the limit their pace; none of them trips it.
    only.script(json!({"chunks": 30, "chunk_ms": 20}))?;
    let mut widest = Duration::ZERO;
    for _ in 0..2 {
        let s = client.chat_stream("chat-model", json!({})).await?;
        assert!(s.complete(), "a paced stream ends complete: {:?}", s.datas());
        assert_eq!(s.contents().len(), 30);
        widest = widest.max(widest_gap(&s));
    }

    // The same pace, then a stall: ended by the learnt limit, not the 60 s cap.
    only.script(json!({"chunks": 30, "chunk_ms": 20, "hang_after_chunks": 10}))?;
    let s = client.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.contents().len(), 10, "content so far: {:?}", s.datas());
    assert!(!s.done());
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["error"]["code"], "upstream_stream_broken", "last event: {last}");
    let last_content = s.contents().last().map(|e| e.at).unwrap_or_default();
    let noticed = s.events.last().map(|e| e.at).unwrap_or_default().saturating_sub(last_content);
    // The gateway's p99 gap is the widest gap the client saw: the scripted 20 ms (and the
    // timer's millisecond), so the floor rules.
    assert!(widest >= Duration::from_millis(20) && widest <= Duration::from_millis(22), "widest gap {widest:?}");
    let bound = Duration::from_secs(1).max(widest.saturating_mul(10));
    assert!(noticed >= bound, "not before the 1 s floor: {noticed:?}");
    assert!(noticed <= bound + Duration::from_millis(10), "noticed {noticed:?} after the last chunk, bound {bound:?}");
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "idle_timeout")]), 1.0);
    Ok(())
}
