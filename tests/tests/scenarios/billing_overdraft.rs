//! docs/design.md §5 through the gateway: overdraft is impossible. 500 concurrent requests
//! against an account that can afford exactly 37 reservations: exactly 37 are served,
//! the rest are refused with 402 before any upstream call, `balance − reserved` never
//! goes below zero while they run, and the journal adds up to the final balance.
//!
//! The upstream reports a usage that costs exactly the reservation, so settling gives
//! nothing back and "exactly 37" does not depend on how the requests interleave with
//! the settlements; it also answers after 300 ms, so that all of them overlap.

use std::time::Duration;

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::{Backend, TestDb};
use sluice_tests::billing::{Price, Sampler, usage_of};
use sluice_tests::canned::{CannedUpstream, CannedUsage};
use sluice_tests::client::chat_body;
use sluice_tests::{GatewayOptions, TestGateway, route, serial, yaml};

const CONCURRENT: usize = 500;
const AFFORDABLE: usize = 37;
const MAX_TOKENS: u64 = 100;
const PRICE: Price = Price { input: "2.00", output: "10.00" };

async fn overdraft_is_impossible(backend: Backend) -> anyhow::Result<()> {
    // 500 concurrent requests: not next to a test that measures time.
    let _serial = serial().await;
    let Some(db) = TestDb::of(backend).await? else { return Ok(()) };
    let body = chat_body("chat-model", false, json!({"max_tokens": MAX_TOKENS})).to_string();
    // The reservation: input bound (body bytes) and max_tokens at the candidate's price.
    let estimate = PRICE.cost(body.len() as u64, MAX_TOKENS);
    let usage = CannedUsage { prompt: body.len() as u64, completion: MAX_TOKENS };
    let upstream = CannedUpstream::start_delayed("only", usage, Duration::from_millis(300)).await?;
    let docs = [upstream.doc(), route("chat", "chat-model", &[("only", 100)]).candidate(0, "price", PRICE.json())];
    let opts = GatewayOptions { auth: AuthMode::Keys, ledger: Some(db.url.clone()), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    // One nanodollar short of a 38th reservation.
    let opening = estimate * (AFFORDABLE as i64 + 1) - 1;
    let key = gw.account("acme", opening).await?;
    let ledger = gw.ledger()?;
    let client = gw.client()?.with_key(&key);

    let sampler = Sampler::start(db.connect().await?, "acme", Duration::from_millis(2));
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(CONCURRENT));
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENT {
        let (client, body, start) = (client.clone(), body.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            client.post("/v1/chat/completions", body, &[]).await
        }));
    }
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await??);
    }
    let report = sampler.finish().await?;

    let served: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    let refused: Vec<_> = replies.iter().filter(|r| r.status == 402).collect();
    let other: Vec<_> =
        replies.iter().filter(|r| r.status != 200 && r.status != 402).map(|r| (r.status, r.text())).collect();
    eprintln!(
        "overdraft ({backend:?}): {} served, {} refused, {} other; sampler: {} reads, min available {} nanos, max reserved {} ({} reservations)",
        served.len(),
        refused.len(),
        other.len(),
        report.samples,
        report.min_available,
        report.max_reserved,
        report.max_reserved / estimate
    );
    assert!(other.is_empty(), "unexpected answers: {other:?}");
    assert_eq!(served.len(), AFFORDABLE, "exactly the affordable number of requests is served");
    assert_eq!(refused.len(), CONCURRENT - AFFORDABLE);
    for r in &refused {
        assert_eq!(r.error_kind(), ("insufficient_quota".into(), "insufficient_quota".into()), "{}", r.text());
    }
    assert_eq!(upstream.bodies().len(), AFFORDABLE, "a refused request never reaches the upstream");

    // During the run.
    assert!(report.samples >= 20, "the sampler read the account only {} times", report.samples);
    assert!(report.min_available >= 0, "balance − reserved went down to {}", report.min_available);
    assert!(report.inconsistent.is_empty(), "journal checks during the run: {:?}", report.inconsistent);
    assert!(report.journal_checks > 0);

    // After it: the balance is the opening minus what the 37 cost.
    let mut charged = 0;
    for r in &served {
        let (input, output) =
            usage_of(&r.json()["usage"]).ok_or_else(|| anyhow::anyhow!("an answer without usage: {}", r.text()))?;
        charged += PRICE.cost(input, output);
    }
    // The grant's remainder goes back when it is idle (docs/design.md §5a).
    gw.return_grants().await;
    let account = ledger.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert_eq!(account.balance_nanos, opening - charged, "final balance = opening − Σ usage × price");
    assert_eq!(account.reserved_nanos, 0);
    let check = ledger.journal_verify("acme").await?;
    assert!(check.is_consistent(), "{check:?}");
    assert_eq!(check.uncollected_nanos, 0);
    assert_eq!(ledger.open_reservations().await?, 0);
    assert_eq!(ledger.open_grants().await?, 0);
    let kinds = db.journal_kinds().await?;
    // Grant takes, not a reservation per request; one settlement row per answer.
    let takes = kinds.get("reserve").copied().unwrap_or(0);
    assert!((1..=AFFORDABLE as u64).contains(&takes), "{kinds:?}");
    assert_eq!(kinds.get("settle"), Some(&(AFFORDABLE as u64)), "{kinds:?}");
    assert_eq!(
        gw.count("sluice_requests_total", &[("route", "chat"), ("code", "402")]),
        (CONCURRENT - AFFORDABLE) as f64
    );
    assert_eq!(gw.count("sluice_spend_nanodollars_total", &[("route", "chat")]), charged as f64);
    assert_eq!(gw.metric("sluice_reservations_open", &[]), Some(0.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overdraft_is_impossible_on_sqlite() -> anyhow::Result<()> {
    overdraft_is_impossible(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overdraft_is_impossible_on_postgres() -> anyhow::Result<()> {
    overdraft_is_impossible(Backend::Postgres).await
}
