use serde_json::{Value, json};

use super::*;
use crate::{Out, TranslateError};

fn events(outs: &[Out]) -> Vec<(String, Value)> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Event { bytes, .. } => {
                let text = std::str::from_utf8(bytes).unwrap_or_default();
                let (name, data) = text.strip_prefix("event: ")?.split_once("\ndata: ")?;
                Some((name.to_owned(), serde_json::from_str(data.trim_end()).unwrap_or(Value::Null)))
            }
            _ => None,
        })
        .collect()
}

/// Feeds `input` split at `at`, then ends it.
fn run(mut t: Box<dyn Transcoder + Send>, input: &[u8], at: usize) -> Vec<Out> {
    let mut outs = t.feed(&input[..at]);
    outs.extend(t.feed(&input[at..]));
    outs.extend(t.finish());
    outs
}

fn chat_of(body: Value) -> Result<(Value, Vec<std::borrow::Cow<'static, str>>), TranslateError> {
    chat_with(body, crate::ToChat::default())
}

fn chat_with(
    body: Value,
    options: crate::ToChat,
) -> Result<(Value, Vec<std::borrow::Cow<'static, str>>), TranslateError> {
    let t = to_chat(body.to_string().as_bytes(), options)?;
    Ok((serde_json::from_slice(&t.body).unwrap_or(Value::Null), t.dropped))
}

fn ids() -> ResponseIds {
    ResponseIds { id: "resp_r1".into(), model: "route-model".into(), created: 1_700_000_000, namespaces: Vec::new() }
}

#[test]
fn a_codex_turn_translates_to_chat_with_its_hints_named() {
    // The shape Codex sends on its second turn: developer prompt, replayed reasoning,
    // a function call and its output, hosted-tool-free tools.
    let body = json!({
        "model": "claude", "stream": true, "store": false, "tool_choice": "auto", "parallel_tool_calls": true,
        "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}, "prompt_cache_key": "s1",
        "client_metadata": {"x": "y"}, "instructions": null,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": null, "encrypted_content": "gAAA"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running ls."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "a.txt"},
        ],
        "tools": [{"type": "function", "name": "shell", "description": "Run", "strict": false,
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
    });
    let (chat, dropped) = chat_of(body).expect("translates");
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "List files"},
            {"role": "assistant", "content": "Running ls.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        ])
    );
    assert_eq!(chat["tools"][0]["function"]["name"], "shell");
    assert_eq!(chat["tools"][0]["function"]["strict"], false);
    assert_eq!(chat["tool_choice"], "auto");
    assert_eq!(chat["stream"], true);
    assert!(chat.get("store").is_none(), "store: false is the gateway's own behaviour, not sent on");
    let mut dropped = dropped;
    dropped.sort_unstable();
    assert_eq!(dropped, ["client_metadata", "include", "prompt_cache_key", "reasoning"]);
}

#[test]
fn a_string_input_instructions_and_limits_translate() {
    let body = json!({"model": "m", "input": "hi", "instructions": "Be kind.", "max_output_tokens": 64,
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}}});
    let (chat, dropped) = chat_of(body).expect("translates");
    assert_eq!(chat["messages"], json!([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]));
    assert_eq!(chat["max_tokens"], 64);
    assert_eq!(chat["response_format"]["json_schema"]["name"], "out");
    assert_eq!(chat["response_format"]["json_schema"]["strict"], true);
    assert!(dropped.is_empty());
}

#[test]
fn a_function_call_without_text_opens_its_own_assistant_message_and_parallel_calls_join_it() {
    let body = json!({"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "x"}]},
        {"type": "function_call_output", "call_id": "b", "output": "y"},
    ]});
    let (chat, _) = chat_of(body).expect("translates");
    let m = chat["messages"].as_array().expect("messages");
    assert_eq!(m.len(), 4);
    assert_eq!(m[1]["content"], Value::Null);
    assert_eq!(m[1]["tool_calls"].as_array().map(Vec::len), Some(2));
    assert_eq!(m[2], json!({"role": "tool", "tool_call_id": "a", "content": "x"}));
}

