//! The provider protocols the chaos upstream speaks (docs/design.md §9), and
//! how a request path names one.
//!
//! Written from the providers' documented URL layouts, not from the
//! gateway's translation code, so that the fake checks that code.

use serde::{Deserialize, Serialize};

/// A provider wire protocol, named as in an Upstream's `spec.protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// OpenAI's API: `/v1/chat/completions`, completions, embeddings, and
    /// the Responses API (`/v1/responses`).
    #[serde(rename = "openai")]
    OpenAi,
    /// `/openai/deployments/{deployment}/chat/completions?api-version=…`.
    #[serde(rename = "azure-openai")]
    AzureOpenAi,
    /// Anthropic Messages: `/v1/messages`.
    Anthropic,
    /// Claude on Vertex AI: `…/publishers/anthropic/models/{m}:rawPredict`.
    VertexAnthropic,
    /// Gemini on Vertex AI: `…/publishers/google/models/{m}:generateContent`.
    VertexGemini,
    /// Gemini on AI Studio: `/v1beta/models/{m}:generateContent`.
    Gemini,
    /// Bedrock: Converse (`/model/{id}/converse`, `/converse-stream`), and Claude's
    /// Messages through InvokeModel (`/invoke`, `/invoke-with-response-stream`).
    Bedrock,
}

impl Protocol {
    /// Every protocol, in counter order.
    pub const ALL: [Protocol; 7] = [
        Protocol::OpenAi,
        Protocol::AzureOpenAi,
        Protocol::Anthropic,
        Protocol::VertexAnthropic,
        Protocol::VertexGemini,
        Protocol::Gemini,
        Protocol::Bedrock,
    ];

    /// The `spec.protocol` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::AzureOpenAi => "azure-openai",
            Protocol::Anthropic => "anthropic",
            Protocol::VertexAnthropic => "vertex-anthropic",
            Protocol::VertexGemini => "vertex-gemini",
            Protocol::Gemini => "gemini",
            Protocol::Bedrock => "bedrock",
        }
    }

    /// Position in [`Protocol::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The native wire family that renders answers for this protocol (its
    /// chat paths; `/v1/responses` is [`Family::Responses`] on `openai`).
    pub(crate) fn family(self) -> Family {
        match self {
            Protocol::OpenAi | Protocol::AzureOpenAi => Family::OpenAi,
            Protocol::Anthropic | Protocol::VertexAnthropic => Family::Anthropic,
            Protocol::VertexGemini | Protocol::Gemini => Family::Gemini,
            Protocol::Bedrock => Family::Bedrock,
        }
    }
}

/// Protocols that share one body format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    OpenAi,
    /// OpenAI's Responses API: a second body format of the `openai` protocol,
    /// chosen by its path.
    Responses,
    Anthropic,
    Gemini,
    Bedrock,
    /// Claude's Messages on Bedrock's InvokeModel: an Anthropic body (with Bedrock's
    /// `anthropic_version`, the model in the path) answered as a message, or as its
    /// events, each in an event-stream `chunk` frame.
    BedrockMessages,
}

/// One native inference call, as named by its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    /// The protocol counted and whose credentials are checked.
    pub(crate) protocol: Protocol,
    /// The body format: the protocol's, or [`Family::Responses`] on `/v1/responses`.
    pub(crate) family: Family,
    /// The model from the path (Vertex, Gemini, Bedrock; percent-decoded) or
    /// `None` when the body names it (Anthropic, Responses).
    pub(crate) model: Option<String>,
    /// The path selects streaming (`:streamRawPredict`, `converse-stream`, …).
    pub(crate) stream: bool,
    /// The call counts tokens rather than answering (Anthropic's
    /// `/v1/messages/count_tokens`, Vertex's `count-tokens:rawPredict`, Bedrock's
    /// `count-tokens`).
    pub(crate) count_tokens: bool,
}

impl Call {
    /// A call in `protocol`'s own body format.
    pub(crate) fn new(protocol: Protocol, model: Option<String>, stream: bool) -> Self {
        Self { protocol, family: protocol.family(), model, stream, count_tokens: false }
    }
}

/// Why a path names no call: the provider's own "no such operation".
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NoCall;

