//! `ModelRoute.spec.synthetic` (docs/design.md §10): every candidate gets a real
//! completion every interval, sent to it alone; the checks feed the upstream's health and
//! attempts, never the route's requests, rollups or error budget; their cost is spend of
//! the account `sluice-synthetic`. Intervals of 1 s; every wait polls.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_chaos::Protocol;
use sluice_ledger::testing::eventually;
use sluice_ledger::{JournalCheck, SYNTHETIC_ACCOUNT};
use sluice_tests::{ChaosUpstream, TestGateway, error_budget, route, serial, yaml};

const INTERVAL: Duration = Duration::from_secs(1);

fn checks(gw: &TestGateway, upstream: &str, outcome: &str) -> f64 {
    gw.count("sluice_synthetic_checks_total", &[("route", "chat"), ("upstream", upstream), ("outcome", outcome)])
}

#[tokio::test]
async fn each_candidate_is_checked_once_per_interval_and_the_route_never_sees_it() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [a, b] = ChaosUpstream::start_all(["a", "b"]).await?;
    let price = json!({"input": "3.00", "output": "15.00"});
    let docs = [
        a.doc(),
        b.native_doc("anthropic"),
        route("chat", "chat-model", &[("a", 100), ("b", 50)])
            .candidate(0, "price", price.clone())
            .candidate(1, "price", price)
            .with("spec.synthetic", json!({"interval": "1s"})),
        error_budget("chat-slo", &["chat"], "99.9", "1h"),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;

    // The first checks come within the first interval (jittered), then one per interval.
    let warm =
        eventually(Duration::from_secs(5), async || checks(&gw, "a", "ok") >= 1.0 && checks(&gw, "b", "ok") >= 1.0)
            .await;
    assert!(warm, "no first checks:\n{}", gw.metrics());
    let (a0, b0) = (checks(&gw, "a", "ok"), checks(&gw, "b", "ok"));
    let since = Instant::now();
    let more = eventually(Duration::from_secs(10), async || {
        checks(&gw, "a", "ok") >= a0 + 4.0 && checks(&gw, "b", "ok") >= b0 + 4.0
    })
    .await;
    assert!(more, "fewer than 4 checks per candidate in 10 s:\n{}", gw.metrics());
    let elapsed = since.elapsed();
    // Four more checks of one candidate are due three intervals apart; two per interval
    // would take 1.5 s. The slack covers the scheduler's 100 ms tick and the checks'
    // own latency on a busy machine.
    assert!(elapsed >= 2 * INTERVAL + INTERVAL / 2, "4 checks in {elapsed:?}: more than one per interval");
    let per_interval = elapsed.as_secs_f64() / INTERVAL.as_secs_f64() + 1.0;
    for (up, before) in [("a", a0), ("b", b0)] {
        let n = checks(&gw, up, "ok") - before;
        assert!(n <= per_interval + 1.0, "{up}: {n} checks in {elapsed:?}");
    }
    // Each check is one chat completion at that candidate, in its own protocol.
    let native = |c: &ChaosUpstream, p: Protocol| c.counters().by_protocol.get(&p).copied().unwrap_or(0);
    assert!(
        native(&a, Protocol::OpenAi) >= 5 && native(&b, Protocol::Anthropic) >= 5,
        "a: {:?}\nb: {:?}",
        a.counters(),
        b.counters()
    );

    // Upstream attempts and rollups count them; route requests, rollups and budget do not.
    assert!(gw.count("sluice_upstream_attempts_total", &[("upstream", "a"), ("outcome", "ok")]) >= 5.0);
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat")]), 0.0, "{}", gw.metrics());
    let rollups = gw.rollups(&["chat"], &["a", "b"]).await?;
    assert_eq!(rollups.route("chat"), (0, 0), "checks entered the route's rollups");
    assert!(rollups.attempts("a", "ok") >= 5 && rollups.attempts("b", "ok") >= 5, "{:?}", rollups.outcomes("a"));
    let ledger = gw.ledger()?;
    let runtime = gw.state.current.get().ok_or_else(|| anyhow::anyhow!("no config"))?;
    let report = sluice_gateway::cmd::budgets::evaluate(&ledger, &runtime.snapshot.budgets[0]).await?;
    assert_eq!((report.total_events, report.good_events), (0, 0), "checks entered the error budget");

    // Their cost is spend of sluice-synthetic, whose balance stays 0.
    let spend = ledger.synthetic_spend().await?;
    assert!(spend > 0, "no synthetic spend journalled");
    let account = ledger.account(SYNTHETIC_ACCOUNT).await?.ok_or_else(|| anyhow::anyhow!("no {SYNTHETIC_ACCOUNT}"))?;
    assert_eq!((account.balance_nanos, account.reserved_nanos), (0, 0));
    let verify: JournalCheck = ledger.journal_verify(SYNTHETIC_ACCOUNT).await?;
    assert!(verify.is_consistent(), "{verify:?}");
    Ok(())
}

