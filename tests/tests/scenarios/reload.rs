//! docs/design.md §3 hot reload: manifests are re-read on change while serving; a bad new
//! version is refused and the old one keeps serving. Under ~200 req/s for 10 s, two
//! good rewrites and one broken one cost zero failed requests.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, Doc, TestGateway, route, serial, yaml};

const WORKERS: u32 = 8;
/// Per worker: 8 × 25/s = 200 req/s.
const PACE: Duration = Duration::from_millis(40);
const RUN: Duration = Duration::from_secs(10);

struct Sample {
    at: Duration,
    status: Option<u16>,
    upstream: Option<String>,
}

fn manifests(a: &ChaosUpstream, b: &ChaosUpstream, weights: (u32, u32), extra_route: bool, broken: bool) -> String {
    let mut docs: Vec<Doc> = vec![a.doc(), b.doc(), route("chat", "chat-model", &[("a", weights.0), ("b", weights.1)])];
    if extra_route {
        docs.push(route("extra", "extra-model", &[("b", 100)]));
    }
    if broken {
        // Refused by validation: weights are 1..1000.
        docs.push(route("bad", "bad-model", &[("a", 5000)]));
    }
    yaml(&docs)
}

fn reloads(gw: &TestGateway, result: &str) -> f64 {
    gw.count("sluice_config_reloads_total", &[("result", result)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_under_load_fail_no_request() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [a, b] = ChaosUpstream::start_all(["a", "b"]).await?;
    let gw = TestGateway::start(&manifests(&a, &b, (100, 50), false, false)).await?;
    assert_eq!((reloads(&gw, "ok"), reloads(&gw, "rejected")), (1.0, 0.0), "the initial load counts as one");
    let client = gw.client()?;
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            // Staggered start so that the load is spread over each 40 ms.
            tokio::time::sleep(PACE / WORKERS * w).await;
            let mut tick = tokio::time::interval(PACE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while t0.elapsed() < RUN {
                tick.tick().await;
                let at = t0.elapsed();
                let (status, upstream) = match client.chat("chat-model", json!({})).await {
                    Ok(r) => (Some(r.status), r.header("x-sluice-upstream").map(str::to_string)),
                    Err(_) => (None, None),
                };
                out.push(Sample { at, status, upstream });
            }
            out
        }));
    }

    // v2 at 2.5 s: weights swapped.
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(t0.elapsed())).await;
    gw.write_manifests(&manifests(&a, &b, (50, 100), false, false))?;
    let v2_written = t0.elapsed();
    assert!(eventually(Duration::from_secs(3), async || reloads(&gw, "ok") == 2.0).await, "v2 was not loaded");
    let v2_loaded = t0.elapsed();
    // A broken version at 5 s: refused, v2 keeps serving.
    tokio::time::sleep(Duration::from_millis(5000).saturating_sub(t0.elapsed())).await;
    gw.write_manifests(&manifests(&a, &b, (50, 100), true, true))?;
    assert!(
        eventually(Duration::from_secs(3), async || reloads(&gw, "rejected") == 1.0).await,
        "the broken version was not refused"
    );
    assert_eq!(gw.client()?.chat("extra-model", json!({})).await?.status, 404, "nothing of the refused version serves");
    // v3 at 7.5 s: a route added.
    tokio::time::sleep(Duration::from_millis(7500).saturating_sub(t0.elapsed())).await;
    gw.write_manifests(&manifests(&a, &b, (50, 100), true, false))?;
    assert!(eventually(Duration::from_secs(3), async || reloads(&gw, "ok") == 3.0).await, "v3 was not loaded");
    let r = gw.client()?.chat("extra-model", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("b")), "the added route serves");

    let mut samples = Vec::new();
    for w in workers {
        samples.extend(w.await?);
    }
    let failed: Vec<_> = samples.iter().filter(|s| s.status != Some(200)).map(|s| (s.at, s.status)).collect();
    let rate = samples.len() as f64 / RUN.as_secs_f64();
    eprintln!(
        "reload: {} requests ({rate:.0}/s), {} failed; v2 loaded {:.0} ms after writing",
        samples.len(),
        failed.len(),
        (v2_loaded - v2_written).as_secs_f64() * 1000.0
    );
    assert!(failed.is_empty(), "failed requests (time, status): {failed:?}");
    assert!(rate >= 160.0, "only {rate:.0} req/s: the load did not happen");
    // Which config served: v1 (a first) before the rewrite, v2 (b first) once loaded,
    // through the refused version and v3.
    // (A margin on each side: a request is handled a little after it was sent.)
    let margin = Duration::from_millis(200);
    for s in &samples {
        if s.at + margin < v2_written {
            assert_eq!(s.upstream.as_deref(), Some("a"), "v1 at {:?}", s.at);
        } else if s.at > v2_loaded + margin {
            assert_eq!(s.upstream.as_deref(), Some("b"), "v2 at {:?}", s.at);
        }
    }
    assert_eq!((reloads(&gw, "ok"), reloads(&gw, "rejected")), (3.0, 1.0));
    Ok(())
}
