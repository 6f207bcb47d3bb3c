//! Anthropic SSE (`message_start` … `message_stop`) → OpenAI chunks.

use std::collections::HashMap;

use http::HeaderMap;
use serde_json::Value;

use super::{classify, finish_reason, usage};
use crate::sse::SseFramer;
use crate::{AnswerOpts, ChunkWriter, FinishReason, Out, Transcoder, UpstreamError, Usage};

/// The Messages stream state machine. Tool calls are numbered per response, not by
/// Anthropic's content-block index (a text block between two calls takes no index).
pub(crate) struct StreamTranscoder {
    framer: SseFramer,
    writer: ChunkWriter,
    /// Content-block index → OpenAI tool-call index.
    tools: HashMap<u64, usize>,
    usage: Usage,
    finish: Option<FinishReason>,
    ended: bool,
}

impl StreamTranscoder {
    pub(crate) fn new(opts: AnswerOpts) -> Self {
        Self {
            framer: SseFramer::new(),
            writer: ChunkWriter::new(&opts),
            tools: HashMap::new(),
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
        match v["type"].as_str().unwrap_or("") {
            "message_start" => {
                let m = &v["message"];
                self.writer.set_id(m["id"].as_str().unwrap_or(""));
                self.writer.set_model(m["model"].as_str().unwrap_or(""));
                usage(&m["usage"], &mut self.usage);
            }
            "content_block_start" => {
                let block = &v["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let index = self.writer.tool_start(
                            block["id"].as_str(),
                            block["name"].as_str().unwrap_or(""),
                            out,
                        );
                        self.tools.insert(v["index"].as_u64().unwrap_or(0), index);
                    }
                    Some("text") => self.writer.text(block["text"].as_str().unwrap_or(""), out),
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        self.writer.text(delta["text"].as_str().unwrap_or(""), out)
                    }
                    Some("input_json_delta") => {
                        // The first `partial_json` is often "": the writer skips empty fragments.
                        if let Some(&index) = v["index"].as_u64().and_then(|b| self.tools.get(&b)) {
                            self.writer.tool_args(
                                index,
                                delta["partial_json"].as_str().unwrap_or(""),
                                out,
                            );
                        }
                    }
                    // Thinking and signature deltas have no OpenAI chat equivalent.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(&index) = v["index"].as_u64().and_then(|b| self.tools.get(&b)) {
                    self.writer.tool_end(index, out);
                }
            }
            "message_delta" => {
                if let Some(stop) = v["delta"]["stop_reason"].as_str() {
                    self.finish = Some(finish_reason(stop));
                }
                usage(&v["usage"], &mut self.usage);
            }
            "message_stop" => {
                self.ended = true;
                let mut reason = self.finish.unwrap_or(FinishReason::Stop);
                if reason == FinishReason::Stop && self.writer.tool_calls() > 0 {
                    reason = FinishReason::ToolCalls;
                }
                self.writer.finish(reason, out);
                self.writer.usage_and_done(&self.usage, out);
            }
            "error" => self.fail(classify(200, &HeaderMap::new(), data.as_bytes(), 0), out),
            // `ping` and future event types carry nothing to forward.
            _ => {}
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
        if !self.ended {
            self.fail(
                UpstreamError::malformed(200, "the stream ended before message_stop"),
                &mut out,
            );
        }
        out
    }
}
