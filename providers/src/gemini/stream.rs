//! Gemini SSE (`alt=sse`: each event a whole `GenerateContentResponse`, no end marker)
//! → OpenAI chunks.

use http::HeaderMap;

use super::{Part, classify, finish_reason, parts, usage};
use crate::sse::{SseEvents, event_json};
use crate::{AnswerOpts, ChunkWriter, FinishReason, Out, UpstreamError, Usage};

/// Gemini's stream has no end event: the answer is complete when the body ends after a
/// response with a `finishReason`. Function calls arrive whole and get ids unique per
/// response (Gemini gives none, or ids that need not be unique across turns).
pub(crate) struct Stream {
    writer: ChunkWriter,
    usage: Usage,
    finish: Option<FinishReason>,
}

impl Stream {
    pub(crate) fn new(opts: AnswerOpts) -> Self {
        Self { writer: ChunkWriter::new(&opts), usage: Usage::default(), finish: None }
    }
}

impl SseEvents for Stream {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        let Some(v) = event_json(&mut self.writer, data, out) else {
            return;
        };
        if v.get("error").is_some() {
            return self.writer.error(classify(200, &HeaderMap::new(), data.as_bytes(), 0), out);
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
                Part::Call { id, name, args, extra } => {
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

    fn end(&mut self, out: &mut Vec<Out>) {
        if self.writer.is_done() {
            return;
        }
        match self.finish {
            Some(reason) => {
                self.writer.finish(reason, out);
                self.writer.usage_and_done(&self.usage, out);
            }
            None => self.writer.error(UpstreamError::malformed(200, "the stream ended without a finishReason"), out),
        }
    }
}
