use super::*;

fn start(index: usize, block: Value) -> String {
    serde_json::json!({"type": "content_block_start", "index": index, "content_block": block}).to_string()
}

fn text(index: usize, text: &str) -> String {
    serde_json::json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})
        .to_string()
}

fn delta(index: usize, delta: Value) -> String {
    serde_json::json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string()
}

fn stop(index: usize) -> String {
    serde_json::json!({"type": "content_block_stop", "index": index}).to_string()
}

fn text_block() -> Value {
    serde_json::json!({"type": "text", "text": ""})
}

fn message_delta(output: u64) -> String {
    serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}})
        .to_string()
}

/// The event sent: its name and data.
fn sent(s: Spliced) -> (String, Value) {
    let Spliced::Send(e) = s else { panic!("expected an event, got {s:?}") };
    let (name, data) = e.trim_end().split_once('\n').unwrap_or_default();
    let data = serde_json::from_str(data.trim_start_matches("data: ")).unwrap_or_default();
    (name.trim_start_matches("event: ").to_string(), data)
}

/// A client that has "The upstream " in an open text block.
fn cut_in_text() -> Delivered {
    let mut d = Delivered::default();
    d.observe(r#"{"type":"message_start","message":{"id":"msg_a","usage":{"input_tokens":5}}}"#);
    d.observe(&start(0, text_block()));
    d.observe(&text(0, "The "));
    d.observe(&text(0, "upstream "));
    d
}

#[test]
fn a_prefill_continuation_joins_the_open_block_without_repeating_a_space() {
    let mut d = cut_in_text();
    assert!(d.resumable() && !d.nothing());
    assert_eq!(d.prefill(), Some(("The upstream", " ")));
    let mut mode = d.continuation(Some(" "));
    assert_eq!(mode, Mode::Prefill { tail: " ".into(), base: 0, join: true });
    let start_b = r#"{"type":"message_start","message":{"id":"msg_b"}}"#;
    assert_eq!(d.splice(start_b, &mut mode, None), Spliced::Skip, "the client keeps the first message_start");
    assert_eq!(d.splice(&start(0, text_block()), &mut mode, None), Spliced::Skip, "the block is open already");
    let (name, e) = sent(d.splice(&text(0, " said "), &mut mode, None));
    assert_eq!((name.as_str(), &e["index"], &e["delta"]["text"]), ("content_block_delta", &0.into(), &"said ".into()));
    let (_, e) = sent(d.splice(&text(0, " hello"), &mut mode, None));
    assert_eq!(e["delta"]["text"], " hello", "only the first piece loses the repeated whitespace");
    // A block after the joined one counts on from the client's.
    let tool = serde_json::json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}});
    assert_eq!(sent(d.splice(&stop(0), &mut mode, None)).1["index"], 0);
    assert_eq!(sent(d.splice(&start(1, tool), &mut mode, None)).1["index"], 1);
    let usage = Usage::plain(12, 9);
    let (name, e) = sent(d.splice(&message_delta(4), &mut mode, Some(usage)));
    assert_eq!(name, "message_delta");
    assert_eq!((e["usage"]["input_tokens"].as_u64(), e["usage"]["output_tokens"].as_u64()), (Some(12), Some(9)));
    assert_eq!(d.blocks[0].text, "The upstream said  hello");
}

#[test]
fn a_prefill_after_a_closed_block_starts_the_next_one() {
    let mut d = cut_in_text();
    d.observe(&stop(0));
    let mut mode = d.continuation(Some(" "));
    assert_eq!(mode, Mode::Prefill { tail: " ".into(), base: 1, join: false });
    assert_eq!(sent(d.splice(&start(0, text_block()), &mut mode, None)).1["index"], 1);
    let (_, e) = sent(d.splice(&text(0, " said"), &mut mode, None));
    assert_eq!((&e["index"], &e["delta"]["text"]), (&1.into(), &"said".into()));
}

#[test]
fn a_replay_is_held_back_while_it_matches_and_relayed_after() {
    let mut d = cut_in_text();
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&start(0, text_block()), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&text(0, "The "), &mut mode, None), Spliced::Skip);
    let (_, e) = sent(d.splice(&text(0, "upstream said "), &mut mode, None));
    assert_eq!(e["delta"]["text"], "said ");
    assert_eq!(sent(d.splice(&stop(0), &mut mode, None)).0, "content_block_stop", "the open block is closed");
    assert!(matches!(d.splice(&message_delta(3), &mut mode, None), Spliced::Send(_)));
    assert_eq!(d.blocks[0].text, "The upstream said ");
}

