//! docs/design.md §5 settlement: the charge is the upstream's reported usage at the price of
//! the candidate that served, for whole answers and streams alike (the gateway asks for
//! usage even when the client did not); after a failover only that candidate is billed,
//! at its own price; failed attempts are never billed.
//!
//! The canned upstream reports a usage unrelated to the text it sends (1234 prompt and
//! 567 completion tokens for a three-word answer), so an estimate could never match.

use serde_json::json;
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::{TestDb, eventually};
use sluice_tests::billing::{Price, usage_of};
use sluice_tests::canned::{CANNED_WORDS, CannedUpstream, CannedUsage};
use sluice_tests::client::chat_body;
use sluice_tests::{ChaosUpstream, Doc, GatewayOptions, TestGateway, route, yaml};

const USAGE: CannedUsage = CannedUsage { prompt: 1234, completion: 567 };
const CHEAP: Price = Price { input: "1.00", output: "2.00" };
const DEAR: Price = Price { input: "30.00", output: "60.00" };
const OPENING: i64 = 100_000_000_000;
const DEFAULT_MAX_TOKENS: u64 = 4096;

async fn gateway(docs: &[Doc]) -> anyhow::Result<(TestGateway, sluice_tests::Client)> {
    gateway_on(docs, None).await
}

async fn gateway_on(docs: &[Doc], db: Option<&TestDb>) -> anyhow::Result<(TestGateway, sluice_tests::Client)> {
    let opts = GatewayOptions { auth: AuthMode::Keys, ledger: db.map(|d| d.url.clone()), ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(docs), opts).await?;
    let key = gw.account("acme", OPENING).await?;
    let client = gw.client()?.with_key(&key);
    Ok((gw, client))
}

async fn balance(gw: &TestGateway) -> anyhow::Result<i64> {
    // What the idle grant still holds goes back first (docs/design.md §5a).
    gw.return_grants().await;
    let a = gw.ledger()?.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert_eq!(a.reserved_nanos, 0, "nothing stays reserved after an answer");
    Ok(a.balance_nanos)
}

/// Waits until a stream's settlement (which runs before its last event) is visible.
async fn settled(gw: &TestGateway) -> bool {
    eventually(std::time::Duration::from_secs(5), async || gw.metric("sluice_reservations_open", &[]) == Some(0.0))
        .await
}

#[tokio::test]
async fn settlement_uses_the_usage_the_upstream_reported() -> anyhow::Result<()> {
    let only = CannedUpstream::start("only", USAGE).await?;
    let (gw, client) =
        gateway(&[only.doc(), route("chat", "chat-model", &[("only", 100)]).candidate(0, "price", CHEAP.json())])
            .await?;
    let cost = CHEAP.cost(USAGE.prompt, USAGE.completion);
    let mut want = OPENING;

    // A whole answer.
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(usage_of(&r.json()["usage"]), Some((USAGE.prompt, USAGE.completion)));
    want -= cost;
    assert_eq!(balance(&gw).await?, want, "charged usage × price");

    // A stream whose client asked for usage: it sees the usage chunk, and is billed by it.
    let s = client.chat_stream("chat-model", json!({"stream_options": {"include_usage": true}})).await?;
    assert!(s.complete(), "{:?}", s.datas());
    assert_eq!(s.usage(), Some((USAGE.prompt, USAGE.completion)));
    assert!(settled(&gw).await);
    want -= cost;
    assert_eq!(balance(&gw).await?, want);

    // A stream whose client did not: the gateway asked for usage all the same, billed by
    // it, and stripped the usage chunk.
    let s = client.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete(), "{:?}", s.datas());
    assert_eq!(s.usage(), None, "the usage chunk is stripped: {:?}", s.datas());
    assert_eq!(s.contents().len(), CANNED_WORDS.len());
    assert!(settled(&gw).await);
    want -= cost;
    assert_eq!(balance(&gw).await?, want, "billed by the reported usage, not by the 3 content events");
    let asked: Vec<_> = only.bodies().iter().map(|b| b["stream_options"]["include_usage"].clone()).collect();
    assert_eq!(asked, [json!(null), json!(true), json!(true)], "the gateway asks streams for usage");

    let ledger = gw.ledger()?;
    let check = ledger.journal_verify("acme").await?;
    assert!(check.is_consistent(), "{check:?}");
    assert_eq!(check.uncollected_nanos, 0);
    assert_eq!(
        gw.count("sluice_tokens_total", &[("route", "chat"), ("kind", "output")]),
        (3 * USAGE.completion) as f64
    );
    assert_eq!(gw.count("sluice_tokens_total", &[("route", "chat"), ("kind", "input")]), (3 * USAGE.prompt) as f64);
    assert_eq!(gw.count("sluice_spend_nanodollars_total", &[("route", "chat")]), (3 * cost) as f64);
    Ok(())
}

