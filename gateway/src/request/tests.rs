use proptest::prelude::*;
use serde_json::{Map, json};

use super::*;

fn parse(endpoint: Endpoint, body: &str) -> Result<ClientRequest, ApiError> {
    ClientRequest::parse(endpoint, &Bytes::copy_from_slice(body.as_bytes()))
}

fn err(endpoint: Endpoint, body: &str) -> String {
    match parse(endpoint, body) {
        Err(e) => e.to_string(),
        Ok(_) => "accepted".into(),
    }
}

/// What the upstream body must mean: the client's object with `model` replaced,
/// `max_tokens` defaulted and usage asked for on streams (the tree-based rewrite the
/// splice replaced).
fn reference(endpoint: Endpoint, body: &str, model: &str, default_max: u32) -> Value {
    let mut map: Map<String, Value> = serde_json::from_str(body).unwrap();
    map.insert("model".into(), Value::String(model.into()));
    let has_max = ["max_tokens", "max_completion_tokens"].iter().any(|k| map.get(*k).is_some_and(|v| !v.is_null()));
    if endpoint != Endpoint::Embeddings && !has_max {
        map.insert("max_tokens".into(), Value::from(default_max));
    }
    if map.get("stream") == Some(&Value::Bool(true)) {
        let options = map.entry("stream_options").or_insert_with(|| json!({}));
        if options.is_null() {
            *options = json!({});
        }
        options.as_object_mut().unwrap().insert("include_usage".into(), Value::Bool(true));
    }
    Value::Object(map)
}

fn spliced(endpoint: Endpoint, body: &str, model: &str, default_max: u32) -> Value {
    let upstream = parse(endpoint, body).unwrap().upstream_body(model, default_max);
    serde_json::from_slice(&upstream).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&upstream)))
}

