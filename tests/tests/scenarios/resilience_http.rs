//! Resilience, one upstream HTTP fault per test (docs/design.md §4.2): what the client sees,
//! and what the metrics and the ledger's SLI rollups (after a flush) record.
//! Throttling is not hammered; a 500 once costs one failover; a persistent 503 is
//! demoted after one failure (or, when everything fails, answered 503 naming every
//! candidate); a 400 is passed through after exactly one attempt and not billed.

use std::time::Duration;

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_tests::billing::Price;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, yaml};
use tokio::time::Instant;

async fn pair(
    primary_script: serde_json::Value,
    backup_script: serde_json::Value,
) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    pair_with(primary_script, backup_script, GatewayOptions::default()).await
}

async fn pair_with(
    primary_script: serde_json::Value,
    backup_script: serde_json::Value,
    opts: GatewayOptions,
) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    primary.script(primary_script)?;
    backup.script(backup_script)?;
    let docs = [primary.doc(), backup.doc(), route("chat", "chat-model", &[("primary", 100), ("backup", 50)])];
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    Ok((primary, backup, gw))
}

fn attempts(gw: &TestGateway, upstream: &str, outcome: &str) -> f64 {
    gw.count("sluice_upstream_attempts_total", &[("upstream", upstream), ("outcome", outcome)])
}

/// Requests every 50 ms for 1.5 s while the primary throttles: all served by the
/// backup, and the primary asked once per cooldown: its 429 skips it for 1 s, then it
/// gets a trial (it said when to come back, docs/design.md §4.1), which is throttled
/// again. On tokio's paused clock; it runs again for the rollups, which wait on the
/// ledger.
async fn throttled_primary(script: serde_json::Value, cooldown: &str) -> anyhow::Result<()> {
    let (primary, backup, gw) = pair_with(script, json!({}), GatewayOptions::paused()).await?;
    tokio::time::pause();
    let client = gw.client()?;
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut sent = 0u64;
    let mut failed_over = Vec::new();
    while t0.elapsed() < Duration::from_millis(1500) {
        tick.tick().await;
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("backup")), "{}", r.text());
        if let Some(reason) = r.header("x-sluice-failover") {
            assert_eq!(reason, "http_429");
            failed_over.push(sent);
        }
        sent += 1;
    }
    tokio::time::resume();
    let asked = primary.requests();
    eprintln!("throttle ({cooldown}): {sent} requests in 1.5 s, the throttled primary was asked {asked} times");
    assert_eq!(sent, 31, "a request every 50 ms from 0 to 1.5 s");
    assert_eq!(asked, 2, "the throttled primary is asked once per cooldown");
    // At 0 and, its cooldown over, by the request at 1 s (the next, if the gateway's
    // clock had moved on before it recorded the first 429).
    assert!(failed_over.len() == 2 && failed_over[0] == 0 && (20..=21).contains(&failed_over[1]), "{failed_over:?}");
    assert_eq!(backup.requests(), sent);
    assert_eq!(attempts(&gw, "primary", "http_429"), asked as f64);
    assert_eq!(gw.count("sluice_failovers_total", &[("route", "chat"), ("reason", "http_429")]), asked as f64);
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (sent, 0), "all answered: nothing bad");
    assert_eq!(roll.route_failovers("chat"), asked);
    assert_eq!(roll.attempts("primary", "http_429"), asked);
    assert_eq!(roll.attempts("backup", "ok"), sent);
    Ok(())
}

#[tokio::test]
async fn a_429_with_retry_after_is_not_hammered() -> anyhow::Result<()> {
    throttled_primary(json!({"status": 429, "retry_after": 1}), "Retry-After: 1").await
}

#[tokio::test]
async fn a_429_without_retry_after_is_not_hammered() -> anyhow::Result<()> {
    throttled_primary(json!({"status": 429}), "default 1 s").await
}

#[tokio::test]
async fn a_throttled_only_candidate_waits_for_retry_after_then_answers_429() -> anyhow::Result<()> {
    let only = ChaosUpstream::start("only").await?;
    only.script(json!({"status": 429, "retry_after": 1}))?;
    let docs = [
        only.doc(),
        route("chat", "chat-model", &[("only", 100)]).with("spec.backoff", json!({"maxAttempts": 2, "base": "10ms"})),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    // The rollups below wait on the ledger: on the real clock.
    tokio::time::resume();
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error_kind(), ("rate_limit_error".into(), "rate_limited".into()));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(only.requests(), 2);
    assert!(
        r.elapsed >= Duration::from_secs(1) && r.elapsed < Duration::from_millis(1050),
        "the second walk did not wait for Retry-After: 1: {:?}",
        r.elapsed
    );
    let roll = gw.rollups(&["chat"], &["only"]).await?;
    assert_eq!(roll.route("chat"), (1, 1), "a 429 after every candidate was throttled is a bad event");
    assert_eq!(roll.attempts("only", "http_429"), 2);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "429")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_500_once_costs_one_failover_then_the_primary_serves_again() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(json!({}), json!({})).await?;
    let client = gw.client()?;
    for _ in 0..10 {
        assert_eq!(client.chat("chat-model", json!({})).await?.header("x-sluice-upstream"), Some("primary"));
    }
    primary.script(json!({"status": 500}))?;
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(r.header("x-sluice-failover"), Some("http_5xx"));
    primary.healthy();
    // 10 successes and one failure: 100 × 10/11 still leads the backup's 50.
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(
        (r.status, r.header("x-sluice-upstream"), r.header("x-sluice-attempts")),
        (200, Some("primary"), Some("1"))
    );
    assert_eq!((primary.requests(), backup.requests()), (12, 1));
    assert_eq!(primary.state.requests_with_status(500), 1);
    assert_eq!(attempts(&gw, "primary", "http_5xx"), 1.0);
    assert_eq!(attempts(&gw, "primary", "ok"), 11.0);
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (12, 0));
    assert_eq!(roll.route_failovers("chat"), 1);
    assert_eq!(
        (roll.attempts("primary", "http_5xx"), roll.attempts("primary", "ok"), roll.attempts("backup", "ok")),
        (1, 11, 1)
    );
    Ok(())
}

