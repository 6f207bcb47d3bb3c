//! docs/design.md §5a with the real binary: top-ups and key revocations reach every
//! gateway within 1 s. Gateways authenticate from a key cache and learn of changes
//! through the ledger's change feed (Postgres `LISTEN`/`NOTIFY` plus a periodic check;
//! SQLite the periodic check), so after `admin key revoke` every gateway answers 401,
//! and after `admin account topup` an account refused with 402 is served again, each
//! within 1 s of the command's return, while other traffic keeps the ledger busy.
//!
//! Postgres: two gateway processes on one database. SQLite: one gateway process, with
//! `admin` writing to the same file concurrently.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_ledger::testing::{Backend, TestDb, eventually};
use sluice_tests::billing::Price;
use sluice_tests::client::{Client, chat_body};
use sluice_tests::process::{self, GatewayProcess};
use sluice_tests::{ChaosUpstream, manifests_file, route, serial, yaml};
use tempfile::TempDir;

const PRICE: Price = Price { input: "3.00", output: "15.00" };
const MAX_TOKENS: u64 = 50;
/// The contract (docs/design.md §5a).
const WITHIN: Duration = Duration::from_secs(1);
/// For a gateway's first answers (connections are opened, nothing is measured).
const WARM_UP: Duration = Duration::from_secs(10);

struct Setup {
    _upstream: ChaosUpstream,
    manifests: PathBuf,
    _dir: TempDir,
}

async fn setup() -> anyhow::Result<Setup> {
    let [upstream] = ChaosUpstream::start_all(["fast"]).await?;
    let docs = [upstream.doc(), route("quick", "quick-model", &[("fast", 100)]).candidate(0, "price", PRICE.json())];
    let (dir, manifests) = manifests_file(&yaml(&docs))?;
    Ok(Setup { _upstream: upstream, manifests, _dir: dir })
}