#[test]
fn what_cannot_be_translated_is_refused_naming_it() {
    let cases = [
        (json!({"previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"store": true}), "store"),
        (json!({"background": true}), "background"),
        (json!({"tools": [{"type": "function", "name": "f"}, {"type": "code_interpreter"}]}), "tools[1]"),
        (json!({"tool_choice": {"type": "web_search"}}), "tool_choice"),
        (json!({"input": [{"type": "item_reference", "id": "msg_1"}]}), "input[0]"),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0]",
        ),
        (json!({"input": [{"type": "local_shell_call", "call_id": "c"}]}), "input[0]"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (json!({"text": {"format": {"type": "grammar"}}}), "text.format"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let err = chat_of(body).expect_err(field);
        assert_eq!(err.field(), field);
    }
}

/// A chat stream with text, as a translated candidate's attempt produces it.
const CHAT_TEXT: &str = "data: {\"model\":\"up-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n\
data: [DONE]\n\n";

#[test]
fn a_chat_stream_becomes_the_responses_events_at_every_split() {
    for at in 0..=CHAT_TEXT.len() {
        let outs = run(from_chat(ids()), CHAT_TEXT.as_bytes(), at);
        let ev = events(&outs);
        let kinds: Vec<&str> = ev.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ],
            "split at {at}"
        );
        for (n, (kind, data)) in ev.iter().enumerate() {
            assert_eq!(data["type"], *kind);
            assert_eq!(data["sequence_number"], n);
        }
        let done = &ev[9].1["response"];
        assert_eq!(done["id"], "resp_r1");
        assert_eq!(done["model"], "up-model");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][0]["id"], "msg_r1");
        assert_eq!(
            done["usage"],
            json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 2,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12})
        );
        assert_eq!(ev[6].1["text"], "Hello");
        assert_eq!(outs.last(), Some(&Out::Done));
        let content: Vec<bool> = outs
            .iter()
            .filter_map(|o| if let Out::Event { content, .. } = o { Some(*content) } else { None })
            .collect();
        assert_eq!(content.iter().position(|c| *c), Some(4), "content from the first delta");
    }
}

