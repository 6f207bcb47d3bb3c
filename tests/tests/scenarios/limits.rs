//! docs/design.md §5b over real HTTP: a key's limits answer with the OpenAI
//! `x-ratelimit-*` headers, a request over one is refused with 429 in the inbound API's
//! shape (never an attempt, never an upstream's failure), a limit on the account holds
//! all its keys, and a change reaches the gateway within a second.

use std::time::Duration;

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::{TestDb, eventually};
use sluice_ledger::{KeySelector, LimitsUpdate, Meter, NANOS_PER_USD};
use sluice_tests::billing::Price;
use sluice_tests::canned::{CannedUpstream, CannedUsage};
use sluice_tests::{GatewayOptions, TestGateway, route, yaml};

const USAGE: CannedUsage = CannedUsage { prompt: 12, completion: 3 };

fn set(meter: Meter, value: Option<i64>) -> LimitsUpdate {
    LimitsUpdate(vec![(meter, value)])
}

#[tokio::test]
async fn a_limited_key_sees_its_standing_and_is_refused_over_it() -> anyhow::Result<()> {
    let up = CannedUpstream::start("only", USAGE).await?;
    let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&[up.doc(), route("chat", "chat-model", &[("only", 100)])]), opts).await?;
    let key = gw.account("acme", 1_000_000_000_000).await?;
    let other = gw.ledger()?.create_key("acme").await?;
    gw.ledger()?.update_key_limits(KeySelector::Key(&key), &set(Meter::Requests, Some(3))).await?;
    let client = gw.client()?.with_key(&key);

    for remaining in ["2", "1", "0"] {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
        assert_eq!(r.header("x-ratelimit-remaining-requests"), Some(remaining));
        let reset = r.header("x-ratelimit-reset-requests").unwrap_or_default();
        assert!(reset.ends_with('s'), "{reset:?}");
    }
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error_kind(), ("requests".to_owned(), "rate_limit_exceeded".to_owned()));
    assert!(r.error_message().contains("on requests per min (RPM): Limit 3, Used 3, Requested 1"), "{}", r.text());
    let secs: u64 = r.header("retry-after").unwrap_or_default().parse()?;
    assert!((1..=60).contains(&secs), "{secs}");
    assert!(r.header("retry-after-ms").is_some());
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None, "a refusal carries the limit it hit, not a standing");
    assert_eq!(r.header("x-sluice-attempts"), None, "no attempt was made");

    // The Messages shape, from the same limit.
    let body = json!({"model": "chat-model", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let r = client.post("/v1/messages", body.to_string(), &[]).await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        (r.json()["type"].as_str(), r.json()["error"]["type"].as_str()),
        (Some("error"), Some("rate_limit_error"))
    );

    // Another key of the account is not limited: served, with no standing to report.
    let r = gw.client()?.with_key(&other).chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-ratelimit-limit-requests"), None);

    assert_eq!(gw.count("sluice_limit_rejections_total", &[("limit", "rpm"), ("key_kind", "key")]), 2.0);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "only"), ("outcome", "ok")]), 4.0);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "429"), ("api", "chat")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn an_account_limit_holds_its_keys_together_and_changes_apply_within_a_second() -> anyhow::Result<()> {
    let up = CannedUpstream::start("only", USAGE).await?;
    let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&[up.doc(), route("chat", "chat-model", &[("only", 100)])]), opts).await?;
    let first = gw.account("acme", 1_000_000_000_000).await?;
    let second = gw.ledger()?.create_key("acme").await?;
    let (a, b) = (gw.client()?.with_key(&first), gw.client()?.with_key(&second));
    // Both keys served (and cached) before the account gets its limit.
    assert_eq!(a.chat("chat-model", json!({})).await?.status, 200);
    assert_eq!(b.chat("chat-model", json!({})).await?.status, 200);
    gw.ledger()?.update_account_limits("acme", &set(Meter::Requests, Some(2))).await?;

    // The change reaches the key cache within 1 s: then two requests of either key fill it.
    let limited = eventually(Duration::from_secs(1), async || {
        a.chat("chat-model", json!({}))
            .await
            .ok()
            .and_then(|r| r.header("x-ratelimit-limit-requests").map(str::to_owned))
            == Some("2".into())
    })
    .await;
    assert!(limited, "the account's new limit did not reach the gateway within 1 s");
    assert_eq!(b.chat("chat-model", json!({})).await?.status, 200);
    let r = a.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.error_message().contains("for account \"acme\""), "{}", r.text());
    assert_eq!(b.chat("chat-model", json!({})).await?.status, 429);
    assert_eq!(gw.count("sluice_limit_rejections_total", &[("limit", "rpm"), ("key_kind", "account")]), 2.0);

    // Removed: served again within 1 s.
    gw.ledger()?.update_account_limits("acme", &set(Meter::Requests, None)).await?;
    let served = eventually(Duration::from_secs(1), async || {
        a.chat("chat-model", json!({})).await.is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "the removed limit still refused after 1 s");
    Ok(())
}

