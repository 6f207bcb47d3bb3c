//! Mid-stream resume (docs/design.md §4.5, `failover.midStream: resume`): a stream that
//! breaks after content reached the client (reset, cut without a finish reason, idle
//! timeout, an error event) is continued on the next candidate not used yet, as more
//! chunks of the same stream.
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
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::sse::Format;
use super::sse::{Event, Splitter, Usage};
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

mod splice;

pub use splice::{Delivered, Mode, Spliced};

/// Resumes per request at most.
pub const MAX_RESUMES: u32 = 2;

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
struct Continuation {
    first: Bytes,
    rest: BodyStream,
    mode: Mode,
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
    async fn next(
        &mut self,
        delivered: &Delivered,
        reason: ResumeReason,
        broken_upstream: &str,
    ) -> Option<Continuation> {
        if self.resumes >= MAX_RESUMES {
            return None;
        }
        let (prefill, tail) = delivered.prefill();
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
            let mut modes = Vec::new();
            // A turn that holds a tool call cannot be continued as a prefill: it is replayed.
            if c.upstream.cfg.assistant_prefill && !prefill.is_empty() && !delivered.has_tool_calls() {
                modes.push(Mode::Prefill { tail: tail.to_string() });
            }
            modes.push(Mode::replay(delivered));
            for mode in modes {
                let body = match &mode {
                    Mode::Prefill { .. } => match with_prefill(&self.req, prefill) {
                        Some(b) => b,
                        None => continue,
                    },
                    _ => self.req.clone(),
                };
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
                            how = if matches!(mode, Mode::Prefill { .. }) { "prefill" } else { "replay" },
                            delivered_chars = delivered.text.chars().count(),
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
                    Err(outcome) if outcome == Outcome::Http4xx && matches!(mode, Mode::Prefill { .. }) => continue,
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

/// The request with `prefill` as a trailing assistant message.
fn with_prefill(req: &ClientRequest, prefill: &str) -> Option<ClientRequest> {
    let mut body: Value = serde_json::from_slice(req.body()).ok()?;
    body.get_mut("messages")?.as_array_mut()?.push(serde_json::json!({"role": "assistant", "content": prefill}));
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

/// Relays like [`super::pump`], resuming a break on the next candidate.
pub(super) async fn pump(
    first: Bytes,
    mut rest: BodyStream,
    wants_usage: bool,
    mut idle: IdleWatch,
    mut resumer: Resumer,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> (StreamEnd, Option<Bytes>) {
    let first_upstream = resumer.route.candidates.iter().enumerate().find(|(i, _)| resumer.used.get(*i) == Some(&true));
    let mut upstream_name = first_upstream.map_or_else(String::new, |(_, c)| c.upstream.cfg.name.clone());
    let mut end = StreamEnd::default();
    let mut delivered = Delivered::default();
    let mut mode = Mode::First;
    let mut earlier = Usage::default();
    let mut cur = Current { attempt: None, usage: None, content_events: 0, prompt_bound: resumer.req.input_bound };
    let mut splitter = Splitter::default();
    let mut finished = false;
    let mut first_break: Option<(Outcome, String)> = None;
    let mut model_read = false;
    let mut chunk = Some(first);
    loop {
        let mut broke: Option<(Outcome, ResumeReason, String)> = None;
        if let Some(bytes) = chunk.take() {
            for event in splitter.push(&bytes) {
                let out = match event {
                    // Only OpenAI chunk streams are resumed; they end in `[DONE]`.
                    Event::Done | Event::Last { .. } => return done(end, cur, &resumer, earlier),
                    Event::Chunk { raw, usage, finished: f, usage_only, content } => {
                        if !std::mem::replace(&mut model_read, true) {
                            end.model = super::sse::model_of(&raw);
                        }
                        let text = String::from_utf8_lossy(&raw);
                        let data = text.trim().trim_start_matches("data:").trim();
                        if is_error(data) {
                            broke = Some((
                                Outcome::Reset,
                                ResumeReason::ErrorEvent,
                                format!("the upstream sent an error: {data}"),
                            ));
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
                        let sum = cur.usage.map(|u| splice::add(earlier, u));
                        if usage_only && !wants_usage {
                            None
                        } else if mode == Mode::First {
                            delivered.observe(data);
                            Some(raw)
                        } else {
                            match delivered.splice(data, &mut mode, sum) {
                                Spliced::Send(e) => Some(Bytes::from(e)),
                                Spliced::Skip => None,
                                Spliced::Diverged => {
                                    // The replay's upstream did nothing wrong; the client's
                                    // stream cannot go on.
                                    let (outcome, reason) =
                                        first_break.clone().unwrap_or((Outcome::Reset, String::new()));
                                    end_attempt(&mut end, &mut cur, Outcome::Ok, &resumer, &mut earlier);
                                    tracing::warn!(route = %resumer.route.cfg.name, upstream = %upstream_name, "the replay differs from what the client has; the stream ends");
                                    return broken(end, Format::OpenAi, outcome, &reason);
                                }
                            }
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
                return done(end, cur, &resumer, earlier);
            }
        }
        if broke.is_none() {
            let limit = idle.limit();
            let waiting = Instant::now();
            let next = tokio::select! {
                next = tokio::time::timeout(limit, rest.next()) => next,
                () = tx.closed() => {
                    end.client_gone = true;
                    end_attempt(&mut end, &mut cur, Outcome::Ok, &resumer, &mut earlier);
                    return (end, None);
                }
            };
            match next {
                Ok(Some(Ok(bytes))) => {
                    idle.gap(waiting.elapsed());
                    chunk = Some(bytes);
                    continue;
                }
                Ok(None) if finished => return done(end, cur, &resumer, earlier),
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
        let next = if delivered.inside_tool_call() || delivered.nothing() || finished {
            None
        } else {
            resumer.next(&delivered, reason, &upstream_name).await
        };
        let Some(c) = next else { return broken(end, Format::OpenAi, first_detail.0, &first_detail.1) };
        upstream_name = c.attempt.upstream().cfg.name.clone();
        cur = Current {
            attempt: Some((c.candidate, c.attempt)),
            usage: None,
            content_events: 0,
            prompt_bound: c.prompt_bound,
        };
        mode = c.mode;
        rest = c.rest;
        idle = c.idle;
        splitter = Splitter::default();
        finished = false;
        chunk = Some(c.first);
    }
}

/// An OpenAI-style in-stream error event: `{"error": …}` and no choices.
fn is_error(data: &str) -> bool {
    data.contains("\"error\"")
        && serde_json::from_str::<Value>(data)
            .is_ok_and(|v| v.get("error").is_some_and(|e| !e.is_null()) && v.get("choices").is_none())
}

/// Ends the attempt being relayed: the first one's outcome and usage go to `end`, a
/// continuation is finished here and listed.
fn end_attempt(end: &mut StreamEnd, cur: &mut Current, outcome: Outcome, resumer: &Resumer, earlier: &mut Usage) {
    let used = cur.usage();
    *earlier = splice::add(*earlier, used);
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

/// A complete end: `[DONE]`, with the attempt being relayed finished.
fn done(mut end: StreamEnd, mut cur: Current, resumer: &Resumer, mut earlier: Usage) -> (StreamEnd, Option<Bytes>) {
    end_attempt(&mut end, &mut cur, Outcome::Ok, resumer, &mut earlier);
    end.healed = !end.resumed.is_empty();
    (end, Some(Format::OpenAi.done()))
}
