//! docs/design.md §4.5 mid-stream resume: with `failover.midStream: resume` a stream that
//! breaks after content reached the client is finished by the next candidate, as one
//! stream with the exact text an unbroken one has; with the default `error` the same
//! faults end with `upstream_stream_broken`.
//!
//! The chaos upstream continues a trailing assistant message where it stops (as a model
//! does), or refuses it with a 400 when told to (`refuse_prefill`).

use std::time::Duration;

use serde_json::{Value, json};
use sluice_gateway::server::AuthMode;
use sluice_ledger::testing::eventually;
use sluice_tests::billing::{Price, usage_of};
use sluice_tests::client::chat_body;
use sluice_tests::{ChaosUpstream, Doc, GatewayOptions, SseReply, TestGateway, route, serial, yaml};

const WORDS: u32 = 8;

/// A primary and a backup speaking `protocols`, on a route with `mid_stream` (if set).
async fn pair(
    protocols: (&str, &str),
    mid_stream: Option<&str>,
    extra: &[Doc],
) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let mut r = route("chat", "chat-model", &[("primary", 100), ("backup", 50)]);
    if let Some(m) = mid_stream {
        r = r.with("spec.failover.midStream", m);
    }
    let mut docs = vec![doc(&primary, protocols.0), doc(&backup, protocols.1), r];
    docs.extend_from_slice(extra);
    let gw = TestGateway::start(&yaml(&docs)).await?;
    Ok((primary, backup, gw))
}

fn doc(u: &ChaosUpstream, protocol: &str) -> Doc {
    if protocol == "openai" { u.doc() } else { u.native_doc(protocol) }
}

/// The text of a stream's content deltas, in order.
fn text(s: &SseReply) -> String {
    s.events.iter().filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_string)).collect()
}

/// The text an unbroken stream of `WORDS` words has.
async fn unbroken(gw: &TestGateway, upstream: &ChaosUpstream) -> anyhow::Result<String> {
    upstream.script(json!({"chunks": WORDS}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert!(s.complete(), "{:?}", s.datas());
    Ok(text(&s))
}

/// One stream: same id, created and choice index throughout, one role chunk, a finish
/// reason, `[DONE]`, no error.
fn assert_one_whole_stream(s: &SseReply) {
    assert_eq!(s.status, 200);
    assert!(s.complete(), "a resumed stream ends complete: {:?}", s.datas());
    assert!(s.events.iter().all(|e| e.error_code().is_none()), "{:?}", s.datas());
    let chunks: Vec<Value> = s.events.iter().filter(|e| !e.is_done()).map(|e| e.json()).collect();
    let first = chunks.first().cloned().unwrap_or_default();
    for c in &chunks {
        assert_eq!((&c["id"], &c["created"]), (&first["id"], &first["created"]), "one stream: {c}");
        for choice in c["choices"].as_array().into_iter().flatten() {
            assert_eq!(choice["index"], 0, "{c}");
        }
    }
    let roles = chunks.iter().filter(|c| c["choices"][0]["delta"]["role"].is_string()).count();
    assert_eq!(roles, 1, "one role chunk: {:?}", s.datas());
}

fn assert_broken(s: &SseReply) {
    assert_eq!(s.status, 200);
    assert!(!s.done(), "a broken stream must not end with [DONE]: {:?}", s.datas());
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["error"]["code"], "upstream_stream_broken", "last event: {last}");
}

#[tokio::test]
async fn a_cut_anthropic_stream_is_finished_by_the_backup_with_the_exact_text() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(("anthropic", "anthropic"), Some("resume"), &[]).await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3, "chunk_ms": 5}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_one_whole_stream(&s);
    assert_eq!(text(&s), whole, "the client has the exact text of an unbroken stream");
    assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
    assert_eq!(backup.requests(), 1, "one prefill request");
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 1.0);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "primary"), ("outcome", "reset")]), 1.0);
    assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", "ok")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn an_error_event_mid_stream_is_resumed_too() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(("anthropic", "anthropic"), Some("resume"), &[]).await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "error_after_chunks": 4}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_one_whole_stream(&s);
    assert_eq!(text(&s), whole);
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "error_event")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn a_backup_refusing_the_prefill_is_replayed_and_verified() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(("anthropic", "anthropic"), Some("resume"), &[]).await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": WORDS, "refuse_prefill": true}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_one_whole_stream(&s);
    assert_eq!(text(&s), whole, "the replay's first words are held back, the rest relayed");
    assert_eq!(backup.requests(), 2, "the refused prefill, then the replay");
    Ok(())
}

