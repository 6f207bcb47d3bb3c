//! Open-loop demo traffic: a request every 1/rate seconds whatever the answers do.

use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::mpsc;

/// One answered request.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Model asked for.
    pub model: &'static str,
    /// Answered fully and correctly (2xx, and a stream that ended with `[DONE]`).
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
    let client = reqwest::Client::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < duration {
        tick.tick().await;
        i += 1;
        // Six in ten for Claude (half of them streamed), three for GPT-4o, one for Gemini.
        let (model, stream) = match i % 10 {
            0..=5 => ("claude-opus-4", i.is_multiple_of(2)),
            6..=8 => ("gpt-4o", i.is_multiple_of(3)),
            _ => ("gemini-2.5-pro", false),
        };
        let body = serde_json::json!({
            "model": model,
            "stream": stream,
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "Say hello in eight words."}],
        });
        let request = client.post(format!("{base}/chat/completions")).bearer_auth(&key).json(&body);
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            let sample = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let header = |n: &str| response.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
                    let upstream = header("x-sluice-upstream");
                    let failovers = header("x-sluice-failover")
                        .map(|v| v.split(',').map(str::to_string).collect())
                        .unwrap_or_default();
                    let mut body = Vec::new();
                    let mut read_ok = true;
                    let mut bytes = response.bytes_stream();
                    while let Some(chunk) = bytes.next().await {
                        match chunk {
                            Ok(c) => body.extend_from_slice(&c),
                            Err(_) => {
                                read_ok = false;
                                break;
                            }
                        }
                    }
                    let complete = !stream || body.windows(12).any(|w| w == b"data: [DONE]");
                    Sample {
                        model,
                        ok: (200..300).contains(&status) && read_ok && complete,
                        upstream,
                        failovers,
                        latency: began.elapsed(),
                    }
                }
                Err(_) => Sample { model, ok: false, upstream: None, failovers: Vec::new(), latency: began.elapsed() },
            };
            let _ = tx.send(sample);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
