//! docs/design.md §4.2 per-candidate budget: remaining deadline ÷ candidates not yet tried,
//! so that a hung candidate cannot eat the whole deadline; when it runs out, 504.
//!
//! On tokio's paused clock (`GatewayOptions::paused`): the 2 s deadline and its thirds
//! are virtual time, so the bounds are a millisecond's, however busy the machine.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, yaml};
use tokio::time::Instant;

#[tokio::test]
async fn three_hung_candidates_share_a_2s_deadline_then_504() -> anyhow::Result<()> {
    let ups = ChaosUpstream::start_all(["one", "two", "three"]).await?;
    for u in &ups {
        u.script(json!({"hang": true}))?;
    }
    let mut docs: Vec<_> = ups.iter().map(ChaosUpstream::doc).collect();
    docs.push(route("chat", "chat-model", &[("one", 300), ("two", 200), ("three", 100)]).with("spec.deadline", "2s"));
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    let client = gw.client()?;

    // Record when each upstream first saw a request (polled every 2 ms).
    let arrivals: Arc<Mutex<[Option<Instant>; 3]>> = Arc::default();
    let watch = {
        let arrivals = arrivals.clone();
        let states: Vec<_> = ups.iter().map(|u| u.state.clone()).collect();
        tokio::spawn(async move {
            loop {
                let now = Instant::now();
                if let Ok(mut a) = arrivals.lock() {
                    for (slot, s) in a.iter_mut().zip(&states) {
                        if slot.is_none() && s.requests() > 0 {
                            *slot = Some(now);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let t0 = Instant::now();
    let r = client.chat("chat-model", json!({})).await?;
    let elapsed = t0.elapsed();
    watch.abort();

    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.error_kind(), ("api_error".into(), "deadline_exceeded".into()));
    assert_eq!(r.header("x-sluice-attempts"), Some("3"));
    assert_eq!(r.header("x-sluice-failover"), Some("budget,budget,budget"));
    let off = elapsed.as_secs_f64() - 2.0;
    eprintln!("deadline: 504 after {:.3} s", elapsed.as_secs_f64());
    assert!(off.abs() <= 0.01, "504 after {elapsed:?}, want 2 s ± 10 ms");
    for u in &ups {
        assert_eq!(u.requests(), 1, "{} saw {} requests; a timed-out upstream is not retried", u.name, u.requests());
    }
    let starts: Vec<f64> = arrivals
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .iter()
        .map(|a| a.map_or(f64::NAN, |a| a.saturating_duration_since(t0).as_secs_f64()))
        .collect();
    eprintln!(
        "deadline: candidates started at {:?} ms",
        starts.iter().map(|s| (s * 1000.0).round()).collect::<Vec<_>>()
    );
    for (i, (start, want)) in starts.iter().zip([0.0, 2.0 / 3.0, 4.0 / 3.0]).enumerate() {
        assert!((start - want).abs() <= 0.01, "candidate {i} started at {start:.3} s, want {want:.3} s");
    }
    // Every abandoned attempt was cancelled, not left hanging on the upstream.
    for u in &ups {
        assert!(
            eventually(Duration::from_secs(2), async || u.state.in_flight() == 0).await,
            "{} still has a request in flight",
            u.name
        );
    }
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "two"), ("outcome", "budget")]), 1.0);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "504")]), 1.0);
    Ok(())
}
