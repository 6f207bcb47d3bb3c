//! docs/design.md §4.1 candidate order: effective weight = weight × success ratio of the
//! upstream's last 100 attempts in the health window. A failing primary falls behind
//! a healthy backup by that arithmetic; a recovered one is found again by a trial after
//! `circuitBreaker.openFor`, or once its failures age out of the window.
//!
//! On tokio's paused clock (`GatewayOptions::paused`), with the contract's own times:
//! a 60 s health window, `openFor` 30 s, and during recovery one request every 4 s. The
//! waits are virtual, so the tests take milliseconds and a busy machine changes no
//! bound. Recovery times are measured from the last failed request, whose send and
//! answer instants bound when the gateway recorded the failure. The rules themselves
//! are tested on injected time in the gateway's `health` tests.

use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, Client, GatewayOptions, TestGateway, route, yaml};
use tokio::time::Instant;

const PRIMARY_WEIGHT: u32 = 100;
const BACKUP_WEIGHT: u32 = 51;
/// Successes of the primary before it starts failing.
const HISTORY: u32 = 20;
const OPEN_FOR: Duration = Duration::from_secs(30);
const WINDOW: Duration = Duration::from_secs(60);
const RECOVERY_GAP: Duration = Duration::from_secs(4);
/// Slack on upper bounds: the requests' own (virtual) time.
const SLACK: Duration = Duration::from_millis(50);

/// The primary's last failure: sent at `.0`, answered at `.1`; the gateway recorded it
/// in between.
type LastFailure = (Instant, Instant);

/// Failed attempts after which the primary's effective weight is below the backup's:
/// the smallest k with `w_p × h / (h + k) < w_b`.
fn failures_to_fall_behind() -> u32 {
    (1..)
        .find(|k| f64::from(PRIMARY_WEIGHT) * f64::from(HISTORY) / f64::from(HISTORY + k) < f64::from(BACKUP_WEIGHT))
        .unwrap_or(0)
}

async fn start(open_for: &str, window: Duration) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        // A breaker that cannot open within 100 samples: only the weights decide here.
        primary.doc().with("spec.circuitBreaker.openFor", open_for).with("spec.circuitBreaker.minimumRequests", 1000),
        backup.doc(),
        route("chat", "chat-model", &[("primary", PRIMARY_WEIGHT), ("backup", BACKUP_WEIGHT)]),
    ];
    let opts = GatewayOptions { health_window: window, ..GatewayOptions::paused() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    tokio::time::pause();
    Ok((primary, backup, gw))
}

/// Serves `HISTORY` requests from the healthy primary, then makes it fail (503) until
/// it is no longer tried first; returns how many requests tried it first, and when the
/// last one was.
async fn demote(
    client: &Client,
    primary: &ChaosUpstream,
    backup: &ChaosUpstream,
) -> anyhow::Result<(u32, LastFailure)> {
    for _ in 0..HISTORY {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.header("x-sluice-upstream"), Some("primary"));
    }
    primary.script(json!({"status": 503}))?;
    let mut tried_first = 0;
    let mut last_failure = (Instant::now(), Instant::now());
    for _ in 0..2 * HISTORY {
        let before = primary.requests();
        let sent = Instant::now();
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 200, "the backup answers every request");
        assert_eq!(r.header("x-sluice-upstream"), Some("backup"));
        if primary.requests() > before {
            assert_eq!(r.header("x-sluice-attempts"), Some("2"));
            assert_eq!(r.header("x-sluice-failover"), Some("http_5xx"));
            tried_first += 1;
            last_failure = (sent, Instant::now());
        } else {
            assert_eq!(r.header("x-sluice-attempts"), Some("1"));
        }
    }
    assert!(backup.requests() >= u64::from(2 * HISTORY));
    Ok((tried_first, last_failure))
}

/// Sends a request every `RECOVERY_GAP` until the primary serves; returns when that
/// request was sent and answered (`None` if not within `limit`); the gateway chose the
/// primary in between.
async fn primary_again(client: &Client, limit: Duration) -> anyhow::Result<Option<(Instant, Instant)>> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let sent = Instant::now();
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 200);
        if r.header("x-sluice-upstream") == Some("primary") {
            return Ok(Some((sent, Instant::now())));
        }
        tokio::time::sleep(RECOVERY_GAP).await;
    }
    Ok(None)
}

