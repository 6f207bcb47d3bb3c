//! The status page (docs/design.md §10) in a real browser: headless Chromium loads
//! `/status` of a gateway in file mode whose route has two chaos candidates checked
//! every second while clients send traffic. One candidate fails (`POST /_chaos`): the
//! page shows the route degraded within one interval plus flush slack while every
//! client still gets 200 from the backup; it recovers: the page shows it operational
//! and the incident with its start and end. Screenshots go to `target/status-screens/`.
//!
//! Chromium is the Debian package `chromium` (scripts/test installs it). Without it the
//! test fails under `CI=true` and is skipped with a note otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_ledger::testing::eventually;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, serial, yaml};

const INTERVAL: Duration = Duration::from_secs(1);
/// The gateway writes a check when it finishes; the page reads it on the next load.
/// Slack for the check in flight and a loaded machine.
const SLACK: Duration = Duration::from_secs(4);

/// The Chromium binary, or `None` (skip) outside CI.
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("sh").args(["-c", &format!("command -v {name}")]).output()
            && out.status.success()
        {
            return Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "chromium is missing (scripts/test installs the Debian package `chromium`)"
    );
    eprintln!("skipped: chromium is not installed (apt-get install chromium)");
    None
}

/// Runs headless Chromium with a fresh profile on `args`; its stdout. Asynchronous: the
/// gateway it loads the page from runs on this test's runtime.
async fn browse(chromium: &Path, args: &[&str]) -> anyhow::Result<String> {
    let profile = tempfile::tempdir()?;
    let run = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| anyhow::anyhow!("chromium {args:?} did not finish within 60 s"))??;
    anyhow::ensure!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `data-status` of the route's section in the DOM Chromium built.
fn route_status(dom: &str, route: &str) -> Option<String> {
    let at = dom.find(&format!("data-route=\"{route}\""))?;
    let section = &dom[dom[..at].rfind("<section")?..];
    let rest = &section[section.find("data-status=\"")? + 13..];
    Some(rest[..rest.find('"')?].to_owned())
}

async fn screenshot(chromium: &Path, url: &str, name: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/status-screens");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(name);
    browse(
        chromium,
        &[&format!("--screenshot={}", file.display()), "--window-size=1100,1800", "--hide-scrollbars", url],
    )
    .await?;
    anyhow::ensure!(file.exists(), "no screenshot at {}", file.display());
    Ok(file)
}

#[tokio::test]
async fn a_browser_sees_a_failing_candidate_degrade_the_route_and_the_recovery_end_the_incident() -> anyhow::Result<()>
{
    let Some(chromium) = chromium() else { return Ok(()) };
    let _serial = serial().await;
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        primary.doc(),
        backup.doc(),
        route("chat", "chat-model", &[("primary", 100), ("backup", 1)])
            .with("spec.synthetic", json!({"interval": "1s"})),
    ];
    let opts = GatewayOptions { flush_interval: Duration::from_millis(500), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let status_url = format!("{}/status", gw.base);
    let runtime = gw.state.current.get().ok_or_else(|| anyhow::anyhow!("no config"))?;
    let route_key = runtime.snapshot.routes[0].key.clone();

    // Clients, all along: every answer must be a 200.
    let stop = Arc::new(AtomicBool::new(false));
    let (served, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients = {
        let (client, stop, served, refused) = (gw.client()?, stop.clone(), served.clone(), refused.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match client.chat("chat-model", json!({})).await {
                    Ok(r) if r.status == 200 => served.fetch_add(1, Ordering::Relaxed),
                    _ => refused.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let http = reqwest::Client::new();
    let page = async || -> String {
        match http.get(&status_url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let operational = eventually(Duration::from_secs(15), async || {
        route_status(&page().await, &route_key).as_deref() == Some("operational")
    })
    .await;
    assert!(operational, "the route is not operational to begin with:\n{}", page().await);

    // The primary fails: the page says so within one interval plus slack.
    let set = http.post(format!("{}/_chaos", primary.base)).json(&json!({"status": 503})).send().await?;
    assert!(set.status().is_success(), "POST /_chaos: {}", set.status());
    let failed_at = Instant::now();
    let degraded = eventually(INTERVAL + SLACK, async || {
        route_status(&page().await, &route_key).as_deref() == Some("degraded_performance")
    })
    .await;
    assert!(degraded, "the route is not degraded {:?} after the failure:\n{}", INTERVAL + SLACK, page().await);
    let noticed = failed_at.elapsed();
    let dom = browse(&chromium, &["--dump-dom", &status_url]).await?;
    assert_eq!(route_status(&dom, &route_key).as_deref(), Some("degraded_performance"), "{dom}");
    assert!(dom.contains(">Degraded performance<"), "the state in words:\n{dom}");
    assert!(dom.contains("ongoing"), "no ongoing incident:\n{dom}");
    let outage_png = screenshot(&chromium, &status_url, "outage.png").await?;
    let during = served.load(Ordering::Relaxed);
    assert!(during > 0 && refused.load(Ordering::Relaxed) == 0, "clients were refused during the outage");

    // Recovery: two good checks with no live failure since (live failures count by
    // the minute, so this takes until the next minute at most).
    let set = http.post(format!("{}/_chaos", primary.base)).json(&json!({})).send().await?;
    assert!(set.status().is_success());
    let recovered = eventually(Duration::from_secs(120), async || {
        route_status(&page().await, &route_key).as_deref() == Some("operational")
    })
    .await;
    assert!(recovered, "the route did not recover:\n{}", page().await);
    let dom = browse(&chromium, &["--dump-dom", &status_url]).await?;
    assert_eq!(route_status(&dom, &route_key).as_deref(), Some("operational"), "{dom}");
    let incident =
        dom.split("<tr data-incident=").nth(1).ok_or_else(|| anyhow::anyhow!("no incident listed:\n{dom}"))?;
    let row = &incident[..incident.find("</tr>").unwrap_or(incident.len())];
    assert!(row.contains("data-resolved=\"true\""), "the incident is not resolved: {row}");
    assert!(row.contains("chat-model: degraded performance"), "{row}");
    assert_eq!(row.matches("<time datetime=").count(), 2, "start and end: {row}");
    let recovered_png = screenshot(&chromium, &status_url, "recovered.png").await?;

    stop.store(true, Ordering::Relaxed);
    clients.await?;
    assert_eq!(refused.load(Ordering::Relaxed), 0, "every client request is served by a candidate");
    eprintln!(
        "status page: degraded after {noticed:?}; {} client requests, all 200; screenshots {} and {}",
        served.load(Ordering::Relaxed),
        outage_png.display(),
        recovered_png.display()
    );
    Ok(())
}
