//! Hostile input on the request path, in process (the gateway's router driven with
//! `oneshot`, a healthy chaos upstream and a SQLite ledger behind it): arbitrary bytes,
//! arbitrary JSON, OpenAI-shaped bodies with wrong types and absurd values, odd
//! headers, huge bodies, invalid UTF-8. Whatever comes in, the answer is a success or
//! one of the documented OpenAI-shaped errors (docs/design.md §3), never a 5xx made by the
//! gateway itself, never a panic. Socket-level abuse is in `hostile_socket.rs`.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, Request};
use hyper::service::Service as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use sluice_gateway::server::AuthMode;
use sluice_gateway::server::router::App;
use sluice_ledger::testing::eventually;
use sluice_tests::billing::Price;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, route, yaml};

const MAX_BODY: usize = 64 * 1024;
const ENDPOINTS: [&str; 3] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

/// The errors the gateway itself may answer: (status, type, code).
const DOCUMENTED: [(u16, &str, &str); 9] = [
    (400, "invalid_request_error", "invalid_request"),
    (401, "authentication_error", "invalid_api_key"),
    (402, "insufficient_quota", "insufficient_quota"),
    (404, "invalid_request_error", "model_not_found"),
    (404, "invalid_request_error", "unknown_url"),
    (405, "invalid_request_error", "method_not_allowed"),
    (408, "invalid_request_error", "request_timeout"),
    (413, "invalid_request_error", "request_too_large"),
    (429, "rate_limit_error", "rate_limited"),
];

#[derive(Clone, Debug)]
struct Input {
    method: Method,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Vec<u8>,
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

async fn send(app: &App, input: &Input) -> anyhow::Result<Answer> {
    let mut req = Request::builder().method(input.method.clone()).uri(&input.path);
    for (k, v) in &input.headers {
        req = req.header(k, v);
    }
    let resp = app.call(req.body(axum::body::Body::from(input.body.clone()))?).await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(30), axum::body::to_bytes(resp.into_body(), 64 * 1024 * 1024))
        .await??;
    Ok(Answer { status, headers, body })
}

