//! Mid-stream resume (docs/design.md §4.5, `failover.midStream: resume`): a stream that
//! breaks after content reached the client (reset, cut without a finish reason, idle
//! timeout, an error event) is continued on the next candidate not used yet, as more
//! events of the same stream: chat chunks ([`chat`]), Messages events ([`messages`]) or
//! Responses events ([`responses`]).
//!
//! A candidate with `assistantPrefill` gets the original request plus the delivered text
//! as a trailing assistant message; one without it (or one refusing the prefill with a
//! 400) gets the original request again, and its replay is held back while it matches
//! what the client has. At most [`MAX_RESUMES`] per request, within the route's deadline;
//! never inside a tool call's arguments, and after a complete tool call by replay only
//! (a turn holding a tool call cannot be a prefill). Every attempt is billed:
//! [`StreamEnd::resumed`] lists the continuations with their usage.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::sse::{Event, Format, Splitter, Usage};
use super::{IdleWatch, StreamEnd, broken};
use crate::attempt::outcome::Outcome;
use crate::attempt::{self, BodyStream, Committed, StreamError};
use crate::config::Route;
use crate::headers::RequestId;
use crate::request::ClientRequest;
use crate::route::health::Circuit;
use crate::server::Gateway;
use crate::telemetry::metrics::{ResumeReason, RouteResume};
use crate::telemetry::traces::RequestTrace;

pub mod chat;
pub mod messages;
pub mod responses;

/// Resumes per request at most.
pub const MAX_RESUMES: u32 = 2;

/// What the client has of a stream in one format, and how a continuation's events are
/// made part of it.
pub trait Transcript: Default + Send {
    /// How a continuation is spliced in (continuing a prefill, or a replay held back while
    /// it matches), with its progress.
    type Mode: Send;
    /// The stream format it reads.
    const FORMAT: Format;
    /// Reads the data of a first attempt's event as it is relayed.
    fn observe(&mut self, data: &str);
    /// Nothing of an answer was sent yet.
    fn nothing(&self) -> bool;
    /// A resume may start here: not inside a tool call's arguments.
    fn resumable(&self) -> bool;
    /// The text a prefill continuation is given (trailing whitespace trimmed) and the
    /// trimmed tail; `None` when what was sent cannot be a prefill (a tool call,
    /// thinking, no text).
    fn prefill(&self) -> Option<(&str, &str)>;
    /// A continuation's mode: continuing the prefill whose trimmed tail is `tail`, or
    /// (`None`) a replay.
    fn continuation(&self, prefill_tail: Option<&str>) -> Self::Mode;
    /// Rewrites the data of one event of a continuation; `usage` is the sum to report
    /// when the event carries usage (this attempt's plus the earlier ones').
    fn splice(&mut self, data: &str, mode: &mut Self::Mode, usage: Option<Usage>) -> Spliced;
    /// Characters of text sent (for the log).
    fn chars(&self) -> usize;
}

/// What one event of a continuation becomes.
#[derive(Debug, PartialEq)]
pub enum Spliced {
    /// Send this event.
    Send(String),
    /// Nothing of it is new to the client.
    Skip,
    /// The replay differs from what the client has.
    Diverged,
}

/// The sum of two attempts' usage.
pub fn add(a: Usage, b: Usage) -> Usage {
    let mut sum = Usage::plain(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens);
    sum.prompt_tokens_details.cached_tokens =
        a.prompt_tokens_details.cached_tokens + b.prompt_tokens_details.cached_tokens;
    sum.prompt_tokens_details.cache_write_tokens =
        a.prompt_tokens_details.cache_write_tokens + b.prompt_tokens_details.cache_write_tokens;
    sum
}

