//! Outages, on the real clock but scaled down through config so that each takes
//! seconds (the rules behind them are tested on injected time in the gateway's
//! `health` tests; here they are seen end to end):
//!
//! - A flapping primary (docs/design.md §4.1): the contract's scenario (503 for 60 s,
//!   one request every 4 s, `openFor` 30 s) 7.5× faster: 503 for 8 s, one request every
//!   400 ms, `openFor` 4 s. The backup answers every request during the outage, the
//!   primary is tried at most once per openFor/2 (not hammered), and serves again
//!   within `openFor` of its recovery.
//! - Error-budget consumption (docs/design.md §2, §3 `budgets`): a route whose only upstream
//!   fails with 503 for 12 s at 40 req/s (the same ~500 bad events as 2 minutes at
//!   4 req/s). Once the rollups are flushed (every 1 s here), `sluice-gateway budgets`
//!   (the real binary) shows exactly the bad and total events the clients saw, the
//!   consumption and burn rates they imply, and the state; a budget over a healthy
//!   route next to it stays Healthy.
//!
//! Time bounds are the rules' own (a slow machine makes fewer trials, never more) or
//! leave seconds of slack; waits for state poll.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_ledger::testing::eventually;
use sluice_tests::load::{Shot, open_loop};
use sluice_tests::process;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, error_budget, route, serial, yaml};

const GAP: Duration = Duration::from_millis(400);
const OPEN_FOR: Duration = Duration::from_secs(4);
const OUTAGE: Duration = Duration::from_secs(8);

#[tokio::test]
async fn a_flapping_primary_is_served_around_and_found_again_within_open_for() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let open_for = format!("{}s", OPEN_FOR.as_secs());
    let docs = [
        primary.doc().with("spec.circuitBreaker.openFor", open_for.as_str()),
        backup.doc(),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let client = gw.client()?;
    let mut sent = 0u64;
    for _ in 0..2 {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("primary")));
        sent += 1;
        tokio::time::sleep(GAP).await;
    }
    primary.script(json!({"status": 503}))?;
    let outage = Instant::now();
    while outage.elapsed() < OUTAGE {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(
            (r.status, r.header("x-sluice-upstream")),
            (200, Some("backup")),
            "at {:?} into the outage: {}",
            outage.elapsed(),
            r.text()
        );
        sent += 1;
        tokio::time::sleep(GAP).await;
    }
    let trials = primary.requests() - 2;
    primary.healthy();
    let recovered = Instant::now();
    let mut back_after = None;
    // Polls at the scenario's pace, with a limit far beyond the bound asserted below.
    while recovered.elapsed() < 5 * OPEN_FOR {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 200);
        sent += 1;
        if r.header("x-sluice-upstream") == Some("primary") {
            back_after = Some(recovered.elapsed());
            break;
        }
        tokio::time::sleep(GAP).await;
    }
    eprintln!(
        "flapping: primary tried {trials} times during the {OUTAGE:?} outage; serving again {back_after:?} after recovering (openFor {OPEN_FOR:?})"
    );
    let back_after =
        back_after.ok_or_else(|| anyhow::anyhow!("the primary did not serve again within {:?}", 5 * OPEN_FOR))?;
    // A trial is due openFor/2 after the last failure, so the bound leaves openFor/2
    // minus a request gap of slack.
    assert!(back_after <= OPEN_FOR, "primary back after {back_after:?}");
    // Two successes, then 100 × 2/(2 + k) < 50 first holds at k = 3 failures; after
    // that, at most one trial per openFor/2 (2 s): at most 3 + 4 in 8 s, and at least
    // one, as the outage outlasts openFor/2 and a gap.
    assert!((4..=7).contains(&trials), "the failing primary was asked {trials} times in {OUTAGE:?}");
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (sent, 0), "no client saw the outage");
    assert_eq!(roll.route_failovers("chat"), trials);
    assert_eq!(roll.attempts("primary", "http_5xx"), trials);
    assert_eq!(
        gw.count("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "http_5xx")]),
        trials as f64
    );
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "200")]), sent as f64);
    Ok(())
}

fn shot_of(n: u64, at: Duration, r: anyhow::Result<sluice_tests::Reply>) -> Shot {
    match r {
        Ok(r) => Shot { n, at, latency: r.elapsed, status: Some(r.status), ok: r.status == 200, ..Shot::default() },
        Err(e) => Shot { n, at, error: Some(e.to_string()), ..Shot::default() },
    }
}

/// `(good, bad)` as docs/design.md §2 counts them; panics on client errors or no answer.
fn events(shots: &[Shot]) -> (u64, u64) {
    let odd: Vec<_> = shots.iter().filter(|s| !matches!(s.status, Some(200 | 429 | 500..=599))).collect();
    assert!(odd.is_empty(), "answers that are neither good nor bad: {odd:?}");
    let good = shots.iter().filter(|s| s.ok).count() as u64;
    (good, shots.len() as u64 - good)
}

fn report<'a>(json: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    json.as_array()
        .and_then(|a| a.iter().find(|b| b["name"] == name))
        .map(|b| &b["status"])
        .ok_or_else(|| anyhow::anyhow!("no budget {name} in {json}"))
}

