//! `Upstream.spec.probe`: a dead endpoint is found without traffic; a passing probe
//! does not hide failures (it cannot see a model-level outage).

use std::time::Duration;

use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, TestGateway, refused_url, route, serial, upstream_doc, yaml};

#[tokio::test]
async fn a_failing_probe_demotes_an_idle_upstream_and_a_passing_one_changes_nothing() -> anyhow::Result<()> {
    let _serial = serial().await;
    let healthy = ChaosUpstream::start("healthy").await?;
    let docs = [
        upstream_doc("dead", &refused_url().await?).with("spec.probe.interval", "200ms"),
        healthy.doc().with("spec.probe.interval", "200ms").with("spec.probe.path", "/models"),
        route("chat", "chat-model", &[("dead", 100), ("healthy", 50)]),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    // No request is sent: only probes reach the upstreams.
    let probed = eventually(Duration::from_secs(5), async || {
        gw.count("sluice_upstream_attempts_total", &[("upstream", "dead"), ("outcome", "connect")]) >= 2.0
    })
    .await;
    assert!(probed, "the dead upstream's probe failures were not recorded:\n{}", gw.metrics());
    assert!(
        eventually(Duration::from_secs(5), async || healthy.counters().models >= 2).await,
        "the healthy upstream was not probed"
    );
    // Probe successes are not attempts: nothing was counted as ok for either.
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "healthy"), ("outcome", "ok")]), 0.0);
    assert_eq!(healthy.requests(), 0, "probes are not chat requests");
    // The dead primary is demoted already: the first real request goes to the backup.
    let r = gw.client()?.chat("chat-model", serde_json::json!({})).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sluice-upstream"), Some("healthy"));
    assert_eq!(r.header("x-sluice-attempts"), Some("1"), "the probed-dead primary was not tried first");
    Ok(())
}
