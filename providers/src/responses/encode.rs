//! An OpenAI chat answer as a Responses answer: the chunks of a stream as the
//! Responses events ([`from_chat`]), a whole `chat.completion` as a `response`
//! ([`response_of_completion`]).

use bytes::Bytes;
use serde_json::{Value, json};

use crate::messages::event;
use crate::sse::{SseEvents, SseTranscoder};
use crate::{Out, Transcoder, UpstreamError, Usage};

/// What names a response: its id (`resp_…`), the model when the answer does not name
/// one, and its creation time (Unix seconds).
#[derive(Clone, Debug)]
pub struct ResponseIds {
    /// `resp_…`; its items are `msg_…` and `fc_…` with the same suffix.
    pub id: String,
    /// The route's model.
    pub model: String,
    /// `created_at`.
    pub created: u64,
    /// The request's tool namespaces ([`crate::Translated::namespaces`]): a call to
    /// `{namespace}__{name}` is answered as `name` in `namespace`.
    pub namespaces: Vec<String>,
}

impl ResponseIds {
    /// A chat function name split into its namespace and the tool's name.
    fn split<'a>(&'a self, function: &'a str) -> (Option<&'a str>, &'a str) {
        for ns in &self.namespaces {
            if let Some(name) =
                function.strip_prefix(ns.as_str()).and_then(|rest| rest.strip_prefix(super::chat::NAMESPACE_SEPARATOR))
            {
                return (Some(ns), name);
            }
        }
        (None, function)
    }

    /// A `function_call` item.
    fn call_item(&self, id: &str, call_id: &str, function: &str, arguments: &str, status: &str) -> Value {
        let (namespace, name) = self.split(function);
        let mut item = json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments});
        if let Some(ns) = namespace {
            item["namespace"] = json!(ns);
        }
        item
    }
    fn item_id(&self, prefix: &str, n: usize) -> String {
        let suffix = self.id.strip_prefix("resp_").unwrap_or(&self.id);
        if n == 0 { format!("{prefix}_{suffix}") } else { format!("{prefix}_{suffix}_{n}") }
    }

    /// The `response` object; `output` and `usage` as far as known.
    fn response(&self, model: Option<&str>, status: &str, output: Vec<Value>, usage: Option<&Usage>) -> Value {
        let incomplete = match status {
            "incomplete" => json!({"reason": "max_output_tokens"}),
            _ => Value::Null,
        };
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": null, "incomplete_details": incomplete, "instructions": null, "max_output_tokens": null,
            "model": model.filter(|m| !m.is_empty()).unwrap_or(&self.model),
            "output": output, "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null}, "store": false, "temperature": null,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": null,
            "truncation": "disabled", "usage": usage.map(responses_usage), "user": null, "metadata": {},
        })
    }
}

/// Responses' `usage`: `input_tokens` includes the cached tokens. A translated
/// candidate's web searches (Anthropic's) are not `web_search_call` items, whose query
/// and sources the translation does not have: they are counted as Anthropic counts them,
/// `server_tool_use.web_search_requests` (only when there are some).
fn responses_usage(u: &Usage) -> Value {
    let mut usage = json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    });
    if u.web_searches > 0 {
        usage["server_tool_use"] = json!({"web_search_requests": u.web_searches});
    }
    usage
}

/// The response `status` for an OpenAI `finish_reason`: cut by the token limit, it is
/// incomplete.
fn status_of(finish: &str) -> &'static str {
    if finish == "length" { "incomplete" } else { "completed" }
}

fn message_item(id: &str, text: &str, annotations: &[Value], status: &str) -> Value {
    json!({
        "id": id, "type": "message", "status": status, "role": "assistant",
        "content": if status == "in_progress" { json!([]) } else { json!([text_part(text, annotations)]) },
    })
}

fn text_part(text: &str, annotations: &[Value]) -> Value {
    json!({"type": "output_text", "text": text, "annotations": annotations, "logprobs": []})
}

