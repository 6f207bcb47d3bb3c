//! docs/design.md §4.2: a connect error fails over at once. A refused primary must cost almost
//! nothing compared with a route whose only candidate is healthy.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_tests::{ChaosUpstream, TestGateway, median, ms, refused_url, route, serial, upstream_doc, yaml};

const ROUNDS: usize = 21;
/// The contract's bound on the extra cost of a refused primary.
const MAX_OVERHEAD: Duration = Duration::from_millis(5);

#[tokio::test]
async fn a_refused_primary_costs_under_5ms() -> anyhow::Result<()> {
    let _serial = serial().await;
    let backup = ChaosUpstream::start("backup").await?;
    let direct = ChaosUpstream::start("direct").await?;
    let docs = [
        // openFor 1ms: the demoted primary gets its trial on every request, so every
        // request really pays for the refused connection first.
        upstream_doc("refused", &refused_url().await?).with("spec.circuitBreaker.openFor", "1ms"),
        backup.doc(),
        direct.doc(),
        route("failover", "failover-model", &[("refused", 100), ("backup", 50)]),
        route("single", "single-model", &[("direct", 100)]),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let client = gw.client()?;
    // Warm both paths (connection pools, lazy statics).
    for model in ["failover-model", "single-model"] {
        assert_eq!(client.chat(model, json!({})).await?.status, 200);
    }
    let connects_before =
        gw.count("sluice_upstream_attempts_total", &[("upstream", "refused"), ("outcome", "connect")]);

    let (mut via_failover, mut via_single) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // Interleaved, so that both see the same machine load.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let t0 = Instant::now();
        let r = client.chat("failover-model", json!({})).await?;
        via_failover.push(t0.elapsed());
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-sluice-upstream"), Some("backup"));
        assert_eq!(r.header("x-sluice-failover"), Some("connect"), "the refused primary was tried first");
        let t0 = Instant::now();
        let r = client.chat("single-model", json!({})).await?;
        via_single.push(t0.elapsed());
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-sluice-attempts"), Some("1"));
    }
    let connects = gw.count("sluice_upstream_attempts_total", &[("upstream", "refused"), ("outcome", "connect")])
        - connects_before;
    assert_eq!(connects, ROUNDS as f64, "every request tried the refused primary");

    let (f, s) = (median(&via_failover), median(&via_single));
    let overhead = f.saturating_sub(s);
    eprintln!("refused primary: median {:.2} ms vs direct {:.2} ms: overhead {:.2} ms", ms(f), ms(s), ms(overhead));
    assert!(overhead < MAX_OVERHEAD, "a refused primary cost {overhead:?} extra (median {f:?} vs {s:?})");
    Ok(())
}
