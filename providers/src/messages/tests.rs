use http::{HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::*;
use crate::{Out, Protocol, Target, TranslateError};

mod count;

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

const NATIVE_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":3}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\\u00e9+/=\"}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

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
        assert_eq!(content, [false, false, false, true, false], "content from the first block delta");
        assert_eq!(outs.last(), Some(&Out::Done));
    }
}

#[test]
fn a_native_error_before_content_may_fail_over_and_a_cut_stream_is_an_error() {
    let input = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let outs = run(relay(), input.as_bytes(), 10);
    match outs.last() {
        Some(Out::Error { error, before_content: true }) => assert_eq!(error.kind, crate::ErrorKind::Overloaded),
        other => panic!("{other:?}"),
    }
    let cut = &NATIVE_STREAM[..NATIVE_STREAM.find("event: message_stop").unwrap_or(0)];
    let outs = run(relay(), cut.as_bytes(), 0);
    assert!(matches!(outs.last(), Some(Out::Error { before_content: false, .. })), "{outs:?}");
}

fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
    (HeaderName::from_static(name), HeaderValue::from_static(value))
}

#[test]
fn anthropic_gets_the_body_as_given_and_every_anthropic_header() {
    let target = Target::new(Protocol::Anthropic, "claude-x", 1024);
    let body = br#"{"model":"claude-x","max_tokens":5,"messages":[],"future_member":{"a":1}}"#;
    let headers = [header("anthropic-beta", "new-beta-2099-01-01"), header("anthropic-future", "1")];
    let n = native(&target, &bytes::Bytes::from_static(body), &headers, true, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.path, "/messages");
    assert_eq!(&n.body[..], &body[..]);
    let names: Vec<(&str, &str)> =
        n.all_headers(&headers).map(|(k, v)| (k.as_str(), v.to_str().unwrap_or(""))).collect();
    assert_eq!(
        names,
        [("anthropic-beta", "new-beta-2099-01-01"), ("anthropic-future", "1"), ("anthropic-version", "2023-06-01")]
    );
    let own = [header("anthropic-version", "2024-01-01"), header("anthropic-beta", "b")];
    let n = native(&target, &bytes::Bytes::from_static(body), &own, false, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.path, "/messages/count_tokens");
    let sent: Vec<_> = n.all_headers(&own).cloned().collect();
    assert_eq!(sent, own, "the client's version wins, and nothing is added");
}

#[test]
fn vertex_gets_its_envelope_and_loses_only_what_it_refuses() {
    let target = Target {
        gcp_project: Some("p"),
        gcp_location: Some("us-east5"),
        ..Target::new(Protocol::VertexAnthropic, "claude-x@2025", 1024)
    };
    let body = br#"{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],
        "context_management":{"edits":[]},"output_config":{"effort":"high"},"stream":true,
        "messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
        {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"Sig\u00e9/+="}]}]}"#;
    let headers = [
        header("anthropic-version", "2023-06-01"),
        header("anthropic-beta", "claude-code-20250219, interleaved-thinking-2025-05-14"),
    ];
    let n = native(&target, &bytes::Bytes::from_static(body), &headers, true, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.path, "/projects/p/locations/us-east5/publishers/anthropic/models/claude-x@2025:streamRawPredict");
    let text = String::from_utf8_lossy(&n.body);
    assert!(text.contains(r#""signature":"Sig\u00e9/+=""#), "byte-exact: {text}");
    let v: Value = serde_json::from_slice(&n.body).unwrap_or_default();
    assert_eq!(v["anthropic_version"], "vertex-2023-10-16");
    assert!(v.get("model").is_none() && v.get("context_management").is_none() && v.get("output_config").is_none());
    assert_eq!(v["system"][1], json!({"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}));
    assert_eq!(v["system"][0]["cache_control"], json!({"type":"ephemeral"}));
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(2), "the system entry left messages");
    let names: Vec<(&str, &str)> = n.headers.iter().map(|(k, v)| (k.as_str(), v.to_str().unwrap_or(""))).collect();
    assert_eq!(names, [("anthropic-beta", "interleaved-thinking-2025-05-14")]);
}

fn chat(body: Value) -> Result<(Value, Vec<std::borrow::Cow<'static, str>>), TranslateError> {
    chat_with(body, crate::ToChat::default())
}

fn chat_with(
    body: Value,
    options: crate::ToChat,
) -> Result<(Value, Vec<std::borrow::Cow<'static, str>>), TranslateError> {
    let t = to_chat(body.to_string().as_bytes(), options)?;
    Ok((serde_json::from_slice(&t.body).unwrap_or_default(), t.dropped))
}

#[test]
fn a_conversation_with_tools_translates_to_chat() {
    let (c, dropped) = chat(json!({
        "model": "m", "max_tokens": 100, "stream": true, "stop_sequences": ["X"], "metadata": {"user_id": "u1"},
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "two"}],
        "thinking": {"type": "adaptive"},
        "tools": [{"name": "Read", "description": "read a file", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "A"}]},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]},
        ],
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dropped, ["cache_control", "thinking"]);
    assert_eq!(c["max_tokens"], 100);
    assert_eq!(c["stop"], json!(["X"]));
    assert_eq!(c["user"], "u1");
    assert_eq!(c["tool_choice"], "required");
    assert_eq!(c["parallel_tool_calls"], false);
    assert_eq!(
        c["tools"][0]["function"],
        json!({"name": "Read", "description": "read a file", "parameters": {"type": "object"}})
    );
    let m = &c["messages"];
    assert_eq!(m[0], json!({"role": "system", "content": "be brief\n\ntwo"}));
    assert_eq!(m[1], json!({"role": "user", "content": "read a"}));
    assert_eq!(m[2]["content"], "ok");
    assert_eq!(m[2]["tool_calls"][0]["function"], json!({"name": "Read", "arguments": "{\"path\":\"a\"}"}));
    assert_eq!(m[3], json!({"role": "tool", "tool_call_id": "toolu_1", "content": "A"}));
    assert_eq!(m[4]["content"][0]["image_url"]["url"], "data:image/png;base64,AAA");
}

