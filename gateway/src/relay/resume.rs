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
//! [`super::StreamEnd::resumed`] lists the continuations with their usage.

use std::sync::Arc;
use tokio::time::Instant;

use bytes::Bytes;
use serde_json::Value;

use super::IdleWatch;
use super::sse::Format;
use crate::attempt::Books;
use crate::attempt::{self, BodyStream, Committed};
use crate::config::Route;
use crate::headers::RequestId;
use crate::health::Circuit;
use crate::outcome::Outcome;
use crate::request::ClientRequest;
use crate::telemetry::metrics::{ResumeReason, RouteResume};
use crate::telemetry::traces::RequestTrace;
use crate::usage::Usage;

pub mod chat;
pub mod messages;
mod pump;
pub mod responses;

pub(super) use pump::pump;

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
    sum.server_tool_use.web_search_requests =
        a.server_tool_use.web_search_requests + b.server_tool_use.web_search_requests;
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
    books: Arc<Books>,
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
        books: Arc<Books>,
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
        Self { books, route, req: req.clone(), deadline, used, resumes: 0, request_id, trace }
    }

    /// The name of the upstream serving the first attempt.
    fn serving_upstream(&self) -> String {
        let serving = self.route.candidates.iter().zip(&self.used).find(|(_, used)| **used);
        serving.map_or_else(String::new, |(c, _)| c.upstream.cfg.name.clone())
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
            let tries = prefill.map(|(text, tail)| How::Prefill { text, tail }).into_iter().chain([How::Replay]);
            for how in tries {
                let (body, mode) = match how {
                    How::Prefill { text, tail } => match with_prefill(&self.req, text) {
                        Some(body) => (body, delivered.continuation(Some(tail))),
                        None => continue,
                    },
                    How::Replay => (self.req.clone(), delivered.continuation(None)),
                };
                match self.attempt(idx, &body).await {
                    Ok((first, rest, attempt)) => {
                        self.resumes += 1;
                        self.books
                            .metrics
                            .stream_resumes
                            .get_or_create(&RouteResume { route: self.route.cfg.name.clone(), reason })
                            .inc();
                        tracing::warn!(
                            route = %self.route.cfg.name,
                            from = broken_upstream,
                            to = %c.upstream.cfg.name,
                            reason = reason.as_str(),
                            how = how.as_str(),
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
                    Err(outcome) if outcome == Outcome::Http4xx && matches!(how, How::Prefill { .. }) => continue,
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
        let upstream = &c.upstream;
        match attempt::run(upstream, spec, &self.books).await {
            Ok(started) => {
                match started.rest {
                    Some(rest) => Ok((started.first, rest, started.attempt)),
                    // An answer without content continues nothing.
                    None => {
                        started.attempt.finish(Outcome::Ok, &self.books);
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

/// How a continuation is asked.
#[derive(Clone, Copy)]
enum How<'a> {
    /// With the delivered `text` as a trailing assistant message (`tail`: the trailing
    /// whitespace it left out).
    Prefill { text: &'a str, tail: &'a str },
    /// The original request again.
    Replay,
}

impl How<'_> {
    fn as_str(self) -> &'static str {
        match self {
            How::Prefill { .. } => "prefill",
            How::Replay => "replay",
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
    let list = if req.endpoint == crate::endpoint::Endpoint::Responses { "input" } else { "messages" };
    let turns = body.get_mut(list)?;
    if let Value::String(text) = turns {
        *turns = serde_json::json!([{"role": "user", "content": std::mem::take(text)}]);
    }
    turns.as_array_mut()?.push(serde_json::json!({"role": "assistant", "content": prefill}));
    let bytes = Bytes::from(serde_json::to_vec(&body).ok()?);
    ClientRequest::parse(req.endpoint, &bytes).ok()
}
