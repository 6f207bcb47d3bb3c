//! Open-loop demo traffic: a request every 1/rate seconds whatever the answers do.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;

/// The inbound API a request speaks, as the client that speaks it would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`: the OpenAI SDKs.
    Chat,
    /// `/v1/messages`: Claude Code and the Anthropic SDKs.
    Messages,
    /// `/v1/responses`: Codex.
    Responses,
}

impl Api {
    /// Every API, in summary order.
    pub const ALL: [Api; 3] = [Api::Chat, Api::Messages, Api::Responses];

    /// Its path after `/v1`.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/chat/completions",
            Api::Messages => "/messages",
            Api::Responses => "/responses",
        }
    }

    /// The event that ends its complete stream.
    fn last_event(self) -> &'static [u8] {
        match self {
            Api::Chat => b"data: [DONE]",
            Api::Messages => b"message_stop",
            Api::Responses => b"response.completed",
        }
    }

    /// A request for `model` in its shape.
    fn body(self, model: &str, stream: bool) -> serde_json::Value {
        let said = "Say hello in eight words.";
        match self {
            Api::Responses => {
                serde_json::json!({"model": model, "stream": stream, "max_output_tokens": 256, "input": said})
            }
            Api::Chat | Api::Messages => serde_json::json!({
                "model": model,
                "stream": stream,
                "max_tokens": 256,
                "messages": [{"role": "user", "content": said}],
            }),
        }
    }
}

/// One answered request.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Model asked for.
    pub model: &'static str,
    /// The API it spoke.
    pub api: Api,
    /// Answered fully and correctly (2xx, and a stream that ended with its API's last
    /// event).
    pub ok: bool,
    /// `x-sluice-upstream`.
    pub upstream: Option<String>,
    /// `x-sluice-failover` labels.
    pub failovers: Vec<String>,
    /// Time to the whole answer.
    pub latency: Duration,
}

/// Sends requests until `duration` has passed since `start`.
pub async fn drive(
    base: String,
    key: String,
    rate: u32,
    duration: Duration,
    start: Instant,
    tx: mpsc::UnboundedSender<Sample>,
) {
    // The gateway's own HTTP client stack (plain HTTP to a local gateway): the demo
    // needs no other client.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < duration {
        tick.tick().await;
        i += 1;
        // Six in ten for Claude (half of them streamed; every other one through the
        // Messages API, as Claude Code sends it), three for GPT-4o (one in three through
        // the Responses API, as Codex sends it), one for Gemini.
        let (model, stream, api) = match i % 10 {
            0..=5 => ("claude-opus-4", i.is_multiple_of(2), if i % 4 < 2 { Api::Messages } else { Api::Chat }),
            6..=8 => ("gpt-4o", i.is_multiple_of(3), if i % 10 == 7 { Api::Responses } else { Api::Chat }),
            _ => ("gemini-2.5-pro", false, Api::Chat),
        };
        let body = Bytes::from(serde_json::to_vec(&api.body(model, stream)).unwrap_or_default());
        let request = http::Request::post(format!("{base}{}", api.path()))
            .header(AUTHORIZATION, format!("Bearer {key}"))
            .header("anthropic-version", "2023-06-01")
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body));
        let (client, tx) = (client.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            let answer = match request {
                Ok(request) => client.request(request).await.ok(),
                Err(_) => None,
            };
            let sample = match answer {
                Some(response) => {
                    let status = response.status().as_u16();
                    let header = |n: &str| response.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
                    let upstream = header("x-sluice-upstream");
                    let failovers = header("x-sluice-failover")
                        .map(|v| v.split(',').map(str::to_string).collect())
                        .unwrap_or_default();
                    let (read_ok, body) = match response.into_body().collect().await {
                        Ok(collected) => (true, collected.to_bytes()),
                        Err(_) => (false, Bytes::new()),
                    };
                    let last = api.last_event();
                    let complete = !stream || body.windows(last.len()).any(|w| w == last);
                    Sample {
                        model,
                        api,
                        ok: (200..300).contains(&status) && read_ok && complete,
                        upstream,
                        failovers,
                        latency: began.elapsed(),
                    }
                }
                None => {
                    Sample { model, api, ok: false, upstream: None, failovers: Vec::new(), latency: began.elapsed() }
                }
            };
            let _ = tx.send(sample);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
