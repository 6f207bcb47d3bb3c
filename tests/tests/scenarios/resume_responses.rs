//! docs/design.md §4.5 mid-stream resume on `/v1/responses` (what Codex sends): a
//! Responses stream that breaks after content reached the client is finished by the next
//! candidate as one response — the first attempt's `id`, `sequence_number`s counting on,
//! the client's output item continued, the exact text of an unbroken stream, and a
//! `response.completed` that carries that whole output and every attempt's usage —
//! whether the backup continues a prefill (an `anthropic` backup, through translation) or
//! replays the request natively (an `openai` backup).

use serde_json::{Value, json};
use sluice_tests::{ChaosUpstream, SseReply, TestGateway, route, yaml};

const WORDS: u32 = 8;

/// An `openai` primary (Responses natively) and a backup speaking `backup_protocol`.
async fn pair(backup_protocol: &str) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let backup_doc = if backup_protocol == "openai" { backup.doc() } else { backup.native_doc(backup_protocol) };
    let docs = [
        primary.doc(),
        backup_doc,
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]).with("spec.failover.midStream", "resume"),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    Ok((primary, backup, gw))
}

async fn responses_stream(gw: &TestGateway) -> anyhow::Result<SseReply> {
    let body = json!({"model": "chat-model", "input": "hello there", "max_output_tokens": 64, "stream": true});
    gw.client()?.stream("/v1/responses", &body).await
}

fn events_of<'a>(s: &'a SseReply, kind: &'a str) -> impl Iterator<Item = Value> + 'a {
    s.events.iter().map(|e| e.json()).filter(move |e| e["type"] == kind)
}

/// The text of the stream's `output_text.delta`s, in order.
fn text(s: &SseReply) -> String {
    events_of(s, "response.output_text.delta").filter_map(|e| e["delta"].as_str().map(str::to_string)).collect()
}

/// One response: sequence numbers 0, 1, 2, … without a gap, one `response.created`,
/// one message item added and done, `response.completed` last, no failure; returns
/// the completed response.
fn assert_one_response(s: &SseReply) -> Value {
    assert_eq!(s.status, 200);
    assert!(s.end.is_ok(), "{:?}", s.end);
    let events: Vec<Value> = s.events.iter().map(|e| e.json()).collect();
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["sequence_number"].as_u64()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>(), "{:?}", s.datas());
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(!types.iter().any(|t| *t == "error" || *t == "response.failed"), "{types:?}");
    for (kind, n) in [("response.created", 1), ("response.output_item.added", 1), ("response.output_item.done", 1)] {
        assert_eq!(types.iter().filter(|t| **t == kind).count(), n, "{kind}: {types:?}");
    }
    assert_eq!(types.last(), Some(&"response.completed"), "{types:?}");
    let ids: Vec<&Value> = events.iter().filter_map(|e| e.get("item_id")).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one item: {ids:?}");
    let created = &events[0]["response"]["id"];
    let completed = events.last().map(|e| e["response"].clone()).unwrap_or_default();
    assert_eq!(&completed["id"], created, "the client's response id");
    completed
}

/// The text an unbroken stream has.
async fn unbroken(gw: &TestGateway, primary: &ChaosUpstream) -> anyhow::Result<String> {
    primary.script(json!({"chunks": WORDS}))?;
    let s = responses_stream(gw).await?;
    assert_one_response(&s);
    Ok(text(&s))
}

#[tokio::test]
async fn a_cut_responses_stream_is_finished_as_one_response_by_prefill_or_by_replay() -> anyhow::Result<()> {
    // (backup protocol, its requests, output tokens reported: 3 of the broken attempt
    // plus the continuation's 5 words, or the replay's 8)
    for (backup_protocol, output) in [("anthropic", 3 + 5), ("openai", 3 + 8)] {
        let (primary, backup, gw) = pair(backup_protocol).await?;
        let whole = unbroken(&gw, &primary).await?;
        primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
        backup.script(json!({"chunks": WORDS}))?;
        let s = responses_stream(&gw).await?;
        let response = assert_one_response(&s);
        assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
        assert_eq!(text(&s), whole, "the client has the exact text of an unbroken stream ({backup_protocol})");
        assert_eq!(response["output"][0]["content"][0]["text"], whole.as_str(), "{response}");
        assert_eq!(response["output"].as_array().map(Vec::len), Some(1));
        assert_eq!(response["usage"]["output_tokens"], output, "{backup_protocol}: {}", response["usage"]);
        assert_eq!(backup.requests(), 1);
        assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 1.0);
        assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", "ok")]), 1.0);
    }
    Ok(())
}

#[tokio::test]
async fn a_replay_that_stops_short_ends_in_response_failed_naming_the_break() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair("openai").await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": 2}))?;
    let s = responses_stream(&gw).await?;
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["type"], "response.failed", "{:?}", s.datas());
    assert_eq!(last["response"]["error"]["code"], "upstream_stream_broken");
    assert!(last["response"]["error"]["message"].as_str().is_some_and(|m| m.contains("broke")), "{last}");
    assert_eq!(events_of(&s, "response.completed").count(), 0);
    assert_eq!(text(&s), whole.split_inclusive(' ').take(3).collect::<String>(), "nothing of the replay was sent");
    Ok(())
}
