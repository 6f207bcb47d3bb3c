//! Relays a committed upstream stream to the client (docs/design.md §4.4): events are forwarded
//! as they arrive, malformed ones dropped, the usage chunk stripped when the client did
//! not ask for it, a stream that finished without `[DONE]` finalised at once, and a
//! stream that breaks after bytes were sent ended with an SSE error event, never a clean
//! close.
//!
//! The last event (`[DONE]` or the error event) is sent only after `on_end`'s future
//! (the settlement) is done: a client that saw `[DONE]` has been billed, even if the
//! process dies right after sending it. When the settlement could not commit in time
//! (the ledger is away, docs/design.md §5a), the stream ends with an error event
//! `ledger_unavailable` instead of `[DONE]`.

use std::convert::Infallible;
use std::future::Future;
use tokio::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::attempt::{BodyStream, StreamError};
use crate::outcome::Outcome;

pub mod idle;
pub mod resume;
pub mod sse;

pub use idle::IdleWatch;
use sse::{Event, FinishReason, Format, Splitter};

use crate::usage::Usage;

/// How long a relayed stream may stay silent before the client is sent a keep-alive
/// (Messages: `event: ping`; OpenAI formats: an SSE comment). Claude Code gives up on a
/// stream after 300 s without a byte, load balancers after 60 s.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// How a relayed stream ended.
#[derive(Debug, Clone)]
pub struct StreamEnd {
    /// How the first attempt ended: `Ok` for a complete answer; `IdleTimeout` or `Reset`
    /// for a broken one (then resumed, or not).
    pub outcome: Outcome,
    /// Usage reported by the first attempt, if any.
    pub usage: Option<Usage>,
    /// Content events the first attempt forwarded (an output estimate when usage is missing).
    pub content_events: u64,
    /// The client went away before the end.
    pub client_gone: bool,
    /// Malformed events dropped.
    pub dropped: u64,
    /// The continuations of a resumed stream, each finished already (docs/design.md §4.5).
    pub resumed: Vec<resume::Resumed>,
    /// The stream broke, was resumed and ended complete.
    pub healed: bool,
    /// The last finish reason the client was sent.
    pub finish_reason: Option<FinishReason>,
    /// The model the stream's first chunk names (the upstream's, often a dated version).
    pub model: Option<String>,
}

impl Default for StreamEnd {
    fn default() -> Self {
        Self {
            outcome: Outcome::Ok,
            usage: None,
            content_events: 0,
            client_gone: false,
            dropped: 0,
            resumed: Vec::new(),
            healed: false,
            finish_reason: None,
            model: None,
        }
    }
}

/// Starts relaying; returns the client body stream. `on_end` runs exactly once, when the
/// upstream stream is finished or abandoned, even if the client went away; the future it
/// returns is awaited before the last event is sent, and says whether the answer was
/// billed (`false`: the last event is a `ledger_unavailable` error). With a
/// [`resume::Resumer`], a break is continued on another candidate
/// (`failover.midStream: resume`).
pub fn relay<F, Fut>(
    first: Bytes,
    rest: BodyStream,
    format: Format,
    wants_usage: bool,
    idle: IdleWatch,
    resumer: Option<resume::Resumer>,
    on_end: F,
) -> axum::body::Body
where
    F: FnOnce(StreamEnd) -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(async move {
        let (end, last, rest) = match resumer {
            None => {
                let mut rest = rest;
                let (end, last) = pump(first, &mut rest, format, wants_usage, idle, &tx).await;
                (end, last, Some(rest))
            }
            // Boxed: the resuming pump's state is the larger by far, and this task's
            // future is copied into the runtime whole.
            Some(r) => {
                use resume::{chat, messages, pump, responses};
                let (end, last) = match format {
                    Format::OpenAi => Box::pin(pump::<chat::Delivered>(first, rest, wants_usage, idle, r, &tx)).await,
                    Format::Messages => {
                        Box::pin(pump::<messages::Delivered>(first, rest, wants_usage, idle, r, &tx)).await
                    }
                    Format::Responses => {
                        Box::pin(pump::<responses::Delivered>(first, rest, wants_usage, idle, r, &tx)).await
                    }
                };
                (end, last, None)
            }
        };
        let complete = end.outcome == Outcome::Ok && !end.client_gone;
        let billed = on_end(end).await;
        let last = match last {
            Some(_) if !billed => Some(unbilled(format)),
            last => last,
        };
        if let Some(last) = last {
            let _ = tx.send(Ok(last)).await;
        }
        // The client has its last event; its body ends with the upstream's, as through
        // any proxy (bounded by the drain).
        if let Some(rest) = rest.filter(|_| complete) {
            drain(rest).await;
        }
    });
    axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Forwards events until the stream ends; returns how it ended and the last event still
