//! A gateway told to stop (SIGTERM, as at every rollout) loses nothing: with
//! `--shutdown-delay` it first answers `/readyz` with 503 while still serving new
//! requests, so that load balancers can take it out; then it closes its listener and
//! lets the requests in flight, streams included, finish before it exits.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_tests::process::GatewayProcess;
use sluice_tests::{ChaosUpstream, route, serial, yaml};

#[tokio::test]
async fn sigterm_drains_then_finishes_streams_in_flight() -> anyhow::Result<()> {
    let _serial = serial().await;
    let slow = ChaosUpstream::start("slow").await?;
    let quick = ChaosUpstream::start("quick").await?;
    // 12 chunks 100 ms apart: a stream that outlives the shutdown delay.
    slow.script(json!({"chunks": 12, "chunk_ms": 100}))?;
    let docs = [slow.doc(), quick.doc(), route("slow", "slow-model", &[("slow", 100)]), route("quick", "quick-model", &[("quick", 100)])];
    let dir = tempfile::tempdir()?;
    let manifests = dir.path().join("manifests.yaml");
    std::fs::write(&manifests, yaml(&docs))?;
    let ledger = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let args: Vec<String> = ["--manifests", &manifests.display().to_string(), "--ledger", &ledger, "--auth", "none", "--shutdown-delay", "600ms"]
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
    // Let the stream start before the signal.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let signalled = Instant::now();
    gw.terminate().await?;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Within the delay: not ready, but still serving.
    let ready = client.get("/readyz").await?;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("shutting down"));
    let r = client.chat("quick-model", json!({})).await?;
    assert_eq!(r.status, 200, "a request during the delay is served: {}", r.text());

    // After the delay: the listener is closed.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let refused = sluice_tests::Client::new(&gw.base)?.get("/healthz").await;
    assert!(refused.is_err(), "new connections are refused after the delay: {refused:?}");

    // The stream that was in flight finishes whole, well after the listener closed.
    let stream = streaming.await??;
    assert_eq!(stream.status, 200);
    assert!(stream.complete(), "the stream in flight was cut: {:?}\n{}", stream.datas(), gw.log());
    assert_eq!(stream.contents().len(), 12);
    let code = gw.wait_exit(Duration::from_secs(10)).await?;
    assert_eq!(code, Some(0), "{}", gw.log());
    assert!(signalled.elapsed() >= Duration::from_millis(600), "exited before the delay was over");
    let log = gw.log();
    assert!(log.contains("/readyz now answers 503"), "{log}");
    assert!(log.contains("letting requests in flight finish"), "{log}");
    Ok(())
}
