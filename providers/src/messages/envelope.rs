//! The native request of a Messages call: the client's body for `anthropic` (only the
//! model changed), for `vertex-anthropic` (the model in the path, the
//! `anthropic_version` member, and what Vertex refuses: docs/gateway.md, "Messages on
//! Vertex AI") and for Claude on `bedrock` (InvokeModel: the model in the path, the
//! betas in the body, and what Bedrock refuses: docs/gateway.md, "Messages on Bedrock").
//! A `count_tokens` request goes to each one's own count endpoint, in the same envelope
//! (Bedrock's CountTokens wraps the InvokeModel body).

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::anthropic::{VERTEX_VERSION, model_segment, vertex_prefix};
use crate::{NativeRequest, Protocol, Target, TranslateError};

/// The `anthropic-version` sent when neither the client nor the Upstream names one.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Betas Vertex AI accepts in `anthropic-beta`; others are left out of the header
/// there (Vertex refuses a request naming a beta it does not know).
const VERTEX_BETAS: &[&str] = &[
    "interleaved-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
];

/// Members Vertex AI refuses, left out there: each is a hint to the model or to
/// Anthropic's own service, never a part of the conversation.
const VERTEX_DROPS: &[&str] = &["context_management", "output_config"];

/// The `anthropic_version` of Claude on Bedrock's InvokeModel.
pub const BEDROCK_VERSION: &str = "bedrock-2023-05-31";

/// Betas Bedrock accepts (sent as the body's `anthropic_beta` list there); others are
/// left out, as on Vertex.
const BEDROCK_BETAS: &[&str] = &[
    "interleaved-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
    "output-128k-2025-02-19",
    "computer-use-2025-01-24",
];

/// Members Bedrock refuses (its InvokeModel names the model in the path and the stream
/// by the operation), left out there, with the hints Vertex refuses too.
const BEDROCK_DROPS: &[&str] = &["model", "stream", "anthropic_version", "context_management", "output_config"];

