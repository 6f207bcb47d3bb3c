use super::*;
use crate::relay::resume::add;

fn chunk(id: &str, created: u64, text: Option<&str>, role: bool) -> String {
    let mut delta = serde_json::json!({});
    if role {
        delta["role"] = "assistant".into();
    }
    if let Some(t) = text {
        delta["content"] = t.into();
    }
    serde_json::json!({"id": id, "object": "chat.completion.chunk", "created": created,
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    .to_string()
}

fn sent(s: Spliced) -> Value {
    match s {
        Spliced::Send(e) => serde_json::from_str(e.trim_start_matches("data: ").trim()).unwrap_or_default(),
        other => panic!("expected an event, got {other:?}"),
    }
}

#[test]
fn a_prefill_continuation_keeps_the_first_ids_drops_its_role_and_the_repeated_space() {
    let mut d = Delivered::default();
    d.observe(&chunk("chatcmpl-a", 100, Some("The "), true));
    d.observe(&chunk("chatcmpl-a", 100, Some("upstream "), false));
    assert_eq!(d.prefill(), Some(("The upstream", " ")));
    let mut mode = Mode::Prefill { tail: " ".into() };
    // The role-only chunk of the new attempt is dropped.
    assert_eq!(d.splice(&chunk("chatcmpl-b", 200, None, true), &mut mode, None), Spliced::Skip);
    let e = sent(d.splice(&chunk("chatcmpl-b", 200, Some(" said "), true), &mut mode, None));
    assert_eq!((e["id"].as_str(), e["created"].as_u64()), (Some("chatcmpl-a"), Some(100)));
    assert_eq!(e["choices"][0]["delta"], serde_json::json!({"content": "said "}));
    // Only the first piece loses its repeated whitespace.
    let e = sent(d.splice(&chunk("chatcmpl-b", 200, Some(" hello"), false), &mut mode, None));
    assert_eq!(e["choices"][0]["delta"]["content"], " hello");
    assert_eq!(d.text, "The upstream said  hello");
}

#[test]
fn a_replay_is_held_back_while_it_matches_and_relayed_after() {
    let mut d = Delivered::default();
    d.observe(&chunk("x", 1, Some("The upstream "), true));
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&chunk("y", 2, Some("The "), true), &mut mode, None), Spliced::Skip);
    let e = sent(d.splice(&chunk("y", 2, Some("upstream said "), false), &mut mode, None));
    assert_eq!(e["choices"][0]["delta"]["content"], "said ");
    let e = sent(d.splice(&chunk("y", 2, Some("hello "), false), &mut mode, None));
    assert_eq!(e["choices"][0]["delta"]["content"], "hello ");
    assert_eq!(d.text, "The upstream said hello ");
}

#[test]
fn a_replay_that_differs_or_ends_early_diverges() {
    let mut d = Delivered::default();
    d.observe(&chunk("x", 1, Some("The upstream "), true));
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&chunk("y", 2, Some("A different "), true), &mut mode, None), Spliced::Diverged);
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&chunk("y", 2, Some("The "), true), &mut mode, None), Spliced::Skip);
    let stop = r#"{"id":"y","created":2,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    assert_eq!(d.splice(stop, &mut mode, None), Spliced::Diverged);
}

#[test]
fn the_usage_chunk_reports_the_sum_and_tool_calls_are_noticed() {
    let mut d = Delivered::default();
    d.observe(r#"{"id":"x","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#);
    assert!(d.prefill().is_none() && !d.resumable());
    let mut mode = Mode::Prefill { tail: String::new() };
    let usage = r#"{"id":"y","created":2,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
    let sum = add(Usage::plain(7, 3), Usage::plain(5, 2));
    let e = sent(d.splice(usage, &mut mode, Some(sum)));
    assert_eq!((e["usage"]["prompt_tokens"].as_u64(), e["usage"]["completion_tokens"].as_u64()), (Some(12), Some(5)));
    assert_eq!(e["id"], "x");
}

fn call(id: &str, name: Option<&str>, args: &str) -> String {
    let mut function = serde_json::json!({"arguments": args});
    if let Some(n) = name {
        function["name"] = n.into();
    }
    serde_json::json!({"id": id, "created": 1, "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": id, "type": "function", "function": function}]}, "finish_reason": null}]})
    .to_string()
}

#[test]
fn a_replay_holds_back_a_complete_tool_call_the_client_has_and_relays_what_follows() {
    let mut d = Delivered::default();
    d.observe(&call("a", Some("lookup"), "{\"q\": "));
    assert!(!d.resumable(), "cut inside the arguments");
    d.observe(&call("a", None, "\"x\"}"));
    assert!(d.prefill().is_none() && d.resumable() && !d.nothing());
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&call("b", Some("lookup"), "{\"q\": "), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&call("b", None, "\"x\"}"), &mut mode, None), Spliced::Skip);
    let stop = r#"{"id":"b","created":2,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
    let e = sent(d.splice(stop, &mut mode, None));
    assert_eq!((e["id"].as_str(), e["choices"][0]["finish_reason"].as_str()), (Some("a"), Some("tool_calls")));
    // Another call, or a replay that stops short of the client's call, diverges.
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&call("b", Some("other"), ""), &mut mode, None), Spliced::Diverged);
    let mut mode = Mode::replay(&d);
    assert_eq!(d.splice(&call("b", Some("lookup"), "{\"q\": "), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(stop, &mut mode, None), Spliced::Diverged);
}
