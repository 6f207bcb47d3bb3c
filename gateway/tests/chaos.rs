//! The chaos upstream over real sockets (127.0.0.1:0), driven by reqwest as
//! a gateway would drive a provider. The OpenAI protocol is tested here, the
//! native ones in `chaos/<protocol>.rs`.
#![expect(
    clippy::unwrap_used,
    reason = "helpers outside #[test] fns panic on failure, like the tests"
)]

use std::error::Error as _;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::{Value, json};
use sluice_gateway::chaos::{self, ChaosState, Script};
use sluice_ledger::testing::eventually;
use tokio::net::TcpListener;

#[path = "chaos/anthropic.rs"]
mod anthropic;
#[path = "chaos/auth.rs"]
mod auth;
#[path = "chaos/bedrock.rs"]
mod bedrock;
#[path = "chaos/gemini.rs"]
mod gemini;
#[path = "chaos/native.rs"]
mod native;

const CHAT: &str = "/v1/chat/completions";
const MS: fn(u64) -> Duration = Duration::from_millis;

type Headers<'a> = &'a [(&'a str, &'a str)];

struct Chaos {
    base: String,
    state: ChaosState,
    http: reqwest::Client,
}

/// An SSE body as a client reads it: events with their arrival times, and
/// how the body ended.
struct Events {
    events: Vec<(Duration, String)>,
    end: Result<(), reqwest::Error>,
}

async fn start() -> Chaos {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = ChaosState::new();
    tokio::spawn(chaos::serve(listener, state.clone()));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    Chaos { base, state, http }
}

fn chat_body(stream: bool) -> Value {
    json!({"model": "gpt-test", "stream": stream,
           "messages": [{"role": "user", "content": "hello there"}]})
}

impl Chaos {
    /// Sends with a 5 s client timeout (hang tests set a shorter one).
    async fn send(&self, path: &str, body: &Value, h: Headers<'_>) -> reqwest::Result<Response> {
        self.send_within(MS(5000), path, body, h).await
    }

    async fn send_within(
        &self,
        timeout: Duration,
        path: &str,
        body: &Value,
        h: Headers<'_>,
    ) -> reqwest::Result<Response> {
        let mut req = self.http.post(format!("{}{path}", self.base)).json(body);
        for (k, v) in h {
            req = req.header(*k, *v);
        }
        req.timeout(timeout).send().await
    }

    async fn chat(&self, h: Headers<'_>) -> Response {
        self.send(CHAT, &chat_body(false), h).await.unwrap()
    }

    async fn json(&self, path: &str, body: Value) -> Value {
        let resp = self.send(path, &body, &[]).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/json");
        resp.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(format!("{}{path}", self.base)).send().await;
        resp.unwrap().json().await.unwrap()
    }

    async fn stream(&self, body: &Value, h: Headers<'_>) -> Events {
        let t0 = Instant::now();
        let resp = self.send(CHAT, body, h).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        read_events(resp, t0).await
    }

    /// `POST /_chaos`: status and JSON answer.
    async fn control(&self, script: &str) -> (u16, Value) {
        let url = format!("{}/_chaos", self.base);
        let resp = self.http.post(url).body(script.to_owned()).send().await;
        let resp = resp.unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }
}