/// 500 requests at once on a key with $1.00 of daily spend left: what the ledger
/// charged ends at most $1.00 (each request holds its estimate of the cap while it runs,
/// and settles what it cost).
async fn spend_cap_under_a_burst(db: Option<&TestDb>) -> anyhow::Result<()> {
    const PRICE: Price = Price { input: "3.00", output: "15.00" };
    const OPENING: i64 = 100 * NANOS_PER_USD;
    // 50 + 500 tokens: $0.00765 an answer; max_tokens 600 makes the estimate larger.
    let up = CannedUpstream::start("only", CannedUsage { prompt: 50, completion: 500 }).await?;
    let docs = [up.doc(), route("chat", "chat-model", &[("only", 100)]).candidate(0, "price", PRICE.json())];
    let opts = GatewayOptions { auth: AuthMode::Keys, ledger: db.map(|d| d.url.clone()), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let key = gw.account("acme", OPENING).await?;
    let cap = NANOS_PER_USD;
    gw.ledger()?.update_key_limits(KeySelector::Key(&key), &set(Meter::DailySpend, Some(cap))).await?;
    let client = gw.client()?.with_key(&key);
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let client = client.clone();
        burst.spawn(async move { client.chat("chat-model", json!({"max_tokens": 600})).await });
    }
    let (mut served, mut capped) = (0, 0);
    let mut estimate = 0;
    for reply in burst.join_all().await {
        let r = reply?;
        match r.status {
            200 => served += 1,
            429 => {
                assert_eq!(r.error_kind(), ("insufficient_quota".to_owned(), "insufficient_quota".to_owned()));
                assert_eq!(r.header("x-should-retry"), Some("false"));
                // "… this request may cost up to $0.0093…": one request's estimate.
                let message = r.error_message();
                let usd: String = message
                    .split("may cost up to $")
                    .nth(1)
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                estimate = sluice_ledger::parse_usd(usd.trim_end_matches('.')).unwrap_or(estimate);
                capped += 1;
            }
            other => anyhow::bail!("unexpected {other}: {}", r.text()),
        }
    }
    gw.return_grants().await;
    let spent = OPENING - gw.ledger()?.account("acme").await?.map_or(0, |a| a.balance_nanos);
    eprintln!("spend cap $1.00: {served} served, {capped} refused, spent ${}", sluice_ledger::format_usd(spent));
    assert!(estimate > 0, "no refusal said its estimate");
    assert!(spent <= cap, "spent {spent} over the cap {cap}");
    assert!(spent + 2 * estimate > cap, "spent only {spent}: the cap stranded more than an estimate");
    assert_eq!(served + capped, 500);
    Ok(())
}

#[tokio::test]
async fn spend_cap_holds_under_a_burst_of_500_on_sqlite() -> anyhow::Result<()> {
    spend_cap_under_a_burst(None).await
}

#[tokio::test]
async fn spend_cap_holds_under_a_burst_of_500_on_postgres() -> anyhow::Result<()> {
    let Some(db) = TestDb::postgres().await? else { return Ok(()) };
    spend_cap_under_a_burst(Some(&db)).await
}
