//! An OpenAI client for tests: whole replies, and SSE streams recorded event by event
//! with each event's arrival time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Value, json};

/// A client of one gateway.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// A whole reply.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
    /// From sending to the end of the body.
    pub elapsed: Duration,
}

/// One SSE event as the client saw it.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// Arrival, from the moment the request was sent.
    pub at: Duration,
    /// The `data:` payload (lines joined).
    pub data: String,
}

/// A streamed reply.
#[derive(Debug)]
pub struct SseReply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// When the headers arrived, from sending.
    pub headers_at: Duration,
    /// Complete events in order.
    pub events: Vec<SseEvent>,
    /// The raw body (for error answers, which are JSON, not SSE).
    pub body: String,
    /// How the body ended: `Err` if the connection broke.
    pub end: Result<(), String>,
    /// When the body ended, from sending.
    pub ended_at: Duration,
}

impl Client {
    /// A client of the gateway at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().no_proxy().tcp_nodelay(true).timeout(Duration::from_secs(120)).build()?;
        Ok(Self { http, base: base.to_string(), key: None })
    }

    /// The same client sending `Authorization: Bearer KEY`.
    #[must_use]
    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        let t0 = Instant::now();
        let resp = self.request(reqwest::Method::GET, path).send().await?;
        Reply::read(resp, t0).await
    }

    /// `POST path` with a raw body and extra headers.
    pub async fn post(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        let mut r = self.request(reqwest::Method::POST, path).header("content-type", "application/json").body(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let t0 = Instant::now();
        let resp = r.send().await?;
        Reply::read(resp, t0).await
    }

    /// A non-streaming chat completion for `model`; `extra` fields are merged into the body.
    pub async fn chat(&self, model: &str, extra: Value) -> anyhow::Result<Reply> {
        self.post("/v1/chat/completions", chat_body(model, false, extra).to_string(), &[]).await
    }

    /// A streaming chat completion for `model`, read to its end.
    pub async fn chat_stream(&self, model: &str, extra: Value) -> anyhow::Result<SseReply> {
        self.chat_stream_with(model, extra, &[]).await
    }

    /// A streaming chat completion with extra request headers (e.g. `x-request-id`).
    pub async fn chat_stream_with(
        &self,
        model: &str,
        extra: Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<SseReply> {
        self.chat_stream_counted(model, extra, headers, &AtomicUsize::new(0)).await
    }

    /// A streamed request of any API (`body` asks for a stream), read to its end.
    pub async fn stream(&self, path: &str, body: &Value) -> anyhow::Result<SseReply> {
        let r = self.request(reqwest::Method::POST, path).header("content-type", "application/json").json(body);
        let t0 = Instant::now();
        SseReply::read(r.send().await?, t0, &AtomicUsize::new(0)).await
    }

    /// [`Client::chat_stream_with`] that adds each event to `seen` as it arrives, so
    /// that a test can wait until the stream is under way.
    pub async fn chat_stream_counted(
        &self,
        model: &str,
        extra: Value,
        headers: &[(&str, &str)],
        seen: &AtomicUsize,
    ) -> anyhow::Result<SseReply> {
        let body = chat_body(model, true, extra).to_string();
        let mut r = self
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let t0 = Instant::now();
        let resp = r.send().await?;
        SseReply::read(resp, t0, seen).await
    }
}

/// `{"model", "messages": [one user message], "stream"}` plus `extra`'s fields.
pub fn chat_body(model: &str, stream: bool, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hello there"}]});
    if stream {
        body["stream"] = json!(true);
    }
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    body
}

impl Reply {
    async fn read(resp: reqwest::Response, t0: Instant) -> anyhow::Result<Self> {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await?;
        Ok(Self { status, headers, body, elapsed: t0.elapsed() })
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `(error.type, error.code)` of an OpenAI error body.
    pub fn error_kind(&self) -> (String, String) {
        let v = self.json();
        let s = |k: &str| v["error"][k].as_str().unwrap_or_default().to_string();
        (s("type"), s("code"))
    }

    /// `error.message` of an OpenAI error body.
    pub fn error_message(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap_or_default().to_string()
    }
}

impl SseEvent {
    /// The payload as JSON (`Null` for `[DONE]` or invalid JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }

    /// `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }

    /// A chunk whose first choice carries content.
    pub fn is_content(&self) -> bool {
        self.json()["choices"][0]["delta"]["content"].is_string()
    }

    /// A chunk that carries a non-null `usage`.
    pub fn has_usage(&self) -> bool {
        self.json().get("usage").is_some_and(|u| !u.is_null())
    }

    /// A chunk whose first choice carries a finish reason.
    pub fn is_finish(&self) -> bool {
        self.json()["choices"][0]["finish_reason"].is_string()
    }

    /// `error.code` of an SSE error event.
    pub fn error_code(&self) -> Option<String> {
        self.json()["error"]["code"].as_str().map(str::to_string)
    }
}

impl SseReply {
    async fn read(mut resp: reqwest::Response, t0: Instant, seen: &AtomicUsize) -> anyhow::Result<Self> {
        let headers_at = t0.elapsed();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let (mut body, mut buf, mut events) = (String::new(), String::new(), Vec::new());
        let end = loop {
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    let text = String::from_utf8_lossy(&bytes);
                    body.push_str(&text);
                    buf.push_str(&text);
                    while let Some(at) = buf.find("\n\n") {
                        let raw: String = buf.drain(..at + 2).collect();
                        let data: Vec<&str> = raw
                            .lines()
                            .filter_map(|l| l.strip_prefix("data:"))
                            .map(|d| d.strip_prefix(' ').unwrap_or(d))
                            .collect();
                        if !data.is_empty() {
                            events.push(SseEvent { at: t0.elapsed(), data: data.join("\n") });
                            seen.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            }
        };
        Ok(Self { status, headers, headers_at, events, body, end, ended_at: t0.elapsed() })
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Arrival of the first event.
    pub fn first_event_at(&self) -> Option<Duration> {
        self.events.first().map(|e| e.at)
    }

    /// Content events.
    pub fn contents(&self) -> Vec<&SseEvent> {
        self.events.iter().filter(|e| e.is_content()).collect()
    }

    /// Whether the stream carried `data: [DONE]`.
    pub fn done(&self) -> bool {
        self.events.iter().any(SseEvent::is_done)
    }

    /// A complete answer as a client must judge it: 200, ended cleanly with `[DONE]`
    /// as the last event, and no error event.
    pub fn complete(&self) -> bool {
        self.status == 200
            && self.end.is_ok()
            && self.events.last().is_some_and(SseEvent::is_done)
            && self.events.iter().all(|e| e.error_code().is_none())
    }

    /// The `usage` the stream carried (the client asked for it), as
    /// `(prompt_tokens, completion_tokens)`.
    pub fn usage(&self) -> Option<(u64, u64)> {
        self.events.iter().rev().find(|e| e.has_usage()).and_then(|e| {
            let u = e.json()["usage"].clone();
            Some((u["prompt_tokens"].as_u64()?, u["completion_tokens"].as_u64()?))
        })
    }

    /// The events' payloads, for assertion messages.
    pub fn datas(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.data.as_str()).collect()
    }
}