/// A dear primary that fails, a cheap backup with its own model id that serves.
async fn failover_pair(
    primary_script: serde_json::Value,
    first: Price,
    second: Price,
    db: Option<&TestDb>,
) -> anyhow::Result<(ChaosUpstream, CannedUpstream, TestGateway, sluice_tests::Client)> {
    let primary = ChaosUpstream::start("primary").await?;
    primary.script(primary_script)?;
    let backup = CannedUpstream::start("backup", USAGE).await?;
    let r = route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
        .candidate(0, "price", first.json())
        .candidate(0, "model", "primary-model-id")
        .candidate(1, "price", second.json())
        .candidate(1, "model", "backup-model-id");
    let (gw, client) =
        gateway_on(&[primary.doc().with("spec.timeouts.firstByte", "100ms"), backup.doc(), r], db).await?;
    Ok((primary, backup, gw, client))
}

#[tokio::test]
async fn after_a_failover_only_the_candidate_that_served_is_billed_at_its_price() -> anyhow::Result<()> {
    let body = chat_body("chat-model", false, json!({})).to_string();
    for (name, script, stream) in [
        ("503, whole answer", json!({"status": 503}), false),
        ("503, stream", json!({"status": 503}), true),
        ("reset, stream", json!({"reset_after_chunks": 0}), true),
        ("silent, stream", json!({"first_byte_ms": 5000}), true),
    ] {
        let db = TestDb::sqlite();
        let (primary, backup, gw, client) = failover_pair(script, DEAR, CHEAP, Some(&db)).await?;
        let id = format!("failover-{}", name.replace([',', ' '], "-"));
        let (status, upstream, model, usage) = if stream {
            let s = client
                .chat_stream_with(
                    "chat-model",
                    json!({"stream_options": {"include_usage": true}}),
                    &[("x-request-id", &id)],
                )
                .await?;
            assert!(s.complete(), "{name}: {:?}", s.datas());
            let model = s.events.first().map(|e| e.json()["model"].clone()).unwrap_or_default();
            (s.status, s.header("x-sluice-upstream").map(str::to_string), model, s.usage())
        } else {
            let r = client.post("/v1/chat/completions", body.clone(), &[("x-request-id", &id)]).await?;
            (
                r.status,
                r.header("x-sluice-upstream").map(str::to_string),
                r.json()["model"].clone(),
                usage_of(&r.json()["usage"]),
            )
        };
        assert_eq!(status, 200, "{name}");
        assert_eq!(upstream.as_deref(), Some("backup"), "{name}");
        assert_eq!(model, json!("backup-model-id"), "{name}: the answer names the model that served");
        assert_eq!(usage, Some((USAGE.prompt, USAGE.completion)), "{name}: the answer carries the server's usage");
        assert_eq!(primary.requests(), 1, "{name}");
        assert_eq!(backup.bodies().len(), 1, "{name}");
        assert_eq!(backup.bodies()[0]["model"], "backup-model-id", "{name}: the backup is asked for its own model id");
        assert!(settled(&gw).await);
        assert_eq!(
            balance(&gw).await?,
            OPENING - CHEAP.cost(USAGE.prompt, USAGE.completion),
            "{name}: billed once, at the backup's price"
        );

        // The reservation covered the dearest candidate; one settlement, by the backup.
        let ledger = gw.ledger()?;
        let check = ledger.journal_verify("acme").await?;
        assert!(check.is_consistent(), "{name}: {check:?}");
        assert_eq!(check.uncollected_nanos, 0);
        assert_eq!(check.entries, 5, "{name}: open, grant take, settle, its post to the account, grant return");
        let input_bound = if stream {
            chat_body("chat-model", true, json!({"stream_options": {"include_usage": true}})).to_string().len()
        } else {
            body.len()
        };
        let journal = db.journal().await?;
        // A fresh account's first grant is sized to the first request's estimate.
        let take =
            journal.iter().find(|j| j.kind == "reserve").ok_or_else(|| anyhow::anyhow!("{name}: no grant take"))?;
        assert_eq!(
            take.amount,
            DEAR.cost(input_bound as u64, DEFAULT_MAX_TOKENS),
            "{name}: reserved at the dearest candidate's price"
        );
        let row = journal
            .iter()
            .find(|j| j.kind == "settle" && j.request_id.as_deref() == Some(id.as_str()))
            .ok_or_else(|| anyhow::anyhow!("{name}: no settlement"))?;
        assert_eq!((row.grant_id, row.upstream.as_deref()), (take.grant_id, Some("default/backup")), "{name}");
        assert_eq!(
            (row.input_tokens, row.output_tokens),
            (Some(USAGE.prompt as i64), Some(USAGE.completion as i64)),
            "{name}"
        );
        assert_eq!(row.amount, CHEAP.cost(USAGE.prompt, USAGE.completion), "{name}");
        let spent = gw.count("sluice_spend_nanodollars_total", &[("route", "chat")]);
        assert_eq!(spent, CHEAP.cost(USAGE.prompt, USAGE.completion) as f64, "{name}");
        // Failed attempts are visible in the metrics, and cost nothing.
        let failed: f64 = ["http_5xx", "reset", "first_byte_timeout"]
            .iter()
            .map(|o| gw.count("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", o)]))
            .sum();
        assert_eq!(failed, 1.0, "{name}");
    }
    Ok(())
}