/// The contract for any answer to any input.
fn check(input: &Input, a: &Answer) -> Result<(), String> {
    let text = String::from_utf8_lossy(&a.body);
    if a.status >= 500 {
        return Err(format!("a {} from the gateway: {text}", a.status));
    }
    let openai_path = ENDPOINTS.contains(&input.path.as_str());
    if openai_path && a.headers.get("x-request-id").is_none_or(|v| v.is_empty()) {
        return Err(format!("no x-request-id on a {}", a.status));
    }
    if a.status < 300 {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(&a.body).map_err(|_| format!("a {} that is not JSON: {text:?}", a.status))?;
    let field = |k: &str| v["error"][k].as_str().map(str::to_string);
    let (Some(message), Some(kind), Some(code)) = (field("message"), field("type"), field("code")) else {
        return Err(format!("a {} that is not OpenAI-shaped: {text}", a.status));
    };
    if message.is_empty() {
        return Err(format!("an empty error message: {text}"));
    }
    // An upstream's own 4xx is passed through unchanged (only after an attempt).
    let passed_through = a.headers.contains_key("x-sluice-attempts") && (400..500).contains(&a.status);
    if !passed_through && !DOCUMENTED.contains(&(a.status, kind.as_str(), code.as_str())) {
        return Err(format!("an undocumented error ({}, {kind}, {code}): {text}", a.status));
    }
    Ok(())
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,40}".prop_map(Value::from),
        prop_oneof![Just("chat-model"), Just("user"), Just("content"), Just("")].prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("model".to_string()),
            Just("messages".to_string()),
            Just("prompt".to_string()),
            Just("input".to_string()),
            Just("stream".to_string()),
            Just("max_tokens".to_string()),
            Just("stream_options".to_string()),
            Just("role".to_string()),
            Just("content".to_string()),
            "[a-z_]{1,12}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// OpenAI-shaped bodies whose fields have every type but the right one, or absurd values.
fn arb_shaped() -> impl Strategy<Value = Value> {
    let odd = || {
        prop_oneof![
            Just(json!(null)),
            Just(json!(-1)),
            Just(json!(0)),
            Just(json!(1.5)),
            Just(json!("x")),
            Just(json!([])),
            Just(json!({})),
            Just(json!(true))
        ]
    };
    let model = prop_oneof![6 => Just(json!("chat-model")), 1 => Just(json!("no-such-model")), 1 => odd()];
    let messages = prop_oneof![
        6 => Just(json!([{"role": "user", "content": "hi"}])),
        1 => Just(json!([{"role": "user", "content": 123}])),
        1 => Just(json!([{}])),
        1 => Just(json!([])),
        1 => odd(),
    ];
    let absent = || Just(Value::Null);
    let stream = prop_oneof![4 => absent(), 3 => Just(json!(true)), 2 => Just(json!(false)), 1 => odd()];
    let max_tokens = prop_oneof![6 => absent(), 3 => Just(json!(16)), 1 => Just(json!(u64::MAX)), 1 => Just(json!(1e300)), 1 => Just(json!(i64::MIN)), 1 => odd()];
    let options = prop_oneof![6 => absent(), 2 => Just(json!({"include_usage": true})), 1 => Just(json!({"include_usage": "yes"})), 1 => odd()];
    let extra = prop_oneof![2 => absent(), 1 => arb_json()];
    (model, messages, stream, max_tokens, options, extra).prop_map(
        |(model, messages, stream, max_tokens, options, extra)| {
            let mut body = json!({"model": model, "messages": messages, "prompt": "p", "input": "i"});
            for (k, v) in [("stream", stream), ("max_tokens", max_tokens), ("stream_options", options), ("user", extra)]
            {
                if !v.is_null() {
                    body[k] = v;
                }
            }
            body
        },
    )
}

fn arb_headers(key: String) -> impl Strategy<Value = Vec<(HeaderName, HeaderValue)>> {
    let value = proptest::collection::vec(any::<u8>(), 0..80)
        .prop_filter_map("not a header value", |b| HeaderValue::from_bytes(&b).ok());
    let name = prop_oneof![
        Just("content-type"),
        Just("authorization"),
        Just("x-request-id"),
        Just("accept"),
        Just("accept-encoding"),
        Just("content-encoding"),
        Just("x-chaos-status"),
        Just("x-chaos-hang"),
        Just("x-sluice-upstream"),
        Just("x-odd-header"),
    ];
    let fixed = prop_oneof![
        Just(("x-chaos-status", "503".to_string())),
        Just(("x-chaos-hang", "true".to_string())),
        Just(("content-type", "text/plain".to_string())),
        Just(("content-encoding", "gzip".to_string())),
        Just(("x-request-id", "r".repeat(5000))),
        Just(("authorization", "Bearer".to_string())),
        Just(("authorization", "Basic dXNlcjpwYXNz".to_string())),
    ]
    .prop_filter_map("bad fixed header", |(k, v)| Some((HeaderName::from_static(k), HeaderValue::from_str(&v).ok()?)));
    let random = (name, value).prop_map(|(k, v)| (HeaderName::from_static(k), v));
    let auth = HeaderValue::from_str(&format!("Bearer {key}")).ok();
    (proptest::collection::vec(prop_oneof![random, fixed], 0..4), proptest::bool::weighted(0.85)).prop_map(
        move |(mut h, with_key)| {
            // Usually a valid key first, so that most inputs get past authentication.
            if with_key && let Some(auth) = &auth {
                h.insert(0, (http::header::AUTHORIZATION, auth.clone()));
            }
            h
        },
    )
}

fn arb_input(key: String) -> impl Strategy<Value = Input> {
    let body = prop_oneof![
        2 => proptest::collection::vec(any::<u8>(), 0..2048),
        2 => arb_json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        8 => arb_shaped().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        1 => proptest::collection::vec(any::<u8>(), MAX_BODY - 16..MAX_BODY + 16),
    ];
    let path = prop_oneof![8 => proptest::sample::select(ENDPOINTS.to_vec()).prop_map(str::to_string), 1 => "/v1/[a-z/]{0,20}"];
    let method = prop_oneof![20 => Just(Method::POST), 1 => Just(Method::GET), 1 => Just(Method::PUT), 1 => Just(Method::DELETE)];
    (method, path, arb_headers(key), body).prop_map(|(method, path, headers, body)| Input {
        method,
        path,
        headers,
        body,
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// A billed gateway (keys, a priced route) over a healthy chaos upstream.
async fn start() -> anyhow::Result<(ChaosUpstream, TestGateway, String)> {
    let only = ChaosUpstream::start("only").await?;
    let price = Price { input: "3.00", output: "15.00" };
    let docs = [only.doc(), route("chat", "chat-model", &[("only", 100)]).candidate(0, "price", price.json())];
    let opts = GatewayOptions { auth: AuthMode::Keys, max_body_bytes: MAX_BODY, ..GatewayOptions::default() };
    let gw = TestGateway::start_with(&yaml(&docs), opts).await?;
    let key = gw.account("acme", 1_000_000_000_000).await?;
    Ok((only, gw, key))
}

#[test]
fn any_input_gets_a_success_or_a_documented_error() -> anyhow::Result<()> {
    let rt = runtime()?;
    let (only, gw, key) = rt.block_on(start())?;
    let app = sluice_gateway::server::router(gw.state.clone());
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2048);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u32>::new());
    let result = runner.run(&arb_input(key), |input| {
        let answer = rt.block_on(send(&app, &input)).map_err(|e| TestCaseError::fail(format!("no answer: {e}")))?;
        if let Ok(mut s) = statuses.lock() {
            *s.entry(answer.status).or_default() += 1;
        }
        check(&input, &answer).map_err(TestCaseError::fail)
    });
    let statuses = statuses.into_inner().unwrap_or_default();
    eprintln!("hostile input: answers by status {statuses:?}; the upstream saw {} requests", only.requests());
    if let Err(e) = result {
        anyhow::bail!("{e}");
    }
    // The fuzzing reached every stage: refusals, billing and the upstream.
    for status in [200, 400, 401, 404, 413] {
        assert!(statuses.contains_key(&status), "no {status} among {statuses:?}");
    }
    // Nothing stays reserved and the money adds up after all that.
    rt.block_on(async {
        let ledger = gw.ledger()?;
        assert!(
            eventually(Duration::from_secs(5), async || gw.metric("sluice_reservations_open", &[]) == Some(0.0)).await
        );
        gw.return_grants().await;
        let check = ledger.journal_verify("acme").await?;
        assert!(check.is_consistent() && check.reserved_nanos == 0, "{check:?}");
        anyhow::Ok(())
    })?;
    drop(gw);
    Ok(())
}

#[test]
fn huge_deep_and_invalid_utf8_bodies_are_refused_cleanly() -> anyhow::Result<()> {
    let rt = runtime()?;
    let (only, gw, key) = rt.block_on(start())?;
    let app = sluice_gateway::server::router(gw.state.clone());
    let auth = (http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {key}"))?);
    let post =
        |body: Vec<u8>| Input { method: Method::POST, path: ENDPOINTS[0].into(), headers: vec![auth.clone()], body };
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("10 MiB of garbage", vec![b'x'; 10 * 1024 * 1024], 413),
        ("one byte over the limit", vec![b' '; MAX_BODY + 1], 413),
        ("deeply nested arrays", b"[".repeat(MAX_BODY - 1), 400),
        (
            "deeply nested messages",
            [br#"{"model":"chat-model","messages":"#.as_slice(), &b"[".repeat(10_000), &b"]".repeat(10_000), b"}"]
                .concat(),
            400,
        ),
        (
            "invalid UTF-8 in a string",
            [
                br#"{"model":"chat-model","messages":[{"role":"user","content":""#.as_slice(),
                &[0xff, 0xfe, 0xc3],
                br#""}]}"#,
            ]
            .concat(),
            400,
        ),
        (
            "a lone surrogate escape",
            br#"{"model":"chat-model","messages":[{"role":"user","content":"\ud800"}]}"#.to_vec(),
            400,
        ),
        ("a NUL-filled body", vec![0; 1000], 400),
        ("an empty body", Vec::new(), 400),
        (
            "max_tokens beyond any wallet",
            br#"{"model":"chat-model","messages":[{"role":"user","content":"hi"}],"max_tokens":18446744073709551615}"#
                .to_vec(),
            402,
        ),
    ];
    rt.block_on(async {
        for (name, body, want) in cases {
            let input = post(body);
            let a = send(&app, &input).await?;
            assert_eq!(
                a.status,
                want,
                "{name}: {}",
                String::from_utf8_lossy(&a.body).chars().take(300).collect::<String>()
            );
            check(&input, &a).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        }
        // Other methods and unknown paths are OpenAI-shaped too.
        for (method, path) in [
            (Method::GET, ENDPOINTS[0]),
            (Method::DELETE, ENDPOINTS[2]),
            (Method::POST, "/v1/models"),
            (Method::POST, "/healthz"),
            (Method::GET, "/v2/nothing"),
        ] {
            let input =
                Input { method: method.clone(), path: path.into(), headers: vec![auth.clone()], body: Vec::new() };
            let a = send(&app, &input).await?;
            assert!(a.status == 404 || a.status == 405, "{method} {path}: {}", a.status);
            check(&input, &a).map_err(|e| anyhow::anyhow!("{method} {path}: {e}"))?;
        }
        assert_eq!(only.requests(), 0, "none of these reached the upstream");
        anyhow::Ok(())
    })
}