#[test]
fn tool_calls_stream_as_function_call_items() {
    let input = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"shell\",\"arguments\":\"\"}}]}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"cmd\\\":\"}}]}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"ls\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n\
        data: [DONE]\n\n";
    let ev = events(&run(from_chat(ids()), input.as_bytes(), 7));
    let added = ev.iter().find(|(k, _)| k == "response.output_item.added").map(|(_, d)| d).expect("added");
    assert_eq!(added["item"]["type"], "function_call");
    assert_eq!(added["item"]["call_id"], "call_9");
    let deltas: Vec<&str> = ev
        .iter()
        .filter(|(k, _)| k == "response.function_call_arguments.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(deltas.concat(), "{\"cmd\":\"ls\"}");
    let (last, data) = ev.last().expect("events");
    assert_eq!(last, "response.completed");
    assert_eq!(data["response"]["output"][0]["arguments"], "{\"cmd\":\"ls\"}");
    assert_eq!(data["response"]["output"][0]["status"], "completed");
}

#[test]
fn a_stream_cut_by_the_token_limit_is_incomplete_and_one_without_an_end_is_an_error() {
    let cut = CHAT_TEXT.replace("\"stop\"", "\"length\"");
    let ev = events(&run(from_chat(ids()), cut.as_bytes(), 0));
    let (last, data) = ev.last().expect("events");
    assert_eq!(last, "response.incomplete");
    assert_eq!(data["response"]["incomplete_details"]["reason"], "max_output_tokens");

    let unfinished = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let outs = run(from_chat(ids()), unfinished.as_bytes(), 3);
    assert!(matches!(outs.last(), Some(Out::Error { before_content: false, .. })));
}

#[test]
fn a_whole_completion_becomes_a_response() {
    let body = json!({"model": "up", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    let (bytes, usage) = response_of_completion(body.to_string().as_bytes(), &ids()).expect("converts");
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["content"][0]["text"], "Let me look.");
    assert_eq!(v["output"][1]["type"], "function_call");
    assert_eq!(v["output"][1]["call_id"], "call_1");
    assert_eq!(v["usage"]["total_tokens"], 10);
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (7, 3));
}

const NATIVE_STREAM: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\"}}\n\n\
event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"encrypted_content\":\"gA\\u00e9==\"}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"delta\":\"Hi\"}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n";

#[test]
fn a_native_stream_passes_byte_for_byte_at_every_split() {
    for at in 0..=NATIVE_STREAM.len() {
        let outs = run(relay(), NATIVE_STREAM.as_bytes(), at);
        let bytes: Vec<u8> = outs
            .iter()
            .filter_map(|o| match o {
                Out::Event { bytes, .. } => Some(bytes.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(String::from_utf8_lossy(&bytes), NATIVE_STREAM, "split at {at}");
        let content: Vec<bool> = outs
            .iter()
            .filter_map(|o| if let Out::Event { content, .. } = o { Some(*content) } else { None })
            .collect();
        assert_eq!(content, [false, false, true, false]);
        assert_eq!(outs.last(), Some(&Out::Done));
    }
}

#[test]
fn a_native_failure_before_content_may_fail_over_and_a_cut_stream_is_an_error() {
    let failed = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
        event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}}\n\n";
    let outs = run(relay(), failed.as_bytes(), 9);
    let Some(Out::Error { error, before_content: true }) = outs.last() else { panic!("{outs:?}") };
    assert_eq!(error.kind, crate::ErrorKind::RateLimited);
    assert!(error.message.contains("slow down"));

    let cut = &NATIVE_STREAM[..NATIVE_STREAM.find("event: response.completed").unwrap_or(0)];
    let outs = run(relay(), cut.as_bytes(), 0);
    assert!(matches!(outs.last(), Some(Out::Error { before_content: false, .. })));
}

#[test]
fn a_whole_answers_usage_counts_cached_tokens_inside_the_input() {
    let body = br#"{"id":"resp_1","usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":60},"output_tokens":9}}"#;
    let u = usage_of_response(body).expect("usage");
    assert_eq!((u.prompt_tokens, u.cached_tokens, u.completion_tokens), (100, 60, 9));
    assert_eq!(usage_of_response(b"{}"), None);
}

#[test]
fn namespaced_tools_are_flattened_for_chat_and_split_again_in_the_answer() {
    // Codex groups its sub-agent tools in a namespace.
    let body = json!({"model": "m", "tool_choice": {"type": "function", "namespace": "agents", "name": "spawn"},
        "tools": [{"type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [
            {"type": "function", "name": "spawn", "parameters": {"type": "object"}}]}],
        "input": [{"role": "user", "content": "go"},
                  {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "ok"}]});
    let t = to_chat(body.to_string().as_bytes(), crate::ToChat::default()).expect("translates");
    let chat: Value = serde_json::from_slice(&t.body).expect("json");
    assert_eq!(chat["tools"][0]["function"]["name"], "agents__spawn");
    assert_eq!(chat["tool_choice"]["function"]["name"], "agents__spawn");
    assert_eq!(chat["messages"][1]["tool_calls"][0]["function"]["name"], "agents__spawn");
    assert_eq!(t.namespaces, ["agents"]);

    let ids = ResponseIds { namespaces: t.namespaces, ..ids() };
    let answer = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
        "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "agents__spawn", "arguments": "{}"}},
                       {"id": "c3", "type": "function", "function": {"name": "plain", "arguments": "{}"}}]}}]});
    let (bytes, _) = response_of_completion(answer.to_string().as_bytes(), &ids).expect("converts");
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!((&v["output"][0]["namespace"], &v["output"][0]["name"]), (&json!("agents"), &json!("spawn")));
    assert_eq!((&v["output"][1].get("namespace"), &v["output"][1]["name"]), (&None, &json!("plain")));

    let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c2\",\"function\":{\"name\":\"agents__spawn\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let ev = events(&run(from_chat(ids), stream.as_bytes(), 0));
    let added = ev.iter().find(|(k, _)| k == "response.output_item.added").map(|(_, d)| d).expect("added");
    assert_eq!((&added["item"]["namespace"], &added["item"]["name"]), (&json!("agents"), &json!("spawn")));
    let done = ev.iter().find(|(k, _)| k == "response.function_call_arguments.done").map(|(_, d)| d).expect("done");
    assert_eq!(done["name"], "spawn");
}