#[tokio::test]
async fn a_failing_primary_falls_behind_then_a_trial_makes_it_primary_again() -> anyhow::Result<()> {
    let (primary, backup, gw) = start("30s", WINDOW).await?;
    let client = gw.client()?;
    let expected = failures_to_fall_behind();
    assert_eq!(expected, 20, "100 × 20/(20+k) < 51 first holds at k = 20");

    let (tried_first, last_failure) = demote(&client, &primary, &backup).await?;
    // A demoted upstream gets its trial openFor/2 after its last failure: the requests
    // that showed it no longer leads must all have come before.
    assert!(
        last_failure.0.elapsed() < OPEN_FOR / 2,
        "the demotion phase took {:?}, past the trial",
        last_failure.0.elapsed()
    );
    assert_eq!(tried_first, expected, "the primary was tried first exactly while its effective weight led");
    // Nothing tried it during the second half: it is no longer called first.
    assert_eq!(primary.requests(), u64::from(HISTORY + expected));
    let weight = gw.metric("sluice_upstream_effective_weight", &[("upstream", "primary")]).unwrap_or(-1.0);
    let want = f64::from(PRIMARY_WEIGHT * HISTORY) / f64::from(HISTORY + expected);
    assert!((weight - want).abs() < 1e-9, "effective weight {weight}, want {want}");

    // It recovers; nobody touches the gateway.
    primary.healthy();
    let back = primary_again(&client, 4 * OPEN_FOR).await?;
    let back = back.ok_or_else(|| anyhow::anyhow!("the primary never served again within {:?}", 4 * OPEN_FOR))?;
    // Bounds on the time from the recorded failure to the gateway's choice.
    let (earliest, latest) = (back.0.duration_since(last_failure.1), back.1.duration_since(last_failure.0));
    eprintln!(
        "demotion: fell behind after {tried_first} failures; primary again {:.2} s after its last failure (openFor {OPEN_FOR:?})",
        latest.as_secs_f64()
    );
    assert!(latest >= OPEN_FOR / 2, "tried again {latest:?} after its last failure, before openFor/2");
    assert!(earliest <= OPEN_FOR + RECOVERY_GAP + SLACK, "recovered {earliest:?} after its last failure");
    // The successful trial cleared its failure history: it leads again, alone.
    for _ in 0..5 {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.header("x-sluice-upstream"), Some("primary"));
        assert_eq!(r.header("x-sluice-attempts"), Some("1"));
    }
    assert_eq!(
        gw.metric("sluice_upstream_effective_weight", &[("upstream", "primary")]),
        Some(f64::from(PRIMARY_WEIGHT))
    );
    Ok(())
}

#[tokio::test]
async fn old_failures_age_out_of_the_health_window() -> anyhow::Result<()> {
    // No trial within the test (openFor 1h): only the window can bring it back.
    let window = WINDOW;
    let (primary, backup, gw) = start("1h", window).await?;
    let client = gw.client()?;
    let (tried_first, last_failure) = demote(&client, &primary, &backup).await?;
    assert_eq!(tried_first, failures_to_fall_behind());
    primary.healthy();
    let back = primary_again(&client, 10 * window).await?;
    let back = back.ok_or_else(|| anyhow::anyhow!("the primary never served again"))?;
    // Bounds on the time from the recorded failure to the gateway's choice.
    let (earliest, latest) = (back.0.duration_since(last_failure.1), back.1.duration_since(last_failure.0));
    eprintln!("window: primary again {:.2} s after its last failure (window {window:?})", latest.as_secs_f64());
    assert!(latest >= window, "back {latest:?} after its last failure, before its failures aged out");
    assert!(earliest <= window + RECOVERY_GAP + SLACK, "back {earliest:?} after its last failure");
    Ok(())
}

#[tokio::test]
async fn a_client_that_leaves_during_a_trial_does_not_block_recovery() -> anyhow::Result<()> {
    let (primary, backup, gw) = start("300ms", WINDOW).await?;
    let client = gw.client()?;
    primary.script(json!({"status": 503}))?;
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!((r.header("x-sluice-upstream"), r.header("x-sluice-attempts")), (Some("backup"), Some("2")));

    // openFor has passed: the next request gives the primary its trial, but the
    // primary hangs and the client gives up.
    primary.script(json!({"hang": true}))?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let body = sluice_tests::client::chat_body("chat-model", false, json!({}));
    let gave_up = http
        .post(format!("{}/v1/chat/completions", gw.base))
        .json(&body)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    assert_eq!(primary.requests(), 2, "the trial reached the primary");
    assert!(
        eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await,
        "the abandoned trial was not cancelled"
    );

    // The primary recovers: a later trial must still be possible.
    primary.healthy();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let recovered = primary_again(&client, Duration::from_secs(5)).await?;
    assert!(
        recovered.is_some(),
        "no trial after the abandoned one: the primary stays demoted (backup served {} requests)",
        backup.requests()
    );
    Ok(())
}