async fn read_events(mut resp: Response, t0: Instant) -> Events {
    let (mut buf, mut events) = (String::new(), Vec::new());
    let end = loop {
        match resp.chunk().await {
            Ok(Some(bytes)) => {
                buf.push_str(std::str::from_utf8(&bytes).unwrap());
                while let Some(at) = buf.find("\n\n") {
                    events.push((t0.elapsed(), buf[..at].to_owned()));
                    buf.drain(..at + 2);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    assert!(buf.is_empty(), "partial event left: {buf:?}");
    Events { events, end }
}

impl Events {
    fn texts(&self) -> Vec<&str> {
        self.events.iter().map(|(_, e)| e.as_str()).collect()
    }

    /// Every event but `[DONE]`, as JSON.
    fn json(&self) -> Vec<Value> {
        let texts = self.texts().into_iter();
        let data = texts.map(|e| e.strip_prefix("data: ").unwrap());
        let data = data.filter(|d| *d != "[DONE]");
        data.map(|d| serde_json::from_str(d).unwrap()).collect()
    }
}

#[tokio::test]
async fn json_answers_carry_usage_on_every_endpoint() {
    let c = start().await;
    for path in [CHAT, "/chat/completions"] {
        let v = c.json(path, chat_body(false)).await;
        assert_eq!(
            (&v["object"], &v["model"]),
            (&json!("chat.completion"), &json!("gpt-test"))
        );
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        // "user" + "hello there" = 15 bytes → 4 tokens; 5 chunks → 5 tokens.
        let usage = json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9});
        assert_eq!(v["usage"], usage);
    }
    let v = c.json(CHAT, json!({"model": "m", "max_tokens": 2})).await;
    assert_eq!(v["usage"]["completion_tokens"], 2);
    assert_eq!(v["choices"][0]["finish_reason"], "length");

    let v = c
        .json("/completions", json!({"model": "c", "prompt": "abcd"}))
        .await;
    assert_eq!(
        (&v["object"], &v["usage"]["prompt_tokens"]),
        (&json!("text_completion"), &json!(1))
    );
    let v = c
        .json("/v1/embeddings", json!({"model": "e", "input": ["a", "b"]}))
        .await;
    assert_eq!(
        (v["data"].as_array().unwrap().len(), &v["model"]),
        (2, &json!("e"))
    );

    for path in ["/models", "/v1/models"] {
        assert_eq!(c.get(path).await["object"], "list");
    }
    assert_eq!(
        c.state.requests(),
        5,
        "model listings are not inference requests"
    );
    assert_eq!(c.state.counters().models, 2);
}

#[tokio::test]
async fn stream_keeps_its_cadence_and_ends_with_done() {
    let c = start().await;
    let h = [("x-chaos-chunks", "4"), ("x-chaos-chunk-ms", "100")];
    let s = c.stream(&chat_body(true), &h).await;
    s.end.as_ref().unwrap();
    assert_eq!(
        s.events.len(),
        6,
        "4 content + finish + [DONE]: {:?}",
        s.texts()
    );
    assert_eq!(*s.texts().last().unwrap(), "data: [DONE]");
    let json = s.json();
    for e in &json {
        assert_eq!(
            (&e["object"], &e["model"]),
            (&json!("chat.completion.chunk"), &json!("gpt-test"))
        );
        assert!(e.get("usage").is_none(), "usage only when asked");
    }
    assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(json[4]["choices"][0]["finish_reason"], "stop");
    for pair in s.events[..4].windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= MS(70) && gap < MS(1000), "gap {gap:?}");
    }
}