/// Chat's annotations (`{"type": "url_citation", "url_citation": {…}}`) as Responses
/// has them (`{"type": "url_citation", "start_index", "end_index", "url", "title"}`).
fn annotations_of(chat: &Value) -> impl Iterator<Item = Value> + '_ {
    chat.as_array().into_iter().flatten().filter(|a| a["type"] == "url_citation").map(|a| {
        let mut flat = json!({"type": "url_citation"});
        if let (Value::Object(flat), Some(Value::Object(c))) = (&mut flat, a.get("url_citation")) {
            flat.extend(c.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        flat
    })
}

/// A whole OpenAI `chat.completion` as a Responses `response`, and its usage.
pub fn response_of_completion(body: &[u8], ids: &ResponseIds) -> Result<(Bytes, Usage), UpstreamError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| UpstreamError::malformed(200, e))?;
    let choice = &v["choices"][0];
    let message = &choice["message"];
    let mut output = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        let annotations: Vec<Value> = annotations_of(&message["annotations"]).collect();
        output.push(message_item(&ids.item_id("msg", 0), text, &annotations, "completed"));
    }
    for (k, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let f = &call["function"];
        output.push(ids.call_item(
            &ids.item_id("fc", k),
            call["id"].as_str().unwrap_or(""),
            f["name"].as_str().unwrap_or(""),
            f["arguments"].as_str().unwrap_or(""),
            "completed",
        ));
    }
    let usage = Usage::of_openai_json(&v["usage"]);
    let status = status_of(choice["finish_reason"].as_str().unwrap_or("stop"));
    let answer = ids.response(v["model"].as_str(), status, output, Some(&usage));
    Ok((Bytes::from(answer.to_string()), usage))
}

/// A transcoder from an OpenAI chunk stream (as every candidate's attempt produces
/// it) to the Responses events: `response.created` and `response.in_progress`, an
/// output item for the text and one per tool call (added, deltas, done), then
/// `response.completed` (or `response.incomplete`) with the whole output and the usage.
pub fn from_chat(ids: ResponseIds) -> Box<dyn Transcoder + Send> {
    Box::new(SseTranscoder::new(FromChat {
        ids,
        model: None,
        seq: 0,
        started: false,
        items: Vec::new(),
        message: None,
        calls: Vec::new(),
        finish: None,
        usage: None,
        content: false,
        done: false,
    }))
}

/// An output item being streamed.
enum Item {
    Message { id: String, text: String, annotations: Vec<Value> },
    Call { id: String, call_id: String, name: String, arguments: String },
}

impl Item {
    fn json(&self, ids: &ResponseIds, status: &str) -> Value {
        match self {
            Item::Message { id, text, annotations } => message_item(id, text, annotations, status),
            Item::Call { id, call_id, name, arguments } => ids.call_item(id, call_id, name, arguments, status),
        }
    }
}

struct FromChat {
    ids: ResponseIds,
    /// The model the upstream named.
    model: Option<String>,
    seq: u64,
    started: bool,
    /// Output items in output order; items stay open until the answer ends.
    items: Vec<Item>,
    /// The message item's output index.
    message: Option<usize>,
    /// OpenAI tool-call index → output index.
    calls: Vec<(u64, usize)>,
    finish: Option<String>,
    usage: Option<Usage>,
    content: bool,
    done: bool,
}