#[tokio::test]
async fn a_backup_without_prefill_replays_and_a_replay_that_diverges_ends_with_the_error_event() -> anyhow::Result<()> {
    // An OpenAI-protocol backup has no assistantPrefill: it is replayed.
    let (primary, backup, gw) = pair(("anthropic", "openai"), Some("resume"), &[]).await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_one_whole_stream(&s);
    assert_eq!(text(&s), whole);

    // A replay that stops before what the client has differs from it.
    backup.script(json!({"chunks": 2}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_broken(&s);
    let message = s.events.last().map(|e| e.json()["error"]["message"].clone()).unwrap_or_default();
    assert!(message.as_str().is_some_and(|m| m.contains("broke")), "names the original break: {message}");
    assert_eq!(
        text(&s),
        whole.split_inclusive(' ').take(3).collect::<String>(),
        "nothing of the replay reached the client"
    );
    Ok(())
}

#[tokio::test]
async fn a_cut_inside_a_tool_calls_arguments_is_not_resumed() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(("anthropic", "anthropic"), Some("resume"), &[]).await?;
    primary.script(json!({"chunks": WORDS, "tool_call": "lookup", "reset_after_chunks": 3}))?;
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]);
    let s = gw.client()?.chat_stream("chat-model", json!({"tools": tools})).await?;
    assert_broken(&s);
    assert_eq!(backup.requests(), 0, "never resumed inside a tool call");
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 0.0);
    Ok(())
}

#[tokio::test]
async fn a_cut_after_a_complete_tool_call_is_resumed_by_replay() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair(("anthropic", "anthropic"), Some("resume"), &[]).await?;
    // Four argument pieces, all sent, then the cut before the call's finish.
    primary.script(json!({"chunks": 4, "tool_call": "lookup", "reset_after_chunks": 4}))?;
    backup.script(json!({"chunks": 4, "tool_call": "lookup"}))?;
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]);
    let s = gw.client()?.chat_stream("chat-model", json!({"tools": tools})).await?;
    assert_one_whole_stream(&s);
    let calls: Vec<Value> = s
        .events
        .iter()
        .filter_map(|e| e.json()["choices"][0]["delta"]["tool_calls"].as_array().cloned())
        .flatten()
        .collect();
    let names: Vec<&str> = calls.iter().filter_map(|c| c["function"]["name"].as_str()).collect();
    let args: String = calls.iter().filter_map(|c| c["function"]["arguments"].as_str()).collect();
    assert_eq!(names, ["lookup"], "the call is sent once: {:?}", s.datas());
    assert_eq!(serde_json::from_str::<Value>(&args)?, json!({"query": "The upstream said hello "}));
    let finishes: Vec<String> =
        s.events.iter().filter_map(|e| e.json()["choices"][0]["finish_reason"].as_str().map(str::to_string)).collect();
    assert_eq!(finishes, ["tool_calls"]);
    assert_eq!(backup.requests(), 1, "a replay, not a prefill");
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 1.0);
    Ok(())
}

#[tokio::test]
async fn at_most_two_resumes_per_request() -> anyhow::Result<()> {
    for third_breaks in [false, true] {
        let [p, b1, b2, b3] = ChaosUpstream::start_all(["p", "b1", "b2", "b3"]).await?;
        let docs = [
            p.native_doc("anthropic"),
            b1.native_doc("anthropic"),
            b2.native_doc("anthropic"),
            b3.native_doc("anthropic"),
            route("chat", "chat-model", &[("p", 100), ("b1", 90), ("b2", 80), ("b3", 70)])
                .with("spec.failover.midStream", "resume"),
        ];
        let gw = TestGateway::start(&yaml(&docs)).await?;
        let whole = unbroken(&gw, &p).await?;
        // Each continues the last and breaks two words later.
        p.script(json!({"chunks": WORDS, "reset_after_chunks": 2}))?;
        b1.script(json!({"chunks": WORDS, "reset_after_chunks": 2}))?;
        if third_breaks {
            b2.script(json!({"chunks": WORDS, "reset_after_chunks": 2}))?;
        } else {
            b2.script(json!({"chunks": WORDS}))?;
        }
        let before = b3.requests();
        let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
        assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 2.0);
        assert_eq!(b3.requests(), before, "no third resume");
        if third_breaks {
            assert_broken(&s);
            assert_eq!(text(&s), whole.split_inclusive(' ').take(6).collect::<String>());
        } else {
            assert_one_whole_stream(&s);
            assert_eq!(text(&s), whole);
        }
    }
    Ok(())
}

