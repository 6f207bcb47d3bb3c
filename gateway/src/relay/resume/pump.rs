//! The resuming relay (docs/design.md §4.5): events are forwarded as [`super::super`]'s
//! pump does, read by the stream format's [`Transcript`]; a break hands over to the
//! next continuation, whose events are spliced in.

use std::convert::Infallible;
use tokio::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Resumed, Resumer, Spliced, Transcript, add};
use crate::attempt::{BodyStream, Committed, StreamError};
use crate::outcome::Outcome;
use crate::relay::sse::{Event, FinishReason, Splitter, data_of};
use crate::relay::{IdleWatch, StreamEnd, broken, next_chunk};
use crate::telemetry::metrics::ResumeReason;
use crate::usage::Usage;

/// Relays like [`crate::relay`]'s pump, resuming a break on the next candidate; `T`
/// reads and splices the stream's format.
pub(in crate::relay) async fn pump<T: Transcript>(
    first: Bytes,
    mut rest: BodyStream,
    wants_usage: bool,
    mut idle: IdleWatch,
    resumer: Resumer,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> (StreamEnd, Option<Bytes>) {
    let mut relay = Relay::<T>::new(resumer);
    let mut chunk = Some(first);
    loop {
        let mut broke = None;
        if let Some(bytes) = chunk.take() {
            for event in relay.splitter.push(&bytes) {
                match relay.event(event, wants_usage) {
                    Step::Send(raw) => {
                        if tx.send(Ok(raw)).await.is_err() {
                            return relay.client_gone();
                        }
                    }
                    Step::Skip => {}
                    Step::Broke(b) => {
                        broke = Some(b);
                        break;
                    }
                    Step::Done(last) => return relay.done(last),
                    Step::Diverged => return relay.diverged(),
                }
            }
            // Finished and usage known: nothing more is owed, so do not wait for the
            // upstream's end marker (or its silence).
            if broke.is_none() && relay.finished && relay.cur.usage.is_some() {
                return relay.done(T::FORMAT.done());
            }
        }
        let broke = match broke {
            Some(b) => b,
            None => {
                let limit = idle.limit();
                let waiting = Instant::now();
                let Some(next) = next_chunk(&mut rest, limit, T::FORMAT, tx).await else {
                    return relay.client_gone();
                };
                match next {
                    Ok(Some(Ok(bytes))) => {
                        idle.gap(waiting.elapsed());
                        chunk = Some(bytes);
                        continue;
                    }
                    Ok(None) if relay.finished => return relay.done(T::FORMAT.done()),
                    Ok(None) => Break::closed(),
                    Ok(Some(Err(e))) => Break::failed(e),
                    Err(_) => Break::idle(limit),
                }
            }
        };
        let Some((first, next, next_idle)) = relay.resume(broke).await else { return relay.broken() };
        (chunk, rest, idle) = (Some(first), next, next_idle);
    }
}

/// What one upstream event means for the client's stream.
enum Step {
    /// Send it.
    Send(Bytes),
    /// Nothing of it is for the client.
    Skip,
    /// The attempt broke.
    Broke(Break),
    /// The stream is complete; this is its last event.
    Done(Bytes),
    /// A replay differs from what the client has.
    Diverged,
}

/// How an attempt broke.
struct Break {
    outcome: Outcome,
    reason: ResumeReason,
    detail: String,
}

impl Break {
    fn closed() -> Self {
        let detail = "the upstream closed the stream before it finished".into();
        Self { outcome: Outcome::Reset, reason: ResumeReason::Cut, detail }
    }

    fn failed(e: StreamError) -> Self {
        match e {
            StreamError::Upstream(e) => Self::error_event(&e.to_string()),
            e => {
                let detail = format!("the upstream stream broke: {e}");
                Self { outcome: Outcome::Reset, reason: ResumeReason::Reset, detail }
            }
        }
    }

    fn error_event(error: &str) -> Self {
        let detail = format!("the upstream sent an error: {error}");
        Self { outcome: Outcome::Reset, reason: ResumeReason::ErrorEvent, detail }
    }

    fn idle(limit: std::time::Duration) -> Self {
        let detail = format!("the upstream sent nothing for {}ms", limit.as_millis());
        Self { outcome: Outcome::IdleTimeout, reason: ResumeReason::IdleTimeout, detail }
    }
}

/// The attempt being relayed.
struct Current {
    /// `None` for the first attempt (finished by the caller), else the continuation's.
    attempt: Option<(usize, Committed)>,
    usage: Option<Usage>,
    content_events: u64,
    prompt_bound: u64,
}

impl Current {
    /// What it used: reported, or the prompt bound and one token per content event.
    fn usage(&self) -> Usage {
        self.usage.unwrap_or(Usage::plain(self.prompt_bound, self.content_events))
    }
}

/// A resuming relay's state.
struct Relay<T: Transcript> {
    resumer: Resumer,
    end: StreamEnd,
    /// What the client has.
    delivered: T,
    /// How the continuation being relayed is spliced in; `None` for the first attempt.
    mode: Option<T::Mode>,
    /// What the attempts before the current one used.
    earlier: Usage,
    cur: Current,
    splitter: Splitter,
    /// The current attempt sent its finish.
    finished: bool,
    /// The first break, which the client is told of when the stream cannot go on.
    first_break: Option<(Outcome, String)>,
    model_read: bool,
    /// The upstream being relayed (for the log).
    upstream: String,
}

impl<T: Transcript> Relay<T> {
    fn new(resumer: Resumer) -> Self {
        let upstream = resumer.serving_upstream();
        let cur = Current { attempt: None, usage: None, content_events: 0, prompt_bound: resumer.req.input_bound };
        Self {
            resumer,
            end: StreamEnd::default(),
            delivered: T::default(),
            mode: None,
            earlier: Usage::default(),
            cur,
            splitter: Splitter::new(T::FORMAT),
            finished: false,
            first_break: None,
            model_read: false,
            upstream,
        }
    }

    fn event(&mut self, event: Event, wants_usage: bool) -> Step {
        match event {
            Event::Done => Step::Done(T::FORMAT.done()),
            // A Responses stream ends in the event that carries the whole response: a
            // continuation's is made the client's.
            Event::Last { raw, usage, finished } => {
                self.end.finish_reason = Some(finished);
                self.cur.usage = usage.or(self.cur.usage);
                match self.splice(&raw) {
                    Some(Spliced::Send(e)) => Step::Done(Bytes::from(e)),
                    Some(Spliced::Diverged) => Step::Diverged,
                    Some(Spliced::Skip) | None => Step::Done(raw),
                }
            }
            Event::Chunk { raw, usage, finished, usage_only, content } => {
                self.chunk(raw, usage, finished, usage_only && !wants_usage, content)
            }
            Event::Other(raw) => Step::Send(raw),
            Event::Malformed(reason) => {
                self.end.dropped += 1;
                tracing::warn!(%reason, "dropped an upstream SSE event that is not valid JSON");
                Step::Skip
            }
        }
    }

    /// A data event; `hidden` when the client did not ask for it (a usage-only chunk).
    fn chunk(
        &mut self,
        raw: Bytes,
        usage: Option<Usage>,
        finished: Option<FinishReason>,
        hidden: bool,
        content: bool,
    ) -> Step {
        if !std::mem::replace(&mut self.model_read, true) {
            self.end.model = self.splitter.model_of(&raw);
        }
        let Some(data) = data_of(&raw) else { return Step::Skip };
        let data = data.trim();
        if is_error(data) {
            return Step::Broke(Break::error_event(data));
        }
        if finished.is_some() {
            self.finished = true;
            self.end.finish_reason = finished;
        }
        if usage.is_some() {
            self.cur.usage = usage;
        }
        self.cur.content_events += u64::from(content);
        if hidden {
            return Step::Skip;
        }
        let sum = self.cur.usage.map(|u| add(self.earlier, u));
        let Some(mode) = self.mode.as_mut() else {
            self.delivered.observe(data);
            return Step::Send(raw);
        };
        match self.delivered.splice(data, mode, sum) {
            Spliced::Send(e) => Step::Send(Bytes::from(e)),
            Spliced::Skip => Step::Skip,
            Spliced::Diverged => Step::Diverged,
        }
    }

    /// A continuation's event spliced in (`None` for the first attempt's).
    fn splice(&mut self, raw: &[u8]) -> Option<Spliced> {
        let mode = self.mode.as_mut()?;
        let sum = self.cur.usage.map(|u| add(self.earlier, u));
        let data = data_of(raw).unwrap_or_default();
        Some(self.delivered.splice(data.trim(), mode, sum))
    }

    /// Ends the attempt being relayed: the first one's outcome and usage go to `end`, a
    /// continuation is finished here and listed.
    fn end_attempt(&mut self, outcome: Outcome) {
        let used = self.cur.usage();
        self.earlier = add(self.earlier, used);
        match self.cur.attempt.take() {
            None => {
                self.end.outcome = outcome;
                self.end.usage = self.cur.usage;
                self.end.content_events = self.cur.content_events;
            }
            Some((candidate, attempt)) => {
                attempt.finish(outcome, &self.resumer.books);
                self.end.resumed.push(Resumed { candidate, usage: used });
            }
        }
        // Counted once.
        self.cur.usage = None;
        self.cur.content_events = 0;
    }

    /// Hands a break over to the next continuation: its first bytes, the rest of its
    /// body and its idle watch; `None` when there is none (inside a tool call, nothing
    /// sent yet, no candidate left or answering).
    async fn resume(&mut self, b: Break) -> Option<(Bytes, BodyStream, IdleWatch)> {
        let route = &self.resumer.route.cfg.name;
        tracing::warn!(%route, upstream = %self.upstream, detail = %b.detail, "stream broke after bytes reached the client");
        self.first_break.get_or_insert((b.outcome, b.detail));
        self.end_attempt(b.outcome);
        if !self.delivered.resumable() || self.delivered.nothing() || self.finished {
            return None;
        }
        let c = self.resumer.next(&self.delivered, b.reason, &self.upstream).await?;
        self.upstream = c.attempt.upstream().cfg.name.clone();
        self.cur = Current {
            attempt: Some((c.candidate, c.attempt)),
            usage: None,
            content_events: 0,
            prompt_bound: c.prompt_bound,
        };
        self.mode = Some(c.mode);
        self.splitter = Splitter::new(T::FORMAT);
        self.finished = false;
        Some((c.first, c.rest, c.idle))
    }

    /// A complete end with its `last` event (`[DONE]`, `message_stop`, the completed
    /// response), the attempt being relayed finished.
    fn done(mut self, last: Bytes) -> (StreamEnd, Option<Bytes>) {
        self.end_attempt(Outcome::Ok);
        self.end.healed = !self.end.resumed.is_empty();
        (self.end, Some(last))
    }

    fn client_gone(mut self) -> (StreamEnd, Option<Bytes>) {
        self.end.client_gone = true;
        self.end_attempt(Outcome::Ok);
        (self.end, None)
    }

    /// The stream cannot go on: it ends with the error naming the first break.
    fn broken(self) -> (StreamEnd, Option<Bytes>) {
        let (outcome, reason) = self.first_break.unwrap_or((Outcome::Reset, String::new()));
        broken(self.end, T::FORMAT, outcome, &reason)
    }

    /// A replay differs from what the client has: its upstream did nothing wrong, but
    /// the client's stream cannot go on.
    fn diverged(mut self) -> (StreamEnd, Option<Bytes>) {
        self.end_attempt(Outcome::Ok);
        let route = &self.resumer.route.cfg.name;
        tracing::warn!(%route, upstream = %self.upstream, "the replay differs from what the client has; the stream ends");
        self.broken()
    }
}

/// An in-stream error event: chat's `{"error": …}` with no choices, Messages'
/// `{"type": "error", …}`, Responses' `error` or `response.failed`.
fn is_error(data: &str) -> bool {
    (data.contains("\"error\"") || data.contains("response.failed"))
        && serde_json::from_str::<Value>(data).is_ok_and(|v| match v.get("type").and_then(Value::as_str) {
            Some(kind) => kind == "error" || kind == "response.failed",
            None => v.get("error").is_some_and(|e| !e.is_null()) && v.get("choices").is_none(),
        })
}
