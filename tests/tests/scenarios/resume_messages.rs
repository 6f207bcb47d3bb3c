//! docs/design.md §4.5 mid-stream resume on `/v1/messages`: a Messages stream that breaks
//! after content reached the client is finished by the next candidate as one message —
//! one `message_start`, content blocks counting on from where they were, the exact text
//! of an unbroken stream, one `message_delta` with every attempt's output summed, and
//! `message_stop` — whether the backup continues a prefill (`anthropic`) or replays the
//! request through translation (an OpenAI-protocol backup).

use serde_json::{Value, json};
use sluice_tests::{ChaosUpstream, SseReply, TestGateway, route, yaml};

const WORDS: u32 = 8;

/// A primary `anthropic` candidate and a backup speaking `backup`, resuming mid-stream.
async fn pair(backup_protocol: &str) -> anyhow::Result<(ChaosUpstream, ChaosUpstream, TestGateway)> {
    let [primary, backup] = ChaosUpstream::start_all(["primary", "backup"]).await?;
    let backup_doc = if backup_protocol == "openai" { backup.doc() } else { backup.native_doc(backup_protocol) };
    let docs = [
        primary.native_doc("anthropic"),
        backup_doc,
        route("chat", "chat-model", &[("primary", 100), ("backup", 50)]).with("spec.failover.midStream", "resume"),
    ];
    let gw = TestGateway::start(&yaml(&docs)).await?;
    Ok((primary, backup, gw))
}