#[test]
fn what_has_no_equivalent_is_refused_by_name() {
    let base = |extra: Value| {
        let mut b = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]});
        if let (Value::Object(b), Value::Object(e)) = (&mut b, extra) {
            b.extend(e);
        }
        b
    };
    let field = |body: Value| chat(body).err().map(|e| e.field().to_owned());
    assert_eq!(field(base(json!({"top_k": 5}))).as_deref(), Some("top_k"));
    assert_eq!(field(base(json!({"mcp_servers": []}))).as_deref(), Some("mcp_servers"));
    assert_eq!(
        field(base(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}))).as_deref(),
        Some("tools[0]")
    );
    let doc = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "document", "source": {"type": "text", "data": "d"}}]}]});
    assert_eq!(field(doc).as_deref(), Some("messages[0].content[1]"));
}

const CHAT_STREAM: &str = "data: {\"id\":\"c\",\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"Read\",\"arguments\":\"\"}}]}}]}\n\n\
data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"p\\\":1}\"}}]}}]}\n\n\
data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: {\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":6}}}\n\n\
data: [DONE]\n\n";

#[test]
fn a_chat_stream_becomes_the_messages_events_at_every_split() {
    for at in 0..=CHAT_STREAM.len() {
        let outs = run(from_chat("msg_r1", "route-model"), CHAT_STREAM.as_bytes(), at);
        let names: Vec<String> = events(&outs).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "split at {at}"
        );
        assert_eq!(outs.last(), Some(&Out::Done));
    }
    let ev = events(&run(from_chat("msg_r1", "route-model"), CHAT_STREAM.as_bytes(), 0));
    assert_eq!(ev[0].1["message"]["id"], "msg_r1");
    assert_eq!(ev[0].1["message"]["model"], "gpt-x");
    for (name, data) in &ev {
        assert_eq!(data["type"], name.as_str(), "the event name is the data's type");
    }
    assert_eq!(ev[2].1["delta"], json!({"type": "text_delta", "text": "Hi"}));
    assert_eq!(ev[4].1["content_block"], json!({"type": "tool_use", "id": "call_1", "name": "Read", "input": {}}));
    assert_eq!(
        ev[5].1,
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"p\":1}"}})
    );
    assert_eq!(ev[7].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        ev[7].1["usage"],
        json!({"input_tokens": 4, "cache_read_input_tokens": 6, "cache_creation_input_tokens": 0, "output_tokens": 4})
    );
}

#[test]
fn a_chat_stream_cut_before_its_finish_is_an_error() {
    let cut = &CHAT_STREAM
        [..CHAT_STREAM.find("data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{},").unwrap_or(0)];
    let outs = run(from_chat("m", "m"), cut.as_bytes(), 0);
    assert!(matches!(outs.last(), Some(Out::Error { before_content: false, .. })), "{outs:?}");
}

