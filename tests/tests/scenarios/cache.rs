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

/// A route that caches deterministic completions, on one chaos upstream.
async fn completions_gateway(stale_if_error: Option<&str>) -> anyhow::Result<(ChaosUpstream, TestGateway)> {
    let up = ChaosUpstream::start("writer").await?;
    let mut route = route("chat", "chat-model", &[("writer", 100)]).with("spec.cache.completions", "deterministic");
    if let Some(stale) = stale_if_error {
        route = route.with("spec.cache.staleIfError", stale);
    }
    let gw = TestGateway::start(&yaml(&[up.doc(), route])).await?;
    Ok((up, gw))
}

/// `(path, body)` of one completion on each inbound API, streamed or not.
fn completion(api: &str, stream: bool, temperature: f64) -> (&'static str, String) {
    let said = json!([{"role": "user", "content": "name a colour"}]);
    let (path, body) = match api {
        "chat" => ("/v1/chat/completions", json!({"model": "chat-model", "messages": said})),
        "messages" => ("/v1/messages", json!({"model": "chat-model", "max_tokens": 64, "messages": said})),
        _ => ("/v1/responses", json!({"model": "chat-model", "input": "name a colour"})),
    };
    let mut body = body;
    body["temperature"] = json!(temperature);
    if stream {
        body["stream"] = json!(true);
    }
    (path, body.to_string())
}

#[tokio::test]
async fn every_api_answers_a_repeated_completion_from_the_cache_whole_or_streamed() -> anyhow::Result<()> {
    let (up, gw) = completions_gateway(None).await?;
    let client = gw.client()?;
    for api in ["chat", "messages", "responses"] {
        for stream in [false, true] {
            let (path, body) = completion(api, stream, 0.0);
            let sent = up.requests();
            let first = client.post(path, body.clone(), &[]).await?;
            assert_eq!((first.status, first.header("x-sluice-cache")), (200, Some("miss")), "{api}: {}", first.text());
            // Stored once the answer is complete: a stream's end reaches the cache just
            // after its last byte reached the client.
            let mut again = client.post(path, body.clone(), &[]).await?;
            if again.header("x-sluice-cache") != Some("hit") {
                tokio::time::sleep(Duration::from_millis(100)).await;
                again = client.post(path, body.clone(), &[]).await?;
            }
            assert_eq!((again.status, again.header("x-sluice-cache")), (200, Some("hit")), "{api} stream={stream}");
            assert_eq!(up.requests(), sent + 1, "{api} stream={stream}: the hit went upstream");
            assert_eq!(again.text(), first.text(), "{api} stream={stream}: the replay differs");
            assert!(again.header("age").is_some());
            let kind = if stream { "text/event-stream" } else { "application/json" };
            assert_eq!(again.header("content-type"), Some(kind));
        }
    }
    // The stream and the whole answer are kept apart; a sampled request is not cached.
    let (path, body) = completion("chat", false, 0.9);
    let sent = up.requests();
    for _ in 0..2 {
        let r = client.post(path, body.clone(), &[]).await?;
        assert_eq!(r.header("x-sluice-cache"), None, "a sampled completion was looked up");
    }
    assert_eq!(up.requests(), sent + 2);
    let hits =
        gw.count("sluice_cache_requests_total", &[("route", "chat"), ("kind", "completions"), ("result", "hit")]);
    assert_eq!(hits, 6.0);
    Ok(())
}

#[tokio::test]
async fn errors_and_cut_streams_are_never_stored() -> anyhow::Result<()> {
    let (up, gw) = completions_gateway(None).await?;
    let client = gw.client()?;
    let (path, body) = completion("chat", true, 0.0);
    up.script(json!({"reset_after_chunks": 2}))?;
    let cut = client.post(path, body.clone(), &[]).await?;
    assert!(!cut.text().contains("[DONE]"), "the stream was not cut: {}", cut.text());
    up.healthy();
    let next = client.post(path, body.clone(), &[]).await?;
    assert_eq!(next.header("x-sluice-cache"), Some("miss"), "a cut stream was replayed: {}", next.text());

    let (path, body) = completion("chat", false, 0.0);
    up.script(json!({"status": 400}))?;
    assert_eq!(client.post(path, body.clone(), &[]).await?.status, 400);
    up.healthy();
    let next = client.post(path, body, &[]).await?;
    assert_eq!((next.status, next.header("x-sluice-cache")), (200, Some("miss")), "an error was stored");
    Ok(())
}

#[tokio::test]
async fn stale_if_error_answers_from_the_cache_when_every_candidate_is_down() -> anyhow::Result<()> {
    for stale in [Some("1h"), None] {
        let (up, gw) = completions_gateway(stale).await?;
        let client = gw.client()?;
        let (path, body) = completion("messages", false, 0.0);
        let stored = client.post(path, body.clone(), &[]).await?;
        assert_eq!(stored.status, 200, "{}", stored.text());
        up.script(json!({"status": 503}))?;
        // `no-cache` passes the fresh entry by: the request goes upstream, which fails.
        let r = client.post(path, body.clone(), &[("cache-control", "no-cache")]).await?;
        match stale {
            Some(_) => {
                assert_eq!((r.status, r.header("x-sluice-cache")), (200, Some("stale")), "{}", r.text());
                assert_eq!(r.text(), stored.text());
                let n = gw.count(
                    "sluice_cache_requests_total",
                    &[("route", "chat"), ("kind", "completions"), ("result", "stale")],
                );
                assert_eq!(n, 1.0);
            }
            None => {
                assert_eq!(r.status, 503, "{}", r.text());
                assert_eq!(r.json()["type"], "error", "not Messages' error shape: {}", r.text());
            }
        }
        // `no-store` never reads, not even a stale entry.
        let r = client.post(path, body, &[("cache-control", "no-store")]).await?;
        assert_eq!(r.status, 503);
    }
    Ok(())
}

#[tokio::test]
async fn a_completion_one_gateway_stored_is_a_hit_on_another() -> anyhow::Result<()> {
    let Some(redis) = RedisServer::start().await? else { return Ok(()) };
    let up = ChaosUpstream::start("writer").await?;
    let route = route("chat", "chat-model", &[("writer", 100)]).with("spec.cache.completions", "always");
    let manifests = yaml(&[up.doc(), route]);
    let opts = GatewayOptions { cache_redis: Some(redis.url.clone()), ..GatewayOptions::default() };
    let a = TestGateway::start_with(&manifests, opts.clone()).await?;
    let b = TestGateway::start_with(&manifests, opts).await?;
    let (path, body) = completion("responses", true, 0.8);
    let first = a.client()?.post(path, body.clone(), &[]).await?;
    assert_eq!(first.header("x-sluice-cache"), Some("miss"));
    assert!(eventually(Duration::from_secs(5), async || redis.keys().await == Some(1)).await, "A stored nothing");
    let hit = b.client()?.post(path, body, &[]).await?;
    assert_eq!(hit.header("x-sluice-cache"), Some("hit"), "B did not find what A stored");
    assert_eq!(hit.text(), first.text());
    assert_eq!(up.requests(), 1);
    Ok(())
}