/// The part of a prefill continuation's `text` that is new: its leading whitespace is
/// skipped while it repeats the `tail` the prefill trimmed (what is left of it is kept
/// for the next piece).
fn skip_tail<'a>(text: &'a str, tail: &mut String) -> &'a str {
    let mut skip = 0;
    for (a, b) in text.chars().zip(tail.chars()) {
        if a != b {
            break;
        }
        skip += a.len_utf8();
    }
    let stop = skip < text.len() || skip >= tail.len();
    *tail = if stop { String::new() } else { tail[skip..].to_string() };
    &text[skip..]
}

/// A continuation that ran: its candidate and what it used.
#[derive(Debug, Clone, Copy)]
pub struct Resumed {
    /// Index in `route.candidates`.
    pub candidate: usize,
    /// Reported usage, or the estimate when it broke before reporting.
    pub usage: Usage,
}

/// What a resume needs: the request, the route and where the first attempt ran.
pub struct Resumer {
    gw: Arc<Gateway>,
    route: Arc<Route>,
    req: ClientRequest,
    deadline: Instant,
    used: Vec<bool>,
    resumes: u32,
    /// The client's request id, sent with every continuation as with the first attempt.
    request_id: RequestId,
    /// The request's span: continuations are attempts under it like any other.
    trace: RequestTrace,
}

/// A continuation that answered.
struct Continuation<M> {
    first: Bytes,
    rest: BodyStream,
    mode: M,
    idle: IdleWatch,
    candidate: usize,
    attempt: Committed,
    prompt_bound: u64,
}

impl Resumer {
    /// A resumer for a stream served by candidate `serving` of `route`, `started` at,
    /// sent upstream as `request_id` and traced under `trace`.
    pub fn new(
        gw: Arc<Gateway>,
        route: Arc<Route>,
        req: &ClientRequest,
        serving: usize,
        started: Instant,
        request_id: RequestId,
        trace: RequestTrace,
    ) -> Self {
        let mut used = vec![false; route.candidates.len()];
        if let Some(u) = used.get_mut(serving) {
            *u = true;
        }
        let deadline = started + std::time::Duration::from_millis(route.cfg.deadline_ms);
        Self { gw, route, req: req.clone(), deadline, used, resumes: 0, request_id, trace }
    }

    /// Starts the next continuation, trying the unused candidates in spec order, those
    /// with an open circuit last.
    async fn next<T: Transcript>(
        &mut self,
        delivered: &T,
        reason: ResumeReason,
        broken_upstream: &str,
    ) -> Option<Continuation<T::Mode>> {
        if self.resumes >= MAX_RESUMES {
            return None;
        }
        let prefill = delivered.prefill();
        let now = Instant::now();
        let mut order: Vec<usize> =
            (0..self.route.candidates.len()).filter(|i| self.used.get(*i) == Some(&false)).collect();
        order.sort_by_key(|i| {
            self.route.candidates.get(*i).is_some_and(|c| c.upstream.health.circuit(now) == Circuit::Open)
        });
        for idx in order {
            if Instant::now() >= self.deadline {
                return None;
            }
            if let Some(u) = self.used.get_mut(idx) {
                *u = true;
            }
            let Some(c) = self.route.candidates.get(idx) else { continue };
            // What cannot be a prefill (a tool call, thinking) is replayed.
            let prefill = prefill.filter(|_| c.upstream.cfg.assistant_prefill);
            for (text, tail) in
                [prefill.map(|(text, tail)| (Some(text), Some(tail))), Some((None, None))].into_iter().flatten()
            {
                let body = match text {
                    Some(text) => match with_prefill(&self.req, text) {
                        Some(b) => b,
                        None => continue,
                    },
                    None => self.req.clone(),
                };
                let mode = delivered.continuation(tail);
                match self.attempt(idx, &body).await {
                    Ok((first, rest, attempt)) => {
                        self.resumes += 1;
                        self.gw
                            .metrics
                            .stream_resumes
                            .get_or_create(&RouteResume { route: self.route.cfg.name.clone(), reason })
                            .inc();
                        tracing::warn!(
                            route = %self.route.cfg.name,
                            from = broken_upstream,
                            to = %c.upstream.cfg.name,
                            reason = reason.as_str(),
                            how = if text.is_some() { "prefill" } else { "replay" },
                            delivered_chars = delivered.chars(),
                            resume = self.resumes,
                            "resuming a broken stream on another upstream"
                        );
                        let idle = IdleWatch::of(attempt.upstream());
                        return Some(Continuation {
                            first,
                            rest,
                            mode,
                            idle,
                            candidate: idx,
                            attempt,
                            prompt_bound: body.input_bound,
                        });
                    }
                    // A refused prefill is tried again as a replay on the same candidate.
                    Err(outcome) if outcome == Outcome::Http4xx && text.is_some() => continue,
                    Err(_) => break,
                }
            }
        }
        None
    }