#[test]
fn a_whole_chat_answer_becomes_a_message() {
    let body = json!({"id": "c", "model": "gpt-x", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "Hello"}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2}});
    let (message, usage) =
        message_of_completion(body.to_string().as_bytes(), "msg_1", "m").unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_slice(&message).unwrap_or_default();
    assert_eq!(v["content"], json!([{"type": "text", "text": "Hello"}]));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["input_tokens"], 7);
    assert_eq!(usage, Usage::from_inclusive(7, 2, 0));
    assert_eq!(usage_of_message(&message), Some(usage), "a message's usage reads back the same");
}

#[test]
fn a_native_message_usage_counts_cache_reads_and_writes_as_input() {
    let body = br#"{"id":"msg","usage":{"input_tokens":3,"cache_read_input_tokens":10,"cache_creation_input_tokens":5,"output_tokens":2}}"#;
    assert_eq!(usage_of_message(body), Some(Usage::from_exclusive(3, 2, 10, 5)));
    assert_eq!(usage_of_message(b"{\"id\":\"x\"}"), None);
}

#[test]
fn claude_on_bedrock_gets_invoke_models_envelope_and_betas_in_the_body() {
    let model = "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-x-v1:0";
    assert!(is_claude_on_bedrock(model) && !is_claude_on_bedrock("meta.llama3-70b-instruct-v1:0"));
    let target = Target::new(Protocol::Bedrock, model, 1024);
    let body = br#"{"model":"m","max_tokens":5,"stream":true,"anthropic_version":"2023-06-01","output_config":{"effort":"high"},
        "messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},
        {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"Sig\u00e9/+="}]}]}"#;
    let headers = [
        header("anthropic-version", "2023-06-01"),
        header("anthropic-beta", "claude-code-20250219, interleaved-thinking-2025-05-14"),
    ];
    let n = native(&target, &bytes::Bytes::from_static(body), &headers, true, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        n.path,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.anthropic.claude-x-v1%3A0/invoke-with-response-stream"
    );
    assert!(n.headers.is_empty(), "Bedrock takes its betas in the body: {:?}", n.headers);
    let text = String::from_utf8_lossy(&n.body);
    assert!(text.contains(r#""signature":"Sig\u00e9/+=""#), "byte-exact: {text}");
    let v: Value = serde_json::from_slice(&n.body).unwrap_or_default();
    assert_eq!(v["anthropic_version"], BEDROCK_VERSION);
    assert_eq!(v["anthropic_beta"], json!(["interleaved-thinking-2025-05-14"]));
    for gone in ["model", "stream", "output_config"] {
        assert!(v.get(gone).is_none(), "{gone}: {v}");
    }
    assert_eq!(v["system"], json!([{"type": "text", "text": "be brief"}]), "the system entry left messages");
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(2));
    let n = native(&target, &bytes::Bytes::from_static(br#"{"max_tokens":5,"messages":[]}"#), &[], false, false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(n.path.ends_with("/invoke"));
}

#[test]
fn claude_on_bedrock_refuses_server_tools_by_name_and_takes_client_tools_named_alike() {
    let target = Target::new(Protocol::Bedrock, "us.anthropic.claude-x-v1:0", 1024);
    let refused = |body: Value| match native(&target, &bytes::Bytes::from(body.to_string()), &[], false, false) {
        Err(TranslateError::Unsupported { field, reason }) => format!("{field}: {reason}"),
        other => panic!("not refused: {other:?}"),
    };
    let user = json!([{"role": "user", "content": "news?"}]);
    // Claude Code's search sub-agent's request.
    let search = json!({"max_tokens": 5, "messages": user, "tools": [
        {"name": "Read", "input_schema": {"type": "object"}},
        {"type": "web_search_20260209", "name": "web_search", "max_uses": 8}]});
    assert_eq!(
        refused(search),
        "tools[1]: Claude on Bedrock has no server tools: \"web_search_20260209\" runs at Anthropic and on Vertex AI"
    );
    let history = json!({"max_tokens": 5, "messages": [
        {"role": "user", "content": "news?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}}]},
        {"role": "user", "content": "and?"}]});
    assert!(refused(history).starts_with("messages[1].content[1]: "));
    // A client tool that is called web_search, or text that names a server tool, is not one.
    let client = json!({"max_tokens": 5, "messages": [{"role": "user", "content": "use \"web_search_20250305\""}],
        "tools": [{"name": "web_search", "input_schema": {"type": "object"}}]});
    assert!(native(&target, &bytes::Bytes::from(client.to_string()), &[], false, false).is_ok());
}

/// `events` as InvokeModelWithResponseStream frames them: each event's data, base64,
/// in a `chunk` frame.
fn bedrock_frames(stream: &str) -> Vec<u8> {
    use base64::Engine as _;
    stream
        .split("\n\n")
        .filter_map(|e| e.split_once("\ndata: ").map(|(_, data)| data))
        .flat_map(|data| {
            let payload = json!({"bytes": base64::engine::general_purpose::STANDARD.encode(data)}).to_string();
            crate::eventstream::encode_event("chunk", payload.as_bytes()).map(|b| b.to_vec()).unwrap_or_default()
        })
        .collect()
}

#[test]
fn bedrocks_frames_become_the_messages_events_at_every_split() {
    let frames = bedrock_frames(NATIVE_STREAM);
    for at in (0..=frames.len()).step_by(7) {
        let outs = run(bedrock_relay(), &frames, at);
        let bytes: Vec<u8> = outs
            .iter()
            .filter_map(|o| match o {
                Out::Event { bytes, .. } => Some(bytes.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        // The same events as Anthropic's own stream; `ping` keeps its spacing.
        assert_eq!(String::from_utf8_lossy(&bytes), NATIVE_STREAM, "split at {at}");
        assert_eq!(outs.last(), Some(&Out::Done));
    }
    // An exception frame before content may fail over; one after it ends the stream.
    let mut throttled = bedrock_frames(&NATIVE_STREAM[..NATIVE_STREAM.find("event: ping").unwrap_or(0)]);
    let exception = crate::eventstream::encode_exception("throttlingException", br#"{"message":"slow down"}"#);
    throttled.extend_from_slice(&exception.unwrap_or_default());
    match run(bedrock_relay(), &throttled, 0).last() {
        Some(Out::Error { error, before_content: true }) => assert_eq!(error.kind, crate::ErrorKind::RateLimited),
        other => panic!("{other:?}"),
    }
    let cut = bedrock_frames(&NATIVE_STREAM[..NATIVE_STREAM.find("event: message_stop").unwrap_or(0)]);
    assert!(matches!(run(bedrock_relay(), &cut, 0).last(), Some(Out::Error { before_content: false, .. })));
    let json = br#"{"message":"The security token included in the request is expired"}"#;
    assert!(matches!(run(bedrock_relay(), json, 0).last(), Some(Out::Error { before_content: true, .. })));
}

#[test]
fn server_tools_are_refused_unless_the_route_omits_them_and_then_named() {
    let body = json!({"model": "m", "max_tokens": 64,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "messages": [
            {"role": "user", "content": "weather and news?"},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Here is the news."}]},
            {"role": "user", "content": "thanks"}]});
    // Refused by default, naming the first server part met (the earlier turn's call).
    let refused = chat(body.clone()).expect_err("refused by default");
    assert_eq!(refused.field(), "messages[1].content[0]");
    assert!(refused.to_string().contains("hostedTools: omit"), "{refused}");
    let mut fresh = body.clone();
    fresh["messages"] = json!([{"role": "user", "content": "news?"}]);
    let refused = chat(fresh).expect_err("the tool itself");
    assert_eq!(refused.field(), "tools[1]");
    assert!(refused.to_string().contains("hostedTools: omit"), "{refused}");

    let omit = crate::ToChat { omit_hosted_tools: true };
    let (c, dropped) = chat_with(body.clone(), omit).expect("translates");
    assert_eq!(dropped, ["content.server_tool_use", "content.web_search_tool_result", "tools.web_search_20250305"]);
    assert_eq!(c["tools"].as_array().map(Vec::len), Some(1));
    assert_eq!(c["messages"][1], json!({"role": "assistant", "content": "Here is the news."}));

    // A choice of the omitted tool, or of any tool when none is left, cannot be served.
    let mut named = body.clone();
    named["tool_choice"] = json!({"type": "tool", "name": "web_search"});
    assert_eq!(chat_with(named, omit).expect_err("names it").field(), "tool_choice.name");
    let mut only = body;
    only["tools"] = json!([{"type": "web_fetch_20250910", "name": "web_fetch"}]);
    only["tool_choice"] = json!({"type": "any"});
    assert_eq!(chat_with(only.clone(), omit).expect_err("no tool left").field(), "tool_choice");
    only["tool_choice"] = json!({"type": "auto"});
    let (c, _) = chat_with(only, omit).expect("translates");
    assert_eq!((c.get("tools"), c.get("tool_choice")), (None, None));
    // Client-run Anthropic tools (bash, text editor) are never omitted.
    let bash = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "bash_20250124", "name": "bash"}]});
    assert_eq!(chat_with(bash, omit).expect_err("client tool").field(), "tools[0]");
}