#[test]
fn web_search_becomes_chat_web_search_other_hosted_tools_are_refused_unless_the_route_omits_them() {
    // Codex's default turn: its function tools, the hosted web search, and an earlier
    // turn's web search call.
    let body = json!({"model": "m", "tool_choice": "auto", "parallel_tool_calls": true,
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}},
                  {"type": "web_search"}, {"type": "web_search_preview"}],
        "input": [{"role": "user", "content": "look it up"},
                  {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
                  {"role": "assistant", "content": [{"type": "output_text", "text": "found"}]}]});
    // By default the search goes as chat's web_search_options (a candidate with a search
    // of its own serves it, the others refuse it); the earlier call's record is left out
    // and named: its findings are in the text that follows.
    let (chat, dropped) = chat_of(body.clone()).expect("translates");
    assert_eq!(dropped, ["input.web_search_call"]);
    assert_eq!(chat["web_search_options"], json!({}));
    assert_eq!(chat["tools"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        chat["messages"],
        json!([{"role": "user", "content": "look it up"}, {"role": "assistant", "content": "found"}])
    );
    // The tool's settings: the location moves under `approximate`, as chat has it.
    let located = json!({"model": "m", "input": "weather?", "tools": [{"type": "web_search",
        "search_context_size": "low", "filters": {"allowed_domains": ["example.org"]},
        "user_location": {"type": "approximate", "city": "Lyon", "country": "FR", "region": null}}]});
    let (chat, dropped) = chat_of(located).expect("translates");
    assert!(dropped.is_empty(), "{dropped:?}");
    assert_eq!(chat.get("tools"), None);
    assert_eq!(
        chat["web_search_options"],
        json!({"search_context_size": "low", "filters": {"allowed_domains": ["example.org"]},
               "user_location": {"type": "approximate", "approximate": {"city": "Lyon", "country": "FR"}}})
    );
    // Codex's default search reads cached pages only: no other search can promise that.
    let cached = json!({"model": "m", "input": "hi", "tools": [{"type": "web_search", "external_web_access": false}]});
    let refused = chat_of(cached.clone()).expect_err("cached pages only");
    assert_eq!(refused.field(), "tools[0].external_web_access");
    assert!(refused.to_string().contains("hostedTools: omit"), "{refused}");
    let live = json!({"model": "m", "input": "hi", "tools": [{"type": "web_search", "external_web_access": true}]});
    assert_eq!(chat_of(live).expect("live search").0["web_search_options"], json!({}));
    // Every other hosted tool, and the records of its calls, are refused by default.
    let mut files = body.clone();
    files["tools"][1] = json!({"type": "file_search", "vector_store_ids": ["vs_1"]});
    let refused = chat_of(files).expect_err("file search");
    assert_eq!(refused.field(), "tools[1]");
    assert!(refused.to_string().contains("hostedTools: omit"), "{refused}");
    let mut history = body.clone();
    history["input"][1]["type"] = json!("file_search_call");
    let refused = chat_of(history).expect_err("an earlier file search");
    assert_eq!(refused.field(), "input[1]");
    assert!(refused.to_string().contains("hostedTools: omit"), "{refused}");

    let omit = crate::ToChat { omit_hosted_tools: true };
    // Omitted, every hosted tool but the web search goes: that one stays for the
    // candidates with a search of their own, and the others leave it out
    // (`Target::omit_hosted_tools`); a cached-pages-only search goes too.
    let (chat, dropped) = chat_with(body.clone(), omit).expect("translates");
    assert_eq!(dropped, ["input.web_search_call"]);
    assert_eq!(chat["web_search_options"], json!({}));
    let (chat, dropped) = chat_with(cached, omit).expect("translates");
    assert_eq!((dropped.as_slice(), chat.get("web_search_options")), (&["tools.web_search".into()][..], None));
    let mut files = body;
    files["tools"][1] = json!({"type": "file_search"});
    files["tools"][2] = json!({"type": "code_interpreter"});
    let (chat, dropped) = chat_with(files, omit).expect("translates");
    assert_eq!(dropped, ["input.web_search_call", "tools.file_search", "tools.code_interpreter"]);
    assert_eq!(chat["tools"].as_array().map(Vec::len), Some(1));
    assert_eq!(chat["tools"][0]["function"]["name"], "shell");
    assert_eq!(chat["tool_choice"], "auto");
    assert_eq!(
        chat["messages"],
        json!([{"role": "user", "content": "look it up"}, {"role": "assistant", "content": "found"}])
    );

    // Only hosted tools: the request goes without tools; one that requires a call, or
    // chooses a hosted tool, cannot be served.
    let only = json!({"model": "m", "input": "hi", "tools": [{"type": "file_search"}], "tool_choice": "auto", "parallel_tool_calls": false});
    let (chat, dropped) = chat_with(only.clone(), omit).expect("translates");
    assert_eq!(dropped, ["tools.file_search"]);
    assert_eq!((chat.get("tools"), chat.get("tool_choice"), chat.get("parallel_tool_calls")), (None, None, None));
    let mut required = only.clone();
    required["tool_choice"] = json!("required");
    assert_eq!(chat_with(required, omit).expect_err("no tool left to call").field(), "tool_choice");
    let mut chosen = only;
    chosen["tool_choice"] = json!({"type": "file_search"});
    assert_eq!(chat_with(chosen, omit).expect_err("a hosted choice").field(), "tool_choice");
    // Client-run tools are never omitted: a custom tool stays refused.
    let custom = json!({"model": "m", "input": "hi", "tools": [{"type": "custom", "name": "apply_patch"}]});
    assert_eq!(chat_with(custom, omit).expect_err("client tool").field(), "tools[0]");
}