/// `/v1/projects/{p}/locations/{l}/publishers/{anthropic|google}/models/{m}:{method}`
/// (the `/v1` already stripped by the route); Claude's token count is the model
/// `count-tokens` with `rawPredict` (its body names the model).
pub(crate) fn vertex(rest: &str) -> Result<Call, NoCall> {
    let parts: Vec<&str> = rest.split('/').collect();
    let ["projects", project, "locations", location, "publishers", publisher, "models", tail] = parts[..] else {
        return Err(NoCall);
    };
    if project.is_empty() || location.is_empty() {
        return Err(NoCall);
    }
    let (model, method) = tail.rsplit_once(':').ok_or(NoCall)?;
    if (publisher, model) == ("anthropic", "count-tokens") {
        return match method {
            "rawPredict" => Ok(Call { count_tokens: true, ..Call::new(Protocol::VertexAnthropic, None, false) }),
            _ => Err(NoCall),
        };
    }
    let (protocol, stream) = match (publisher, method) {
        ("anthropic", "rawPredict") => (Protocol::VertexAnthropic, false),
        ("anthropic", "streamRawPredict") => (Protocol::VertexAnthropic, true),
        ("google", "generateContent") => (Protocol::VertexGemini, false),
        ("google", "streamGenerateContent") => (Protocol::VertexGemini, true),
        _ => return Err(NoCall),
    };
    named(protocol, model, stream)
}

/// `/v1beta/models/{m}:generateContent|:streamGenerateContent`.
pub(crate) fn gemini(tail: &str) -> Result<Call, NoCall> {
    let (model, method) = tail.rsplit_once(':').ok_or(NoCall)?;
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return Err(NoCall),
    };
    if model.contains('/') {
        return Err(NoCall);
    }
    named(Protocol::Gemini, model, stream)
}

/// `/model/{id}/converse|converse-stream|invoke|invoke-with-response-stream|count-tokens`:
/// the id is ONE path segment, so a literal `/` in it (an ARN sent unencoded) names no
/// operation, as on AWS.
pub(crate) fn bedrock(rest: &str) -> Result<Call, NoCall> {
    let (id, op) = rest.split_once('/').ok_or(NoCall)?;
    if op == "count-tokens" {
        let model = percent_decode(id).ok_or(NoCall)?;
        return Ok(Call { count_tokens: true, ..named(Protocol::Bedrock, &model, false)? });
    }
    let (stream, family) = match op {
        "converse" => (false, Family::Bedrock),
        "converse-stream" => (true, Family::Bedrock),
        "invoke" => (false, Family::BedrockMessages),
        "invoke-with-response-stream" => (true, Family::BedrockMessages),
        _ => return Err(NoCall),
    };
    let model = percent_decode(id).ok_or(NoCall)?;
    Ok(Call { family, ..named(Protocol::Bedrock, &model, stream)? })
}

fn named(protocol: Protocol, model: &str, stream: bool) -> Result<Call, NoCall> {
    if model.is_empty() {
        return Err(NoCall);
    }
    Ok(Call::new(protocol, Some(model.to_owned()), stream))
}

/// Decodes `%XX` escapes; `None` for a bad escape or non-UTF-8 result.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value of `name` in a query string, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v).unwrap_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_calls() {
        let c = vertex("projects/p/locations/us-east5/publishers/anthropic/models/claude@1:streamRawPredict").unwrap();
        assert_eq!((c.protocol, c.model.as_deref(), c.stream), (Protocol::VertexAnthropic, Some("claude@1"), true));
        let c = vertex("projects/p/locations/global/publishers/google/models/g:generateContent").unwrap();
        assert_eq!((c.protocol, c.stream), (Protocol::VertexGemini, false));
        assert_eq!(vertex("projects/p/locations/l/publishers/x/models/m:rawPredict"), Err(NoCall));
        assert!(gemini("gemini-2.0:streamGenerateContent").unwrap().stream);
        assert_eq!(gemini("m:predict"), Err(NoCall));
        let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fabc";
        let c = bedrock(&format!("{arn}/converse-stream")).unwrap();
        assert_eq!(c.model.as_deref(), Some("arn:aws:bedrock:us-east-1:1:application-inference-profile/abc"));
        // The same ARN with a literal '/': not an operation.
        assert_eq!(bedrock("arn:aws:bedrock:us-east-1:1:application-inference-profile/abc/converse"), Err(NoCall));
        let c = vertex("projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict").unwrap();
        assert_eq!((c.protocol, c.model, c.count_tokens), (Protocol::VertexAnthropic, None, true));
        assert_eq!(
            vertex("projects/p/locations/l/publishers/anthropic/models/count-tokens:streamRawPredict"),
            Err(NoCall)
        );
        let c = bedrock("anthropic.claude-x-v1%3A0/count-tokens").unwrap();
        assert_eq!((c.model.as_deref(), c.count_tokens), (Some("anthropic.claude-x-v1:0"), true));
        assert!(!bedrock("m/invoke").unwrap().count_tokens);
        assert_eq!(query_param(Some("a=1&api-version=2024-10-21"), "api-version").as_deref(), Some("2024-10-21"));
        assert_eq!(query_param(Some("alt=sse"), "api-version"), None);
    }
}