/// A JSON object's members in their order, each value as the client wrote it.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    out.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Members<'_> {
    fn get(&self, name: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// The object, members in order, values as they came.
    fn write(&self, extra: &[(&str, String)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 64);
        out.push(b'{');
        let mut first = true;
        let members =
            self.0.iter().map(|(k, v)| (k.as_ref(), v.get())).chain(extra.iter().map(|(k, v)| (*k, v.as_str())));
        for (k, v) in members {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.extend_from_slice(serde_json::Value::String(k.to_owned()).to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
        }
        out.push(b'}');
        out
    }
}

fn invalid_body(e: impl fmt::Display) -> TranslateError {
    TranslateError::invalid("body", e.to_string())
}

/// The native request for a Messages body sent to an `anthropic`, `vertex-anthropic` or
/// Claude-on-`bedrock` target; with `count_tokens`, the request that counts the body's
/// input tokens instead: Anthropic's `POST /v1/messages/count_tokens`, Vertex AI's
/// `count-tokens:rawPredict` (the model in the body) or Bedrock's CountTokens (the
/// InvokeModel body, base64, in its `input.invokeModel.body`), each answering
/// `{"input_tokens": N}` but Bedrock (`{"inputTokens": N}`, see
/// [`super::token_count_of_bedrock`]). `headers` are the client's `anthropic-*` headers:
/// to `anthropic` they go as they came ([`NativeRequest::client_headers`]; the envelope
/// adds `anthropic-version` only when the client sent none), to Vertex only the betas it
/// accepts. For `anthropic` the body is sent as given: the caller has spliced the
/// candidate's model into the client's bytes.
pub fn native(
    target: &Target<'_>,
    body: &Bytes,
    headers: &[(HeaderName, HeaderValue)],
    stream: bool,
    count_tokens: bool,
) -> Result<NativeRequest, TranslateError> {
    match target.protocol {
        Protocol::Anthropic => {
            // The client's headers go as they came; the version only when it sent none.
            const VERSION: HeaderName = HeaderName::from_static("anthropic-version");
            let own = if headers.iter().any(|(n, _)| *n == VERSION) {
                Vec::new()
            } else {
                let version = target.anthropic_version.and_then(|v| HeaderValue::from_str(v).ok());
                vec![(VERSION, version.unwrap_or_else(|| HeaderValue::from_static(ANTHROPIC_VERSION)))]
            };
            let path = if count_tokens { "/messages/count_tokens" } else { "/messages" };
            Ok(NativeRequest { path: path.into(), body: body.clone(), headers: own, client_headers: true })
        }
        Protocol::VertexAnthropic => vertex(target, body, headers, stream, count_tokens),
        Protocol::Bedrock => bedrock(target, body, headers, stream, count_tokens),
        other => Err(TranslateError::unsupported(
            "protocol",
            format!("{} does not speak the Messages API natively", other.as_str()),
        )),
    }
}

fn vertex(
    target: &Target<'_>,
    body: &[u8],
    headers: &[(HeaderName, HeaderValue)],
    stream: bool,
    count_tokens: bool,
) -> Result<NativeRequest, TranslateError> {
    let drops = |k: &str| matches!(k, "model" | "anthropic_version") || VERTEX_DROPS.contains(&k);
    let mut extra = vec![("anthropic_version", format!("\"{VERTEX_VERSION}\""))];
    if count_tokens {
        // The count endpoint's path names no model: the body does.
        extra.insert(0, ("model", serde_json::Value::from(target.model).to_string()));
    }
    let body = rebuilt(body, drops, &mut extra)?;
    let mut out = Vec::new();
    for (name, value) in headers {
        match name.as_str() {
            "anthropic-version" => {}
            "anthropic-beta" => {
                let betas = accepted_betas(value, VERTEX_BETAS);
                if let (false, Ok(v)) = (betas.is_empty(), HeaderValue::from_str(&betas.join(","))) {
                    out.push((name.clone(), v));
                }
            }
            _ => out.push((name.clone(), value.clone())),
        }
    }
    // Counting names the model in the body and is never streamed.
    let model = if count_tokens { "count-tokens".to_owned() } else { model_segment(target.model) };
    let verb = if stream && !count_tokens { "streamRawPredict" } else { "rawPredict" };
    let path = format!("{}/publishers/anthropic/models/{model}:{verb}", vertex_prefix(target)?);
    Ok(NativeRequest { path: path.into(), body: Bytes::from(body), headers: out, client_headers: false })
}

/// Claude on Bedrock (InvokeModel): the model in the path, the operation naming the
/// stream, `anthropic_version` in the body and the client's accepted betas as its
/// `anthropic_beta` list; no `anthropic-*` header is sent. CountTokens is sent the same
/// InvokeModel body (with the `max_tokens` InvokeModel requires, which a count request
/// has none of), for the foundation model the candidate's id names.
fn bedrock(
    target: &Target<'_>,
    body: &[u8],
    headers: &[(HeaderName, HeaderValue)],
    stream: bool,
    count_tokens: bool,
) -> Result<NativeRequest, TranslateError> {
    reject_server_tools(body)?;
    let mut extra = vec![("anthropic_version", format!("\"{BEDROCK_VERSION}\""))];
    let betas: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n.as_str() == "anthropic-beta")
        .flat_map(|(_, v)| accepted_betas(v, BEDROCK_BETAS))
        .collect();
    if !betas.is_empty() {
        extra.push(("anthropic_beta", serde_json::Value::from(betas).to_string()));
    }
    if count_tokens && let Some(bound) = output_bound(body)? {
        extra.push(("max_tokens", bound.to_string()));
    }
    let body = rebuilt(body, |k| BEDROCK_DROPS.contains(&k) || k == "anthropic_beta", &mut extra)?;
    if count_tokens {
        let path =
            format!("/model/{}/count-tokens", crate::encode_segment(super::bedrock::counted_model(target.model)));
        let body = super::bedrock::count_tokens_input(&body);
        return Ok(NativeRequest { path: path.into(), body, headers: Vec::new(), client_headers: false });
    }
    let verb = if stream { "invoke-with-response-stream" } else { "invoke" };
    let path = format!("/model/{}/{verb}", crate::encode_segment(target.model));
    Ok(NativeRequest { path: path.into(), body: Bytes::from(body), headers: Vec::new(), client_headers: false })
}

/// Refuses a body with a server tool (web search, web fetch, code execution) or a
/// record of one's use: they run at Anthropic (and Vertex AI), and Bedrock refuses them
/// (docs/gateway.md, "Messages on Bedrock"). The candidate is passed over.
fn reject_server_tools(body: &[u8]) -> Result<(), TranslateError> {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default)]
        tools: Option<Vec<Typed>>,
        #[serde(default)]
        messages: Option<Vec<Message>>,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        #[serde(default)]
        content: Option<Content>,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Content {
        Blocks(Vec<Typed>),
        Other(de::IgnoredAny),
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type", default)]
        kind: Option<String>,
    }
    // Most bodies name no server tool anywhere: not parsed for it.
    let named = |needle: &str| body.windows(needle.len()).any(|w| w == needle.as_bytes());
    if !["\"web_search_", "\"web_fetch_", "\"code_execution_", "\"server_tool_use\""].into_iter().any(named) {
        return Ok(());
    }
    let b: Body = serde_json::from_slice(body).map_err(invalid_body)?;
    let lacks =
        |kind: &str| format!("Claude on Bedrock has no server tools: {kind:?} runs at Anthropic and on Vertex AI");
    for (i, t) in b.tools.iter().flatten().enumerate() {
        if let Some(kind) = t.kind.as_deref().filter(|k| super::chat::is_server_tool(k)) {
            return Err(TranslateError::unsupported(format!("tools[{i}]"), lacks(kind)));
        }
    }
    for (i, m) in b.messages.iter().flatten().enumerate() {
        let Some(Content::Blocks(blocks)) = &m.content else { continue };
        for (j, block) in blocks.iter().enumerate() {
            if let Some(kind) = block.kind.as_deref().filter(|k| super::chat::is_server_block(k)) {
                return Err(TranslateError::unsupported(format!("messages[{i}].content[{j}]"), lacks(kind)));
            }
        }
    }
    Ok(())
}

