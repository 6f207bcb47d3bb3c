use serde_json::json;

use super::*;

fn ev(kind: &str, seq: u64, mut data: Value) -> String {
    data["type"] = kind.into();
    data["sequence_number"] = seq.into();
    data.to_string()
}

fn message(id: &str, text: Option<&str>) -> Value {
    match text {
        Some(t) => json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": t, "annotations": []}]}),
        None => json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}),
    }
}

fn added(seq: u64, index: usize, item: Value) -> String {
    ev("response.output_item.added", seq, json!({"output_index": index, "item": item}))
}

fn part(seq: u64, id: &str, index: usize) -> String {
    ev(
        "response.content_part.added",
        seq,
        json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
    )
}

fn text(seq: u64, id: &str, index: usize, delta: &str) -> String {
    ev(
        "response.output_text.delta",
        seq,
        json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
    )
}

fn item_done(seq: u64, index: usize, item: Value) -> String {
    ev("response.output_item.done", seq, json!({"output_index": index, "item": item}))
}

fn completed(seq: u64, id: &str, output: Value) -> String {
    ev(
        "response.completed",
        seq,
        json!({"response": {"id": id, "created_at": 200, "status": "completed", "output": output,
            "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8}}}),
    )
}

/// The event sent: its name and data.
fn sent(s: Spliced) -> (String, Value) {
    let Spliced::Send(e) = s else { panic!("expected an event, got {s:?}") };
    let (name, data) = e.trim_end().split_once('\n').unwrap_or_default();
    let data = serde_json::from_str(data.trim_start_matches("data: ")).unwrap_or_default();
    (name.trim_start_matches("event: ").to_string(), data)
}

/// A client that has "The upstream " in an open message item, up to sequence number 4.
fn cut_in_text() -> Delivered {
    let mut d = Delivered::default();
    d.observe(&ev("response.created", 0, json!({"response": {"id": "resp_a", "created_at": 100}})));
    d.observe(&added(1, 0, message("msg_a", None)));
    d.observe(&part(2, "msg_a", 0));
    d.observe(&text(3, "msg_a", 0, "The "));
    d.observe(&text(4, "msg_a", 0, "upstream "));
    d
}

#[test]
fn a_prefill_continuation_joins_the_open_message_and_finishes_as_the_clients_response() {
    let mut d = cut_in_text();
    assert!(d.resumable() && !d.nothing());
    assert_eq!(d.prefill(), Some(("The upstream", " ")));
    let mut mode = d.continuation(Some(" "));
    let created = ev("response.created", 0, json!({"response": {"id": "resp_b", "created_at": 200}}));
    assert_eq!(d.splice(&created, &mut mode, None), Spliced::Skip, "the client keeps its response");
    assert_eq!(d.splice(&added(1, 0, message("msg_b", None)), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&part(2, "msg_b", 0), &mut mode, None), Spliced::Skip, "the part is open already");
    let (name, e) = sent(d.splice(&text(3, "msg_b", 0, " said "), &mut mode, None));
    assert_eq!(name, "response.output_text.delta");
    assert_eq!((&e["item_id"], &e["delta"], &e["sequence_number"]), (&json!("msg_a"), &json!("said "), &json!(5)));
    let done = ev(
        "response.output_text.done",
        4,
        json!({"item_id": "msg_b", "output_index": 0, "content_index": 0, "text": " said "}),
    );
    let (_, e) = sent(d.splice(&done, &mut mode, None));
    assert_eq!((&e["text"], &e["sequence_number"]), (&json!("The upstream said "), &json!(6)));
    let (_, e) = sent(d.splice(&item_done(5, 0, message("msg_b", Some(" said "))), &mut mode, None));
    assert_eq!(e["item"], message("msg_a", Some("The upstream said ")));
    let sum = Usage::plain(12, 9);
    let (name, e) =
        sent(d.splice(&completed(6, "resp_b", json!([message("msg_b", Some(" said "))])), &mut mode, Some(sum)));
    assert_eq!(name, "response.completed");
    let r = &e["response"];
    assert_eq!((&r["id"], &r["created_at"]), (&json!("resp_a"), &json!(100)), "the client's response");
    assert_eq!(r["output"], json!([message("msg_a", Some("The upstream said "))]), "the whole text");
    assert_eq!(
        (&r["usage"]["input_tokens"], &r["usage"]["output_tokens"], &r["usage"]["total_tokens"]),
        (&json!(12), &json!(9), &json!(21))
    );
    assert_eq!(e["sequence_number"], 8);
}

#[test]
fn a_replay_is_held_back_while_it_matches_and_relayed_after() {
    let mut d = cut_in_text();
    let mut mode = d.continuation(None);
    for e in [added(1, 0, message("msg_b", None)), part(2, "msg_b", 0), text(3, "msg_b", 0, "The ")] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
    let (_, e) = sent(d.splice(&text(4, "msg_b", 0, "upstream said "), &mut mode, None));
    assert_eq!((&e["delta"], &e["item_id"], &e["sequence_number"]), (&json!("said "), &json!("msg_a"), &json!(5)));
    let (_, e) = sent(d.splice(&item_done(5, 0, message("msg_b", Some("The upstream said "))), &mut mode, None));
    assert_eq!(e["item"]["id"], "msg_a");
    let (_, e) = sent(d.splice(&completed(6, "resp_b", json!([])), &mut mode, None));
    assert_eq!(e["response"]["output"], json!([message("msg_a", Some("The upstream said "))]));
    assert_eq!(e["response"]["id"], "resp_a");
}

#[test]
fn a_replay_that_differs_or_ends_early_diverges() {
    let mut d = cut_in_text();
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&added(1, 0, message("msg_b", None)), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&text(2, "msg_b", 0, "A different "), &mut mode, None), Spliced::Diverged);
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&added(1, 0, message("msg_b", None)), &mut mode, None), Spliced::Skip);
    assert_eq!(d.splice(&text(2, "msg_b", 0, "The "), &mut mode, None), Spliced::Skip);
    let short = item_done(3, 0, message("msg_b", Some("The ")));
    assert_eq!(d.splice(&short, &mut mode, None), Spliced::Diverged, "the item ends short of the client's");
    let mut mode = d.continuation(None);
    assert_eq!(d.splice(&completed(1, "resp_b", json!([])), &mut mode, None), Spliced::Diverged, "nothing replayed");
    let mut mode = d.continuation(None);
    let call = json!({"id": "fc_b", "type": "function_call", "name": "lookup", "call_id": "c", "arguments": ""});
    assert_eq!(d.splice(&added(1, 0, call), &mut mode, None), Spliced::Diverged, "another type of item");
}

