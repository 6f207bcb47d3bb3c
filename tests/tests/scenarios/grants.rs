//! docs/design.md §5a with real processes on one Postgres ledger: balance grants held in
//! memory by several gateway processes, settlements written in batches.
//!
//! - Two gateways and 600 concurrent clients drain one account that affords a few
//!   hundred requests: only 200 and 402 answers, `balance − reserved` never negative
//!   (sampled from the database every few ms), and once the gateways returned their
//!   grants on SIGTERM the journal's settlements add up to exactly the balance spent,
//!   one per 200.
//! - A gateway killed with SIGKILL under streamed load: every stream whose client saw
//!   `[DONE]` has exactly one settlement, nothing is billed twice, and the dead
//!   process's grant is expired by the survivor's reaper after its validity and the
//!   route deadline.
//! - Postgres restarted under load: requests are served from grants held or refused
//!   with 503 `ledger_unavailable`, never 500, and everything reconciles afterwards.
//!
//! Top-ups reaching every gateway within 1 s are proven in `propagation.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_ledger::testing::{JournalRow, TestDb, eventually};
use sluice_tests::billing::{Price, Sampler, usage_of};
use sluice_tests::client::chat_body;
use sluice_tests::process::GatewayProcess;
use sluice_tests::{ChaosUpstream, manifests_file, route, serial, yaml};
use tempfile::TempDir;
use tokio::task::JoinSet;

const PRICE: Price = Price { input: "3.00", output: "15.00" };
const MAX_TOKENS: u64 = 20;
/// Short, so that a killed process's grant expires within the test.
const VALIDITY: &str = "2s";
/// The routes' deadline: with the validity, when a dead holder's grant expires.
const DEADLINE: &str = "3s";

struct Setup {
    _upstreams: [ChaosUpstream; 2],
    manifests: PathBuf,
    _dir: TempDir,
}

/// `whole-model` (an instant answer) and `stream-model` (8 chunks 25 ms apart), priced.
async fn setup() -> anyhow::Result<Setup> {
    let [whole, streamy] = ChaosUpstream::start_all(["whole", "streamy"]).await?;
    streamy.script(json!({"chunks": 8, "chunk_ms": 25}))?;
    // A fixed first-byte timeout: the watchdog's `auto` (3 × the p99 seen) trips on a
    // machine busy restarting Postgres, and these tests are about money, not latency.
    let docs = [
        whole.doc().with("spec.timeouts.firstByte", "2s"),
        streamy.doc().with("spec.timeouts.firstByte", "2s"),
        route("whole", "whole-model", &[("whole", 100)]).with("spec.deadline", DEADLINE).candidate(
            0,
            "price",
            PRICE.json(),
        ),
        route("stream", "stream-model", &[("streamy", 100)]).with("spec.deadline", DEADLINE).candidate(
            0,
            "price",
            PRICE.json(),
        ),
    ];
    let (dir, manifests) = manifests_file(&yaml(&docs))?;
    Ok(Setup { _upstreams: [whole, streamy], manifests, _dir: dir })
}

fn serve_args(manifests: &Path, ledger: &str, id: &str) -> Vec<String> {
    [
        "--manifests",
        &manifests.display().to_string(),
        "--ledger",
        ledger,
        "--auth",
        "keys",
        "--gateway-id",
        id,
        "--grant-validity",
        VALIDITY,
        "--flush-interval",
        "250ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn body(stream: bool) -> Value {
    let extra = if stream {
        json!({"max_tokens": MAX_TOKENS, "stream_options": {"include_usage": true}})
    } else {
        json!({"max_tokens": MAX_TOKENS})
    };
    chat_body(if stream { "stream-model" } else { "whole-model" }, stream, extra)
}

/// One request as its client saw it.
#[derive(Clone, Debug, Default)]
struct Answer {
    request_id: String,
    status: Option<u16>,
    /// The error body's `error.code`.
    code: Option<String>,
    /// A complete answer: a 200 body, or a stream that ended with `[DONE]`.
    done: bool,
    usage: Option<(u64, u64)>,
    /// A transport error (no answer, or a body cut short).
    error: Option<String>,
}

fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder().no_proxy().tcp_nodelay(true).timeout(Duration::from_secs(30)).build()?)
}