fn number(v: &Value) -> f64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_show_a_two_minute_outage() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [flaky, steady] = ChaosUpstream::start_all(["flaky", "steady"]).await?;
    let docs = [
        flaky.doc(),
        steady.doc(),
        route("chat", "chat-model", &[("flaky", 100)]),
        route("other", "other-model", &[("steady", 100)]),
        error_budget("chat-slo", &["chat"], "99", "1h"),
        error_budget("other-slo", &["other"], "99.5", "1h"),
    ];
    let opts = GatewayOptions { flush_interval: Duration::from_secs(1), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let client = gw.client()?;

    // 2 s healthy, 12 s of 503, 2 s healthy; 40 req/s on chat, 20 on the other route.
    let script = flaky.state.clone();
    let outage = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = script.set_script(sluice_chaos::Script { status: Some(503), ..Default::default() });
        tokio::time::sleep(Duration::from_secs(12)).await;
        script.reset_script();
    });
    let run = Duration::from_secs(16);
    let c = client.clone();
    let other = tokio::spawn(async move {
        open_loop(20.0, run, 1000, move |n, at| {
            let c = c.clone();
            async move { shot_of(n, at, c.chat("other-model", json!({})).await) }
        })
        .await
    });
    let c = client.clone();
    let chat = open_loop(40.0, run, 1000, move |n, at| {
        let c = c.clone();
        async move { shot_of(n, at, c.chat("chat-model", json!({})).await) }
    })
    .await;
    let other = other.await?;
    outage.await?;
    let (good, bad) = events(&chat);
    let (other_good, other_bad) = events(&other);
    let total = good + bad;
    // 12 s of 503 at 40 req/s is ~480 bad events; a busy machine sends fewer, and what
    // follows compares the budget with the counts the clients saw, whatever they are.
    assert!(bad >= 240 && good >= 60, "the outage did not happen as scripted: {good} good, {bad} bad");
    assert_eq!(other_bad, 0);

    // The flush loop writes the rollups: wait until the CLI sees every request.
    let ledger_url = format!("sqlite://{}", gw.dir.path().join("ledger.db").display());
    let manifests = gw.manifests.display().to_string();
    let budgets_json = || async {
        let out = process::run(&["budgets", "--manifests", &manifests, "--ledger", &ledger_url, "--json"]).await?;
        anyhow::ensure!(out.code == Some(0), "budgets failed: {}", out.stderr);
        Ok::<Value, anyhow::Error>(serde_json::from_str(&out.stdout)?)
    };
    let mut json = Value::Null;
    let reached = eventually(Duration::from_secs(20), async || {
        let now = match budgets_json().await {
            Ok(now) => now,
            Err(e) => {
                json = Value::String(e.to_string());
                return false;
            }
        };
        let done = report(&now, "chat-slo").is_ok_and(|r| r["total_events"] == total)
            && report(&now, "other-slo").is_ok_and(|r| r["total_events"] == other_good);
        json = now;
        done
    })
    .await;
    anyhow::ensure!(reached, "the rollups never reached {total} events: {json}");

    let chat_slo = report(&json, "chat-slo")?;
    eprintln!("budgets: clients saw {good} good and {bad} bad of {total}; chat-slo: {chat_slo}");
    assert_eq!(chat_slo["good_events"], good);
    assert_eq!(chat_slo["consumed"], bad.to_string(), "occurrences: consumed = bad events");
    // Allowed bad events = ⌊total × (1 − 0.99)⌋; a fraction under ten keeps its tenths.
    let allowed = if total >= 1000 || total % 100 == 0 {
        (total / 100).to_string()
    } else {
        format!("{}.{}", total / 100, total / 10 % 10)
    };
    assert_eq!(chat_slo["budget"], allowed, "allowed bad events = total × (1 − 0.99)");
    let consumed = bad as f64 / (total as f64 * 0.01) * 100.0;
    assert!(
        (number(&chat_slo["consumed_percent"]) - consumed).abs() <= 0.051,
        "consumed {} %, want {consumed:.1}",
        chat_slo["consumed_percent"]
    );
    // Every window holds all of the traffic: the same burn rate in each.
    let burn = bad as f64 / total as f64 / 0.01;
    for w in ["5m", "1h", "6h", "3d"] {
        let got = number(&chat_slo["burn_rates"][w]);
        assert!(got > 0.0 && (got - burn).abs() <= 0.051, "burn rate {w} = {got}, want {burn:.1}");
    }
    assert_eq!(chat_slo["state"], "Exhausted");
    assert_eq!(chat_slo["firing_alerts"], json!(["page", "ticket"]));
    let other_slo = report(&json, "other-slo")?;
    assert_eq!(
        (other_slo["consumed"].clone(), other_slo["state"].clone()),
        (json!("0"), json!("Healthy")),
        "{other_slo}"
    );
    assert_eq!(other_slo["burn_rates"]["1h"], "0.0");

    // The table says the same.
    let out = process::run(&["budgets", "--manifests", &manifests, "--ledger", &ledger_url]).await?;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    eprintln!("{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.first().is_some_and(|h| h.starts_with("NAME") && h.contains("BURN-1H") && h.contains("STATE")),
        "{}",
        out.stdout
    );
    let row = |name: &str| {
        lines.iter().find(|l| l.starts_with(name)).map(|l| l.split_whitespace().collect::<Vec<_>>()).unwrap_or_default()
    };
    let chat_row = row("chat-slo");
    assert!(chat_row.contains(&"Exhausted") && chat_row.contains(&format!("{bad}/{total}").as_str()), "{chat_row:?}");
    assert!(chat_row.contains(&chat_slo["burn_rates"]["1h"].as_str().unwrap_or("?")), "{chat_row:?}");
    let other_row = row("other-slo");
    assert!(other_row.contains(&"Healthy") && other_row.contains(&format!("0/{other_good}").as_str()), "{other_row:?}");

    // The upstream side of the rollups: the retries behind each bad answer.
    let roll = gw.rollups(&["chat"], &["flaky"]).await?;
    assert_eq!(roll.route("chat"), (total, bad));
    assert!(roll.attempts("flaky", "http_5xx") >= bad, "{:?}", roll.outcomes("flaky"));
    Ok(())
}
