//! docs/design.md §5 crash safety with the real binary: a gateway killed with SIGKILL leaves
//! its reservations open; a restarted one (any TTL of its own) releases them once they
//! expire, charges nothing twice, and the journal still balances. And a stream whose
//! `[DONE]` a client saw was billed, even if the gateway died right after sending it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use sluice_ledger::Ledger;
use sluice_ledger::testing::{TestDb, eventually};
use sluice_tests::billing::{Price, usage_of};
use sluice_tests::client::chat_body;
use sluice_tests::process::GatewayProcess;
use sluice_tests::{ChaosUpstream, manifests_file, route, serial, yaml};
use tempfile::TempDir;

const PRICE: Price = Price { input: "3.00", output: "15.00" };
const OPENING: i64 = 100_000_000_000;
const FLUSH: Duration = Duration::from_millis(250);

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

struct Setup {
    fast: ChaosUpstream,
    slow: ChaosUpstream,
    manifests: PathBuf,
    _dir: TempDir,
}

/// Two routes: `quick` (an instant upstream) and `slow` (a stream of 1000 chunks 100 ms
/// apart), both priced.
async fn setup() -> anyhow::Result<Setup> {
    let [fast, slow] = ChaosUpstream::start_all(["fast", "slow"]).await?;
    slow.script(json!({"chunks": 1000, "chunk_ms": 100}))?;
    let docs = [
        fast.doc(),
        slow.doc(),
        route("quick", "quick-model", &[("fast", 100)]).candidate(0, "price", PRICE.json()),
        route("slow", "slow-model", &[("slow", 100)]).candidate(0, "price", PRICE.json()),
    ];
    let (dir, manifests) = manifests_file(&yaml(&docs))?;
    Ok(Setup { fast, slow, manifests, _dir: dir })
}

fn serve_args(manifests: &std::path::Path, ledger: &str, ttl: &str) -> Vec<String> {
    [
        "--manifests",
        &manifests.display().to_string(),
        "--ledger",
        ledger,
        "--auth",
        "keys",
        "--reservation-ttl",
        ttl,
        // The per-request reservations of docs/design.md §5, whose orphans this test
        // follows; a killed process's balance grants (§5a) are tested elsewhere.
        "--grant-max",
        "0",
        "--flush-interval",
        &format!("{}ms", FLUSH.as_millis()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn account(ledger: &Ledger) -> anyhow::Result<sluice_ledger::Account> {
    ledger.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_orphaned_by_a_kill_are_released_at_expiry() -> anyhow::Result<()> {
    let _serial = serial().await;
    let s = setup().await?;
    let db = TestDb::sqlite();
    let ledger = db.connect().await?;
    ledger.create_account("acme", OPENING).await?;
    let key = ledger.create_key("acme").await?;

    let mut first = GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "4s")).await?;
    let client = first.client()?.with_key(&key);
    // Two answers settled before the crash.
    let mut charged = 0;
    for i in 0..2 {
        let r = client
            .post(
                "/v1/chat/completions",
                chat_body("quick-model", false, json!({})).to_string(),
                &[("x-request-id", &format!("quick-{i}"))],
            )
            .await?;
        assert_eq!(r.status, 200, "{}", r.text());
        let (input, output) = usage_of(&r.json()["usage"]).ok_or_else(|| anyhow::anyhow!("no usage"))?;
        charged += PRICE.cost(input, output);
    }
    // Four slow streams in flight, each with some content received.
    let mut streams = Vec::new();
    let seen: Arc<[AtomicUsize; 4]> = Arc::default();
    for i in 0..4 {
        let (client, seen) = (client.clone(), seen.clone());
        streams.push(tokio::spawn(async move {
            client
                .chat_stream_counted("slow-model", json!({}), &[("x-request-id", &format!("slow-{i}"))], &seen[i])
                .await
        }));
    }
    let under_way =
        eventually(Duration::from_secs(10), async || seen.iter().all(|n| n.load(Ordering::SeqCst) >= 2)).await;
    assert!(under_way, "the streams did not start: {seen:?}");
    assert_eq!(ledger.open_reservations().await?, 4, "four reservations held by the streams");

    first.kill9().await?;
    let killed_at = unix_ms();
    for t in streams {
        let reply = t.await??;
        assert!(!reply.complete(), "a stream cut by a crash must not look complete: {:?}", reply.datas());
        assert!(!reply.contents().is_empty(), "the stream was mid-answer when the gateway died");
    }
    assert!(
        eventually(Duration::from_secs(5), async || s.slow.state.in_flight() == 0).await,
        "the dead gateway's upstream streams were not closed"
    );
    assert_eq!(ledger.open_reservations().await?, 4, "a kill releases nothing by itself");
    let orphans: Vec<_> = db.reservations().await?.into_iter().filter(|r| r.state == "open").collect();
    let last_expiry = orphans.iter().map(|r| r.expires_at_ms).max().unwrap_or(0);

    // A new process with a shorter TTL of its own: the reaper releases the orphans when
    // *their* expiry passes, not before.
    let second = GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "3s")).await?;
    let mut released_at = None;
    eventually(Duration::from_secs(15), async || {
        let released = ledger.open_reservations().await.is_ok_and(|n| n == 0);
        if released {
            released_at = Some(unix_ms());
        }
        released
    })
    .await;
    let released_at = released_at
        .ok_or_else(|| anyhow::anyhow!("orphaned reservations still open 15 s after the restart:\n{}", second.log()))?;
    let rows = db.reservations_by_request().await?;
    let mut lags = Vec::new();
    for o in &orphans {
        let row = rows.get(&o.request_id).ok_or_else(|| anyhow::anyhow!("reservation {} vanished", o.request_id))?;
        assert_eq!(row.state, "expired", "{row:?}");
        let closed = row.closed_at_ms.unwrap_or(0);
        assert!(closed >= row.expires_at_ms, "released {} ms before its expiry", row.expires_at_ms - closed);
        lags.push(closed - row.expires_at_ms);
    }
    eprintln!(
        "reaper: killed {} ms after the first reservation; orphans expired {} ms after the kill; released {:?} ms after their expiry (flush {} ms); all released {} ms after the last expiry",
        killed_at - orphans.iter().map(|r| r.created_at_ms).min().unwrap_or(0),
        last_expiry - killed_at,
        lags,
        FLUSH.as_millis(),
        released_at - last_expiry
    );
    for lag in &lags {
        // The reaper runs every flush; the rest is slack for a busy machine.
        assert!(*lag <= FLUSH.as_millis() as i64 + 3000, "released {lag} ms after expiry");
    }

    // Nothing charged twice: only the two answers that settled before the crash.
    let journal = db.journal().await?;
    for o in &orphans {
        let kinds: Vec<&str> =
            journal.iter().filter(|j| j.reservation_id == Some(o.id)).map(|j| j.kind.as_str()).collect();
        assert_eq!(kinds, ["reserve", "expire"], "journal of {}", o.request_id);
    }
    for i in 0..2 {
        let id = rows.get(&format!("quick-{i}")).map(|r| r.id);
        let kinds: Vec<&str> = journal.iter().filter(|j| j.reservation_id == id).map(|j| j.kind.as_str()).collect();
        assert_eq!(kinds, ["reserve", "settle"], "journal of quick-{i}");
    }
    let a = account(&ledger).await?;
    assert_eq!((a.balance_nanos, a.reserved_nanos), (OPENING - charged, 0));
    let check = ledger.journal_verify("acme").await?;
    assert!(check.is_consistent(), "{check:?}");

    // The restarted gateway serves and bills as usual.
    let r = second.client()?.with_key(&key).chat("quick-model", json!({})).await?;
    assert_eq!(r.status, 200);
    let (input, output) = usage_of(&r.json()["usage"]).ok_or_else(|| anyhow::anyhow!("no usage"))?;
    let a = account(&ledger).await?;
    assert_eq!((a.balance_nanos, a.reserved_nanos), (OPENING - charged - PRICE.cost(input, output), 0));
    assert!(ledger.journal_verify("acme").await?.is_consistent());
    assert_eq!(ledger.open_reservations().await?, 0);
    assert_eq!(s.fast.requests(), 3);
    Ok(())
}