#[tokio::test]
async fn a_dead_candidate_is_demoted_by_checks_alone_and_still_checked_while_open() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [dead, healthy] = ChaosUpstream::start_all(["dead", "healthy"]).await?;
    dead.script(json!({"status": 503}))?;
    let docs = [
        dead.doc().with("spec.circuitBreaker", json!({"minimumRequests": 2, "openFor": "1m"})),
        healthy.doc(),
        route("chat", "chat-model", &[("dead", 100), ("healthy", 50)])
            .with("spec.synthetic", json!({"interval": "1s"})),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    // No client request: the checks alone open the dead candidate's circuit.
    let opened = eventually(Duration::from_secs(8), async || {
        gw.count("sluice_upstream_attempts_total", &[("upstream", "dead"), ("outcome", "http_5xx")]) >= 2.0
            && gw.state.current.get().is_some_and(|rt| {
                rt.upstreams
                    .get("default/dead")
                    .is_some_and(|u| u.health.circuit(tokio::time::Instant::now()).gauge() == 2)
            })
    })
    .await;
    assert!(opened, "the dead candidate's circuit did not open from checks:\n{}", gw.metrics());
    // The gauges show it without any request having ordered the candidates.
    let gauges = eventually(Duration::from_secs(3), async || {
        gw.metric("sluice_circuit_state", &[("upstream", "dead")]) == Some(2.0)
            && gw.metric("sluice_upstream_effective_weight", &[("upstream", "dead")]) == Some(0.0)
    })
    .await;
    assert!(gauges, "{}", gw.metrics());
    assert_eq!(gw.count("sluice_requests_total", &[("route", "chat")]), 0.0);
    assert!(checks(&gw, "dead", "http_5xx") >= 2.0);

    // The first client request goes straight to the healthy candidate.
    let r = gw.client()?.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sluice-upstream"), Some("healthy"));
    assert_eq!(r.header("x-sluice-attempts"), Some("1"), "the dead candidate was tried first");

    // While the circuit is open (for a minute), checks still reach the dead candidate...
    let sent = dead.requests();
    let still = eventually(Duration::from_secs(5), async || dead.requests() >= sent + 2).await;
    assert!(still, "no check of the open-circuit candidate");
    // ...and as its trial, the first one that succeeds closes the circuit.
    dead.healthy();
    let closed = eventually(Duration::from_secs(5), async || {
        gw.state.current.get().is_some_and(|rt| {
            rt.upstreams.get("default/dead").is_some_and(|u| u.health.circuit(tokio::time::Instant::now()).gauge() == 0)
        })
    })
    .await;
    assert!(closed, "a successful check did not close the circuit:\n{}", gw.metrics());
    assert!(checks(&gw, "dead", "ok") >= 1.0);
    Ok(())
}

