//! Resilience, one stream fault per test (docs/design.md §4.4): a stream cut mid-answer or
//! stalled is never presented as a clean success (error event, no `[DONE]`), counts as
//! bad, and leaves the gateway healthy; a malformed chunk is dropped; a stream without
//! `[DONE]` is finalised at once with its usage, and billed by it.

use std::time::Duration;

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::{TestDb, eventually};
use sluice_tests::billing::Price;
use sluice_tests::{ChaosUpstream, Client, GatewayOptions, SseReply, TestGateway, route, serial, yaml};

const PRICE: Price = Price { input: "3.00", output: "15.00" };

struct Billed {
    only: ChaosUpstream,
    backup: ChaosUpstream,
    gw: TestGateway,
    client: Client,
    db: TestDb,
}

/// `only` (idle timeout 1 s) with a backup behind it, priced, with `--auth keys`.
async fn billed(script: serde_json::Value) -> anyhow::Result<Billed> {
    let [only, backup] = ChaosUpstream::start_all(["only", "backup"]).await?;
    only.script(script)?;
    let db = TestDb::sqlite();
    let r = route("chat", "chat-model", &[("only", 100), ("backup", 50)])
        .candidate(0, "price", PRICE.json())
        .candidate(1, "price", PRICE.json());
    let opts = GatewayOptions { auth: AuthMode::Keys, ledger: Some(db.url.clone()), ..GatewayOptions::default() };
    let gw =
        TestGateway::start_with(&yaml(&[only.doc().with("spec.timeouts.idle", "1s"), backup.doc(), r]), opts).await?;
    let key = gw.account("acme", 1_000_000_000_000).await?;
    let client = gw.client()?.with_key(&key);
    Ok(Billed { only, backup, gw, client, db })
}

/// Broken: 200, the content so far, one error event last, no `[DONE]`.
fn assert_broken(s: &SseReply, contents: usize) {
    assert_eq!(s.status, 200);
    assert!(!s.complete(), "a broken stream looks complete: {:?}", s.datas());
    assert!(!s.done(), "{:?}", s.datas());
    assert_eq!(s.contents().len(), contents, "{:?}", s.datas());
    assert_eq!(
        s.events.last().and_then(|e| e.error_code()).as_deref(),
        Some("upstream_stream_broken"),
        "{:?}",
        s.datas()
    );
}

/// The gateway answers `/healthz` and a normal request after a fault.
async fn still_healthy(b: &Billed) -> anyhow::Result<()> {
    let h = b.client.get("/healthz").await?;
    assert_eq!((h.status, h.text().as_str()), (200, "ok"));
    b.only.healthy();
    let s = b.client.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete(), "a normal request after the fault: {:?}", s.datas());
    // (After a broken stream the backup may serve it: `only` was demoted.)
    let r = b.client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    Ok(())
}

/// What the broken request was billed: settled at most the reservation, for the
/// content that reached the client, and the journal adds up.
async fn billed_for_delivered(b: &Billed, contents: i64) -> anyhow::Result<()> {
    assert!(
        eventually(Duration::from_secs(3), async || b.gw.metric("sluice_reservations_open", &[]) == Some(0.0)).await
    );
    let rows = b.db.settlements().await?;
    let row = rows.first().ok_or_else(|| anyhow::anyhow!("no settlement"))?;
    assert_eq!((rows.len(), row.kind.as_str()), (1, "settle"), "{rows:?}");
    assert_eq!(row.output_tokens, Some(contents), "one token per content event that reached the client");
    let input = row.input_tokens.and_then(|n| u64::try_from(n).ok()).unwrap_or_default();
    assert_eq!(row.amount, PRICE.cost(input, contents.unsigned_abs()), "{row:?}");
    // Within the estimate: nothing uncollected.
    let check = b.gw.ledger()?.journal_verify("acme").await?;
    assert!(check.is_consistent() && check.uncollected_nanos == 0, "{check:?}");
    Ok(())
}

#[tokio::test]
async fn a_stream_cut_mid_answer_ends_with_an_error_event_and_counts_as_bad() -> anyhow::Result<()> {
    let b = billed(json!({"reset_after_chunks": 3, "chunk_ms": 10})).await?;
    let s = b.client.chat_stream("chat-model", json!({})).await?;
    assert_broken(&s, 3);
    assert_eq!(s.header("x-sluice-upstream"), Some("only"));
    assert_eq!(b.backup.requests(), 0, "bytes reached the client: no failover");
    assert!(
        eventually(Duration::from_secs(2), async || b
            .gw
            .count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "reset")])
            == 1.0)
        .await
    );
    let roll = b.gw.rollups(&["chat"], &["only"]).await?;
    assert_eq!(roll.route("chat"), (1, 1), "a broken stream is a bad event");
    assert_eq!(roll.attempts("only", "reset"), 1);
    billed_for_delivered(&b, 3).await?;
    still_healthy(&b).await
}