    /// One attempt of a continuation on candidate `idx`.
    async fn attempt(&self, idx: usize, req: &ClientRequest) -> Result<(Bytes, BodyStream, Committed), Outcome> {
        let Some(c) = self.route.candidates.get(idx) else { return Err(Outcome::Connect) };
        let untried = self.used.iter().filter(|u| !**u).count() + 1;
        let budget = self.deadline.saturating_duration_since(Instant::now()) / u32::try_from(untried).unwrap_or(1);
        let first_byte = Some(c.upstream.health.first_byte_limit(c.upstream.cfg.first_byte));
        let limits = attempt::Limits { first_byte, budget, trial: false };
        let spec = attempt::AttemptSpec::new(c, &self.route.cfg, req, limits, &self.request_id, &self.trace);
        let (gw, upstream) = (&self.gw, &c.upstream);
        let books = attempt::Books { settings: &gw.settings, sli: &gw.sli };
        match attempt::run(upstream, &gw.secrets, spec, books).await {
            Ok(started) => {
                match started.rest {
                    Some(rest) => Ok((started.first, rest, started.attempt)),
                    // An answer without content continues nothing.
                    None => {
                        started.attempt.finish(Outcome::Ok, &gw.settings, &gw.sli);
                        Err(Outcome::Reset)
                    }
                }
            }
            Err(e) => {
                tracing::warn!(route = %self.route.cfg.name, upstream = %upstream.cfg.name, reason = e.outcome.as_str(), detail = %e.detail, "a resume attempt failed");
                Err(e.outcome)
            }
        }
    }
}