#[tokio::test]
async fn include_usage_adds_a_final_usage_chunk() {
    let c = start().await;
    let mut body = chat_body(true);
    body["stream_options"] = json!({"include_usage": true});
    let s = c.stream(&body, &[("x-chaos-chunks", "3")]).await;
    s.end.as_ref().unwrap();
    let json = s.json();
    assert_eq!(json.len(), 5, "3 content + finish + usage");
    assert_eq!(json[4]["choices"], json!([]));
    let usage = json!({"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7});
    assert_eq!(json[4]["usage"], usage);
    assert_eq!(*s.texts().last().unwrap(), "data: [DONE]");
}

#[tokio::test]
async fn no_done_ends_cleanly_after_the_finish_chunk() {
    let c = start().await;
    let s = c
        .stream(&chat_body(true), &[("x-chaos-no-done", "true")])
        .await;
    s.end.as_ref().unwrap();
    assert!(!s.texts().contains(&"data: [DONE]"));
    assert_eq!(
        s.json().last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[tokio::test]
async fn errors_are_openai_shaped_with_retry_after() {
    let c = start().await;
    let h = [
        ("x-chaos-status", "429"),
        ("x-chaos-retry-after", "7"),
        ("x-chaos-retry-after-ms", "1500"),
    ];
    let resp = c.chat(&h).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    assert_eq!(resp.headers()["retry-after-ms"], "1500");
    let v: Value = resp.json().await.unwrap();
    let want = json!({"type": "rate_limit_error", "code": "rate_limit_exceeded"});
    assert_eq!(
        (&v["error"]["type"], &v["error"]["code"]),
        (&want["type"], &want["code"])
    );

    let h = [
        ("x-chaos-status", "400"),
        ("x-chaos-error-code", "context_length_exceeded"),
    ];
    let resp = c.chat(&h).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context_length_exceeded")
    );

    // A failing streaming request gets a JSON error, not an SSE stream.
    let resp = c
        .send(CHAT, &chat_body(true), &[("x-chaos-status", "503")])
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert!(resp.headers().get("retry-after").is_none());

    let resp = c.chat(&[("x-chaos-chunks", "many")]).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    let want = r#"x-chaos-chunks: invalid type: string "many", expected u32"#;
    assert_eq!(v["error"]["message"], want);
}

#[tokio::test]
async fn first_byte_delay_comes_after_200_headers_for_streams() {
    let c = start().await;
    let t0 = Instant::now();
    let resp = c
        .send(CHAT, &chat_body(true), &[("x-chaos-first-byte-ms", "400")])
        .await;
    assert!(
        t0.elapsed() < MS(300),
        "stream headers came after {:?}",
        t0.elapsed()
    );
    let s = read_events(resp.unwrap(), t0).await;
    assert!(
        s.events[0].0 >= MS(380),
        "first event at {:?}",
        s.events[0].0
    );

    let t0 = Instant::now();
    assert_eq!(
        c.chat(&[("x-chaos-first-byte-ms", "300")]).await.status(),
        200
    );
    assert!(t0.elapsed() >= MS(280), "non-stream headers wait");

    let t0 = Instant::now();
    let h = [("x-chaos-headers-first-byte-ms", "300")];
    c.send(CHAT, &chat_body(true), &h).await.unwrap();
    assert!(t0.elapsed() >= MS(280), "stream headers wait too");
}

#[tokio::test]
async fn hang_holds_until_the_client_gives_up() {
    let c = start().await;
    let h = [("x-chaos-hang", "true")];
    let err = c
        .send_within(MS(300), CHAT, &chat_body(false), &h)
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!((c.state.hangs(), c.state.requests()), (1, 1));
    assert!(
        eventually(MS(2000), async || c.state.in_flight() == 0).await,
        "hung handler dropped when the client left"
    );

    let h = [("x-chaos-hang-after-chunks", "2")];
    let mut resp = c.send(CHAT, &chat_body(true), &h).await.unwrap();
    let mut events = String::new();
    while events.matches("\n\n").count() < 2 {
        let chunk = resp.chunk().await.unwrap().unwrap();
        events.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(events.matches("\n\n").count(), 2);
    let stalled = tokio::time::timeout(MS(300), resp.chunk()).await;
    assert!(stalled.is_err(), "stream must stall after 2 chunks");
    assert_eq!(c.state.hangs(), 2);
    drop(resp);
    assert!(
        eventually(MS(2000), async || c.state.in_flight() == 0).await,
        "stalled stream dropped with its client"
    );
}

#[tokio::test]
async fn reset_before_headers_is_a_connection_error() {
    let c = start().await;
    let h = [("x-chaos-reset-after-chunks", "0")];
    let err = c.send(CHAT, &chat_body(false), &h).await.unwrap_err();
    assert!(!err.is_timeout() && err.status().is_none(), "{err:?}");
    assert_eq!(io_kind(&err), Some(ErrorKind::ConnectionReset), "{err:?}");
    assert_eq!((c.state.resets(), c.state.requests()), (1, 1));
    assert!(c.state.counters().by_status.is_empty());
    // The server itself is fine afterwards.
    assert_eq!(c.chat(&[]).await.status(), 200);
}

#[tokio::test]
async fn reset_after_chunks_breaks_the_body() {
    let c = start().await;
    let s = c
        .stream(&chat_body(true), &[("x-chaos-reset-after-chunks", "3")])
        .await;
    assert_eq!(s.events.len(), 3, "{:?}", s.texts());
    assert!(
        s.json()
            .iter()
            .all(|e| e["choices"][0]["finish_reason"].is_null())
    );
    let err = s.end.unwrap_err();
    assert_eq!(io_kind(&err), Some(ErrorKind::ConnectionReset), "{err:?}");

    let resp = c.chat(&[("x-chaos-reset-after-chunks", "2")]).await;
    assert_eq!(resp.status(), 200);
    let err = resp.bytes().await.unwrap_err();
    assert_eq!(
        io_kind(&err),
        Some(ErrorKind::ConnectionReset),
        "plain body: {err:?}"
    );
    assert_eq!(c.state.resets(), 2);
}

#[tokio::test]
async fn malformed_chunk_replaces_one_event() {
    let c = start().await;
    let s = c
        .stream(&chat_body(true), &[("x-chaos-malformed-chunk", "2")])
        .await;
    s.end.as_ref().unwrap();
    let texts = s.texts();
    assert_eq!(texts.len(), 7, "5 content + finish + [DONE]");
    assert_eq!((texts[1], texts[6]), ("data: {not json", "data: [DONE]"));
    for (i, t) in texts[..6].iter().enumerate().filter(|(i, _)| *i != 1) {
        let parsed = serde_json::from_str::<Value>(t.strip_prefix("data: ").unwrap());
        assert!(parsed.is_ok(), "event {i}: {t}");
    }
}

#[tokio::test]
async fn control_endpoint_sets_and_resets_the_default_script() {
    let c = start().await;
    let (status, v) = c.control(r#"{"status":503,"retry_after":2}"#).await;
    assert_eq!(
        (status, &v["script"]),
        (200, &json!({"status": 503, "retry_after": 2}))
    );
    let resp = c.chat(&[]).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "2");
    let resp = c.chat(&[("x-chaos-status", "200")]).await;
    assert_eq!(resp.status(), 200, "a header wins over the default script");

    assert_eq!(c.control("{}").await.0, 200);
    assert_eq!(c.chat(&[]).await.status(), 200);
    assert_eq!(c.state.script(), Script::default());

    let (status, v) = c.control(r#"{"statuss":503}"#).await;
    assert_eq!(status, 400);
    let msg = v["error"]["message"].as_str().unwrap();
    let want = "statuss: unknown field, expected one of: status, error_code, first_byte_ms";
    assert!(msg.starts_with(want), "{msg}");
    let (status, v) = c.control(r#"{"fail_rate":2}"#).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("invalid_chaos_script"))
    );
    assert_eq!(
        v["error"]["message"],
        "fail_rate: must be from 0 to 1, got 2"
    );
}

#[tokio::test]
async fn fail_rate_fails_that_fraction() {
    let c = start().await;
    c.control(r#"{"fail_rate":1}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 503);
    c.control(r#"{"fail_rate":1,"status":429}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 429);
    c.control(r#"{"fail_rate":0,"status":429}"#).await;
    assert_eq!(c.chat(&[]).await.status(), 200);
    c.control(r#"{"fail_rate":0.5}"#).await;
    for _ in 0..200 {
        c.chat(&[]).await;
    }
    let failed = c.state.requests_with_status(503) - 1;
    assert!((50..=150).contains(&failed), "{failed} of 200 failed");
}

#[tokio::test]
async fn counters_are_exact() {
    let c = start().await;
    for _ in 0..3 {
        c.chat(&[]).await.bytes().await.unwrap();
    }
    for _ in 0..2 {
        c.chat(&[("x-chaos-status", "503")]).await;
    }
    c.stream(&chat_body(true), &[]).await.end.unwrap();
    let h = [("x-chaos-reset-after-chunks", "0")];
    c.send(CHAT, &chat_body(false), &h).await.unwrap_err();
    assert!(
        eventually(MS(2000), async || c.state.in_flight() == 0).await,
        "all requests finished"
    );
    let v = c.get("/_chaos").await;
    assert_eq!(v["script"], json!({}));
    let want = json!({"requests": 7, "by_status": {"200": 4, "503": 2}, "streams_started": 1,
                      "resets": 1, "hangs": 0, "in_flight": 0, "models": 0,
                      "by_protocol": {"openai": 7}, "tokens_issued": 0});
    assert_eq!(v["counters"], want);
    assert_eq!(
        (c.state.requests(), c.state.requests_with_status(200)),
        (7, 4)
    );
    c.state.clear_counters();
    assert_eq!(c.state.requests(), 0);
}

#[tokio::test]
async fn error_event_ends_an_openai_stream() {
    let c = start().await;
    let h: Headers<'_> = &[("x-chaos-error-after-chunks", "2")];
    let ev = c.stream(&chat_body(true), h).await;
    assert!(ev.end.is_ok());
    let texts = ev.texts();
    assert_eq!(texts.len(), 3, "{texts:?}");
    let last: Value = serde_json::from_str(texts[2].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error");
    assert_eq!(c.state.counters().by_protocol.len(), 1);
    assert_eq!(c.state.requests_for(chaos::Protocol::OpenAi), 1);
}

/// The I/O error kind at the bottom of a client error, if any.
fn io_kind(err: &reqwest::Error) -> Option<ErrorKind> {
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}