#[tokio::test]
async fn a_backup_dearer_than_the_primary_is_billed_at_its_own_price() -> anyhow::Result<()> {
    let (_primary, _backup, gw, client) = failover_pair(json!({"status": 503}), CHEAP, DEAR, None).await?;
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!((r.status, r.header("x-sluice-upstream")), (200, Some("backup")));
    assert_eq!(balance(&gw).await?, OPENING - DEAR.cost(USAGE.prompt, USAGE.completion));
    let check = gw.ledger()?.journal_verify("acme").await?;
    assert!(check.is_consistent() && check.uncollected_nanos == 0, "the estimate used the dearest price: {check:?}");
    Ok(())
}

#[tokio::test]
async fn failed_attempts_and_failed_requests_are_not_billed() -> anyhow::Result<()> {
    let [a, b] = ChaosUpstream::start_all(["a", "b"]).await?;
    a.script(json!({"status": 503}))?;
    b.script(json!({"status": 502}))?;
    let r = route("chat", "chat-model", &[("a", 100), ("b", 50)])
        .with("spec.backoff", json!({"maxAttempts": 2, "base": "10ms"}))
        .candidate(0, "price", DEAR.json())
        .candidate(1, "price", CHEAP.json());
    let db = TestDb::sqlite();
    let (gw, client) = gateway_on(&[a.doc(), b.doc(), r], Some(&db)).await?;
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 503, "{}", r.text());
    let s = client.chat_stream("chat-model", json!({})).await?;
    assert_eq!(s.status, 503, "{}", s.body);
    assert_eq!((a.requests(), b.requests()), (4, 4));
    assert_eq!(balance(&gw).await?, OPENING, "four failed attempts per request, nothing billed");
    let check = gw.ledger()?.journal_verify("acme").await?;
    assert!(check.is_consistent(), "{check:?}");
    // Grant takes (the stream's larger estimate may grow the grant), both requests held
    // from it and released in memory, then its return: no settlement.
    let kinds: Vec<String> = db.journal().await?.into_iter().map(|j| j.kind).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("open"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("release"), "{kinds:?}");
    assert!(kinds[1..kinds.len() - 1].iter().all(|k| k == "reserve"), "{kinds:?}");
    assert_eq!(gw.count("sluice_spend_nanodollars_total", &[("route", "chat")]), 0.0);
    Ok(())
}