/// to send (`[DONE]` or an error event; none when the client went away).
///
/// Over 80 lines, kept whole: one loop over the upstream's chunks and their events, where
/// what an event says (finish, usage, content) and whether the client is sent it are
/// decided together; split, the hot path of every stream would pass its state around.
async fn pump(
    first: Bytes,
    rest: &mut BodyStream,
    format: Format,
    wants_usage: bool,
    idle: IdleWatch,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> (StreamEnd, Option<Bytes>) {
    let mut end = StreamEnd::default();
    let mut splitter = Splitter::new(format);
    let mut finished = false;
    let mut model_read = false;
    let mut chunk = Some(first);
    loop {
        if let Some(bytes) = chunk.take() {
            for event in splitter.push(&bytes) {
                let out = match event {
                    Event::Done => return (end, Some(format.done())),
                    Event::Last { raw, usage, finished } => {
                        end.usage = usage.or(end.usage);
                        end.finish_reason = Some(finished);
                        return (end, Some(raw));
                    }
                    Event::Chunk { raw, usage, finished: f, usage_only, content } => {
                        if !std::mem::replace(&mut model_read, true) {
                            end.model = splitter.model_of(&raw);
                        }
                        if f.is_some() {
                            finished = true;
                            end.finish_reason = f;
                        }
                        if usage.is_some() {
                            end.usage = usage;
                        }
                        end.content_events += u64::from(content);
                        if usage_only && !wants_usage { None } else { Some(raw) }
                    }
                    Event::Other(raw) => Some(raw),
                    Event::Malformed(reason) => {
                        end.dropped += 1;
                        tracing::warn!(%reason, "dropped an upstream SSE event that is not valid JSON");
                        None
                    }
                };
                if let Some(raw) = out
                    && tx.send(Ok(raw)).await.is_err()
                {
                    end.client_gone = true;
                    return (end, None);
                }
            }
            // Finished and usage known: nothing more is owed, so do not wait for the
            // upstream's `[DONE]` (or its silence).
            if finished && end.usage.is_some() {
                return (end, Some(format.done()));
            }
        }
        let limit = idle.limit();
        let waiting = Instant::now();
        let Some(next) = next_chunk(rest, limit, format, tx).await else {
            end.client_gone = true;
            return (end, None);
        };
        match next {
            Ok(Some(Ok(bytes))) => {
                idle.gap(waiting.elapsed());
                chunk = Some(bytes);
            }
            // Ended without `[DONE]` but with a finish reason: complete.
            Ok(None) if finished => return (end, Some(format.done())),
            Ok(None) => {
                return broken(end, format, Outcome::Reset, "the upstream closed the stream before it finished");
            }
            Ok(Some(Err(e))) => {
                return broken(end, format, Outcome::Reset, &format!("the upstream stream broke: {e}"));
            }
            Err(_) => {
                let reason = format!("the upstream sent nothing for {}ms", limit.as_millis());
                return broken(end, format, Outcome::IdleTimeout, &reason);
            }
        }
    }
}

/// The upstream's next chunk, waited for at most `limit` (`Err` after that); `None` when
/// the client went away first. A client that left is noticed at once, not at the next
/// upstream chunk: a stalled upstream would otherwise be held (and billed) until the
/// idle timeout. A silent upstream is covered by keep-alives, so that the client and
/// the proxies between do not give up first (docs/design.md §4.4).
async fn next_chunk(
    rest: &mut BodyStream,
    limit: std::time::Duration,
    format: Format,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> Option<Result<Option<Result<Bytes, StreamError>>, tokio::time::error::Elapsed>> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        tokio::select! {
            next = tokio::time::timeout_at(deadline, rest.next()) => return Some(next),
            () = tx.closed() => return None,
            () = tokio::time::sleep(KEEP_ALIVE) => {
                if tx.send(Ok(format.keep_alive())).await.is_err() {
                    return None;
                }
            }
        }
    }
}