/// Sends one chat completion (streamed or not) with `x-request-id: id` and reads it to
/// its end.
async fn ask(http: &reqwest::Client, base: &str, key: &str, id: &str, stream: bool) -> Answer {
    let mut a = Answer { request_id: id.to_string(), ..Answer::default() };
    let sent = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-request-id", id)
        .json(&body(stream))
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            a.error = Some(e.to_string());
            return a;
        }
    };
    let status = resp.status().as_u16();
    a.status = Some(status);
    let mut text = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => text.extend_from_slice(&c),
            Ok(None) => break,
            Err(e) => {
                a.error = Some(e.to_string());
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&text);
    if status != 200 || !stream {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        a.code = v["error"]["code"].as_str().map(str::to_string);
        a.usage = usage_of(&v["usage"]);
        a.done = status == 200 && a.error.is_none() && a.usage.is_some();
        return a;
    }
    let datas: Vec<&str> = text.split("\n\n").filter_map(|e| e.trim().strip_prefix("data: ")).collect();
    let events: Vec<Value> = datas.iter().filter_map(|d| serde_json::from_str(d).ok()).collect();
    a.usage = events.iter().rev().find_map(|v| usage_of(&v["usage"]));
    a.code = events.iter().find_map(|v| v["error"]["code"].as_str().map(str::to_string));
    a.done = a.error.is_none() && a.code.is_none() && datas.last() == Some(&"[DONE]");
    a
}

/// Settlement rows (`settle`, or `late_settle` after an expiry) per request id.
fn settlements(journal: &[JournalRow]) -> BTreeMap<String, Vec<&JournalRow>> {
    let mut m: BTreeMap<String, Vec<&JournalRow>> = BTreeMap::new();
    for j in journal.iter().filter(|j| j.kind == "settle" || j.kind == "late_settle") {
        m.entry(j.request_id.clone().unwrap_or_default()).or_default().push(j);
    }
    m
}

/// Checks what a run left in the ledger against what its clients saw: every complete
/// answer settled exactly once at the price of its usage, no request settled twice,
/// and the balance spent equal to the settlements' sum. Returns that sum.
fn reconcile(answers: &[Answer], journal: &[JournalRow], opening: i64, balance: i64) -> anyhow::Result<i64> {
    let settled = settlements(journal);
    let doubled: Vec<_> = settled.iter().filter(|(_, rows)| rows.len() > 1).map(|(id, _)| id).collect();
    anyhow::ensure!(doubled.is_empty(), "requests settled more than once: {doubled:?}");
    let mut lost = Vec::new();
    for a in answers.iter().filter(|a| a.done) {
        let (input, output) = a.usage.ok_or_else(|| anyhow::anyhow!("{} has no usage", a.request_id))?;
        match settled.get(&a.request_id).map(|rows| rows[0]) {
            Some(row) if row.kind == "settle" && row.amount == PRICE.cost(input, output) => {}
            other => lost.push((a.request_id.clone(), other.map(|r| (r.kind.clone(), r.amount)))),
        }
    }
    anyhow::ensure!(lost.is_empty(), "complete answers not billed (or billed wrong): {lost:?}");
    // A settlement on a grant moves its amount (`late_settle`: nothing); the account row
    // takes it when the grant posts (docs/design.md §5a).
    let spent: i64 = journal.iter().filter(|j| j.kind == "settle").map(|j| j.amount).sum::<i64>();
    anyhow::ensure!(
        opening - balance == spent,
        "spent {} but the journal's settlements add up to {spent}",
        opening - balance
    );
    Ok(spent)
}

fn statuses(answers: &[Answer]) -> BTreeMap<String, usize> {
    answers.iter().fold(BTreeMap::new(), |mut m, a| {
        let k = match (&a.status, &a.code, &a.error) {
            (Some(s), Some(c), _) => format!("{s} {c}"),
            (Some(s), None, None) => s.to_string(),
            (Some(s), None, Some(_)) => format!("{s} cut"),
            (None, _, _) => "no answer".into(),
        };
        *m.entry(k).or_default() += 1;
        m
    })
}

async fn stop_all(procs: &mut [GatewayProcess]) -> anyhow::Result<()> {
    for p in procs.iter() {
        p.terminate().await?;
    }
    for p in procs.iter_mut() {
        p.wait_exit(Duration::from_secs(30)).await?;
    }
    Ok(())
}

fn logs(procs: &[GatewayProcess]) -> String {
    procs.iter().map(GatewayProcess::log).collect::<Vec<_>>().join("\n---\n")
}

