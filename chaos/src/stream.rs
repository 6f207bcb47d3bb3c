//! Response bodies that unfold over time: SSE streams and broken bodies.
//!
//! A stream is a small state machine driven by `futures::stream::unfold`:
//! first-byte delay, content chunks with their cadence, the finish chunk,
//! the optional usage chunk, `[DONE]`. Faults cut in between: a hang pends
//! forever (until hyper drops the body because the client left), a reset
//! ends the body with an error and resets the connection, an error event
//! ends it cleanly.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;

use super::conn::ConnHandle;
use super::counters::{Counters, InFlight};
use super::plan::Plan;
use super::wire::{self, Endpoint, ToolCall, Usage};

/// What a body needs to report and inject faults.
pub(crate) struct BodyCtx {
    pub(crate) counters: Arc<Counters>,
    pub(crate) conn: Option<ConnHandle>,
    /// Held until the body ends or is dropped.
    pub(crate) _in_flight: InFlight,
}

/// How a partial plain body ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cut {
    Reset,
    Hang,
}

/// The error that breaks a body on purpose (hyper then drops the connection).
#[derive(Debug, thiserror::Error)]
#[error("chaos: connection reset on purpose")]
pub(crate) struct ResetError;

/// One SSE answer being produced.
pub(crate) struct Sse {
    pub(crate) ctx: BodyCtx,
    pub(crate) plan: Arc<Plan>,
    pub(crate) endpoint: Endpoint,
    /// `data: {…,"choices":[`, see [`wire::event_prefix`].
    pub(crate) prefix: Bytes,
    /// Content chunks to send (the script's, cut at `max_tokens`).
    pub(crate) chunks: u32,
    pub(crate) finish: &'static str,
    /// `Some` when the client asked for `stream_options.include_usage`.
    pub(crate) usage: Option<Usage>,
    /// The tool called instead of text: its argument pieces replace the words.
    pub(crate) tool: Option<ToolCall>,
}

struct SseState {
    sse: Sse,
    step: Step,
    /// JSON events produced so far, for `malformed_chunk`.
    events: u32,
}

#[derive(Clone, Copy)]
enum Step {
    FirstByte,
    Content(u32),
    Finish,
    Usage,
    Done,
    /// After the last event: the body ends (after `end_ms`).
    Close,
    End,
}

impl BodyCtx {
    /// Counts the reset, lets hyper flush what was already written, then
    /// arms the RST and returns the error that makes hyper drop the body.
    pub(crate) async fn reset(&self) -> ResetError {
        self.counters.reset();
        // Returning `Pending` once makes hyper flush buffered chunks first,
        // so the client really receives the N chunks before the break.
        tokio::task::yield_now().await;
        if let Some(conn) = &self.conn {
            conn.abort();
        }
        ResetError
    }

    /// Counts the hang and never returns.
    pub(crate) async fn hang(&self) -> Infallible {
        self.counters.hang();
        std::future::pending().await
    }
}

impl Sse {
    pub(crate) fn into_body(self) -> Body {
        let state = SseState { sse: self, step: Step::FirstByte, events: 0 };
        Body::from_stream(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }))
    }
}

impl SseState {
    async fn next(&mut self) -> Option<Result<Bytes, ResetError>> {
        let plan = Arc::clone(&self.sse.plan);
        loop {
            match self.step {
                Step::FirstByte => {
                    sleep(plan.first_byte).await;
                    self.step = Step::Content(0);
                }
                Step::Content(i) => {
                    let cut_here = |n: Option<u32>| n.is_some_and(|n| i >= n.min(self.sse.chunks));
                    if cut_here(plan.error_after) {
                        // OpenAI's mid-stream error: an error object, then the end.
                        self.step = Step::End;
                        let code = plan.error_code.as_deref().unwrap_or("server_error");
                        let body = wire::error_body(
                            "The server had an error while processing your request.",
                            "server_error",
                            code,
                        );
                        let mut event = b"data: ".to_vec();
                        event.extend_from_slice(&body);
                        event.extend_from_slice(b"\n\n");
                        return Some(Ok(Bytes::from(event)));
                    }
                    if cut_here(plan.reset_after) {
                        self.step = Step::End;
                        return Some(Err(self.sse.ctx.reset().await));
                    }
                    if cut_here(plan.hang_after) {
                        match self.sse.ctx.hang().await {}
                    }
                    if i >= self.sse.chunks {
                        self.step = Step::Finish;
                        continue;
                    }
                    if i > 0 {
                        sleep(plan.chunk_gap).await;
                    }
                    self.step = Step::Content(i + 1);
                    return Some(Ok(self.event(|s| match &s.tool {
                        Some(call) => wire::tool_call_event(&s.prefix, call, i),
                        None => wire::content_event(&s.prefix, s.endpoint, wire::word(i), i == 0),
                    })));
                }
                Step::Finish => {
                    self.step = if self.sse.usage.is_some() { Step::Usage } else { Step::Done };
                    return Some(Ok(self.event(|s| match &s.tool {
                        Some(call) => wire::tool_finish_event(&s.prefix, call, s.finish),
                        None => wire::finish_event(&s.prefix, s.endpoint, s.finish),
                    })));
                }
                Step::Usage => {
                    self.step = Step::Done;
                    let usage = self.sse.usage?;
                    return Some(Ok(self.event(|s| wire::usage_event(&s.prefix, usage))));
                }
                Step::Done => {
                    self.step = Step::Close;
                    if plan.no_done {
                        continue;
                    }
                    return Some(Ok(Bytes::from_static(wire::DONE_EVENT)));
                }
                Step::Close => {
                    self.step = Step::End;
                    sleep(plan.end_gap).await;
                    return None;
                }
                Step::End => return None,
            }
        }
    }

    /// Renders the next JSON event, unless the script wants it malformed.
    fn event(&mut self, render: impl FnOnce(&Sse) -> Bytes) -> Bytes {
        self.events += 1;
        if self.sse.plan.malformed == Some(self.events) {
            return Bytes::from_static(wire::MALFORMED_EVENT);
        }
        render(&self.sse)
    }
}

/// A plain (non-SSE) body that sends the first half of `full`, then resets
/// or hangs: a broken body after headers.
pub(crate) fn cut_body(full: Bytes, cut: Cut, ctx: BodyCtx) -> Body {
    let half = full.slice(..full.len() / 2);
    let state = (Some(half), Some(ctx));
    Body::from_stream(futures::stream::unfold(state, move |(head, ctx)| async move {
        if let Some(head) = head {
            return Some((Ok(head), (None, ctx)));
        }
        let ctx = ctx?;
        match cut {
            Cut::Reset => Some((Err(ctx.reset().await), (None, None))),
            Cut::Hang => match ctx.hang().await {},
        }
    }))
}

/// `tokio::time::sleep`, without arming a timer for zero.
pub(crate) async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}