/// The `max_tokens` a body without one is given where the API requires it but nothing
/// is generated (Bedrock's CountTokens): more than the thinking budget, which
/// InvokeModel checks it against, or 1; `None` when the body has its own.
fn output_bound(body: &[u8]) -> Result<Option<u64>, TranslateError> {
    #[derive(serde::Deserialize)]
    struct Bounds {
        max_tokens: Option<de::IgnoredAny>,
        thinking: Option<serde_json::Value>,
    }
    let b: Bounds = serde_json::from_slice(body).map_err(invalid_body)?;
    let budget = b.thinking.as_ref().and_then(|t| t.get("budget_tokens")).and_then(serde_json::Value::as_u64);
    Ok(b.max_tokens.is_none().then(|| budget.map_or(1, |n| n.saturating_add(1))))
}

/// The betas of an `anthropic-beta` header that are in `accepted`.
fn accepted_betas<'a>(value: &'a HeaderValue, accepted: &[&str]) -> Vec<&'a str> {
    value.to_str().unwrap_or("").split(',').map(str::trim).filter(|b| accepted.contains(b)).collect()
}

/// The body without the members `drops` names, with `extra` members added: a system
/// message inside `messages` (Claude Code sends one, which Vertex and Bedrock refuse)
/// has its blocks join the top-level `system`, after the ones there.
fn rebuilt(
    body: &[u8],
    drops: impl Fn(&str) -> bool,
    extra: &mut Vec<(&str, String)>,
) -> Result<Vec<u8>, TranslateError> {
    let members: Members<'_> = serde_json::from_slice(body).map_err(invalid_body)?;
    let mut kept = Members(members.0.iter().filter(|(k, _)| !drops(k.as_ref())).cloned().collect());
    if let Some(messages) = members.get("messages") {
        let (system, rest) = split_system(messages)?;
        if !system.is_empty() {
            kept.0.retain(|(k, _)| !matches!(k.as_ref(), "messages" | "system"));
            let mut blocks = match members.get("system") {
                None => Vec::new(),
                Some(s) => system_blocks(s, "system")?,
            };
            blocks.extend(system);
            extra.push(("system", format!("[{}]", blocks.join(","))));
            extra.push(("messages", format!("[{}]", rest.join(","))));
        }
    }
    Ok(kept.write(extra))
}

/// The raw messages of a `messages` array: the content blocks of its `system` entries
/// and the other entries, each as it came.
fn split_system(messages: &RawValue) -> Result<(Vec<String>, Vec<String>), TranslateError> {
    let list: Vec<&RawValue> = serde_json::from_str(messages.get()).map_err(invalid_body)?;
    let (mut system, mut rest) = (Vec::new(), Vec::new());
    for (i, m) in list.into_iter().enumerate() {
        let members: Members<'_> = serde_json::from_str(m.get()).map_err(invalid_body)?;
        let role = members.get("role").map(RawValue::get);
        if role == Some("\"system\"") {
            let content = members
                .get("content")
                .ok_or_else(|| TranslateError::invalid(format!("messages[{i}].content"), "required"))?;
            system.extend(system_blocks(content, &format!("messages[{i}].content"))?);
        } else {
            rest.push(m.get().to_owned());
        }
    }
    Ok((system, rest))
}

/// A system value (a string or text blocks) as raw text blocks.
fn system_blocks(value: &RawValue, field: &str) -> Result<Vec<String>, TranslateError> {
    let text = value.get().trim_start();
    if text.starts_with('"') {
        return Ok(vec![format!("{{\"type\":\"text\",\"text\":{}}}", value.get())]);
    }
    let blocks: Vec<&RawValue> =
        serde_json::from_str(text).map_err(|_| TranslateError::invalid(field, "must be a string or content blocks"))?;
    Ok(blocks.into_iter().map(|b| b.get().to_owned()).collect())
}
