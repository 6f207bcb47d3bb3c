//! docs/design.md §4.3 first-byte watchdog: a primary that answers `200` and then stays silent
//! is abandoned after `timeouts.firstByte` (failover), or raced against the backup
//! (hedge); the client's headers are held until a body byte exists.
//!
//! On tokio's paused clock (`GatewayOptions::paused`): the gateway, the upstreams and
//! the client wait on virtual time, so the times below are the scripted ones to the
//! millisecond, however busy the machine.

use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, Doc, GatewayOptions, TestGateway, route, yaml};

const WATCHDOG: Duration = Duration::from_millis(50);
/// First-byte time of the backup, as scripted.
const BACKUP_FIRST_BYTE: Duration = Duration::from_millis(30);
/// The contract's allowance on top of watchdog + backup first byte.
const ALLOWANCE: Duration = Duration::from_millis(20);

async fn start(
    primary_script: serde_json::Value,
    backup_script: serde_json::Value,
    action: &str,
) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    primary.script(primary_script)?;
    backup.script(backup_script)?;
    let docs: Vec<Doc> = vec![
        primary.doc().with("spec.timeouts.firstByte", "50ms"),
        backup.doc().with("spec.timeouts.firstByte", "2s"),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
            .with("spec.failover.onFirstByteTimeout", action),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    Ok((primary, backup, gw))
}

#[tokio::test]
async fn a_silent_primary_is_failed_over_within_the_watchdog() -> anyhow::Result<()> {
    // Fresh upstream health each time: one failed attempt demotes the primary.
    for _ in 0..3 {
        let silent = json!({"first_byte_ms": 10_000});
        let (primary, backup, gw) =
            start(silent, json!({"first_byte_ms": BACKUP_FIRST_BYTE.as_millis() as u64}), "failover").await?;
        let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
        assert_eq!(s.status, 200, "{}", s.body);
        assert_eq!(s.header("x-sluice-upstream"), Some("backup"));
        assert_eq!(s.header("x-sluice-attempts"), Some("2"));
        assert_eq!(s.header("x-sluice-failover"), Some("first_byte_timeout"));
        assert!(s.done(), "a complete answer from the backup: {:?}", s.datas());
        assert_eq!(s.contents().len(), 5);
        let first = s.first_event_at().unwrap_or(Duration::MAX);
        // Headers were held until the backup's first byte, not sent by the silent primary.
        assert!(
            s.headers_at + Duration::from_millis(5) >= WATCHDOG + BACKUP_FIRST_BYTE,
            "headers at {:?}",
            s.headers_at
        );
        assert!(first >= WATCHDOG + BACKUP_FIRST_BYTE, "first byte at {first:?} is faster than possible");
        // Without the watchdog the primary would hold the request for 10 s.
        assert!(first <= WATCHDOG + BACKUP_FIRST_BYTE + ALLOWANCE, "first byte at {first:?}");
        assert_eq!((primary.requests(), backup.requests()), (1, 1));
        assert_eq!(
            gw.count("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "first_byte_timeout")]),
            1.0
        );
        // The abandoned attempt is cancelled: its connection goes away.
        assert!(
            eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await,
            "the silent attempt was not cancelled"
        );
        // The next gateway starts on the real clock (its ledger answers off the runtime).
        tokio::time::resume();
    }
    Ok(())
}

#[tokio::test]
async fn hedge_keeps_the_slow_primary_and_takes_the_first_byte_of_either() -> anyhow::Result<()> {
    // The primary is slow (150 ms) but faster than the hedged backup (50 + 400 ms): it wins.
    let (primary, backup, gw) = start(json!({"first_byte_ms": 150}), json!({"first_byte_ms": 400}), "hedge").await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.header("x-sluice-upstream"), Some("primary"), "the primary kept running and won");
    assert_eq!(s.header("x-sluice-attempts"), Some("2"));
    // The primary won: nothing failed over.
    assert_eq!(s.header("x-sluice-failover"), None);
    assert!(s.done());
    let first = s.first_event_at().unwrap_or(Duration::MAX);
    let won = Duration::from_millis(150);
    assert!(first >= won && first < won + ALLOWANCE, "first byte at {first:?}");
    assert_eq!(backup.requests(), 1, "the backup was started at the watchdog");
    assert!(
        eventually(Duration::from_secs(2), async || backup.state.in_flight() == 0).await,
        "the losing hedge was not cancelled"
    );
    assert_eq!(primary.requests(), 1);
    drop(gw);
    tokio::time::resume();

    // The primary is silent for 1 s; the backup, started at 50 ms, answers at ~80 ms.
    let (primary, backup, gw) = start(json!({"first_byte_ms": 1000}), json!({"first_byte_ms": 30}), "hedge").await?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(s.header("x-sluice-attempts"), Some("2"));
    // The silent primary lost to its first-byte watchdog, and says so.
    assert_eq!(s.header("x-sluice-failover"), Some("first_byte_timeout"));
    assert!(s.done());
    let first = s.first_event_at().unwrap_or(Duration::MAX);
    let hedged = WATCHDOG + BACKUP_FIRST_BYTE;
    assert!(first >= hedged && first < hedged + ALLOWANCE, "first byte at {first:?}");
    assert_eq!((primary.requests(), backup.requests()), (1, 1));
    assert!(
        eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await,
        "the slow primary was not cancelled"
    );
    Ok(())
}

#[tokio::test]
async fn non_streaming_requests_are_not_cut_by_the_watchdog() -> anyhow::Result<()> {
    // Providers send headers only when a whole answer is ready: 200 ms is fine here.
    let (primary, backup, gw) = start(json!({"first_byte_ms": 200}), json!({}), "failover").await?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sluice-upstream"), Some("primary"));
    assert!(r.elapsed >= Duration::from_millis(200));
    assert_eq!((primary.requests(), backup.requests()), (1, 0));
    Ok(())
}