/// How long the end of a complete stream's body is waited for, and how much of it is
/// read, before the connection is given up instead (and the client's body ended).
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
const DRAIN_MAX_BYTES: usize = 64 * 1024;

/// Reads what an upstream still sends after a complete stream (its `[DONE]` after the
/// usage chunk, the chunked body's last chunk) to the body's end, so that its
/// connection goes back to the pool: a body dropped before its end closes the
/// connection, and the next request to the upstream would open (and for `https`,
/// handshake) a new one. Bounded: an upstream that keeps sending or stays silent past
/// [`DRAIN_WAIT`] loses its connection, as before.
async fn drain(mut rest: BodyStream) {
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        let mut read = 0;
        while let Some(Ok(bytes)) = rest.next().await {
            read += bytes.len();
            if read > DRAIN_MAX_BYTES {
                break;
            }
        }
    })
    .await;
}

/// The last event of a stream whose settlement did not commit in time.
fn unbilled(format: Format) -> Bytes {
    let message = "the ledger did not confirm this answer's settlement in time; it stays queued and is billed once the ledger is back";
    format.error("api_error", "ledger_unavailable", message)
}

fn broken(mut end: StreamEnd, format: Format, outcome: Outcome, reason: &str) -> (StreamEnd, Option<Bytes>) {
    end.outcome = outcome;
    tracing::warn!(reason, outcome = outcome.as_str(), "stream broke after bytes reached the client");
    (end, Some(format.error("api_error", "upstream_stream_broken", reason)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http_body_util::BodyExt;

    use super::*;
    use crate::health::Health;

    /// A Messages stream whose upstream goes silent for `gap` after its first event.
    async fn relayed_with_a_gap(format: Format, first: &'static str, last: &'static str, gap: Duration) -> String {
        let (tx, rx) = mpsc::channel(4);
        let rest: BodyStream = Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        let idle = IdleWatch::new(Arc::new(Health::default()), false, Duration::from_secs(120));
        let body = relay(Bytes::from_static(first.as_bytes()), rest, format, false, idle, None, |_| async { true });
        tokio::spawn(async move {
            tokio::time::sleep(gap).await;
            let _ = tx.send(Ok(Bytes::from_static(last.as_bytes()))).await;
        });
        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_upstream_is_covered_by_keep_alives_in_the_streams_own_format() {
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
        let stop = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
                    event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let text = relayed_with_a_gap(Format::Messages, start, stop, Duration::from_secs(40)).await;
        assert_eq!(text.matches("event: ping\ndata: {\"type\": \"ping\"}\n\n").count(), 2, "{text}");
        assert!(
            text.starts_with(start) && text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
        );

        let chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let end = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let text = relayed_with_a_gap(Format::OpenAi, chunk, end, Duration::from_secs(20)).await;
        assert_eq!(text.matches(": keep-alive\n\n").count(), 1, "{text}");
        // A stream that is not silent that long gets none.
        let text = relayed_with_a_gap(Format::OpenAi, chunk, end, Duration::from_secs(14)).await;
        assert!(!text.contains("keep-alive"), "{text}");
    }
}