#[tokio::test]
async fn a_persistent_503_is_demoted_after_one_failure() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(json!({"status": 503}), json!({})).await?;
    let client = gw.client()?;
    for i in 0..20 {
        let r = client.chat("chat-model", json!({})).await?;
        assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("backup")));
        let want = if i == 0 { Some("http_5xx") } else { None };
        assert_eq!(r.header("x-sluice-failover"), want, "request {i}");
    }
    // No history: one failure puts its effective weight at 0, and its trial is only due
    // after openFor/2 (15 s).
    assert_eq!((primary.requests(), backup.requests()), (1, 20));
    assert_eq!(gw.metric("sluice_upstream_effective_weight", &[("upstream", "primary")]), Some(0.0));
    let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
    assert_eq!(roll.route("chat"), (20, 0));
    assert_eq!((roll.attempts("primary", "http_5xx"), roll.attempts("backup", "ok")), (1, 20));
    Ok(())
}

#[tokio::test]
async fn every_candidate_failing_503_is_a_503_naming_each() -> anyhow::Result<()> {
    let [a, b] = ChaosUpstream::start_all(["a", "b"]).await?;
    a.script(json!({"status": 503}))?;
    b.script(json!({"status": 503}))?;
    let docs = [
        a.doc(),
        b.doc(),
        route("chat", "chat-model", &[("a", 100), ("b", 50)])
            .with("spec.backoff", json!({"maxAttempts": 3, "base": "10ms"})),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 503);
    assert_eq!(r.error_kind(), ("api_error".into(), "upstreams_unavailable".into()));
    assert!(
        r.error_message().contains("a: http_5xx") && r.error_message().contains("b: http_5xx"),
        "{}",
        r.error_message()
    );
    assert_eq!(r.header("x-sluice-attempts"), Some("6"));
    assert_eq!((a.requests(), b.requests()), (3, 3), "three walks");
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "503")]), 1.0);
    assert_eq!(attempts(&gw, "a", "http_5xx") + attempts(&gw, "b", "http_5xx"), 6.0);
    let roll = gw.rollups(&["chat"], &["a", "b"]).await?;
    assert_eq!(roll.route("chat"), (1, 1), "one bad event");
    assert_eq!(roll.route_failovers("chat"), 5);
    assert_eq!((roll.attempts("a", "http_5xx"), roll.attempts("b", "http_5xx")), (3, 3));
    Ok(())
}

#[tokio::test]
async fn provider_400s_pass_through_after_one_attempt_and_are_not_billed() -> anyhow::Result<()> {
    let price = Price { input: "3.00", output: "15.00" };
    for code in ["context_length_exceeded", "content_policy_violation"] {
        let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
        primary.script(json!({"status": 400, "error_code": code}))?;
        let r = route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
            .candidate(0, "price", price.json())
            .candidate(1, "price", price.json());
        let opts = GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() };
        let gw = TestGateway::start_with(&yaml(&[primary.doc(), backup.doc(), r]), opts).await?;
        let key = gw.account("acme", 1_000_000_000_000).await?;
        let r = gw.client()?.with_key(&key).chat("chat-model", json!({})).await?;
        assert_eq!(r.status, 400, "{code}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], code, "the provider's reason reaches the client");
        assert!(!r.error_message().is_empty());
        assert_eq!(r.header("x-sluice-attempts"), Some("1"), "{code}");
        assert_eq!(r.header("x-sluice-failover"), None);
        assert_eq!((primary.requests(), backup.requests()), (1, 0), "{code}: exactly one attempt");
        assert_eq!(attempts(&gw, "primary", "http_4xx"), 1.0);
        assert_eq!(gw.count("sluice_requests_total", &[("route", "chat"), ("code", "400")]), 1.0);
        let roll = gw.rollups(&["chat"], &["primary", "backup"]).await?;
        assert_eq!(roll.route("chat"), (0, 0), "{code}: a client error is neither good nor bad");
        assert_eq!(roll.outcomes("primary").into_iter().collect::<Vec<_>>(), [("http_4xx".to_string(), 1)]);
        let ledger = gw.ledger()?;
        gw.return_grants().await;
        let check = ledger.journal_verify("acme").await?;
        assert!(check.is_consistent(), "{check:?}");
        assert_eq!(
            (check.balance_nanos, check.reserved_nanos),
            (1_000_000_000_000, 0),
            "{code}: held from a grant, then released"
        );
        // A client error says nothing about the upstream: it still leads.
        primary.healthy();
        let r = gw.client()?.with_key(&key).chat("chat-model", json!({})).await?;
        assert_eq!(r.header("x-sluice-upstream"), Some("primary"));
    }
    Ok(())
}
