//! Writes the OpenAI `chat.completion.chunk` SSE events every transcoder emits, so the
//! streaming contract of docs/design.md §9 is implemented once: tool-call indexes are
//! a per-response counter, a call's first delta carries id, type, name and `""`
//! arguments, a call without arguments ends with `"{}"`, and the stream always ends
//! with the usage chunk and `[DONE]`.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::{AnswerOpts, Out, UpstreamError, Usage};

/// OpenAI's finish reasons; transcoders map every native reason onto one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
        }
    }

    /// The reason an answer that called a tool finishes with: providers that say only
    /// "stop" (Gemini `STOP`, Anthropic `end_turn`) mean `tool_calls` to OpenAI clients.
    pub fn after_tool_calls(self, called: bool) -> Self {
        if called && self == Self::Stop { Self::ToolCalls } else { self }
    }
}

/// The OpenAI side of one streamed answer.
#[derive(Debug)]
pub struct ChunkWriter {
    id: String,
    created: u64,
    model: String,
    role_sent: bool,
    content: bool,
    /// Per tool call (by OpenAI index): whether any argument text was emitted.
    tool_args: Vec<bool>,
    finished: bool,
    done: bool,
}

impl ChunkWriter {
    pub fn new(opts: &AnswerOpts) -> Self {
        Self {
            id: opts.id.clone(),
            created: opts.created,
            model: String::new(),
            role_sent: false,
            content: false,
            tool_args: Vec::new(),
            finished: false,
            done: false,
        }
    }

    /// Uses the upstream's response id instead of the generated one.
    pub fn set_id(&mut self, id: &str) {
        if !id.is_empty() {
            self.id = id.to_owned();
        }
    }

    /// The model as the upstream reports it.
    pub fn set_model(&mut self, model: &str) {
        model.clone_into(&mut self.model);
    }

    /// Whether a text or tool-call chunk was emitted (the stream has committed).
    pub fn content_emitted(&self) -> bool {
        self.content
    }

    /// Whether the usage chunk and `[DONE]` were emitted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// How many tool calls were started.
    pub fn tool_calls(&self) -> usize {
        self.tool_args.len()
    }

    /// A text delta; empty text emits nothing.
    pub fn text(&mut self, text: &str, out: &mut Vec<Out>) {
        if text.is_empty() {
            return;
        }
        let delta = json!({ "content": text });
        out.push(self.delta(delta, None, true));
    }

    /// Annotations of the text written so far (chat's `url_citation`s of a searched
    /// answer), in a delta of their own; none emits nothing.
    pub fn annotations(&mut self, annotations: Vec<Value>, out: &mut Vec<Out>) {
        if annotations.is_empty() {
            return;
        }
        let delta = json!({ "annotations": annotations });
        out.push(self.delta(delta, None, false));
    }

    /// Starts a tool call and returns its OpenAI index. `id` is generated, unique per
    /// response, when the provider gives none (Gemini).
    pub fn tool_start(&mut self, id: Option<&str>, name: &str, out: &mut Vec<Out>) -> usize {
        self.tool_start_extra(id, name, None, out)
    }

    /// [`Self::tool_start`] with vendor fields merged into the call object, e.g.
    /// `{"extra_content": {"google": {"thought_signature": …}}}`: the convention of
    /// Google's own OpenAI endpoint, which clients echo back in the next turn.
    pub fn tool_start_extra(
        &mut self,
        id: Option<&str>,
        name: &str,
        extra: Option<&Value>,
        out: &mut Vec<Out>,
    ) -> usize {
        let index = self.tool_args.len();
        self.tool_args.push(false);
        let id = match id {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => format!("call_{}_{index}", self.id),
        };
        let mut call = json!({
            "index": index, "id": id, "type": "function",
            "function": { "name": name, "arguments": "" }
        });
        if let (Some(Value::Object(extra)), Some(call)) = (extra, call.as_object_mut()) {
            call.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let delta = json!({ "tool_calls": [call] });
        out.push(self.delta(delta, None, true));
        index
    }

    /// An argument fragment of the call at `index`; empty fragments emit nothing.
    pub fn tool_args(&mut self, index: usize, args: &str, out: &mut Vec<Out>) {
        if args.is_empty() {
            return;
        }
        if let Some(seen) = self.tool_args.get_mut(index) {
            *seen = true;
        }
        let delta = json!({ "tool_calls": [{ "index": index, "function": { "arguments": args } }] });
        out.push(self.delta(delta, None, true));
    }

    /// Ends the call at `index`: a call that got no argument text gets `"{}"`, so
    /// every call's arguments parse as JSON.
    pub fn tool_end(&mut self, index: usize, out: &mut Vec<Out>) {
        if self.tool_args.get(index) == Some(&false) {
            self.tool_args(index, "{}", out);
        }
    }

    /// The finish chunk, once, after ending every call still open; a plain stop after
    /// tool calls is `tool_calls` ([`FinishReason::after_tool_calls`]).
    pub fn finish(&mut self, reason: FinishReason, out: &mut Vec<Out>) {
        if self.finished {
            return;
        }
        self.finished = true;
        for index in 0..self.tool_args.len() {
            self.tool_end(index, out);
        }
        let reason = reason.after_tool_calls(self.tool_calls() > 0);
        out.push(self.delta(json!({}), Some(reason), false));
    }

    /// The usage chunk (`choices: []`), `data: [DONE]` and [`Out::Done`], once; a plain
    /// stop's finish chunk first if none was written.
    pub fn usage_and_done(&mut self, usage: &Usage, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        self.finish(FinishReason::Stop, out);
        self.done = true;
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": [], "usage": usage.to_openai(),
        });
        out.push(Out::Event { bytes: sse(&chunk), content: false });
        out.push(Out::Event { bytes: Bytes::from_static(b"data: [DONE]\n\n"), content: false });
        out.push(Out::Done);
    }

    /// An error: before content the attempt may still fail over, after it the stream
    /// ends. Nothing is written after it, as after `[DONE]`.
    pub fn error(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        self.done = true;
        out.push(Out::Error { error, before_content: !self.content });
    }

    fn delta(&mut self, mut delta: Value, finish: Option<FinishReason>, content: bool) -> Out {
        if !self.role_sent {
            self.role_sent = true;
            delta["role"] = json!("assistant");
        }
        self.content |= content;
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish.map(FinishReason::as_str) }],
        });
        Out::Event { bytes: sse(&chunk), content }
    }
}

/// `data: {chunk}\n\n`, written with `to_writer` (`format!` would go through
/// `fmt::Display`, a few times slower). A `Value` always serialises.
fn sse(chunk: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut out, chunk);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}