#[test]
fn a_replay_that_differs_or_ends_early_diverges() {
    let mut d = cut_in_text();
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&text(0, "A different "), &mut mode, None), Spliced::Diverged);
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&start(0, text_block()), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&text(0, "The "), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&message_delta(1), &mut mode, None), Spliced::Diverged, "finished short of the client's text");
    // A block the client has whole must end where it ended.
    d.observe(&stop(0));
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&start(0, text_block()), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&text(0, "The "), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&stop(0), &mut mode, None), Spliced::Diverged);
    // Another kind of block where the client has text differs.
    let mut mode = d.continuation(None);
    let thinking = serde_json::json!({"type": "thinking", "thinking": ""});
    assert_eq!(d.splice(&start(0, thinking), &mut mode, None), Spliced::Diverged);
}

#[test]
fn thinking_is_replayed_with_its_signature_once() {
    let mut d = Delivered::default();
    d.observe(&start(0, serde_json::json!({"type": "thinking", "thinking": ""})));
    d.observe(&delta(0, serde_json::json!({"type": "thinking_delta", "thinking": "Let me see"})));
    assert!(d.resumable() && !d.nothing());
    assert_eq!(d.prefill(), None, "thinking cannot be a prefill");
    let thinking_block = serde_json::json!({"type": "thinking", "thinking": ""});
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&start(0, thinking_block.clone()), &mut mode, None), Spliced::Skip);
    let thinking = |t: &str| delta(0, serde_json::json!({"type": "thinking_delta", "thinking": t}));
    let signature = delta(0, serde_json::json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}));
    assert_eq!(d.splice(&thinking("Let me"), &mut mode, None), Spliced::Skip);
    let (_, e) = sent(d.splice(&thinking(" see."), &mut mode, None));
    assert_eq!(e["delta"]["thinking"], ".");
    let (_, e) = sent(d.splice(&signature, &mut mode, None));
    assert_eq!(e["delta"]["signature"], "EqQBCgIYAhIM", "the client's open thinking gets the replay's signature");
    assert!(matches!(d.splice(&stop(0), &mut mode, None), Spliced::Send(_)));
    // The text block after it is new to the client.
    assert_eq!(sent(d.splice(&start(1, text_block()), &mut mode, None)).1["index"], 1);
    assert_eq!(sent(d.splice(&text(1, "Yes."), &mut mode, None)).1["delta"]["text"], "Yes.");

    // A replay of a thinking block the client has whole, signature included, is held back.
    let mut mode = d.continuation(None);
    for e in [start(0, thinking_block), thinking("Let me see."), signature.clone(), stop(0)] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
}

#[test]
fn a_cut_inside_a_tool_calls_input_is_not_resumable_and_after_its_stop_is_replayed() {
    let mut d = cut_in_text();
    d.observe(&stop(0));
    let tool = serde_json::json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}});
    d.observe(&start(1, tool.clone()));
    d.observe(&delta(1, serde_json::json!({"type": "input_json_delta", "partial_json": "{\"q\": "})));
    assert!(!d.resumable(), "inside the tool's input");
    d.observe(&delta(1, serde_json::json!({"type": "input_json_delta", "partial_json": "\"x\"}"})));
    assert!(d.resumable() && d.prefill().is_none(), "the input is whole: resumed by replay");
    d.observe(&stop(1));
    let mut mode = d.continuation(None);
    for e in [start(0, text_block()), text(0, "The upstream "), stop(0), start(1, tool.clone())] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
    let other = delta(1, serde_json::json!({"type": "input_json_delta", "partial_json": "{\"q\": \"y\"}"}));
    assert_eq!(d.splice(&other, &mut mode, None), Spliced::Diverged, "other input");
    let mut mode = d.continuation(None);
    let renamed = serde_json::json!({"type": "tool_use", "id": "toolu_2", "name": "search", "input": {}});
    for e in [start(0, text_block()), text(0, "The upstream "), stop(0)] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
    assert_eq!(d.splice(&start(1, renamed), &mut mode, None), Spliced::Diverged, "another tool");
}
