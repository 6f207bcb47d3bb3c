//! One test per translation bug other gateways shipped (named after the bug), so
//! sluice cannot regress into them.

use serde_json::{Value, json};
use sluice_providers::{ChatRequest, ErrorKind, Out, Protocol, build, parse, transcoder};

use crate::fixture::{opts, read, run_stream, target};

/// The chunks of a rendered OpenAI stream.
fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Tool calls assembled the way OpenAI clients do: by `index`.
fn tool_calls(sse: &str) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in chunks(sse) {
        for call in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = usize::try_from(call["index"].as_u64().unwrap()).unwrap();
            if i == calls.len() {
                assert!(call["id"].is_string() && call["type"] == "function", "first delta of a call: {call}");
                assert_eq!(call["function"]["arguments"], "", "first delta carries empty arguments");
                calls.push((
                    call["id"].as_str().unwrap().to_owned(),
                    call["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            } else {
                assert!(i < calls.len(), "index {i} skips ahead");
                assert!(call.get("id").is_none(), "later deltas carry no id");
                calls[i].2.push_str(call["function"]["arguments"].as_str().unwrap());
            }
        }
    }
    calls
}

fn finish_reason(sse: &str) -> String {
    chunks(sse).iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned)).next_back().unwrap()
}

fn usage(sse: &str) -> Value {
    chunks(sse).into_iter().find(|c| c["choices"] == json!([])).unwrap()["usage"].clone()
}

fn stream(protocol: Protocol, case: &str) -> String {
    run_stream(protocol, &read(protocol, case, "response.sse"), &[])
}

#[test]
fn parallel_tool_calls_stream_with_distinct_indexes() {
    // BerriAI/litellm#5231, maximhq/bifrost#1961, Portkey-AI/gateway#1284: every call
    // streamed as index 0. A text block before the calls takes no index.
    let calls = tool_calls(&stream(Protocol::Anthropic, "tool_use_stream"));
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(serde_json::from_str::<Value>(&calls[0].2).unwrap(), json!({ "location": "San Francisco, CA" }));
    assert_eq!(calls[1].1, "get_time");
}

#[test]
fn gemini_tool_call_index_does_not_reset_per_chunk() {
    // BerriAI/litellm#16194, envoyproxy/ai-gateway#1524: calls in separate chunks all got 0.
    let calls = tool_calls(&stream(Protocol::Gemini, "function_call_stream"));
    assert_eq!(calls.iter().map(|c| c.1.as_str()).collect::<Vec<_>>(), ["get_current_weather", "get_time"]);
    // Gemini gives no ids: they are generated, unique per response.
    assert_ne!(calls[0].0, calls[1].0);
}

#[test]
fn gemini_stop_with_function_call_finishes_as_tool_calls() {
    // BerriAI/litellm#21041: the finishReason STOP arrives in a later chunk without parts.
    assert_eq!(finish_reason(&stream(Protocol::Gemini, "function_call_stream")), "tool_calls");
    let c =
        parse(&target(Protocol::Gemini), &read(Protocol::Gemini, "function_call", "response.json"), &opts()).unwrap();
    let body: Value = serde_json::from_slice(&c.body).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn no_argument_tool_calls_end_with_an_empty_object() {
    // agentgateway/agentgateway#3002, BerriAI/litellm#5063: `""` instead of `"{}"` made
    // the next turn fail with "Input should be a valid dictionary".
    for (protocol, case) in [(Protocol::Anthropic, "tool_use_stream"), (Protocol::Gemini, "function_call_stream")] {
        let calls = tool_calls(&stream(protocol, case));
        assert_eq!(calls[1].2, "{}", "{case}");
    }
    for (protocol, case) in [(Protocol::Anthropic, "tool_use"), (Protocol::Gemini, "function_call")] {
        let c = parse(&target(protocol), &read(protocol, case, "response.json"), &opts()).unwrap();
        let body: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(body["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"], "{}", "{case}");
    }
    // And an empty `arguments` in the history is sent as an empty object.
    let req: ChatRequest = serde_json::from_slice(&read(Protocol::Anthropic, "tool_use", "request.json")).unwrap();
    let native = build(&target(Protocol::Anthropic), &req, false).unwrap();
    let body: Value = serde_json::from_slice(&native.body).unwrap();
    assert_eq!(body["messages"][1]["content"][1]["input"], json!({}));
}

#[test]
fn streamed_usage_includes_cache_tokens() {
    // BerriAI/litellm#5364: cache tokens missing from the streamed usage.
    let u = usage(&stream(Protocol::Anthropic, "tool_use_stream"));
    assert_eq!(u["prompt_tokens"], 472 + 2000 + 100);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 2000);
    assert_eq!(u["completion_tokens"], 89);
    let u = usage(&stream(Protocol::Gemini, "function_call_stream"));
    assert_eq!(
        (u["prompt_tokens"].as_u64(), u["prompt_tokens_details"]["cached_tokens"].as_u64()),
        (Some(2052), Some(2000))
    );
}