#[tokio::test]
async fn a_silent_candidate_fails_its_checks_on_the_first_byte_watchdog_and_each_check_is_a_row() -> anyhow::Result<()>
{
    let _serial = serial().await;
    let [silent, healthy] = ChaosUpstream::start_all(["silent", "healthy"]).await?;
    silent.script(json!({"hang": true}))?;
    let docs = [
        silent.doc().with("spec.timeouts.firstByte", "300ms"),
        healthy.doc(),
        route("chat", "chat-model", &[("silent", 100), ("healthy", 50)])
            .with("spec.synthetic", json!({"interval": "1s"})),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let seen = eventually(Duration::from_secs(8), async || {
        checks(&gw, "silent", "first_byte_timeout") >= 2.0 && checks(&gw, "healthy", "ok") >= 2.0
    })
    .await;
    assert!(seen, "no first-byte timeouts of the silent candidate:\n{}", gw.metrics());
    assert!(
        gw.count("sluice_upstream_attempts_total", &[("upstream", "silent"), ("outcome", "first_byte_timeout")]) >= 2.0
    );

    // The rows the status page reads: the rollups' keys, the outcome labels.
    let ledger = gw.ledger()?;
    let keys = |names: &[&str]| names.iter().map(|n| format!("default/{n}")).collect::<Vec<_>>();
    let stored = eventually(Duration::from_secs(5), async || {
        let rows =
            ledger.synthetic_checks(&keys(&["chat"]), &keys(&["silent", "healthy"]), 0).await.unwrap_or_default();
        let count = |up: &str, outcome: &str| rows.iter().filter(|r| r.upstream == up && r.outcome == outcome).count();
        rows.iter().all(|r| r.route == "default/chat")
            && count("default/silent", "first_byte_timeout") >= 2
            && count("default/healthy", "ok") >= 2
            && rows.len() == count("default/silent", "first_byte_timeout") + count("default/healthy", "ok")
    })
    .await;
    assert!(stored, "{:?}", ledger.synthetic_checks(&keys(&["chat"]), &keys(&["silent", "healthy"]), 0).await?);
    Ok(())
}

/// The test-only service-account key (it belongs to no Google project).
const SA_KEY: &str = include_str!("../../../providers/tests/fixtures/gcp/service-account.json");

#[tokio::test]
async fn every_protocol_is_checked_in_its_own_wire_format_with_its_own_credentials() -> anyhow::Result<()> {
    use sluice_chaos::{AwsKeys, ChaosAuth, GoogleAuth, ServiceAccount};
    let _serial = serial().await;
    let key = |k: &str| ChaosAuth { api_key: Some(k.to_string()), ..ChaosAuth::default() };
    let gemini = ChaosUpstream::start_with_auth("gemini", Some(key("gemini-key"))).await?;
    let azure = ChaosUpstream::start_with_auth("azure", Some(key("azure-key"))).await?;
    let aws = AwsKeys { access_key_id: "AKIDSLUICETEST".into(), secret_access_key: "sluice/test/secret+key".into() };
    let bedrock =
        ChaosUpstream::start_with_auth("bedrock", Some(ChaosAuth { aws: Some(aws), ..ChaosAuth::default() })).await?;
    // The Vertex upstream is also the key's token endpoint.
    let vertex = ChaosUpstream::start("vertex").await?;
    let mut sa: serde_json::Value = serde_json::from_str(SA_KEY)?;
    sa["token_uri"] = json!(format!("{}/token", vertex.base));
    let account = ServiceAccount::from_key_json(sa.to_string().as_bytes()).map_err(|e| anyhow::anyhow!(e))?;
    let google = GoogleAuth { service_account: Some(account), ..GoogleAuth::default() };
    vertex.state.set_auth(ChaosAuth { google: Some(google), ..ChaosAuth::default() });
    let secret = |name: &str, k: &str, v: &str| (name.to_string(), k.to_string(), v.to_string());
    let docs = [
        gemini.native_doc("gemini").with("spec.auth.secretRef", json!({"name": "gemini", "key": "apiKey"})),
        azure
            .native_doc("azure-openai")
            .with("spec.azure", json!({"apiVersion": "2024-10-21"}))
            .with("spec.auth.secretRef", json!({"name": "azure", "key": "apiKey"})),
        bedrock.native_doc("bedrock").with("spec.aws", json!({"region": "us-east-1", "credentials": {"secretRef": {"name": "aws-keys"}}})),
        vertex.native_doc("vertex-gemini").with(
            "spec.gcp",
            json!({"project": "sluice-test", "location": "us-east5", "credentials": {"secretRef": {"name": "vertex-sa", "key": "key.json"}}}),
        ),
        route("chat", "chat-model", &[("gemini", 100), ("azure", 90), ("bedrock", 80), ("vertex", 70)])
            .with("spec.synthetic", json!({"interval": "1s", "maxTokens": 2})),
    ];
    let secrets = vec![
        secret("gemini", "apiKey", "gemini-key"),
        secret("azure", "apiKey", "azure-key"),
        secret("aws-keys", "AWS_ACCESS_KEY_ID", "AKIDSLUICETEST"),
        secret("aws-keys", "AWS_SECRET_ACCESS_KEY", "sluice/test/secret+key"),
        secret("vertex-sa", "key.json", &sa.to_string()),
    ];
    let gw =
        TestGateway::start_with(&yaml(&docs), sluice_tests::GatewayOptions { secrets, ..Default::default() }).await?;
    let names = ["gemini", "azure", "bedrock", "vertex"];
    let all_ok = eventually(Duration::from_secs(8), async || names.iter().all(|n| checks(&gw, n, "ok") >= 2.0)).await;
    assert!(all_ok, "not every protocol's checks succeed:\n{}", gw.metrics());
    let protocols = [
        (&gemini, Protocol::Gemini),
        (&azure, Protocol::AzureOpenAi),
        (&bedrock, Protocol::Bedrock),
        (&vertex, Protocol::VertexGemini),
    ];
    for (up, protocol) in protocols {
        let counters = up.counters();
        assert!(counters.by_protocol.get(&protocol).copied().unwrap_or(0) >= 2, "{}: {counters:?}", up.name);
        assert_eq!(counters.by_status.get(&401).copied().unwrap_or(0), 0, "{}: refused credentials", up.name);
    }
    Ok(())
}

/// `synthetic.api`: checks written in Messages and Responses, as Claude Code and Codex
/// write their requests, pass natively and through translation. Reading a Messages or
/// Responses stream as chat chunks would never see its end (`[DONE]`), so a check read
/// in the wrong format fails as `reset`.
#[tokio::test]
async fn checks_are_sent_through_the_inbound_api_the_route_names() -> anyhow::Result<()> {
    let _serial = serial().await;
    let [oai, claude] = ChaosUpstream::start_all(["oai", "claude"]).await?;
    let price = json!({"input": "3.00", "output": "15.00"});
    let docs = [
        oai.doc(),
        claude.native_doc("anthropic"),
        route("agents-claude", "claude-model", &[("claude", 100), ("oai", 50)])
            .candidate(0, "price", price.clone())
            .with("spec.synthetic", json!({"interval": "1s", "api": "messages"})),
        route("agents-gpt", "gpt-model", &[("oai", 100), ("claude", 50)])
            .candidate(0, "price", price)
            .with("spec.synthetic", json!({"interval": "1s", "api": "responses"})),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    let of = |route: &str, upstream: &str, outcome: &str| {
        gw.count("sluice_synthetic_checks_total", &[("route", route), ("upstream", upstream), ("outcome", outcome)])
    };
    let pairs =
        [("agents-claude", "claude"), ("agents-claude", "oai"), ("agents-gpt", "oai"), ("agents-gpt", "claude")];
    let all_ok = eventually(Duration::from_secs(8), async || pairs.iter().all(|(r, u)| of(r, u, "ok") >= 2.0)).await;
    assert!(all_ok, "not every check through Messages and Responses succeeds:\n{}", gw.metrics());
    for (r, u) in pairs {
        for bad in ["reset", "http_4xx", "http_5xx", "first_byte_timeout", "idle_timeout"] {
            assert_eq!(of(r, u, bad), 0.0, "{r}/{u}: {bad}\n{}", gw.metrics());
        }
    }
    // Priced checks are billed from the usage their answers reported.
    let ledger = gw.ledger()?;
    assert!(ledger.synthetic_spend().await? > 0, "no synthetic spend journalled");
    for r in ["agents-claude", "agents-gpt"] {
        assert_eq!(gw.count("sluice_requests_total", &[("route", r)]), 0.0, "{r}: checks counted as requests");
    }
    Ok(())
}
