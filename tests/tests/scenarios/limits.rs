//! docs/design.md §5b over real HTTP: a key's limits answer with the OpenAI
//! `x-ratelimit-*` headers, a request over one is refused with 429 in the inbound API's
//! shape (never an attempt, never an upstream's failure), a limit on the account holds
//! all its keys, and a change reaches the gateway within a second.

use std::time::Duration;

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::eventually;
use sluice_ledger::{KeySelector, LimitsUpdate, Meter};
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
