//! docs/design.md §13 with a real Redis as the shared tier: what one gateway stored,
//! another answers without its upstream; Redis killed mid-run fails no request (its
//! entries become misses) and is used again once it is back.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_ledger::testing::eventually;
use sluice_tests::redis::RedisServer;
use sluice_tests::{ChaosUpstream, Client, GatewayOptions, Reply, TestGateway, route, yaml};

async fn embed(client: &Client, inputs: &[&str]) -> anyhow::Result<Reply> {
    let body = json!({"model": "embed-model", "input": inputs});
    client.post("/v1/embeddings", body.to_string(), &[]).await
}

fn vectors(r: &Reply) -> Vec<Value> {
    r.json()["data"].as_array().map(|d| d.iter().map(|i| i["embedding"].clone()).collect()).unwrap_or_default()
}

async fn two_gateways(redis: &RedisServer) -> anyhow::Result<(ChaosUpstream, TestGateway, TestGateway)> {
    let up = ChaosUpstream::start("embedder").await?;
    let manifests = yaml(&[up.doc(), route("embed", "embed-model", &[("embedder", 100)])]);
    let opts = GatewayOptions { cache_redis: Some(redis.url.clone()), ..GatewayOptions::default() };
    let a = TestGateway::start_with(&manifests, opts.clone()).await?;
    let b = TestGateway::start_with(&manifests, opts).await?;
    Ok((up, a, b))
}

#[tokio::test]
async fn what_one_gateway_stored_another_answers() -> anyhow::Result<()> {
    let Some(redis) = RedisServer::start().await? else { return Ok(()) };
    let (up, a, b) = two_gateways(&redis).await?;
    let first = embed(&a.client()?, &["alpha", "beta"]).await?;
    assert_eq!((first.status, first.header("x-sluice-cache")), (200, Some("miss")), "{}", first.text());
    assert_eq!(up.counters().embedding_inputs, 2);
    // Written to Redis in the background; then B's first request finds it there.
    assert!(eventually(Duration::from_secs(5), async || redis.keys().await == Some(2)).await, "A stored nothing");
    let hit = embed(&b.client()?, &["alpha", "beta"]).await?;
    assert_eq!(hit.header("x-sluice-cache"), Some("hit"), "gateway B did not find what A stored");
    assert_eq!(vectors(&hit), vectors(&first));
    assert_eq!(up.counters().embedding_inputs, 2, "B sent nothing upstream");
    assert_eq!(
        a.count("sluice_cache_requests_total", &[("route", "embed"), ("kind", "embeddings"), ("result", "miss")]),
        1.0
    );
    assert!(
        b.count("sluice_cache_requests_total", &[("route", "embed"), ("kind", "embeddings"), ("result", "hit")]) >= 1.0
    );
    Ok(())
}

#[tokio::test]
async fn a_redis_outage_fails_no_request_and_ends() -> anyhow::Result<()> {
    let Some(mut redis) = RedisServer::start().await? else { return Ok(()) };
    let (up, a, b) = two_gateways(&redis).await?;
    let (ca, cb) = (a.client()?, b.client()?);
    embed(&ca, &["one"]).await?;
    redis.kill().await?;
    // B never saw "one": with the shared tier gone it is a miss, answered all the same.
    for words in [["one"], ["two"], ["one"]] {
        let r = embed(&cb, &words).await?;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(b.count("sluice_cache_shared_errors_total", &[]) >= 1.0);
    assert!(up.counters().embedding_inputs >= 3, "B's requests went upstream while Redis was down");
    // A still has "one" in process: a hit without Redis.
    assert_eq!(embed(&ca, &["one"]).await?.header("x-sluice-cache"), Some("hit"));

    redis.restart().await?;
    // Back (empty): after their pause both gateways use it again. Each round asks new
    // words, so a hit can only come from Redis: B stores them, A (which never saw them)
    // finds them.
    let mut round = 0;
    let shared_again = eventually(Duration::from_secs(10), async || {
        round += 1;
        let word = format!("after the outage {round}");
        let stored = embed(&cb, &[&word]).await.is_ok_and(|r| r.status == 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
        stored && embed(&ca, &[&word]).await.is_ok_and(|r| r.header("x-sluice-cache") == Some("hit"))
    })
    .await;
    assert!(shared_again, "the shared tier was not used again after Redis came back");
    Ok(())
}