#[test]
fn refuses_bad_requests_naming_the_field() {
    assert!(err(Endpoint::Chat, "{").starts_with("request body is not valid JSON"));
    assert!(err(Endpoint::Chat, "").starts_with("request body is not valid JSON"));
    assert!(err(Endpoint::Chat, "[1,").starts_with("request body is not valid JSON"));
    assert_eq!(err(Endpoint::Chat, "[]"), "request body must be a JSON object");
    // Strict everywhere, also in members the gateway does not read.
    let e = err(Endpoint::Chat, r#"{"model":"m","messages":[{"content":"\ud800"}]}"#);
    assert!(e.starts_with("request body is not valid JSON"), "a lone surrogate: {e}");
    let deep = format!(r#"{{"model":"m","messages":[{{}}],"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
    assert!(err(Endpoint::Chat, &deep).contains("recursion limit exceeded"));
    assert_eq!(err(Endpoint::Chat, r#""text""#), "request body must be a JSON object");
    assert_eq!(err(Endpoint::Chat, r#"{"messages":[{}]}"#), "you must provide a 'model' parameter");
    assert_eq!(err(Endpoint::Chat, r#"{"model":1,"messages":[{}]}"#), "'model' must be a non-empty string");
    assert_eq!(err(Endpoint::Chat, r#"{"model":null,"messages":[{}]}"#), "'model' must be a non-empty string");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"","messages":[{}]}"#), "'model' must be a non-empty string");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m"}"#), "you must provide a 'messages' parameter");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":"hi"}"#), "'messages' must be an array of messages");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":null}"#), "'messages' must be an array of messages");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[ ]}"#), "'messages' must not be empty");
    assert_eq!(err(Endpoint::Completions, r#"{"model":"m","prompt":3}"#), "'prompt' must be a string or an array");
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"stream":"yes"}"#), "'stream' must be a boolean");
    assert_eq!(
        err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"max_tokens":-1}"#),
        "'max_tokens' must be a positive integer"
    );
    assert_eq!(
        err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"max_completion_tokens":1.5}"#),
        "'max_completion_tokens' must be a positive integer"
    );
    assert_eq!(
        err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"stream_options":[]}"#),
        "'stream_options' must be an object"
    );
    assert_eq!(
        err(Endpoint::Chat, r#"{"model":"m","messages":[{}],"stream_options":{"include_usage":1}}"#),
        "'stream_options.include_usage' must be a boolean"
    );
    assert_eq!(
        err(Endpoint::Embeddings, r#"{"model":"m","input":"x","stream":true}"#),
        "'stream' is not supported for embeddings"
    );
    // Two values for one member are ambiguous: which one did the client mean?
    assert!(err(Endpoint::Chat, r#"{"model":"a","model":"b","messages":[{}]}"#).contains("duplicate field `model`"));
    assert_eq!(err(Endpoint::Chat, r#"{"model":"m","messages":[{}]}"#), "accepted");
    assert_eq!(
        err(Endpoint::Chat, " \n {\"model\":\"m\",\"messages\":[{}],\"stream\":null,\"max_tokens\":null}"),
        "accepted"
    );
}

#[test]
fn upstream_body_sets_model_max_tokens_and_usage() {
    let r =
        parse(Endpoint::Chat, r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#).unwrap();
    let body: Value = serde_json::from_slice(&r.upstream_body("m-2025", 4096)).unwrap();
    assert_eq!(body["model"], "m-2025");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(!r.wants_usage);
}

#[test]
fn an_unchanged_body_is_sent_as_the_same_bytes() {
    let text = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"x_vendor":{"keep":[1,2.50,"\u00e9"]}}"#;
    let body = Bytes::copy_from_slice(text.as_bytes());
    let r = ClientRequest::parse(Endpoint::Chat, &body).unwrap();
    let upstream = r.upstream_body("m", 4096);
    assert_eq!(upstream, body);
    assert_eq!(upstream.as_ptr(), body.as_ptr(), "no copy when nothing changes");
}

#[test]
fn members_the_gateway_does_not_own_keep_their_exact_bytes() {
    // Number formatting, escapes, key order and whitespace are the client's: a tree
    // round trip would have turned 2.50 into 2.5 and \u00e9 into é.
    let text = "{ \"messages\": [{\"role\":\"user\",\"content\":\"caf\\u00e9\"}],\n  \"temperature\": 2.50, \"model\" : \"m\" }";
    let upstream = parse(Endpoint::Chat, text).unwrap().upstream_body("vendor/m \"quoted\"", 64);
    let upstream = String::from_utf8(upstream.to_vec()).unwrap();
    assert_eq!(
        upstream,
        "{\"max_tokens\":64, \"messages\": [{\"role\":\"user\",\"content\":\"caf\\u00e9\"}],\n  \"temperature\": 2.50, \"model\" : \"vendor/m \\\"quoted\\\"\" }"
    );
}

#[test]
fn stream_options_are_completed_not_replaced() {
    let text =
        r#"{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":false,"x":1},"max_tokens":3}"#;
    let r = parse(Endpoint::Chat, text).unwrap();
    assert!(!r.wants_usage);
    let body: Value = serde_json::from_slice(&r.upstream_body("m", 9)).unwrap();
    assert_eq!(body["stream_options"], json!({"include_usage": true, "x": 1}));
    assert_eq!(body["max_tokens"], 3);

    let text = r#"{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let r = parse(Endpoint::Chat, text).unwrap();
    assert!(r.wants_usage);
    let body: Value = serde_json::from_slice(&r.upstream_body("m", 9)).unwrap();
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

fn member() -> impl Strategy<Value = (String, Value)> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-zé \"\\\\{}]{0,12}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    ("x_[a-z]{1,8}", value)
}

proptest! {
    /// Whatever else the client sends, the spliced body means what the tree rewrite meant.
    #[test]
    fn splice_matches_the_tree_rewrite(
        extra in prop::collection::vec(member(), 0..5),
        model in "[a-z0-9/\"é-]{1,16}",
        target in "[a-z0-9/\"é-]{1,16}",
        stream in any::<bool>(),
        max_tokens in prop::option::of(prop::option::of(1u64..100_000)),
        usage in prop::option::of(prop::option::of(prop::option::of(any::<bool>()))),
        pretty in any::<bool>(),
        endpoint in prop_oneof![Just(Endpoint::Chat), Just(Endpoint::Completions), Just(Endpoint::Embeddings)],
    ) {
        let mut map = Map::new();
        for (k, v) in extra {
            map.insert(k, v);
        }
        map.insert("model".into(), Value::String(model));
        match endpoint {
            Endpoint::Chat | Endpoint::Messages => map.insert("messages".into(), json!([{"role": "user", "content": "hi"}])),
            Endpoint::Completions => map.insert("prompt".into(), json!("hi")),
            Endpoint::Embeddings | Endpoint::Responses => map.insert("input".into(), json!(["a", "b"])),
        };
        if endpoint != Endpoint::Embeddings {
            map.insert("stream".into(), Value::Bool(stream));
            if let Some(n) = max_tokens {
                map.insert("max_tokens".into(), n.map_or(Value::Null, Value::from));
            }
            match usage {
                None => {}
                Some(None) => { map.insert("stream_options".into(), Value::Null); }
                Some(Some(None)) => { map.insert("stream_options".into(), json!({})); }
                Some(Some(Some(b))) => { map.insert("stream_options".into(), json!({"include_usage": b})); }
            }
        }
        let object = Value::Object(map);
        let text = if pretty { serde_json::to_string_pretty(&object).unwrap() } else { object.to_string() };
        prop_assert_eq!(spliced(endpoint, &text, &target, 777), reference(endpoint, &text, &target, 777));
    }
}

#[test]
fn the_web_searches_a_request_allows_are_its_search_tools_max_uses() {
    let searches = |endpoint, body: Value| parse(endpoint, &body.to_string()).unwrap().web_searches;
    let user = json!([{"role": "user", "content": "news?"}]);
    // Claude Code's search tool says how many; one without a bound counts the default.
    let tools = json!([
        {"name": "Read", "input_schema": {"type": "object", "properties": {"type": {"type": "string"}}}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
        {"type": "web_fetch_20250910", "name": "web_fetch"},
    ]);
    let messages = |tools| json!({"model": "m", "max_tokens": 10, "messages": user, "tools": tools});
    assert_eq!(searches(Endpoint::Messages, messages(tools)), 8);
    let unbounded = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    assert_eq!(searches(Endpoint::Messages, messages(unbounded)), WEB_SEARCH_MAX_USES);
    assert_eq!(searches(Endpoint::Messages, messages(json!([{"name": "web_search", "input_schema": {}}]))), 0);
    // Codex's hosted search, and chat's.
    let codex = json!({"model": "m", "input": "news?", "tools": [{"type": "web_search", "external_web_access": true}]});
    assert_eq!(searches(Endpoint::Responses, codex), WEB_SEARCH_MAX_USES);
    let chat = |options| json!({"model": "m", "messages": user, "web_search_options": options});
    assert_eq!(searches(Endpoint::Chat, chat(json!({}))), WEB_SEARCH_MAX_USES);
    assert_eq!(searches(Endpoint::Chat, chat(Value::Null)), 0);
    // `tools` is still walked strictly.
    let bad = r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search", "x": "\ud800"}]}"#;
    assert!(err(Endpoint::Chat, bad).contains("not valid JSON"), "{}", err(Endpoint::Chat, bad));
}

#[test]
fn a_responses_request_is_read_and_spliced_in_its_own_members() {
    let e = |body: &str| err(Endpoint::Responses, body);
    assert_eq!(e(r#"{"model":"m"}"#), "you must provide a 'input' parameter");
    assert_eq!(e(r#"{"model":"m","input":3}"#), "'input' must be a string or an array");
    assert_eq!(
        e(r#"{"model":"m","input":"hi","max_output_tokens":0}"#),
        "'max_output_tokens' must be a positive integer"
    );
    for (member, value) in [("previous_response_id", r#""resp_1""#), ("conversation", r#"{"id":"c"}"#)] {
        let body = format!(r#"{{"model":"m","input":"hi","{member}":{value}}}"#);
        assert!(e(&body).starts_with(&format!("'{member}' is not supported")), "{member}: {}", e(&body));
    }
    assert!(e(r#"{"model":"m","input":"hi","store":true}"#).starts_with("'store': true is not supported"));
    assert!(e(r#"{"model":"m","input":"hi","background":true}"#).starts_with("'background': true is not supported"));
    assert_eq!(e(r#"{"model":"m","input":"hi","store":"no"}"#), "'store' must be a boolean");
    assert_eq!(e(r#"{"model":"m","input":[],"store":false,"previous_response_id":null}"#), "accepted");

    // The output limit the reservation assumed is spliced in under Responses' name, and
    // a stream is not sent chat's stream options.
    let r = parse(Endpoint::Responses, r#"{"model":"m","input":"hi","stream":true,"max_output_tokens":null}"#).unwrap();
    assert_eq!(r.reserved_output(512), 512);
    let body: Value = serde_json::from_slice(&r.upstream_body("gpt-x", 512)).unwrap();
    assert_eq!(body, json!({"model": "gpt-x", "input": "hi", "stream": true, "max_output_tokens": 512}));
    let r = parse(Endpoint::Responses, r#"{"model":"m","input":"hi","max_output_tokens":9}"#).unwrap();
    assert_eq!(r.reserved_output(512), 9);
    assert_eq!(&r.upstream_body("m", 512)[..], br#"{"model":"m","input":"hi","max_output_tokens":9}"#);
}

#[test]
fn a_responses_request_translates_to_the_chat_request_other_candidates_are_sent() {
    let r =
        parse(Endpoint::Responses, r#"{"model":"m","input":"hi","instructions":"be brief","include":["x"]}"#).unwrap();
    let chat = r.as_chat(ToChat::default()).expect("translates");
    assert_eq!(chat.request.endpoint, Endpoint::Chat);
    assert_eq!(chat.dropped, ["include"]);
    let body: Value = serde_json::from_slice(chat.request.body()).unwrap();
    assert_eq!(body["messages"][0], json!({"role": "system", "content": "be brief"}));
    // The hosted web search goes as chat's; other hosted tools are refused, or left out.
    let r = parse(Endpoint::Responses, r#"{"model":"m","input":"hi","tools":[{"type":"web_search"}]}"#).unwrap();
    let chat = r.as_chat(ToChat::default()).expect("translates");
    assert!(chat.web_search && chat.dropped.is_empty());
    let r = parse(Endpoint::Responses, r#"{"model":"m","input":"hi","tools":[{"type":"file_search"}]}"#).unwrap();
    assert_eq!(r.as_chat(ToChat::default()).map(|_| ()).unwrap_err().field(), "tools[0]");
    let omitting = ToChat { omit_hosted_tools: true };
    let r = parse(Endpoint::Responses, r#"{"model":"m","input":"hi","tools":[{"type":"file_search"}]}"#).unwrap();
    assert_eq!(r.as_chat(omitting).expect("translates").dropped, ["tools.file_search"]);
}

#[test]
fn a_messages_request_keeps_its_anthropic_headers_and_only_those() {
    let body = r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "interleaved-thinking-2025-05-14,context-1m-2025-08-07"),
        ("anthropic-dangerous-direct-browser-access", "true"),
        ("x-api-key", "sk-sluice"),
        ("user-agent", "claude-cli/2.1"),
    ] {
        headers.insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
    }
    let kept = parse(Endpoint::Messages, body).unwrap().with_headers(&headers).anthropic_headers;
    let kept: Vec<(&str, &[u8])> = kept.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
    assert_eq!(
        kept,
        [
            ("anthropic-version", &b"2023-06-01"[..]),
            ("anthropic-beta", b"interleaved-thinking-2025-05-14,context-1m-2025-08-07"),
            ("anthropic-dangerous-direct-browser-access", b"true"),
        ]
    );
    // A chat request forwards none.
    let chat = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    assert!(parse(Endpoint::Chat, chat).unwrap().with_headers(&headers).anthropic_headers.is_empty());
}