/// A searched answer's chat stream: text, then its sources as an annotations delta.
const CHAT_CITED: &str = "data: {\"model\":\"up-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Born 1916.\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"annotations\":[{\"type\":\"url_citation\",\"url_citation\":{\"start_index\":0,\"end_index\":10,\"url\":\"https://example.org/cs\",\"title\":\"CS\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n\
data: [DONE]\n\n";

#[test]
fn a_searched_answers_sources_become_url_citation_annotations() {
    let want = json!({"type": "url_citation", "start_index": 0, "end_index": 10, "url": "https://example.org/cs", "title": "CS"});
    let ev = events(&run(from_chat(ids()), CHAT_CITED.as_bytes(), 40));
    let added = ev.iter().find(|(k, _)| k == "response.output_text.annotation.added").map(|(_, d)| d).expect("added");
    assert_eq!(
        (&added["item_id"], &added["annotation_index"], &added["annotation"]),
        (&json!("msg_r1"), &json!(0), &want)
    );
    let part = ev.iter().find(|(k, _)| k == "response.content_part.done").map(|(_, d)| d).expect("part done");
    assert_eq!(part["part"]["annotations"], json!([want]));
    let completed = &ev.last().expect("events").1["response"];
    assert_eq!(completed["output"][0]["content"][0]["annotations"], json!([want]));

    let body = json!({"model": "up", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "Born 1916.", "annotations": [{"type": "url_citation", "url_citation":
        {"start_index": 0, "end_index": 10, "url": "https://example.org/cs", "title": "CS"}}]}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    let (bytes, _) = response_of_completion(body.to_string().as_bytes(), &ids()).expect("converts");
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["output"][0]["content"][0]["annotations"], json!([want]));
}