#[test]
fn prompt_tokens_include_cache_reads_and_writes() {
    // Portkey-AI/gateway#1210, BerriAI/litellm#15270: prompt_tokens without the cache
    // counts made costs wrong or negative.
    let c = parse(&target(Protocol::Anthropic), &read(Protocol::Anthropic, "text", "response.json"), &opts()).unwrap();
    assert_eq!(
        (c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.cache_write_tokens),
        (2095 + 2051 + 2051, 2051, 2051)
    );
    // Gemini's promptTokenCount already includes its cached tokens: not added twice.
    let c = parse(&target(Protocol::Gemini), &read(Protocol::Gemini, "text", "response.json"), &opts()).unwrap();
    assert_eq!((c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.completion_tokens), (2100, 2000, 12 + 30));
}

#[test]
fn an_error_event_before_content_may_fail_over_and_after_content_may_not() {
    // Portkey-AI/gateway#1047, #1142: a 200 followed by an error was not surfaced and
    // not failed over.
    for protocol in [Protocol::Anthropic, Protocol::Gemini] {
        for (case, before) in [("error_before_content", true), ("error_after_content", false)] {
            let mut t = transcoder(&target(protocol), opts());
            let mut outs = t.feed(&read(protocol, case, "response.sse"));
            outs.extend(t.finish());
            let Some(Out::Error { error, before_content }) = outs.last() else { panic!("{case}: {outs:?}") };
            assert_eq!(*before_content, before, "{protocol:?} {case}");
            assert!(error.kind.retryable(), "{protocol:?} {case}");
            // Nothing was emitted before the error when it came first.
            assert_eq!(outs.len() == 1, before, "{protocol:?} {case}");
        }
    }
    let mut t = transcoder(&target(Protocol::Anthropic), opts());
    let outs = t.feed(&read(Protocol::Anthropic, "error_before_content", "response.sse"));
    let Some(Out::Error { error, .. }) = outs.first() else { panic!("{outs:?}") };
    assert_eq!((error.kind, error.status), (ErrorKind::Overloaded, 529));
}

#[test]
fn vertex_access_token_expired_is_refreshed_not_failed_over() {
    // BerriAI/litellm#23512, pydantic/pydantic-ai#1186: a token was never refreshed.
    for protocol in [Protocol::VertexAnthropic, Protocol::VertexGemini] {
        let body = read(Protocol::VertexAnthropic, "errors", "access_token_expired_401.json");
        let e = sluice_providers::classify(&target(protocol), 401, &http::HeaderMap::new(), &body, 0);
        assert_eq!(e.kind, ErrorKind::AuthExpired, "{protocol:?}");
    }
}

