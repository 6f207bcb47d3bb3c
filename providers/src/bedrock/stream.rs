//! ConverseStream event-stream frames → OpenAI chunks.
//!
//! Order: `messageStart` → (`contentBlockStart`? `contentBlockDelta`* `contentBlockStop`)*
//! → `messageStop` (the stop reason) → `metadata` (usage, after the stop). The finish
//! chunk is written at `messageStop`, the usage chunk and `[DONE]` at `metadata`.

use std::collections::HashMap;

use http::HeaderMap;
use serde_json::Value;

use super::{classify, classify_named, error_name, finish_reason, usage};
use crate::eventstream::{Frame, FrameDecoder, MessageType};
use crate::{AnswerOpts, ChunkWriter, FinishReason, Out, Transcoder, UpstreamError};

/// The ConverseStream state machine. Tool calls are numbered per response, not by
/// Bedrock's `contentBlockIndex` (a text block between two calls takes no index).
pub(crate) struct StreamTranscoder {
    decoder: FrameDecoder,
    writer: ChunkWriter,
    /// `contentBlockIndex` → OpenAI tool-call index.
    tools: HashMap<u64, usize>,
    /// Set when the body is JSON, not frames (an error answer sent with a 2xx, or a
    /// non-stream content type): collected whole and classified at the end.
    json: Option<Vec<u8>>,
    /// Whether any body byte arrived.
    started: bool,
}

impl StreamTranscoder {
    pub(crate) fn new(model: &str, opts: AnswerOpts) -> Self {
        let mut writer = ChunkWriter::new(&opts);
        // ConverseStream does not report the model: it is the one in the path.
        writer.set_model(model);
        Self { decoder: FrameDecoder::new(), writer, tools: HashMap::new(), json: None, started: false }
    }

    fn frame(&mut self, frame: Frame, out: &mut Vec<Out>) {
        let v: Value = serde_json::from_slice(&frame.payload).unwrap_or(Value::Null);
        match frame.message_type {
            MessageType::Event => self.event(&frame.name, &v, out),
            MessageType::Exception => {
                let message = v["message"].as_str().unwrap_or("").to_owned();
                self.writer.error(classify_named(200, &frame.name, message), out);
            }
            MessageType::Error => {
                let message = frame.error_message.unwrap_or_default();
                self.writer.error(classify_named(200, &frame.name, message), out);
            }
        }
    }

    fn event(&mut self, name: &str, v: &Value, out: &mut Vec<Out>) {
        if v.is_null() {
            return self.writer.error(UpstreamError::malformed(200, format!("a {name} event is not JSON")), out);
        }
        match name {
            "contentBlockStart" => {
                let tool = &v["start"]["toolUse"];
                if tool.is_object() {
                    let index =
                        self.writer.tool_start(tool["toolUseId"].as_str(), tool["name"].as_str().unwrap_or(""), out);
                    self.tools.insert(v["contentBlockIndex"].as_u64().unwrap_or(0), index);
                }
            }
            "contentBlockDelta" => {
                let delta = &v["delta"];
                if let Some(text) = delta["text"].as_str() {
                    self.writer.text(text, out);
                } else if let Some(input) = delta["toolUse"]["input"].as_str()
                    && let Some(&index) = v["contentBlockIndex"].as_u64().and_then(|b| self.tools.get(&b))
                {
                    self.writer.tool_args(index, input, out);
                }
                // Reasoning deltas have no OpenAI chat equivalent.
            }
            "messageStop" => {
                let reason = v["stopReason"].as_str().map_or(FinishReason::Stop, finish_reason);
                self.writer.finish(reason, out);
            }
            // Without a messageStop first, the writer finishes with a plain stop.
            "metadata" => self.writer.usage_and_done(&usage(&v["usage"]), out),
            // messageStart (the role goes with the first content), contentBlockStop and
            // future events carry nothing to forward.
            _ => {}
        }
    }
}

impl Transcoder for StreamTranscoder {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Out> {
        let mut out = Vec::new();
        if self.writer.is_done() {
            return out;
        }
        if let Some(json) = &mut self.json {
            json.extend_from_slice(bytes);
            return out;
        }
        // A frame starts with its length, which is never 0x7b______ (2 GB): a body
        // starting with `{` is a JSON answer and must not reach the frame decoder.
        if !self.started && bytes.first() == Some(&b'{') {
            self.json = Some(bytes.to_vec());
            return out;
        }
        self.started |= !bytes.is_empty();
        self.decoder.push(bytes);
        while !self.writer.is_done() {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => self.frame(frame, &mut out),
                Ok(None) => break,
                Err(e) => self.writer.error(UpstreamError::malformed(200, e), &mut out),
            }
        }
        out
    }

    fn finish(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let Some(json) = self.json.take() {
            let v: Value = serde_json::from_slice(&json).unwrap_or(Value::Null);
            let error = if error_name(&HeaderMap::new(), &v).is_some() {
                classify(200, &HeaderMap::new(), &json, 0)
            } else {
                UpstreamError::malformed(200, "a JSON body where an event stream was expected")
            };
            self.writer.error(error, &mut out);
            return out;
        }
        if self.writer.is_done() {
            return out;
        }
        let error = match self.decoder.finish() {
            Err(e) => UpstreamError::malformed(200, e),
            Ok(()) => UpstreamError::malformed(200, "the stream ended before its metadata event"),
        };
        self.writer.error(error, &mut out);
        out
    }
}
