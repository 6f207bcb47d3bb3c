//! An upstream with canned answers whose `usage` is whatever the test says, unrelated
//! to the text it sends: the only way to prove that billing reads the upstream's
//! usage rather than estimating it. Records every request body it receives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::manifest::{Doc, upstream_doc};

/// What the canned upstream reports as usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CannedUsage {
    /// `usage.prompt_tokens`.
    pub prompt: u64,
    /// `usage.completion_tokens`.
    pub completion: u64,
}

/// Content chunks of a streamed answer (and words of a whole one).
pub const CANNED_WORDS: [&str; 3] = ["canned ", "answer ", "text"];

#[derive(Clone)]
struct Canned {
    usage: CannedUsage,
    delay: Duration,
    bodies: Arc<Mutex<Vec<Value>>>,
}

/// A canned upstream on `127.0.0.1:<ephemeral>`; stops when dropped.
pub struct CannedUpstream {
    /// The Upstream's manifest name.
    pub name: String,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    task: JoinHandle<()>,
}

impl CannedUpstream {
    /// Starts one that always reports `usage`, at once.
    pub async fn start(name: &str, usage: CannedUsage) -> anyhow::Result<Self> {
        Self::start_delayed(name, usage, Duration::ZERO).await
    }

    /// Starts one that answers after `delay` and always reports `usage`.
    pub async fn start_delayed(name: &str, usage: CannedUsage, delay: Duration) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding a canned upstream")?;
        let base = format!("http://{}", listener.local_addr()?);
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(Canned {
            usage,
            delay,
            bodies: bodies.clone(),
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { name: name.to_string(), base, bodies, task })
    }

    /// Its Upstream manifest.
    pub fn doc(&self) -> Doc {
        upstream_doc(&self.name, &format!("{}/v1", self.base))
    }

    /// Request bodies received so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

impl Drop for CannedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat(State(c): State<Canned>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Ok(mut b) = c.bodies.lock() {
        b.push(req.clone());
    }
    tokio::time::sleep(c.delay).await;
    let model = req["model"].as_str().unwrap_or("canned").to_string();
    let usage = json!({"prompt_tokens": c.usage.prompt, "completion_tokens": c.usage.completion, "total_tokens": c.usage.prompt + c.usage.completion});
    if req["stream"] != json!(true) {
        let answer = json!({
            "id": "chatcmpl-canned", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": CANNED_WORDS.concat()}, "finish_reason": "stop"}],
            "usage": usage,
        });
        return axum::Json(answer).into_response();
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events: Vec<Value> = CANNED_WORDS.iter().map(|w| chunk(json!({"content": w}), Value::Null)).collect();
    events.push(chunk(json!({}), json!("stop")));
    if req["stream_options"]["include_usage"] == json!(true) {
        events.push(json!({"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage}));
    }
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    ([(http::header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}
