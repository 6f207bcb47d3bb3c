//! Which inbound API a request came in on, and what that decides: the upstream path,
//! the member that carries the conversation, and which candidates speak it natively
//! (docs/design.md §12).

/// Which inbound API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `/v1/embeddings`.
    Embeddings,
    /// `/v1/messages` (Anthropic Messages, docs/design.md §12).
    Messages,
    /// `/v1/responses` (OpenAI Responses, docs/design.md §12).
    Responses,
}

impl Endpoint {
    /// Every endpoint, in [`Self::index`] order.
    pub const ALL: [Endpoint; 5] =
        [Endpoint::Chat, Endpoint::Completions, Endpoint::Embeddings, Endpoint::Messages, Endpoint::Responses];

    /// The position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Path after the upstream base URL (a Messages request reaches an OpenAI-compatible
    /// upstream as a chat request).
    pub fn upstream_path(self) -> &'static str {
        match self {
            Endpoint::Chat | Endpoint::Messages => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Responses => "/responses",
        }
    }

    /// The member that carries the conversation (or input).
    pub fn required_member(self) -> &'static str {
        match self {
            Endpoint::Chat | Endpoint::Messages => "messages",
            Endpoint::Completions => "prompt",
            Endpoint::Embeddings | Endpoint::Responses => "input",
        }
    }

    /// An inbound API of its own format (Messages, Responses): sent natively to the
    /// candidates that speak it, translated through chat for the others.
    pub fn is_inbound_format(self) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::Responses)
    }

    /// Whether a candidate of `protocol` serving `model` speaks this inbound API itself
    /// (docs/design.md §12): Messages on `anthropic`, `vertex-anthropic` and Claude on
    /// `bedrock`, Responses on `openai` and `azure-openai`. The others are sent a
    /// translation through chat.
    pub fn native_on(self, protocol: sluice_crds::snapshot::Protocol, model: &str) -> bool {
        use sluice_crds::snapshot::Protocol as P;
        match self {
            Endpoint::Messages => match protocol {
                P::Anthropic | P::VertexAnthropic => true,
                P::Bedrock => sluice_providers::messages::is_claude_on_bedrock(model),
                _ => false,
            },
            Endpoint::Responses => matches!(protocol, P::Openai | P::AzureOpenai),
            Endpoint::Chat | Endpoint::Completions | Endpoint::Embeddings => false,
        }
    }

    /// The member that bounds the output, which the gateway splices in when the client
    /// did not set it (the reservation assumed the route's default); `None` where the
    /// API requires it (Messages) or has none (embeddings).
    pub fn output_limit(self) -> Option<&'static str> {
        match self {
            Endpoint::Chat | Endpoint::Completions => Some("max_tokens"),
            Endpoint::Responses => Some("max_output_tokens"),
            Endpoint::Messages | Endpoint::Embeddings => None,
        }
    }

    /// The inbound API, as metrics and traces name it.
    pub fn api(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Messages => "messages",
            Endpoint::Responses => "responses",
        }
    }
}