#[tokio::test]
/// On tokio's paused clock, with the quick start's 30 s idle timeout: the stream goes on
/// exactly one idle timeout after it stalled.
async fn a_stall_is_resumed_within_the_idle_bound() -> anyhow::Result<()> {
    const IDLE: Duration = Duration::from_secs(30);
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        primary.native_doc("anthropic").with("spec.timeouts.idle", "30s"),
        backup.native_doc("anthropic"),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]).with("spec.failover.midStream", "resume"),
    ];
    let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
    tokio::time::pause();
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "hang_after_chunks": 3}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
    assert_one_whole_stream(&s);
    assert_eq!(text(&s), whole);
    let at: Vec<Duration> = s.contents().iter().map(|e| e.at).collect();
    let stall = at.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or_default();
    assert!(
        stall >= IDLE && stall < IDLE + Duration::from_millis(50),
        "resumed {stall:?} after the stall began (idle {IDLE:?})"
    );
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "idle_timeout")]), 1.0);
    assert!(
        eventually(Duration::from_secs(2), async || primary.state.in_flight() == 0).await,
        "the stalled stream is given up"
    );
    Ok(())
}

#[tokio::test]
async fn with_the_default_error_the_same_faults_end_with_the_error_event() -> anyhow::Result<()> {
    for fault in [json!({"reset_after_chunks": 3}), json!({"error_after_chunks": 3}), json!({"hang_after_chunks": 3})] {
        // A fresh gateway each time: a broken primary is demoted behind the backup.
        let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
        let docs = [
            primary.native_doc("anthropic").with("spec.timeouts.idle", "30s"),
            backup.native_doc("anthropic"),
            route("chat", "chat-model", &[("primary", 100), ("backup", 50)]),
        ];
        // On the paused clock: the hang ends at the 30 s idle timeout, in no real time.
        let gw = TestGateway::start_with(&yaml(&docs), GatewayOptions::paused()).await?;
        tokio::time::pause();
        let mut script = fault.clone();
        script["chunks"] = json!(WORDS);
        primary.script(script)?;
        let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
        assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
        assert_broken(&s);
        assert!(!s.complete(), "{fault}: never a truncated success");
        assert_eq!(s.contents().len(), 3, "{fault}: {:?}", s.datas());
        assert_eq!(backup.requests(), 0, "{fault}: no resume with midStream: error");
        assert_eq!(gw.metric("sluice_stream_resumes_total", &[("route", "chat")]).unwrap_or(0.0), 0.0);
        tokio::time::resume();
    }
    Ok(())
}