/// Reads a stream until `data: [DONE]` arrives, then SIGKILLs the gateway at once.
async fn kill_on_done(gw: &mut GatewayProcess, key: &str, request_id: &str) -> anyhow::Result<(u64, u64)> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let body = chat_body("quick-model", true, json!({"stream_options": {"include_usage": true}}));
    let mut resp = http
        .post(format!("{}/v1/chat/completions", gw.base))
        .bearer_auth(key)
        .header("x-request-id", request_id)
        .json(&body)
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    while let Some(chunk) = resp.chunk().await? {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains("data: [DONE]") {
            gw.kill9().await?;
            break;
        }
    }
    let reply_usage = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .find_map(|v| usage_of(&v["usage"]));
    reply_usage.ok_or_else(|| anyhow::anyhow!("the stream carried no usage: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_done_was_seen_is_billed_even_if_the_gateway_dies_at_once() -> anyhow::Result<()> {
    let _serial = serial().await;
    let s = setup().await?;
    let db = TestDb::sqlite();
    let ledger = db.connect().await?;
    ledger.create_account("acme", OPENING).await?;
    let key = ledger.create_key("acme").await?;
    let mut charged = 0;
    for i in 0..3 {
        let mut gw = GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "15m")).await?;
        let id = format!("done-then-kill-{i}");
        let (input, output) = kill_on_done(&mut gw, &key, &id).await?;
        charged += PRICE.cost(input, output);
        let row = db
            .reservations_by_request()
            .await?
            .remove(&id)
            .ok_or_else(|| anyhow::anyhow!("no reservation for {id}"))?;
        assert_eq!(row.state, "settled", "the client saw [DONE] but the reservation is {row:?}");
        assert_eq!(row.charged, Some(PRICE.cost(input, output)));
    }
    let a = account(&ledger).await?;
    assert_eq!((a.balance_nanos, a.reserved_nanos), (OPENING - charged, 0));
    assert!(ledger.journal_verify("acme").await?.is_consistent());
    Ok(())
}
