//! Gemini SSE (`alt=sse`: each event a whole `GenerateContentResponse`, no end marker)
//! → OpenAI chunks.

use http::HeaderMap;
use serde_json::Value;

use super::{Part, classify, finish_reason, parts, signature_extra, usage};
use crate::sse::SseFramer;
use crate::{AnswerOpts, ChunkWriter, FinishReason, Out, Transcoder, UpstreamError, Usage};

/// Gemini's stream has no end event: the answer is complete when the body ends after a
/// response with a `finishReason`. Function calls arrive whole and get ids unique per
/// response (Gemini gives none, or ids that need not be unique across turns).
pub(crate) struct StreamTranscoder {
    framer: SseFramer,
    writer: ChunkWriter,
    usage: Usage,
    finish: Option<FinishReason>,
    ended: bool,
}

impl StreamTranscoder {
    pub(crate) fn new(opts: AnswerOpts) -> Self {
        Self {
            framer: SseFramer::new(),
            writer: ChunkWriter::new(&opts),
            usage: Usage::default(),
            finish: None,
            ended: false,
        }
    }

    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        if self.ended {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return self.fail(
                UpstreamError::malformed(200, "a stream event is not JSON"),
                out,
            );
        };
        if v.get("error").is_some() {
            return self.fail(classify(200, &HeaderMap::new(), data.as_bytes(), 0), out);
        }
        if let Some(id) = v["responseId"].as_str() {
            self.writer.set_id(id);
        }
        if let Some(model) = v["modelVersion"].as_str() {
            self.writer.set_model(model);
        }
        for part in parts(&v["candidates"][0]) {
            match Part::of(part) {
                Part::Text(t) => self.writer.text(t, out),
                Part::Call {
                    id,
                    name,
                    args,
                    signature,
                } => {
                    let extra = signature.map(signature_extra);
                    let index = self.writer.tool_start_extra(id, name, extra.as_ref(), out);
                    self.writer.tool_args(index, &args, out);
                    self.writer.tool_end(index, out);
                }
                Part::Skip => {}
            }
        }
        if let Some(reason) = finish_reason(&v) {
            self.finish = Some(reason);
        }
        // Counts are totals so far: the last report wins.
        if let Some(u) = usage(&v["usageMetadata"]) {
            self.usage = u;
        }
    }

    fn fail(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        self.ended = true;
        self.writer.error(error, out);
    }
}

impl Transcoder for StreamTranscoder {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Out> {
        let mut out = Vec::new();
        for ev in self.framer.feed(bytes) {
            self.event(&ev.data, &mut out);
        }
        out
    }

    fn finish(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let Some(ev) = self.framer.finish() {
            self.event(&ev.data, &mut out);
        }
        if self.ended {
            return out;
        }
        self.ended = true;
        match self.finish {
            Some(mut reason) => {
                // Gemini says STOP when it called a function; OpenAI clients expect tool_calls.
                if reason == FinishReason::Stop && self.writer.tool_calls() > 0 {
                    reason = FinishReason::ToolCalls;
                }
                self.writer.finish(reason, &mut out);
                self.writer.usage_and_done(&self.usage, &mut out);
            }
            None => self.writer.error(
                UpstreamError::malformed(200, "the stream ended without a finishReason"),
                &mut out,
            ),
        }
        out
    }
}