fn serve_args(manifests: &Path, ledger: &str) -> Vec<String> {
    ["--manifests", &manifests.display().to_string(), "--ledger", ledger, "--auth", "keys"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// `sluice-gateway admin --ledger URL ARGS…`; its stdout, after checking it succeeded.
async fn admin(url: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut argv = vec!["admin", "--ledger", url];
    argv.extend_from_slice(args);
    let out = process::run(&argv).await?;
    anyhow::ensure!(out.code == Some(0), "admin {args:?} failed ({:?}): {}", out.code, out.stderr);
    Ok(out.stdout)
}

/// The one request body (so that every reservation estimate is the same).
fn body() -> String {
    chat_body("quick-model", false, json!({"max_tokens": MAX_TOKENS})).to_string()
}

/// Polls every gateway until each has answered `status` once, at most `within` after
/// `since`; how long each took (from `since`), or what they answered last.
async fn every_gateway_answers(
    clients: &[Client],
    status: u16,
    since: Instant,
    within: Duration,
) -> anyhow::Result<Vec<Duration>> {
    let mut took: Vec<Option<Duration>> = vec![None; clients.len()];
    let mut last = vec![0u16; clients.len()];
    let remaining = within.saturating_sub(since.elapsed());
    eventually(remaining, async || {
        for (i, c) in clients.iter().enumerate() {
            if took[i].is_some() {
                continue;
            }
            if let Ok(r) = c.post("/v1/chat/completions", body(), &[]).await {
                last[i] = r.status;
                if r.status == status {
                    took[i] = Some(since.elapsed());
                }
            }
        }
        took.iter().all(Option::is_some)
    })
    .await;
    match took.iter().copied().collect::<Option<Vec<_>>>() {
        Some(took) if took.iter().all(|t| *t <= within) => Ok(took),
        _ => {
            anyhow::bail!("not every gateway answered {status} within {within:?}: last answers {last:?}, took {took:?}")
        }
    }
}

/// Other traffic on another account while `admin` writes: the ledger is busy.
fn background_traffic(
    clients: Vec<Client>,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            for c in &clients {
                if let Ok(r) = c.post("/v1/chat/completions", body(), &[]).await
                    && r.status == 200
                {
                    served.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
}

async fn revocations_and_topups_propagate(backend: Backend, gateways: usize) -> anyhow::Result<()> {
    let _serial = serial().await;
    let Some(db) = TestDb::of(backend).await? else { return Ok(()) };
    let s = setup().await?;
    let ledger = db.connect().await?;
    let estimate = PRICE.cost(body().len() as u64, MAX_TOKENS);
    ledger.create_account("acme", 1_000 * estimate).await?;
    ledger.create_account("busy", 1_000_000 * estimate).await?;
    // The key is made by the CLI, so the gateways first hear of it through the feed too.
    let key = admin(&db.url, &["key", "create", "acme"]).await?.trim_end().to_string();
    let busy_key = ledger.create_key("busy").await?;

    let mut procs = Vec::new();
    for _ in 0..gateways {
        procs.push(GatewayProcess::serve(&serve_args(&s.manifests, &db.url)).await?);
    }
    let clients: Vec<Client> = procs.iter().map(|p| Ok(p.client()?.with_key(&key))).collect::<anyhow::Result<_>>()?;
    let busy: Vec<Client> = procs.iter().map(|p| Ok(p.client()?.with_key(&busy_key))).collect::<anyhow::Result<_>>()?;
    // Every gateway serves the key (and has it cached); the first requests also open
    // connections, so they get more time than the contract.
    every_gateway_answers(&clients, 200, Instant::now(), WARM_UP).await?;
    let (stop, served) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let traffic = background_traffic(busy, stop.clone(), served.clone());

    // A revoked key: 401 everywhere within 1 s of `admin key revoke` returning.
    let out = admin(&db.url, &["key", "revoke", &key]).await?;
    let revoked_at = Instant::now();
    assert_eq!(out, format!("revoked key 1 ({}…) of account acme\n", &key[..14]));
    let revoked = every_gateway_answers(&clients, 401, revoked_at, WITHIN).await;
    let log = || procs.iter().map(GatewayProcess::log).collect::<Vec<_>>().join("\n---\n");
    let revoked = revoked.map_err(|e| anyhow::anyhow!("{e}\n{}", log()))?;
    let r = clients[0].post("/v1/chat/completions", body(), &[]).await?;
    assert_eq!(r.error_kind(), ("authentication_error".into(), "invalid_api_key".into()), "{}", r.text());
    // Again: a no-op that says so.
    let out = admin(&db.url, &["key", "revoke", "1"]).await?;
    assert!(out.starts_with(&format!("key 1 ({}…) of account acme was already revoked at ", &key[..14])), "{out}");
    // An unknown id: a clear error naming it, and a failed command.
    let unknown = process::run(&["admin", "--ledger", &db.url, "key", "revoke", "99"]).await?;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    assert!(unknown.stderr.contains("no API key with id 99 in this ledger"), "{}", unknown.stderr);

    // An account that cannot pay: 402 everywhere; after a top-up, 200 everywhere.
    let broke = ledger.create_account("broke", estimate - 1).await?;
    let broke_key = admin(&db.url, &["key", "create", "broke"]).await?.trim_end().to_string();
    let clients_broke: Vec<Client> =
        procs.iter().map(|p| Ok(p.client()?.with_key(&broke_key))).collect::<anyhow::Result<_>>()?;
    every_gateway_answers(&clients_broke, 402, Instant::now(), WARM_UP)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", log()))?;
    let r = clients_broke[0].post("/v1/chat/completions", body(), &[]).await?;
    assert_eq!(r.error_kind(), ("insufficient_quota".into(), "insufficient_quota".into()), "{}", r.text());
    let amount = sluice_ledger::format_usd(100 * estimate);
    admin(&db.url, &["account", "topup", "broke", "--amount", &amount]).await?;
    let topped_up_at = Instant::now();
    let served_again = every_gateway_answers(&clients_broke, 200, topped_up_at, WITHIN)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", log()))?;

    stop.store(true, Ordering::Relaxed);
    traffic.await?;
    let b = ledger.account_by_id(broke.id).await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert!(b.balance_nanos >= b.reserved_nanos, "{b:?}");
    eprintln!(
        "{} with {gateways} gateway(s): revocation refused after {revoked:?}, top-up served after {served_again:?}; {} background requests served meanwhile",
        ledger.kind(),
        served.load(Ordering::Relaxed)
    );
    assert!(served.load(Ordering::Relaxed) > 0, "the background traffic was served");
    ledger.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_postgres_hear_revocations_and_topups_within_1s() -> anyhow::Result<()> {
    revocations_and_topups_propagate(Backend::Postgres, 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_sqlite_hears_revocations_and_topups_within_1s() -> anyhow::Result<()> {
    revocations_and_topups_propagate(Backend::Sqlite, 1).await
}