#[test]
fn a_function_call_is_resumed_once_its_arguments_are_whole_by_replay() {
    let mut d = Delivered::default();
    let call = json!({"id": "fc_a", "type": "function_call", "name": "lookup", "call_id": "call_a", "arguments": ""});
    d.observe(&added(0, 0, call.clone()));
    let args = |seq, delta: &str| {
        ev("response.function_call_arguments.delta", seq, json!({"item_id": "fc_a", "output_index": 0, "delta": delta}))
    };
    d.observe(&args(1, "{\"q\": "));
    assert!(!d.resumable(), "inside the arguments");
    d.observe(&args(2, "\"x\"}"));
    assert!(d.resumable() && d.prefill().is_none(), "whole arguments: a replay");
    let mut mode = d.continuation(None);
    let mut replayed_call = call.clone();
    replayed_call["id"] = "fc_b".into();
    for e in [added(0, 0, replayed_call.clone()), args(1, "{\"q\": \"x\"}")] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
    replayed_call["arguments"] = "{\"q\": \"x\"}".into();
    replayed_call["status"] = "completed".into();
    let (_, e) = sent(d.splice(&item_done(2, 0, replayed_call), &mut mode, None));
    assert_eq!(
        (&e["item"]["id"], &e["item"]["arguments"], &e["sequence_number"]),
        (&json!("fc_a"), &json!("{\"q\": \"x\"}"), &json!(3))
    );
}

#[test]
fn other_items_are_resumed_after_their_done_and_held_back_whole() {
    let mut d = Delivered::default();
    let reasoning = json!({"id": "rs_a", "type": "reasoning", "summary": []});
    d.observe(&added(0, 0, reasoning.clone()));
    assert!(!d.resumable() && !d.nothing(), "inside a reasoning item");
    d.observe(&item_done(1, 0, json!({"id": "rs_a", "type": "reasoning", "encrypted_content": "gA=="})));
    d.observe(&added(2, 1, message("msg_a", None)));
    d.observe(&text(3, "msg_a", 1, "Hi"));
    assert!(d.resumable() && d.prefill().is_none());
    let mut mode = d.continuation(None);
    let theirs = json!({"id": "rs_b", "type": "reasoning", "encrypted_content": "other=="});
    for e in [added(0, 0, json!({"id": "rs_b", "type": "reasoning"})), item_done(1, 0, theirs)] {
        assert_eq!(d.splice(&e, &mut mode, None), Spliced::Skip, "{e}");
    }
    assert_eq!(d.splice(&added(2, 1, message("msg_b", None)), &mut mode, None), Spliced::Skip);
    assert_eq!(sent(d.splice(&text(3, "msg_b", 1, "Hi there"), &mut mode, None)).1["delta"], " there");
}