/// The request with `prefill` as a trailing assistant message (of `messages`, or of a
/// Responses request's `input`); `None` for a request with thinking on, which a prefill
/// cannot continue (Anthropic refuses it).
fn with_prefill(req: &ClientRequest, prefill: &str) -> Option<ClientRequest> {
    let mut body: Value = serde_json::from_slice(req.body()).ok()?;
    if body.pointer("/thinking/type").and_then(Value::as_str).is_some_and(|t| t != "disabled") {
        return None;
    }
    let list = if req.endpoint == crate::request::Endpoint::Responses { "input" } else { "messages" };
    let turns = body.get_mut(list)?;
    if let Value::String(text) = turns {
        *turns = serde_json::json!([{"role": "user", "content": std::mem::take(text)}]);
    }
    turns.as_array_mut()?.push(serde_json::json!({"role": "assistant", "content": prefill}));
    let bytes = Bytes::from(serde_json::to_vec(&body).ok()?);
    ClientRequest::parse(req.endpoint, &bytes).ok()
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

/// Relays like [`super::pump`], resuming a break on the next candidate; `T` reads and
/// splices the stream's format.
pub(super) async fn pump<T: Transcript>(
    first: Bytes,
    mut rest: BodyStream,
    wants_usage: bool,
    mut idle: IdleWatch,
    mut resumer: Resumer,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> (StreamEnd, Option<Bytes>) {
    let format = T::FORMAT;
    let first_upstream = resumer.route.candidates.iter().enumerate().find(|(i, _)| resumer.used.get(*i) == Some(&true));
    let mut upstream_name = first_upstream.map_or_else(String::new, |(_, c)| c.upstream.cfg.name.clone());
    let mut end = StreamEnd::default();
    let mut delivered = T::default();
    // `None` while the first attempt is relayed.
    let mut mode: Option<T::Mode> = None;
    let mut earlier = Usage::default();
    let mut cur = Current { attempt: None, usage: None, content_events: 0, prompt_bound: resumer.req.input_bound };
    let mut splitter = Splitter::new(format);
    let mut finished = false;
    let mut first_break: Option<(Outcome, String)> = None;
    let mut model_read = false;
    let mut chunk = Some(first);
    loop {
        let mut broke: Option<(Outcome, ResumeReason, String)> = None;
        if let Some(bytes) = chunk.take() {
            for event in splitter.push(&bytes) {
                let out = match event {
                    Event::Done => return done(end, cur, &resumer, earlier, format.done()),
                    // A Responses stream ends in the event that carries the whole
                    // response: a continuation's is made the client's.
                    Event::Last { raw, usage, finished: f } => {
                        end.finish_reason = Some(f);
                        cur.usage = usage.or(cur.usage);
                        let Some(mode) = mode.as_mut() else { return done(end, cur, &resumer, earlier, raw) };
                        let data = super::sse::data_of(&raw).unwrap_or_default();
                        match delivered.splice(data.trim(), mode, cur.usage.map(|u| add(earlier, u))) {
                            Spliced::Send(e) => return done(end, cur, &resumer, earlier, Bytes::from(e)),
                            Spliced::Skip => return done(end, cur, &resumer, earlier, raw),
                            Spliced::Diverged => {
                                return diverged(end, cur, &resumer, earlier, first_break, &upstream_name, format);
                            }
                        }
                    }
                    Event::Chunk { raw, usage, finished: f, usage_only, content } => {
                        if !std::mem::replace(&mut model_read, true) {
                            end.model = splitter.model_of(&raw);
                        }
                        let Some(data) = super::sse::data_of(&raw) else { continue };
                        let data = data.trim();
                        if is_error(data) {
                            let detail = format!("the upstream sent an error: {data}");
                            broke = Some((Outcome::Reset, ResumeReason::ErrorEvent, detail));
                            break;
                        }
                        if f.is_some() {
                            finished = true;
                            end.finish_reason = f;
                        }
                        if usage.is_some() {
                            cur.usage = usage;
                        }
                        cur.content_events += u64::from(content);
                        let sum = cur.usage.map(|u| add(earlier, u));
                        match mode.as_mut() {
                            _ if usage_only && !wants_usage => None,
                            None => {
                                delivered.observe(data);
                                Some(raw)
                            }
                            Some(mode) => match delivered.splice(data, mode, sum) {
                                Spliced::Send(e) => Some(Bytes::from(e)),
                                Spliced::Skip => None,
                                Spliced::Diverged => {
                                    return diverged(end, cur, &resumer, earlier, first_break, &upstream_name, format);
                                }
                            },
                        }
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
                    end_attempt(&mut end, &mut cur, Outcome::Ok, &resumer, &mut earlier);
                    return (end, None);
                }
            }
            if broke.is_none() && finished && cur.usage.is_some() {
                return done(end, cur, &resumer, earlier, format.done());
            }
        }
        if broke.is_none() {
            let limit = idle.limit();
            let waiting = Instant::now();
            let Some(next) = super::next_chunk(&mut rest, limit, format, tx).await else {
                end.client_gone = true;
                end_attempt(&mut end, &mut cur, Outcome::Ok, &resumer, &mut earlier);
                return (end, None);
            };
            match next {
                Ok(Some(Ok(bytes))) => {
                    idle.gap(waiting.elapsed());
                    chunk = Some(bytes);
                    continue;
                }
                Ok(None) if finished => return done(end, cur, &resumer, earlier, format.done()),
                Ok(None) => {
                    broke = Some((
                        Outcome::Reset,
                        ResumeReason::Cut,
                        "the upstream closed the stream before it finished".into(),
                    ))
                }
                Ok(Some(Err(StreamError::Upstream(e)))) => {
                    broke = Some((Outcome::Reset, ResumeReason::ErrorEvent, format!("the upstream sent an error: {e}")))
                }
                Ok(Some(Err(e))) => {
                    broke = Some((Outcome::Reset, ResumeReason::Reset, format!("the upstream stream broke: {e}")))
                }
                Err(_) => {
                    let reason = format!("the upstream sent nothing for {}ms", limit.as_millis());
                    broke = Some((Outcome::IdleTimeout, ResumeReason::IdleTimeout, reason));
                }
            }
        }
        let Some((outcome, reason, detail)) = broke else { continue };
        tracing::warn!(route = %resumer.route.cfg.name, upstream = %upstream_name, detail = %detail, "stream broke after bytes reached the client");
        let first_detail = first_break.get_or_insert((outcome, detail)).clone();
        end_attempt(&mut end, &mut cur, outcome, &resumer, &mut earlier);
        // Never inside a tool call's arguments; after a complete one, by replay.
        let next = if !delivered.resumable() || delivered.nothing() || finished {
            None
        } else {
            resumer.next(&delivered, reason, &upstream_name).await
        };
        let Some(c) = next else { return broken(end, format, first_detail.0, &first_detail.1) };
        upstream_name = c.attempt.upstream().cfg.name.clone();
        cur = Current {
            attempt: Some((c.candidate, c.attempt)),
            usage: None,
            content_events: 0,
            prompt_bound: c.prompt_bound,
        };
        mode = Some(c.mode);
        rest = c.rest;
        idle = c.idle;
        splitter = Splitter::new(format);
        finished = false;
        chunk = Some(c.first);
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

/// A replay that differs from what the client has: its upstream did nothing wrong, but
/// the client's stream cannot go on, and ends with the error naming the first break.
fn diverged(
    mut end: StreamEnd,
    mut cur: Current,
    resumer: &Resumer,
    mut earlier: Usage,
    first_break: Option<(Outcome, String)>,
    upstream: &str,
    format: Format,
) -> (StreamEnd, Option<Bytes>) {
    let (outcome, reason) = first_break.unwrap_or((Outcome::Reset, String::new()));
    end_attempt(&mut end, &mut cur, Outcome::Ok, resumer, &mut earlier);
    tracing::warn!(route = %resumer.route.cfg.name, upstream, "the replay differs from what the client has; the stream ends");
    broken(end, format, outcome, &reason)
}

/// Ends the attempt being relayed: the first one's outcome and usage go to `end`, a
/// continuation is finished here and listed.
fn end_attempt(end: &mut StreamEnd, cur: &mut Current, outcome: Outcome, resumer: &Resumer, earlier: &mut Usage) {
    let used = cur.usage();
    *earlier = add(*earlier, used);
    match cur.attempt.take() {
        None => {
            end.outcome = outcome;
            end.usage = cur.usage;
            end.content_events = cur.content_events;
        }
        Some((candidate, attempt)) => {
            attempt.finish(outcome, &resumer.gw.settings, &resumer.gw.sli);
            end.resumed.push(Resumed { candidate, usage: used });
        }
    }
    // Counted once.
    cur.usage = None;
    cur.content_events = 0;
}

/// A complete end with its `last` event (`[DONE]`, `message_stop`, the completed
/// response), the attempt being relayed finished.
fn done(
    mut end: StreamEnd,
    mut cur: Current,
    resumer: &Resumer,
    mut earlier: Usage,
    last: Bytes,
) -> (StreamEnd, Option<Bytes>) {
    end_attempt(&mut end, &mut cur, Outcome::Ok, resumer, &mut earlier);
    end.healed = !end.resumed.is_empty();
    (end, Some(last))
}
