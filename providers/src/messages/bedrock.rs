//! Claude on Bedrock's InvokeModel as a Messages candidate (docs/gateway.md, "Messages on
//! Bedrock"): which Bedrock models speak Messages, and the relay of
//! InvokeModelWithResponseStream, whose `chunk` event frames each carry one Messages
//! event as base64 JSON (`{"bytes": "…"}`). The events pass on as from Anthropic (their
//! data byte for byte); an exception frame ends the stream in the error it names.
//! CountTokens counts an InvokeModel body: [`count_tokens_input`] wraps it, and
//! [`token_count_of_bedrock`] turns the answer into Anthropic's.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Value, json};

use crate::eventstream::{FrameDecoder, MessageType};
use crate::sse::{NamedRelay, SseEvents};
use crate::{Out, Transcoder, UpstreamError};

/// Whether a Bedrock model id names Claude (`anthropic.claude-…`, a cross-region
/// profile such as `us.anthropic.claude-…`, or an ARN holding one): those speak the
/// Messages API through InvokeModel. Others (and application inference profiles, whose
/// ARNs do not say) are sent a translation through Converse.
pub fn is_claude_on_bedrock(model: &str) -> bool {
    model.contains("anthropic.claude")
}

/// The model whose tokens CountTokens counts for a candidate's Claude `model`. It
/// takes foundation-model ids only (it refuses a cross-region inference profile with
/// "The provided model doesn't support counting tokens"), so a profile
/// (`us.anthropic.claude-…`, or an ARN ending in one or in a foundation model) is
/// counted by the foundation model it names: the same tokenizer, the same count. Any
/// other id is left as it is.
pub(crate) fn counted_model(model: &str) -> &str {
    let id = model.rsplit('/').next().unwrap_or(model);
    id.find("anthropic.claude").and_then(|at| id.get(at..)).unwrap_or(model)
}

/// The CountTokens body for an InvokeModel `body`: `{"input":{"invokeModel":{"body":
/// "<base64>"}}}`.
pub(crate) fn count_tokens_input(body: &[u8]) -> Bytes {
    let input = json!({"input": {"invokeModel": {"body": B64.encode(body)}}});
    Bytes::from(input.to_string())
}

/// Bedrock's CountTokens answer (`{"inputTokens": N}`) as Anthropic's count
/// (`{"input_tokens": N}`); an answer without the count is malformed.
pub fn token_count_of_bedrock(body: &[u8]) -> Result<Bytes, UpstreamError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| UpstreamError::malformed(200, e))?;
    let n = v
        .get("inputTokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| UpstreamError::malformed(200, "CountTokens answered without `inputTokens`"))?;
    Ok(Bytes::from(json!({"input_tokens": n}).to_string()))
}

/// The transcoder of a Bedrock InvokeModelWithResponseStream body of Messages events.
pub fn bedrock_relay() -> Box<dyn Transcoder + Send> {
    Box::new(BedrockRelay {
        decoder: FrameDecoder::new(),
        relay: NamedRelay::new(super::events()),
        json: None,
        started: false,
    })
}

struct BedrockRelay {
    decoder: FrameDecoder,
    relay: NamedRelay,
    /// Set when the body is JSON, not frames (an error sent with a 2xx): collected
    /// whole and classified at the end.
    json: Option<Vec<u8>>,
    /// Whether any body byte arrived.
    started: bool,
}

impl BedrockRelay {
    fn frame(&mut self, frame: crate::eventstream::Frame, out: &mut Vec<Out>) {
        let payload: Value = serde_json::from_slice(&frame.payload).unwrap_or(Value::Null);
        match frame.message_type {
            MessageType::Event if frame.name == "chunk" => {
                let event =
                    payload["bytes"].as_str().and_then(|b| B64.decode(b).ok()).and_then(|b| String::from_utf8(b).ok());
                match event {
                    Some(data) => self.relay.event(&data, out),
                    None => self.relay.fail(UpstreamError::malformed(200, "a chunk frame without base64 bytes"), out),
                }
            }
            // Bedrock sends no other event; one it may add later carries no Messages event.
            MessageType::Event => {}
            MessageType::Exception => {
                let message = payload["message"].as_str().unwrap_or("").to_owned();
                self.relay.fail(crate::bedrock::classify_named(200, &frame.name, message), out);
            }
            MessageType::Error => {
                let message = frame.error_message.unwrap_or_default();
                self.relay.fail(crate::bedrock::classify_named(200, &frame.name, message), out);
            }
        }
    }
}

impl Transcoder for BedrockRelay {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Out> {
        let mut out = Vec::new();
        if let Some(json) = &mut self.json {
            json.extend_from_slice(bytes);
            return out;
        }
        // A frame starts with its length, never 0x7b______ (2 GB): a body starting with
        // `{` is a JSON answer and must not reach the frame decoder.
        if !self.started && bytes.first() == Some(&b'{') {
            self.json = Some(bytes.to_vec());
            return out;
        }
        self.started |= !bytes.is_empty();
        self.decoder.push(bytes);
        while !self.relay.done {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => self.frame(frame, &mut out),
                Ok(None) => break,
                Err(e) => self.relay.fail(UpstreamError::malformed(200, e), &mut out),
            }
        }
        out
    }

    fn finish(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let Some(json) = self.json.take() {
            self.relay.fail(crate::bedrock::classify(200, &HeaderMap::new(), &json, 0), &mut out);
            return out;
        }
        if !self.relay.done
            && let Err(e) = self.decoder.finish()
        {
            self.relay.fail(UpstreamError::malformed(200, e), &mut out);
            return out;
        }
        self.relay.end(&mut out);
        out
    }
}
