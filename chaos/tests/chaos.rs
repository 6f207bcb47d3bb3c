//! The chaos upstream over real sockets (127.0.0.1:0), driven by reqwest as
//! a gateway would drive a provider. This file holds the shared client; the
//! OpenAI protocol is in `chaos/openai.rs` (its Responses API in
//! `chaos/responses.rs`), wire faults in `chaos/faults.rs`,
//! the control endpoint in `chaos/control.rs`, the native protocols in
//! `chaos/<protocol>.rs` (their token counts in `chaos/count_tokens.rs`), the
//! agent's tool loop in every protocol in `chaos/tool_loop.rs`.
#![expect(clippy::unwrap_used, reason = "helpers outside #[test] fns panic on failure, like the tests")]

use std::error::Error as _;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::{Value, json};
use sluice_chaos::{self as chaos, ChaosState};
use tokio::net::TcpListener;

#[path = "chaos/anthropic.rs"]
mod anthropic;
#[path = "chaos/auth.rs"]
mod auth;
#[path = "chaos/bedrock.rs"]
mod bedrock;
#[path = "chaos/control.rs"]
mod control;
#[path = "chaos/count_tokens.rs"]
mod count_tokens;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/gemini.rs"]
mod gemini;
#[path = "chaos/native.rs"]
mod native;
#[path = "chaos/openai.rs"]
mod openai;
#[path = "chaos/responses.rs"]
mod responses;
#[path = "chaos/tool_loop.rs"]
mod tool_loop;

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
