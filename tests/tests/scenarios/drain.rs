//! A gateway told to stop (SIGTERM, as at every rollout) loses nothing: with
//! `--shutdown-delay` it first answers `/readyz` with 503 while still serving new
//! requests, so that load balancers can take it out; then it closes its listener and
//! lets the requests in flight, streams included, finish before it exits.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::process::GatewayProcess;
use sluice_tests::{ChaosUpstream, manifests_file, route, serial, yaml};

/// `--shutdown-delay`: long enough that the requests below fit in it on a busy machine.
const DELAY: Duration = Duration::from_secs(2);

#[tokio::test]
async fn sigterm_drains_then_finishes_streams_in_flight() -> anyhow::Result<()> {
    let _serial = serial().await;
    let slow = ChaosUpstream::start("slow").await?;
    let quick = ChaosUpstream::start("quick").await?;
    // 30 chunks 100 ms apart: a stream that outlives the shutdown delay.
    slow.script(json!({"chunks": 30, "chunk_ms": 100}))?;
    let docs = [
        slow.doc(),
        quick.doc(),
        route("slow", "slow-model", &[("slow", 100)]),
        route("quick", "quick-model", &[("quick", 100)]),
    ];
    let (dir, manifests) = manifests_file(&yaml(&docs))?;
    let ledger = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let delay = format!("{}ms", DELAY.as_millis());
    let args: Vec<String> = [
        "--manifests",
        &manifests.display().to_string(),
        "--ledger",
        &ledger,
        "--auth",
        "none",
        "--shutdown-delay",
        &delay,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut gw = GatewayProcess::serve(&args).await?;
    let client = gw.client()?;
    assert_eq!(client.get("/readyz").await?.status, 200);

    let streaming = tokio::spawn({
        let client = gw.client()?;
        async move { client.chat_stream("slow-model", json!({})).await }
    });
    // The stream is under way before the signal.
    assert!(
        eventually(Duration::from_secs(10), async || slow.state.streams_started() == 1).await,
        "the stream did not start"
    );
    let signalled = Instant::now();
    gw.terminate().await?;

    // Within the delay: not ready, but still serving.
    let not_ready =
        eventually(Duration::from_secs(10), async || client.get("/readyz").await.is_ok_and(|r| r.status == 503)).await;
    assert!(not_ready, "/readyz never answered 503 after SIGTERM:\n{}", gw.log());
    let ready = client.get("/readyz").await?;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("shutting down"));
    let r = client.chat("quick-model", json!({})).await?;
    assert_eq!(r.status, 200, "a request during the delay is served: {}", r.text());

    // After the delay: the listener is closed, and not before.
    let fresh = sluice_tests::Client::new(&gw.base)?;
    let refused = eventually(Duration::from_secs(10), async || fresh.get("/healthz").await.is_err()).await;
    assert!(refused, "new connections are still accepted 10 s after the signal");
    assert!(
        signalled.elapsed() >= DELAY,
        "the listener closed {:?} after the signal, before the delay",
        signalled.elapsed()
    );

    // The stream that was in flight finishes whole, well after the listener closed.
    let stream = streaming.await??;
    assert_eq!(stream.status, 200);
    assert!(stream.complete(), "the stream in flight was cut: {:?}\n{}", stream.datas(), gw.log());
    assert_eq!(stream.contents().len(), 30);
    let code = gw.wait_exit(Duration::from_secs(10)).await?;
    assert_eq!(code, Some(0), "{}", gw.log());
    assert!(signalled.elapsed() >= DELAY, "exited before the delay was over");
    let log = gw.log();
    assert!(log.contains("/readyz now answers 503"), "{log}");
    assert!(log.contains("letting requests in flight finish"), "{log}");
    Ok(())
}