async fn account(ledger: &sluice_ledger::Ledger) -> anyhow::Result<sluice_ledger::Account> {
    ledger.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_and_600_clients_drain_one_account_without_overdraft() -> anyhow::Result<()> {
    const CLIENTS: usize = 600;
    const PER_CLIENT: usize = 8;
    let _serial = serial().await;
    let Some(db) = TestDb::postgres().await? else {
        return Ok(());
    };
    let s = setup().await?;
    let ledger = db.connect().await?;
    let estimate = PRICE.cost(body(false).to_string().len() as u64, MAX_TOKENS);
    let opening = 300 * estimate;
    ledger.create_account("acme", opening).await?;
    let key = ledger.create_key("acme").await?;
    let mut procs = vec![
        GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-a")).await?,
        GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-b")).await?,
    ];
    let bases: Vec<String> = procs.iter().map(|p| p.base.clone()).collect();
    let sampler = Sampler::start(db.connect().await?, "acme", Duration::from_millis(3));

    // Every client asks until it is refused (at most PER_CLIENT times), alternately
    // on the two gateways.
    let http = client()?;
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for c in 0..CLIENTS {
        let (http, key, bases) = (http.clone(), key.clone(), bases.clone());
        tasks.spawn(async move {
            let mut out = Vec::new();
            for i in 0..PER_CLIENT {
                let a = ask(&http, &bases[(c + i) % 2], &key, &format!("c{c}-{i}"), false).await;
                let refused = a.status != Some(200);
                out.push(a);
                if refused {
                    break;
                }
            }
            out
        });
    }
    let mut answers = Vec::new();
    while let Some(out) = tasks.join_next().await {
        answers.extend(out?);
    }
    let took = started.elapsed();
    stop_all(&mut procs).await?;
    let report = sampler.finish().await?;
    let log = || logs(&procs);

    let by_status = statuses(&answers);
    let ok: Vec<&Answer> = answers.iter().filter(|a| a.status == Some(200)).collect();
    eprintln!(
        "{} requests from {CLIENTS} clients in {:.1} s on two gateways: {by_status:?}; account read {} times, min available {}, max reserved {}",
        answers.len(),
        took.as_secs_f64(),
        report.samples,
        report.min_available,
        report.max_reserved
    );
    let others: Vec<&Answer> =
        answers.iter().filter(|a| !matches!(a.status, Some(200 | 402)) || a.error.is_some()).take(5).collect();
    anyhow::ensure!(others.is_empty(), "answers other than 200 and 402: {by_status:?}, e.g. {others:?}\n{}", log());
    anyhow::ensure!(
        answers.iter().filter(|a| a.status == Some(402)).all(|a| a.code.as_deref() == Some("insufficient_quota"))
    );
    anyhow::ensure!(ok.len() >= 300, "the account affords at least 300 requests, {} were served", ok.len());
    anyhow::ensure!(ok.iter().all(|a| a.done), "a 200 without usage");
    anyhow::ensure!(answers.len() > ok.len(), "the account never ran dry: no 402");
    anyhow::ensure!(report.samples >= 20, "the sampler read the account only {} times", report.samples);
    anyhow::ensure!(report.min_available >= 0 && report.min_reserved >= 0, "overdraft seen: {report:?}");
    anyhow::ensure!(report.inconsistent.is_empty(), "journal inconsistent during the run: {:?}", report.inconsistent);

    // Grants returned on SIGTERM; every 200 billed once, at its price.
    let a = account(&ledger).await?;
    anyhow::ensure!(a.reserved_nanos == 0, "reserved {} after both gateways stopped\n{}", a.reserved_nanos, log());
    let open: Vec<_> = db.grants().await?.into_iter().filter(|g| g.state == "open").collect();
    anyhow::ensure!(open.is_empty(), "grants still open after SIGTERM: {open:?}");
    let journal = db.journal().await?;
    let spent = reconcile(&answers, &journal, opening, a.balance_nanos)?;
    let unit = ok[0].usage.map(|(i, o)| PRICE.cost(i, o)).unwrap_or(0);
    anyhow::ensure!(ok.iter().all(|a| a.usage == ok[0].usage), "the same request answered with different usages");
    anyhow::ensure!(spent == ok.len() as i64 * unit, "{} answers × {unit} ≠ {spent} spent", ok.len());
    anyhow::ensure!(settlements(&journal).len() == ok.len(), "settlements for requests that were refused");
    let check = ledger.journal_verify("acme").await?;
    anyhow::ensure!(check.is_consistent(), "{check:?}");
    ledger.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_under_streamed_load_loses_no_settlement_and_its_grant_expires() -> anyhow::Result<()> {
    const CLIENTS: usize = 60;
    let _serial = serial().await;
    let Some(db) = TestDb::postgres().await? else {
        return Ok(());
    };
    let s = setup().await?;
    let ledger = db.connect().await?;
    let opening = 1_000_000_000_000;
    ledger.create_account("acme", opening).await?;
    let key = ledger.create_key("acme").await?;
    let mut victim = GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-victim")).await?;
    let survivor = GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-survivor")).await?;
    let bases = [victim.base.clone(), survivor.base.clone()];

    // Streams in a loop, half on each gateway; after the kill, a client of the dead one
    // moves to the survivor.
    let (http, stop, dead, done) =
        (client()?, Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let mut tasks = JoinSet::new();
    for c in 0..CLIENTS {
        let (http, key, bases, stop, dead, done) =
            (http.clone(), key.clone(), bases.clone(), stop.clone(), dead.clone(), done.clone());
        tasks.spawn(async move {
            let mut out = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let on = if dead.load(Ordering::Relaxed) { 1 } else { c % 2 };
                let a = ask(&http, &bases[on], &key, &format!("c{c}-{i}-{on}"), true).await;
                if a.done {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                out.push(a);
                i += 1;
            }
            out
        });
    }
    let warm = eventually(Duration::from_secs(20), async || done.load(Ordering::Relaxed) >= 150).await;
    anyhow::ensure!(
        warm,
        "the load did not get going: {} streams done\n{}",
        done.load(Ordering::Relaxed),
        victim.log()
    );
    let victim_grants: Vec<i64> =
        db.grants().await?.into_iter().filter(|g| g.holder == "gw-victim" && g.state == "open").map(|g| g.id).collect();
    anyhow::ensure!(!victim_grants.is_empty(), "the victim holds no grant under load");
    victim.kill9().await?;
    let killed = Instant::now();
    dead.store(true, Ordering::Relaxed);
    let before = done.load(Ordering::Relaxed);
    let more = eventually(Duration::from_secs(20), async || done.load(Ordering::Relaxed) >= before + 100).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    while let Some(out) = tasks.join_next().await {
        answers.extend(out?);
    }
    anyhow::ensure!(more, "the survivor did not carry the load:\n{}", survivor.log());

    // The survivor's reaper expires the dead holder's grant once its validity and the
    // route deadline passed (2 s + 3 s), not before.
    let expired = eventually(Duration::from_secs(20), async || {
        db.grants().await.is_ok_and(|gs| gs.iter().filter(|g| g.holder == "gw-victim").all(|g| g.state != "open"))
    })
    .await;
    let reaped_after = killed.elapsed();
    anyhow::ensure!(expired, "the dead gateway's grants are still open 20 s after the kill:\n{}", survivor.log());
    let grants = db.grants().await?;
    for g in grants.iter().filter(|g| g.holder == "gw-victim") {
        anyhow::ensure!(g.state == "expired" || g.state == "returned", "{g:?}");
        anyhow::ensure!(g.expires_at_ms >= g.valid_until_ms + 3000, "expiry not past the deadline: {g:?}");
    }
    anyhow::ensure!(
        grants.iter().any(|g| g.holder == "gw-victim" && g.state == "expired"),
        "no grant of the victim was expired: {grants:?}"
    );
    let mut procs = [survivor];
    stop_all(&mut procs).await?;

    let by_status = statuses(&answers);
    let cut = answers.iter().filter(|a| a.status == Some(200) && !a.done).count();
    eprintln!(
        "kill under streamed load: {} streams {by_status:?}, {cut} cut by the kill; the victim's grants closed {:.1} s after the kill",
        answers.len(),
        reaped_after.as_secs_f64()
    );
    anyhow::ensure!(cut > 0, "the kill cut no stream in flight");
    let a = account(&ledger).await?;
    anyhow::ensure!(a.reserved_nanos == 0, "reserved {} after the reaper and the survivor's return", a.reserved_nanos);
    let journal = db.journal().await?;
    reconcile(&answers, &journal, opening, a.balance_nanos)?;
    let check = ledger.journal_verify("acme").await?;
    anyhow::ensure!(check.is_consistent(), "{check:?}");
    ledger.close().await;
    Ok(())
}

/// `pg_ctlcluster` and the local cluster's version, or why the Postgres restart test
/// cannot run here.
fn local_cluster() -> Result<String, String> {
    let found =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("pg_ctlcluster").is_file()));
    if !found {
        return Err("pg_ctlcluster is not installed".into());
    }
    let versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("no local Postgres cluster: {e}"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match versions.as_slice() {
        [v] => Ok(v.clone()),
        _ => Err(format!("expected one local Postgres cluster, found {versions:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_under_load_is_served_from_grants_or_refused_with_503() -> anyhow::Result<()> {
    const RATE: u32 = 150;
    let _serial = serial().await;
    let version = match local_cluster() {
        Ok(v) => v,
        Err(why) if std::env::var_os("CI").is_some() => {
            anyhow::bail!("the Postgres restart test must run under CI: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return Ok(());
        }
    };
    let Some(db) = TestDb::postgres().await? else {
        return Ok(());
    };
    let s = setup().await?;
    let ledger = db.connect().await?;
    let opening = 1_000_000_000_000;
    ledger.create_account("acme", opening).await?;
    let key = ledger.create_key("acme").await?;
    let mut procs = vec![
        GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-a")).await?,
        GatewayProcess::serve(&serve_args(&s.manifests, &db.url, "gw-b")).await?,
    ];
    let bases: Vec<String> = procs.iter().map(|p| p.base.clone()).collect();

    // Open loop: requests start at a fixed rate whatever the answers' latency, so that
    // some start while the database is down.
    let (http, stop, done) = (client()?, Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let t0 = Instant::now();
    let driver = {
        let (key, stop, done) = (key.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut tasks = JoinSet::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1) / RATE);
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (http, base, key, done) = (http.clone(), bases[n % 2].clone(), key.clone(), done.clone());
                tasks.spawn(async move {
                    let sent = t0.elapsed();
                    let a = ask(&http, &base, &key, &format!("r{n}"), n.is_multiple_of(3)).await;
                    if a.done {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    (sent, t0.elapsed(), a)
                });
                n += 1;
            }
            let mut out = Vec::new();
            while let Some(r) = tasks.join_next().await {
                if let Ok(r) = r {
                    out.push(r);
                }
            }
            out
        })
    };
    let warm = eventually(Duration::from_secs(20), async || done.load(Ordering::Relaxed) >= 200).await;
    anyhow::ensure!(warm, "the load did not get going");

    let restarted = Instant::now();
    let out = tokio::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart", "-m", "fast"])
        .output()
        .await?;
    let restart_took = restarted.elapsed();
    anyhow::ensure!(out.status.success(), "pg_ctlcluster restart failed: {}", String::from_utf8_lossy(&out.stderr));
    let back = eventually(Duration::from_secs(30), async || ledger.account("acme").await.is_ok()).await;
    anyhow::ensure!(back, "Postgres did not come back within 30 s");
    let back_after = restarted.elapsed();
    // Served again after the restart: the gateways' pools reconnect.
    let before = done.load(Ordering::Relaxed);
    let served = eventually(Duration::from_secs(20), async || done.load(Ordering::Relaxed) >= before + 200).await;
    stop.store(true, Ordering::Relaxed);
    let timed = driver.await?;
    anyhow::ensure!(served, "not served again after Postgres came back:\n{}", logs(&procs));
    // Started while the database was down (from the restart's start until it answered).
    let (down_from, down_to) = (restarted - t0, restarted - t0 + back_after);
    let during: Vec<Answer> =
        timed.iter().filter(|(sent, _, _)| *sent >= down_from && *sent < down_to).map(|(_, _, a)| a.clone()).collect();
    let during_status = statuses(&during);
    let slowest = timed.iter().map(|(sent, ended, _)| *ended - *sent).max().unwrap_or_default();
    let answers: Vec<Answer> = timed.into_iter().map(|(_, _, a)| a).collect();
    stop_all(&mut procs).await?;
    let log = || logs(&procs);

    let by_status = statuses(&answers);
    eprintln!(
        "Postgres restart under load: restart took {:.1} s, the ledger answered again after {:.1} s; {} requests {by_status:?}; \
         {} started during the outage {during_status:?}; slowest answer {:.1} s",
        restart_took.as_secs_f64(),
        back_after.as_secs_f64(),
        answers.len(),
        during.len(),
        slowest.as_secs_f64()
    );
    let bad: Vec<&Answer> = answers
        .iter()
        .filter(|a| match a.status {
            Some(200) => false,
            Some(503) => a.code.as_deref() != Some("ledger_unavailable"),
            _ => true,
        })
        .take(5)
        .collect();
    anyhow::ensure!(!during.is_empty(), "no request started while the database was down");
    anyhow::ensure!(
        bad.is_empty(),
        "answers other than 200 and 503 ledger_unavailable: {by_status:?}, e.g. {bad:?}\n{}",
        log()
    );
    let a = account(&ledger).await?;
    anyhow::ensure!(a.reserved_nanos == 0, "reserved {} after both gateways stopped\n{}", a.reserved_nanos, log());
    let journal = db.journal().await?;
    reconcile(&answers, &journal, opening, a.balance_nanos)?;
    let check = ledger.journal_verify("acme").await?;
    anyhow::ensure!(check.is_consistent(), "{check:?}");
    ledger.close().await;
    Ok(())
}