#[tokio::test]
async fn a_stalled_stream_is_ended_by_the_idle_timeout_and_counts_as_bad() -> anyhow::Result<()> {
    let _serial = serial().await;
    let b = billed(json!({"hang_after_chunks": 2})).await?;
    let s = b.client.chat_stream("chat-model", json!({})).await?;
    assert_broken(&s, 2);
    let last_content = s.contents().last().map(|e| e.at).unwrap_or_default();
    let gap = s.events.last().map(|e| e.at).unwrap_or_default().saturating_sub(last_content);
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_millis(1600),
        "ended {gap:?} after the last chunk (idle 1 s)"
    );
    assert!(
        eventually(Duration::from_secs(2), async || b.only.state.in_flight() == 0).await,
        "the stalled upstream stream is given up"
    );
    let roll = b.gw.rollups(&["chat"], &["only"]).await?;
    assert_eq!(roll.route("chat"), (1, 1));
    assert_eq!(roll.attempts("only", "idle_timeout"), 1);
    assert_eq!(b.gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "idle_timeout")]), 1.0);
    billed_for_delivered(&b, 2).await?;
    still_healthy(&b).await
}

#[tokio::test]
async fn a_malformed_chunk_is_dropped_and_the_answer_completes() -> anyhow::Result<()> {
    let b = billed(json!({"chunks": 5, "malformed_chunk": 2})).await?;
    let s = b.client.chat_stream("chat-model", json!({"stream_options": {"include_usage": true}})).await?;
    assert!(s.complete(), "{:?}", s.datas());
    assert!(
        s.events.iter().all(|e| e.is_done() || !e.json().is_null()),
        "only valid JSON reaches the client: {:?}",
        s.datas()
    );
    assert_eq!(s.contents().len(), 4);
    assert_eq!(b.gw.count("sluice_stream_events_dropped_total", &[]), 1.0);
    let roll = b.gw.rollups(&["chat"], &["only"]).await?;
    assert_eq!((roll.route("chat"), roll.attempts("only", "ok")), ((1, 0), 1));
    // Billed by the upstream's usage (5 completion tokens), not by what was forwarded.
    let (input, output) = s.usage().ok_or_else(|| anyhow::anyhow!("no usage"))?;
    assert_eq!(output, 5);
    assert!(
        eventually(Duration::from_secs(3), async || b.gw.metric("sluice_reservations_open", &[]) == Some(0.0)).await
    );
    let rows = b.db.settlements().await?;
    assert_eq!(rows.iter().map(|r| r.amount).collect::<Vec<_>>(), [PRICE.cost(input, output)]);
    still_healthy(&b).await
}

#[tokio::test]
async fn a_stream_without_done_is_finalised_at_once_with_its_usage() -> anyhow::Result<()> {
    let b = billed(json!({"chunks": 3, "chunk_ms": 20, "no_done": true})).await?;
    let s = b.client.chat_stream("chat-model", json!({"stream_options": {"include_usage": true}})).await?;
    assert!(s.complete(), "the gateway adds [DONE]: {:?}", s.datas());
    let finish = s.events.iter().find(|e| e.is_finish()).map(|e| e.at).unwrap_or_default();
    let done = s.events.last().map(|e| e.at).unwrap_or_default();
    // The idle timeout is 1 s: waiting for more would show. Settling (SQLite) comes first.
    assert!(
        done.saturating_sub(finish) < Duration::from_millis(200),
        "[DONE] {:?} after the finish chunk",
        done.saturating_sub(finish)
    );
    let (input, output) = s.usage().ok_or_else(|| anyhow::anyhow!("the usage chunk is reported: {:?}", s.datas()))?;
    assert_eq!(output, 3);
    let rows = b.db.settlements().await?;
    let row = rows.first().ok_or_else(|| anyhow::anyhow!("no settlement"))?;
    assert_eq!(
        (row.kind.as_str(), row.amount),
        ("settle", PRICE.cost(input, output)),
        "settled before [DONE] was sent"
    );
    let roll = b.gw.rollups(&["chat"], &["only"]).await?;
    assert_eq!((roll.route("chat"), roll.attempts("only", "ok")), ((1, 0), 1));
    still_healthy(&b).await
}
