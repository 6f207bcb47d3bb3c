//! docs/design.md §4.4 stream handling: the gateway always asks for usage and strips the usage
//! chunk again unless the client asked for it; malformed events are dropped and the
//! stream goes on; a stream that ends without `[DONE]` after a finish reason is
//! finalised at once; a complete stream's upstream connection is kept for the next
//! request.

use std::time::Duration;

use serde_json::json;
use sluice_tests::{ChaosUpstream, TestGateway, route, yaml};

async fn single() -> anyhow::Result<(ChaosUpstream, TestGateway)> {
    let only = ChaosUpstream::start("only").await?;
    let docs = [only.doc().with("spec.timeouts.idle", "5s"), route("chat", "chat-model", &[("only", 100)])];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    Ok((only, gw))
}

/// A stream whose end the gateway has seen (its usage and finish reason, or `[DONE]`)
/// leaves the rest of the upstream's body to be read, so that the connection goes back
/// to the pool: dropped before its end, every streamed request would open a new
/// connection (and for `https`, a new TLS handshake).
#[tokio::test]
async fn complete_streams_reuse_their_upstream_connection() -> anyhow::Result<()> {
    let (only, gw) = single().await?;
    // The upstream ends each body a moment after its last event, as a real one may:
    // a body dropped at `[DONE]` would lose its connection every time.
    only.script(json!({"chunks": 3, "end_ms": 50}))?;
    let client = gw.client()?;
    let before = only.connections();
    for extra in [json!({}), json!({"stream_options": {"include_usage": true}})] {
        for _ in 0..5 {
            let s = client.chat_stream("chat-model", extra.clone()).await?;
            assert!(s.events.last().is_some_and(|e| e.is_done()), "{:?}", s.datas());
        }
    }
    // One connection, and at most two more where the next request came before the
    // last one's connection was back in the pool (hyper then also opens one); ten if
    // each stream's connection were lost.
    let opened = only.connections() - before;
    assert!(opened <= 3, "10 sequential streams opened {opened} upstream connections");
    Ok(())
}

#[tokio::test]
async fn the_usage_chunk_is_stripped_unless_asked_for() -> anyhow::Result<()> {
    let (only, gw) = single().await?;
    only.script(json!({"chunks": 3}))?;
    let client = gw.client()?;

    let s = client.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200);
    assert_eq!(s.contents().len(), 3);
    assert!(s.events.iter().all(|e| !e.has_usage()), "no usage chunk was asked for: {:?}", s.datas());
    assert!(s.events.iter().all(|e| e.is_done() || !e.json()["choices"].as_array().is_some_and(Vec::is_empty)));
    assert_eq!(s.events.len(), 5, "3 contents, finish, [DONE]: {:?}", s.datas());
    assert!(s.events.last().is_some_and(|e| e.is_done()));
    // The gateway still read usage for itself: 3 completion tokens counted.
    assert_eq!(gw.count("sluice_tokens_total", &[("route", "chat"), ("kind", "output")]), 3.0);

    let s = client.chat_stream("chat-model", json!({"stream_options": {"include_usage": true}})).await?;
    assert_eq!(s.events.len(), 6, "3 contents, finish, usage, [DONE]: {:?}", s.datas());
    let usage = s.events.get(4).map(|e| e.json()).unwrap_or_default();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert!(usage["usage"]["prompt_tokens"].as_u64().is_some_and(|n| n > 0));
    assert!(s.events.last().is_some_and(|e| e.is_done()));
    assert_eq!(gw.count("sluice_tokens_total", &[("route", "chat"), ("kind", "output")]), 6.0);
    Ok(())
}

#[tokio::test]
async fn a_malformed_event_is_dropped_and_the_stream_goes_on() -> anyhow::Result<()> {
    let (only, gw) = single().await?;
    // Event 2 of 5 contents is `data: {not json`.
    only.script(json!({"chunks": 5, "malformed_chunk": 2}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200);
    assert!(
        s.events.iter().all(|e| e.is_done() || !e.json().is_null()),
        "only valid JSON reaches the client: {:?}",
        s.datas()
    );
    assert_eq!(s.contents().len(), 4, "the other contents all arrive: {:?}", s.datas());
    assert!(s.events.iter().any(|e| e.is_finish()));
    assert!(s.done());
    assert_eq!(gw.count("sluice_stream_events_dropped_total", &[]), 1.0);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "ok")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_stream_without_done_is_finalised_at_once() -> anyhow::Result<()> {
    let (only, gw) = single().await?;
    only.script(json!({"chunks": 3, "chunk_ms": 20, "no_done": true}))?;
    let client = gw.client()?;
    for extra in [json!({}), json!({"stream_options": {"include_usage": true}})] {
        let s = client.chat_stream("chat-model", extra.clone()).await?;
        assert_eq!(s.status, 200);
        assert!(s.end.is_ok());
        assert!(s.events.last().is_some_and(|e| e.is_done()), "the gateway adds [DONE]: {:?}", s.datas());
        assert!(s.events.iter().all(|e| e.error_code().is_none()), "a finished stream is not broken");
        let finish = s.events.iter().find(|e| e.is_finish()).map(|e| e.at).unwrap_or_default();
        let done = s.events.last().map(|e| e.at).unwrap_or_default();
        // Idle is 5 s: waiting for more would show.
        assert!(
            done.saturating_sub(finish) < Duration::from_millis(100),
            "[DONE] {:?} after the finish chunk ({extra})",
            done.saturating_sub(finish)
        );
        assert!(s.ended_at < Duration::from_secs(1));
    }
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "ok")]), 2.0);
    Ok(())
}
