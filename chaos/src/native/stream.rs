//! A native stream unfolding over time, with the same faults as the OpenAI
//! one: the protocol's opening events at once (Anthropic `message_start`,
//! Bedrock `messageStart`, Responses `response.created` … `content_part.added`:
//! real providers send them before any content),
//! the first-byte delay before the first content event, content with its
//! cadence, then the closing events. A hang, a reset or an in-stream error
//! event cuts in after N content chunks; `malformed_chunk` replaces the Nth
//! event (or frame) of the body.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;

use super::{Answer, anthropic, bedrock, errors, google, responses};
use crate::plan::Plan;
use crate::protocol::Family;
use crate::stream::{BodyCtx, ResetError, sleep};

/// One native answer being streamed.
pub(crate) struct NativeStream {
    pub(crate) ctx: BodyCtx,
    pub(crate) plan: Arc<Plan>,
    pub(crate) answer: Answer,
    pub(crate) family: Family,
}

struct State {
    s: NativeStream,
    step: Step,
    pending: VecDeque<Pending>,
    /// Events produced so far.
    events: u32,
}

/// An event waiting to be sent; closing events are rendered late, as
/// Gemini's framing and Responses' `sequence_number` depend on their position.
enum Pending {
    Ready(Bytes),
    /// The closing event at `index`, of those starting after `first` events.
    Closing {
        first: u32,
        index: usize,
    },
}

#[derive(Clone, Copy)]
enum Step {
    Preamble,
    FirstByte,
    Content(u32),
    Error,
    Closing,
    End,
}

impl NativeStream {
    pub(crate) fn into_body(self) -> Body {
        let state = State { s: self, step: Step::Preamble, pending: VecDeque::new(), events: 0 };
        Body::from_stream(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }))
    }
}

impl State {
    async fn next(&mut self) -> Option<Result<Bytes, ResetError>> {
        let plan = Arc::clone(&self.s.plan);
        let pieces = u32::try_from(self.s.answer.pieces.len()).unwrap_or(u32::MAX);
        loop {
            if let Some(pending) = self.pending.pop_front() {
                return Some(Ok(self.emit(|s, _| match pending {
                    Pending::Ready(bytes) => bytes,
                    Pending::Closing { first, index } => closing(s, first).into_iter().nth(index).unwrap_or_default(),
                })));
            }
            match self.step {
                Step::Preamble => {
                    let events = match self.s.family {
                        Family::Anthropic => anthropic::preamble(&self.s.answer),
                        Family::Bedrock => bedrock::preamble(&self.s.answer),
                        Family::BedrockMessages => bedrock::chunks(anthropic::preamble(&self.s.answer)),
                        Family::Responses => responses::preamble(&self.s.answer, self.events),
                        Family::Gemini | Family::OpenAi => Vec::new(),
                    };
                    self.pending.extend(events.into_iter().map(Pending::Ready));
                    self.step = Step::FirstByte;
                }
                Step::FirstByte => {
                    sleep(plan.first_byte).await;
                    self.step = Step::Content(0);
                }
                Step::Content(i) => {
                    let cut_here = |n: Option<u32>| n.is_some_and(|n| i >= n.min(pieces));
                    if cut_here(plan.error_after) {
                        self.step = Step::Error;
                        continue;
                    }
                    if cut_here(plan.reset_after) {
                        self.step = Step::End;
                        return Some(Err(self.s.ctx.reset().await));
                    }
                    if cut_here(plan.hang_after) {
                        match self.s.ctx.hang().await {}
                    }
                    if i >= pieces {
                        self.step = Step::Closing;
                        continue;
                    }
                    if i > 0 {
                        sleep(plan.chunk_gap).await;
                    }
                    self.step = Step::Content(i + 1);
                    let at = usize::try_from(i).unwrap_or(usize::MAX);
                    return Some(Ok(self.emit(|s, n| match s.family {
                        Family::Anthropic => anthropic::piece(&s.answer, at),
                        Family::Bedrock => bedrock::piece(&s.answer, at),
                        Family::BedrockMessages => bedrock::chunk(&anthropic::piece(&s.answer, at)),
                        Family::Responses => responses::piece(&s.answer, at, n),
                        Family::Gemini | Family::OpenAi => google::piece(&s.answer, at, n),
                    })));
                }
                Step::Error => {
                    self.step = Step::End;
                    let (name, message) = errors::stream_error(self.s.family, self.s.answer.error_name.as_deref());
                    return Some(Ok(self.emit(|s, n| match s.family {
                        Family::Anthropic => anthropic::error_event(&name, message),
                        Family::Bedrock | Family::BedrockMessages => bedrock::exception(&name, message),
                        Family::Responses => responses::error_event(&s.answer, n, &name, message),
                        Family::Gemini | Family::OpenAi => google::error_event(&s.answer, n, &name, message),
                    })));
                }
                Step::Closing => {
                    self.step = Step::End;
                    let first = self.events;
                    let mut count = closing(&self.s, first).len();
                    // Without its end marker: the last closing event is left out.
                    if plan.no_done {
                        count = count.saturating_sub(1);
                    }
                    self.pending.extend((0..count).map(|index| Pending::Closing { first, index }));
                }
                Step::End => return None,
            }
        }
    }

    /// Renders the next event (`n` = events before it), unless the script
    /// wants it malformed.
    fn emit(&mut self, render: impl FnOnce(&NativeStream, u32) -> Bytes) -> Bytes {
        let n = self.events;
        self.events += 1;
        if self.s.plan.malformed == Some(self.events) {
            return match self.s.family {
                Family::Anthropic => Bytes::from_static(anthropic::MALFORMED),
                Family::Bedrock | Family::BedrockMessages => bedrock::malformed(),
                Family::Responses => responses::malformed(&self.s.answer),
                Family::Gemini | Family::OpenAi => google::malformed(&self.s.answer, n),
            };
        }
        render(&self.s, n)
    }
}

/// The closing events, the end marker last; `n` = events before the first.
fn closing(s: &NativeStream, n: u32) -> Vec<Bytes> {
    match s.family {
        Family::Anthropic => anthropic::closing(&s.answer),
        Family::Bedrock => bedrock::closing(&s.answer),
        Family::BedrockMessages => bedrock::messages_closing(&s.answer),
        Family::Responses => responses::closing(&s.answer, n),
        Family::Gemini | Family::OpenAi => google::closing(&s.answer, n),
    }
}