impl FromChat {
    fn emit(&mut self, out: &mut Vec<Out>, kind: &str, mut data: Value, content: bool) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push(Out::Event { bytes: event(kind, &data.to_string()), content });
    }

    fn response(&self, status: &str, usage: Option<&Usage>) -> Value {
        let output = if status == "in_progress" {
            Vec::new()
        } else {
            self.items.iter().map(|i| i.json(&self.ids, "completed")).collect()
        };
        self.ids.response(self.model.as_deref(), status, output, usage)
    }

    fn start(&mut self, out: &mut Vec<Out>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let response = self.response("in_progress", None);
        self.emit(out, "response.created", json!({"response": response}), false);
        self.emit(out, "response.in_progress", json!({"response": response}), false);
    }

    fn add(&mut self, item: Item, out: &mut Vec<Out>) -> usize {
        let index = self.items.len();
        let added = item.json(&self.ids, "in_progress");
        self.items.push(item);
        self.emit(out, "response.output_item.added", json!({"output_index": index, "item": added}), false);
        index
    }

    fn text(&mut self, delta: &str, out: &mut Vec<Out>) {
        let index = match self.message {
            Some(i) => i,
            None => {
                let id = self.ids.item_id("msg", 0);
                let i = self.add(Item::Message { id: id.clone(), text: String::new(), annotations: Vec::new() }, out);
                let part = json!({"item_id": id, "output_index": i, "content_index": 0, "part": text_part("", &[])});
                self.emit(out, "response.content_part.added", part, false);
                self.message = Some(i);
                i
            }
        };
        let Some(Item::Message { id, text, .. }) = self.items.get_mut(index) else { return };
        text.push_str(delta);
        let data = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": []});
        self.content = true;
        self.emit(out, "response.output_text.delta", data, true);
    }

    /// An annotation of the message's text (a searched answer's source).
    fn annotation(&mut self, annotation: Value, out: &mut Vec<Out>) {
        let Some(index) = self.message else { return };
        let Some(Item::Message { id, annotations, .. }) = self.items.get_mut(index) else { return };
        let data = json!({
            "item_id": id, "output_index": index, "content_index": 0,
            "annotation_index": annotations.len(), "annotation": annotation,
        });
        annotations.push(annotation);
        self.emit(out, "response.output_text.annotation.added", data, false);
    }

    fn tool(&mut self, call: &Value, out: &mut Vec<Out>) {
        let k = call["index"].as_u64().unwrap_or(0);
        let index = match self.calls.iter().find(|(c, _)| *c == k) {
            Some(&(_, i)) => i,
            None => {
                let item = Item::Call {
                    id: self.ids.item_id("fc", self.calls.len()),
                    call_id: call["id"].as_str().unwrap_or("").to_owned(),
                    name: call["function"]["name"].as_str().unwrap_or("").to_owned(),
                    arguments: String::new(),
                };
                let i = self.add(item, out);
                self.calls.push((k, i));
                i
            }
        };
        let Some(delta) = call["function"]["arguments"].as_str().filter(|a| !a.is_empty()) else { return };
        let Some(Item::Call { id, arguments, .. }) = self.items.get_mut(index) else { return };
        arguments.push_str(delta);
        let data = json!({"item_id": id, "output_index": index, "delta": delta});
        self.content = true;
        self.emit(out, "response.function_call_arguments.delta", data, true);
    }

    /// Closes every item in output order, then the response.
    fn end_response(&mut self, out: &mut Vec<Out>) {
        self.start(out);
        let items = std::mem::take(&mut self.items);
        for (index, item) in items.iter().enumerate() {
            match item {
                Item::Message { id, text, annotations } => {
                    let at = json!({"item_id": id, "output_index": index, "content_index": 0});
                    let mut done = at.clone();
                    done["text"] = json!(text);
                    done["logprobs"] = json!([]);
                    self.emit(out, "response.output_text.done", done, false);
                    let mut part = at;
                    part["part"] = text_part(text, annotations);
                    self.emit(out, "response.content_part.done", part, false);
                }
                Item::Call { id, name, arguments, .. } => {
                    let name = self.ids.split(name).1;
                    let done = json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments});
                    self.emit(out, "response.function_call_arguments.done", done, false);
                }
            }
            let done = json!({"output_index": index, "item": item.json(&self.ids, "completed")});
            self.emit(out, "response.output_item.done", done, false);
        }
        self.items = items;
        let status = status_of(self.finish.as_deref().unwrap_or("stop"));
        let usage = self.usage.unwrap_or_default();
        let response = self.response(status, Some(&usage));
        self.emit(out, &format!("response.{status}"), json!({"response": response}), false);
        out.push(Out::Done);
        self.done = true;
    }

    fn fail(&mut self, error: UpstreamError, out: &mut Vec<Out>) {
        self.done = true;
        out.push(Out::Error { error, before_content: !self.content });
    }
}

impl SseEvents for FromChat {
    fn event(&mut self, data: &str, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        if data.trim() == "[DONE]" {
            return self.end_response(out);
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return self.fail(UpstreamError::malformed(200, "a stream event is not JSON"), out);
        };
        if let Some(e) = v.get("error") {
            return self.fail(UpstreamError::of_chunk_error(e), out);
        }
        if self.model.is_none() {
            self.model = v["model"].as_str().filter(|m| !m.is_empty()).map(str::to_owned);
        }
        self.start(out);
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(Usage::of_openai_json(u));
        }
        for choice in v["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.text(text, out);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                self.tool(call, out);
            }
            for annotation in annotations_of(&delta["annotations"]) {
                self.annotation(annotation, out);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                self.finish = Some(f.to_owned());
            }
        }
    }

    fn end(&mut self, out: &mut Vec<Out>) {
        if self.done {
            return;
        }
        if self.finish.is_some() {
            self.end_response(out);
        } else {
            self.fail(UpstreamError::malformed(200, "the stream ended before it finished"), out);
        }
    }
}