#[tokio::test]
async fn every_attempt_of_a_resumed_stream_is_billed_at_its_candidates_price() -> anyhow::Result<()> {
    const PRIMARY: Price = Price { input: "3.00", output: "15.00" };
    const BACKUP: Price = Price { input: "30.00", output: "150.00" };
    const OPENING: i64 = 100_000_000_000;
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let docs = [
        primary.native_doc("anthropic"),
        backup.native_doc("anthropic"),
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
            .with("spec.failover.midStream", "resume")
            .candidate(0, "price", PRIMARY.json())
            .candidate(1, "price", BACKUP.json()),
    ];
    let gw =
        TestGateway::start_with(&yaml(&docs), GatewayOptions { auth: AuthMode::Keys, ..GatewayOptions::default() })
            .await?;
    let key = gw.account("acme", OPENING).await?;
    let client = gw.client()?.with_key(&key);
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let extra = json!({"stream_options": {"include_usage": true}});
    let s = client.chat_stream("chat-model", extra.clone()).await?;
    assert_one_whole_stream(&s);
    let (input, output) = s.usage().ok_or_else(|| anyhow::anyhow!("no usage chunk: {:?}", s.datas()))?;
    let usage_chunks = s.events.iter().filter(|e| e.has_usage()).count();
    assert_eq!(usage_chunks, 1, "one usage chunk, the sum");
    // The broken first attempt reported nothing: it is billed the request's size as its
    // input bound and one token per content event; the backup reports its own usage
    // (the 5 words it added).
    let first_input = chat_body("chat-model", true, extra).to_string().len() as u64;
    let (first_output, backup_output) = (3, u64::from(WORDS) - 3);
    assert_eq!(output, first_output + backup_output, "completion tokens of both attempts");
    let backup_input = input - first_input;
    assert!(backup_input > 0);
    assert!(eventually(Duration::from_secs(5), async || gw.metric("sluice_reservations_open", &[]) == Some(0.0)).await);
    let want = PRIMARY.cost(first_input, first_output) + BACKUP.cost(backup_input, backup_output);
    let account = gw.ledger()?.account("acme").await?.ok_or_else(|| anyhow::anyhow!("no account"))?;
    assert_eq!(OPENING - account.balance_nanos, want, "each attempt at its candidate's price, to the nanodollar");
    assert_eq!(
        usage_of(&s.events.iter().find(|e| e.has_usage()).map(|e| e.json()["usage"].clone()).unwrap_or_default()),
        Some((input, output))
    );
    Ok(())
}

/// The three scenarios of the public failoverbench catalogue that no gateway on its
/// scorecard rescues, with the catalogue's parameters: S08, a stream cut after 40
/// tokens; S09, a stream that stalls after 20 tokens (for 30 s: here for good, which
/// is no easier); S14, a cut whose backup rejects the assistant prefill. With
/// `midStream: resume` each must pass (the complete canonical answer, one clean stream,
/// bounded time); with the default `error` each must stay safe (the error event, never
/// a truncated success).
#[tokio::test]
async fn failoverbench_s08_s09_s14_pass_with_resume_and_stay_safe_without() -> anyhow::Result<()> {
    const TOKENS: u32 = 60;
    let _serial = serial().await;
    for mid_stream in ["resume", "error"] {
        for (id, primary_fault, backup_script) in [
            ("S08", json!({"chunks": TOKENS, "reset_after_chunks": 40}), json!({"chunks": TOKENS})),
            ("S09", json!({"chunks": TOKENS, "chunk_ms": 5, "hang_after_chunks": 20}), json!({"chunks": TOKENS})),
            (
                "S14",
                json!({"chunks": TOKENS, "reset_after_chunks": 40}),
                json!({"chunks": TOKENS, "refuse_prefill": true}),
            ),
        ] {
            let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
            let docs = [
                // idle: auto learns the primary's rhythm (5 ms gaps) from the canonical run.
                primary.native_doc("anthropic").with("spec.timeouts.idle", "auto"),
                backup.native_doc("anthropic"),
                route("chat", "chat-model", &[("primary", 100), ("backup", 50)])
                    .with("spec.failover.midStream", mid_stream),
            ];
            let gw = TestGateway::start(&yaml(&docs)).await?;
            primary.script(json!({"chunks": TOKENS, "chunk_ms": 5}))?;
            let canonical = gw.client()?.chat_stream("chat-model", json!({})).await?;
            assert!(canonical.complete(), "{id}: {:?}", canonical.datas());
            primary.script(primary_fault)?;
            backup.script(backup_script)?;
            let s = gw.client()?.chat_stream("chat-model", json!({})).await?;
            if mid_stream == "resume" {
                assert_one_whole_stream(&s);
                assert_eq!(text(&s), text(&canonical), "{id}: the complete canonical answer");
                // A stall is noticed within max(1 s, 10 × p99 gap) = 1 s, not at 30 s.
                assert!(s.ended_at < Duration::from_secs(5), "{id}: took {:?}", s.ended_at);
            } else {
                assert_broken(&s);
                assert!(
                    text(&canonical).starts_with(&text(&s)),
                    "{id}: what was delivered is a prefix, never a truncated success"
                );
                assert!(s.ended_at < Duration::from_secs(5), "{id}: took {:?}", s.ended_at);
            }
        }
    }
    Ok(())
}