#[test]
fn vertex_anthropic_stream_raw_predict_streams_content_as_it_arrives() {
    // envoyproxy/ai-gateway#1894: the client got 0 bytes from streamRawPredict.
    let bytes = read(Protocol::VertexAnthropic, "text_stream", "response.sse");
    let text = std::str::from_utf8(&bytes).unwrap();
    let cut = text.find("event: content_block_stop").unwrap();
    let mut t = transcoder(&target(Protocol::VertexAnthropic), opts());
    let outs = t.feed(&bytes[..cut]);
    assert!(outs.iter().any(|o| matches!(o, Out::Event { content: true, .. })), "{outs:?}");
    let mut outs = t.feed(&bytes[cut..]);
    outs.extend(t.finish());
    assert_eq!(outs.last(), Some(&Out::Done));
}

#[test]
fn azure_content_filter_annotation_chunks_are_dropped() {
    // openai/openai-python#1677, microsoft/semantic-kernel#7250: chunks without `delta`
    // and the `choices: []` prompt-filter chunk broke clients.
    let out = stream(Protocol::AzureOpenAi, "content_filter_stream");
    for c in chunks(&out) {
        match c["choices"].as_array().unwrap().first() {
            Some(choice) => assert!(choice.get("delta").is_some(), "{c}"),
            None => assert!(c["usage"].is_object(), "a choices: [] chunk that is not the usage chunk: {c}"),
        }
    }
    assert_eq!(usage(&out)["prompt_tokens"], 8);
}

#[test]
fn a_stream_cut_before_its_end_is_an_error() {
    for (protocol, case) in [(Protocol::Anthropic, "text_stream"), (Protocol::Gemini, "function_call_stream")] {
        let bytes = read(protocol, case, "response.sse");
        let cut = if protocol == Protocol::Gemini { bytes.len() / 2 } else { bytes.len() - 40 };
        let mut t = transcoder(&target(protocol), opts());
        let mut outs = t.feed(&bytes[..cut]);
        outs.extend(t.finish());
        assert!(
            matches!(outs.last(), Some(Out::Error { before_content: false, error }) if error.kind.retryable()),
            "{case}: {outs:?}"
        );
    }
}

#[test]
fn gemini_thought_signatures_survive_the_round_trip() {
    // higress-group/higress#3929, BerriAI/litellm PR #34603: Gemini 3 answers 400
    // "Function call is missing a thought_signature" when the replayed call lacks it.
    let c = parse(&target(Protocol::Gemini), &read(Protocol::Gemini, "thought_signature", "response.json"), &opts())
        .unwrap();
    let body: Value = serde_json::from_slice(&c.body).unwrap();
    let message = body["choices"][0]["message"].clone();
    let streamed = chunks(&stream(Protocol::Gemini, "thought_signature_stream"));
    assert_eq!(
        streamed[0]["choices"][0]["delta"]["tool_calls"][0]["extra_content"],
        message["tool_calls"][0]["extra_content"]
    );
    // The client sends the assistant message back as it got it, with the tool's answer.
    let req: ChatRequest = serde_json::from_value(json!({ "messages": [
        { "role": "user", "content": "Book a taxi" },
        message,
        { "role": "tool", "tool_call_id": "fc_9qp3", "content": "booked" },
    ]}))
    .unwrap();
    let native: Value = serde_json::from_slice(&build(&target(Protocol::Gemini), &req, false).unwrap().body).unwrap();
    let call = &native["contents"][1]["parts"][0];
    assert_eq!(call["thoughtSignature"], "EsQBCsEBAcsjafQ9Z3xkVtQWoG5iMk8=");
    assert_eq!(call["functionCall"]["id"], "fc_9qp3");
    assert_eq!(native["contents"][2]["parts"][0]["functionResponse"]["id"], "fc_9qp3");
    // An unsigned call (older models reject ids) is replayed without one.
    let req: ChatRequest = serde_json::from_slice(&read(Protocol::Gemini, "function_call", "request.json")).unwrap();
    let native = build(&target(Protocol::Gemini), &req, false).unwrap();
    assert!(!std::str::from_utf8(&native.body).unwrap().contains("\"id\""));
}