async fn messages_stream(gw: &TestGateway, extra: Value) -> anyhow::Result<SseReply> {
    let mut body = json!({"model": "chat-model", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hello there"}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    gw.client()?.stream("/v1/messages", &body).await
}

fn events_of<'a>(s: &'a SseReply, kind: &'a str) -> impl Iterator<Item = Value> + 'a {
    s.events.iter().map(|e| e.json()).filter(move |e| e["type"] == kind)
}

/// The text of the stream's `text_delta`s, in order.
fn text(s: &SseReply) -> String {
    events_of(s, "content_block_delta").filter_map(|e| e["delta"]["text"].as_str().map(str::to_string)).collect()
}

/// One message: one start, each block started and stopped once, one delta, the stop
/// last, no error.
fn assert_one_message(s: &SseReply, blocks: usize) {
    assert_eq!(s.status, 200);
    assert!(s.end.is_ok(), "{:?}", s.end);
    let types: Vec<String> =
        s.events.iter().map(|e| e.json()["type"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(types.last().map(String::as_str), Some("message_stop"), "{types:?}");
    assert!(!types.iter().any(|t| t == "error"), "{:?}", s.datas());
    for (kind, n) in [("message_start", 1), ("message_delta", 1), ("message_stop", 1)] {
        assert_eq!(types.iter().filter(|t| *t == kind).count(), n, "{kind}: {types:?}");
    }
    for kind in ["content_block_start", "content_block_stop"] {
        let indexes: Vec<u64> = events_of(s, kind).filter_map(|e| e["index"].as_u64()).collect();
        assert_eq!(indexes, (0..blocks as u64).collect::<Vec<_>>(), "{kind}: {:?}", s.datas());
    }
}

/// The text an unbroken stream has.
async fn unbroken(gw: &TestGateway, primary: &ChaosUpstream) -> anyhow::Result<String> {
    primary.script(json!({"chunks": WORDS}))?;
    let s = messages_stream(gw, json!({})).await?;
    assert_one_message(&s, 1);
    Ok(text(&s))
}

#[tokio::test]
async fn a_cut_or_an_error_event_is_finished_by_an_anthropic_backup_continuing_the_text() -> anyhow::Result<()> {
    for (fault, reason) in
        [(json!({"reset_after_chunks": 3}), "reset"), (json!({"error_after_chunks": 4, "chunk_ms": 5}), "error_event")]
    {
        let (primary, backup, gw) = pair("anthropic").await?;
        let whole = unbroken(&gw, &primary).await?;
        let mut script = fault;
        script["chunks"] = json!(WORDS);
        primary.script(script)?;
        backup.script(json!({"chunks": WORDS}))?;
        let s = messages_stream(&gw, json!({})).await?;
        assert_one_message(&s, 1);
        assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
        assert_eq!(text(&s), whole, "the client has the exact text of an unbroken stream ({reason})");
        let start = events_of(&s, "message_start").next().unwrap_or_default();
        assert!(start["message"]["id"].as_str().is_some_and(|id| id.starts_with("msg_chaos_")), "{start}");
        let delta = events_of(&s, "message_delta").next().unwrap_or_default();
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(delta["usage"]["output_tokens"], WORDS, "every attempt's output: {delta}");
        assert_eq!(backup.requests(), 1, "one prefill request");
        assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", reason)]), 1.0);
        assert_eq!(gw.count("sluice_upstream_attempts_total", &[("upstream", "backup"), ("outcome", "ok")]), 1.0);
    }
    Ok(())
}

#[tokio::test]
async fn a_translated_backup_replays_and_only_what_follows_the_clients_text_is_relayed() -> anyhow::Result<()> {
    let (primary, backup, gw) = pair("openai").await?;
    let whole = unbroken(&gw, &primary).await?;
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": WORDS}))?;
    let s = messages_stream(&gw, json!({})).await?;
    assert_one_message(&s, 1);
    assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
    assert_eq!(text(&s), whole);
    assert_eq!(backup.requests(), 1, "a replay: the backup has no assistantPrefill");

    // A replay that stops short of what the client has ends the stream with the error
    // event naming the original break.
    primary.script(json!({"chunks": WORDS, "reset_after_chunks": 3}))?;
    backup.script(json!({"chunks": 2}))?;
    let s = messages_stream(&gw, json!({})).await?;
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["type"], "error", "{:?}", s.datas());
    assert!(last["error"]["message"].as_str().is_some_and(|m| m.contains("broke")), "{last}");
    assert_eq!(events_of(&s, "message_stop").count(), 0);
    assert_eq!(text(&s), whole.split_inclusive(' ').take(3).collect::<String>(), "nothing of the replay was sent");
    Ok(())
}

#[tokio::test]
async fn a_tool_call_is_resumed_once_its_input_is_whole_never_inside_it() -> anyhow::Result<()> {
    let tools = json!({"tools": [{"name": "lookup", "input_schema": {"type": "object"}}]});
    let (primary, backup, gw) = pair("anthropic").await?;
    primary.script(json!({"chunks": WORDS, "tool_call": "lookup", "reset_after_chunks": 3}))?;
    let s = messages_stream(&gw, tools.clone()).await?;
    let last = s.events.last().map(|e| e.json()).unwrap_or_default();
    assert_eq!(last["type"], "error", "cut inside the input: {:?}", s.datas());
    assert_eq!(backup.requests(), 0, "never resumed inside a tool call's input");

    // Every input piece sent, then the cut before the block's stop: replayed, as the
    // turn holds a tool call. (A fresh pair: the broken primary is demoted.)
    let (primary, backup, gw) = pair("anthropic").await?;
    primary.script(json!({"chunks": 4, "tool_call": "lookup", "reset_after_chunks": 4}))?;
    backup.script(json!({"chunks": 4, "tool_call": "lookup"}))?;
    let s = messages_stream(&gw, tools).await?;
    assert_one_message(&s, 1);
    let input: String = events_of(&s, "content_block_delta")
        .filter_map(|e| e["delta"]["partial_json"].as_str().map(str::to_string))
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input)?, json!({"query": "The upstream said hello "}));
    let names: Vec<Value> = events_of(&s, "content_block_start").map(|e| e["content_block"]["name"].clone()).collect();
    assert_eq!(names, [json!("lookup")]);
    let delta = events_of(&s, "message_delta").next().unwrap_or_default();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(s.header("x-sluice-upstream"), Some("primary"));
    assert_eq!(backup.requests(), 1, "a replay, not a prefill");
    assert_eq!(gw.count("sluice_stream_resumes_total", &[("route", "chat"), ("reason", "reset")]), 1.0);
    Ok(())
}
