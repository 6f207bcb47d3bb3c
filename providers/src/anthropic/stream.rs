//! Anthropic SSE (`message_start` … `message_stop`) → OpenAI chunks.

use std::collections::HashMap;

use http::HeaderMap;

use super::{Citation, classify, finish_reason, usage};
use crate::sse::{SseEvents, event_json};
use crate::{AnswerOpts, ChunkWriter, FinishReason, Out, UpstreamError, Usage};

/// The Messages stream state machine. Tool calls are numbered per response, not by
/// Anthropic's content-block index (a text block between two calls takes no index).
pub(crate) struct Stream {
    writer: ChunkWriter,
    /// Content-block index → OpenAI tool-call index.
    tools: HashMap<u64, usize>,
    usage: Usage,
    finish: Option<FinishReason>,
    /// Characters of text written so far (where annotations point).
    chars: usize,
    /// Where the text of the last text block started. Anthropic streams one block at
    /// a time, so the block a citation arrives in is the one open.
    text_start: usize,
    /// The citations of the open text block (a web search's sources): their
    /// annotations span the whole block, so they are written when it ends.
    citations: Vec<serde_json::Value>,
}

impl Stream {
    pub(crate) fn new(opts: AnswerOpts) -> Self {
        Self {
            writer: ChunkWriter::new(&opts),
            tools: HashMap::new(),
            usage: Usage::default(),
            finish: None,
            chars: 0,
            text_start: 0,
            citations: Vec::new(),
        }
    }

    fn text(&mut self, text: &str, out: &mut Vec<Out>) {
        self.chars += text.chars().count();
        self.writer.text(text, out);
    }
}

impl SseEvents for Stream {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        let Some(v) = event_json(&mut self.writer, data, out) else {
            return;
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
                        let index =
                            self.writer.tool_start(block["id"].as_str(), block["name"].as_str().unwrap_or(""), out);
                        self.tools.insert(v["index"].as_u64().unwrap_or(0), index);
                    }
                    Some("text") => {
                        self.text_start = self.chars;
                        self.text(block["text"].as_str().unwrap_or(""), out);
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => self.text(delta["text"].as_str().unwrap_or(""), out),
                    Some("citations_delta") => self.citations.push(delta["citation"].clone()),
                    Some("input_json_delta") => {
                        // The first `partial_json` is often "": the writer skips empty fragments.
                        if let Some(&index) = v["index"].as_u64().and_then(|b| self.tools.get(&b)) {
                            self.writer.tool_args(index, delta["partial_json"].as_str().unwrap_or(""), out);
                        }
                    }
                    // Thinking and signature deltas have no OpenAI chat equivalent.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let block = v["index"].as_u64().unwrap_or(0);
                if let Some(&index) = self.tools.get(&block) {
                    self.writer.tool_end(index, out);
                }
                if !self.citations.is_empty() {
                    let (start, end) = (self.text_start, self.chars);
                    let found = self.citations.iter().filter_map(Citation::of).map(|c| c.annotation(start, end));
                    let annotations = found.collect();
                    self.citations.clear();
                    self.writer.annotations(annotations, out);
                }
            }
            "message_delta" => {
                if let Some(stop) = v["delta"]["stop_reason"].as_str() {
                    self.finish = Some(finish_reason(stop));
                }
                usage(&v["usage"], &mut self.usage);
            }
            "message_stop" => {
                self.writer.finish(self.finish.unwrap_or(FinishReason::Stop), out);
                self.writer.usage_and_done(&self.usage, out);
            }
            "error" => self.writer.error(classify(200, &HeaderMap::new(), data.as_bytes(), 0), out),
            // `ping` and future event types carry nothing to forward.
            _ => {}
        }
    }

    fn end(&mut self, out: &mut Vec<Out>) {
        if !self.writer.is_done() {
            self.writer.error(UpstreamError::malformed(200, "the stream ended before message_stop"), out);
        }
    }
}
