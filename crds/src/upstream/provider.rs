//! The provider side of an `Upstream`: its wire protocol and the blocks that only some
//! protocols read (docs/design.md §9), with each protocol's defaults.

#[cfg(feature = "kube")]
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::SecretKeyRef;

/// Wire protocol of an upstream (docs/design.md §9).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// OpenAI-compatible HTTP API.
    #[default]
    Openai,
    /// Azure OpenAI: deployments under `{baseUrl}/deployments/{model}`.
    AzureOpenai,
    /// Anthropic Messages API.
    Anthropic,
    /// AWS Bedrock Converse API.
    Bedrock,
    /// Claude models on Google Vertex AI.
    VertexAnthropic,
    /// Gemini models on Google Vertex AI.
    VertexGemini,
    /// Gemini API (Google AI Studio).
    Gemini,
}

/// Anthropic API version sent when `anthropic.version` is not set.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

impl Protocol {
    /// The name used in manifests, e.g. `vertex-anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::AzureOpenai => "azure-openai",
            Self::Anthropic => "anthropic",
            Self::Bedrock => "bedrock",
            Self::VertexAnthropic => "vertex-anthropic",
            Self::VertexGemini => "vertex-gemini",
            Self::Gemini => "gemini",
        }
    }

    /// True for the protocols that reach Vertex AI and so read `gcp`.
    pub fn is_vertex(self) -> bool {
        matches!(self, Self::VertexAnthropic | Self::VertexGemini)
    }

    /// True when `baseUrl` has no default and must be set.
    pub fn needs_base_url(self) -> bool {
        matches!(self, Self::Openai | Self::AzureOpenai)
    }

    /// Whether the upstream can continue a trailing assistant message, unless
    /// `assistantPrefill` says otherwise.
    pub fn default_assistant_prefill(self) -> bool {
        matches!(self, Self::Anthropic | Self::VertexAnthropic)
    }

    /// Header and scheme that carry an `auth` key unless `auth.header`/`auth.scheme` say
    /// otherwise: `(header, scheme)`, an empty scheme sending the bare key.
    pub fn default_auth_header(self) -> (&'static str, &'static str) {
        match self {
            Self::Openai | Self::Bedrock | Self::VertexAnthropic | Self::VertexGemini => ("authorization", "Bearer"),
            Self::AzureOpenai => ("api-key", ""),
            Self::Anthropic => ("x-api-key", ""),
            Self::Gemini => ("x-goog-api-key", ""),
        }
    }

    /// The base URL used when `baseUrl` is not set, from the protocol's block; `None` for
    /// the protocols that have none (or when the block it needs is missing).
    pub fn default_base_url(self, gcp: Option<&GcpSpec>, aws: Option<&AwsSpec>) -> Option<String> {
        match self {
            Self::Openai | Self::AzureOpenai => None,
            Self::Anthropic => Some("https://api.anthropic.com/v1".into()),
            Self::Gemini => Some("https://generativelanguage.googleapis.com/v1beta".into()),
            Self::Bedrock => aws.map(|a| format!("https://bedrock-runtime.{}.amazonaws.com", a.region)),
            Self::VertexAnthropic | Self::VertexGemini => gcp.map(|g| vertex_base_url(&g.location)),
        }
    }
}

/// The Vertex AI endpoint of a location: regional `{location}-aiplatform`, the global
/// endpoint for `global`, and the multi-region endpoints for `us` and `eu`.
pub fn vertex_base_url(location: &str) -> String {
    match location {
        "global" => "https://aiplatform.googleapis.com/v1".into(),
        "us" | "eu" => format!("https://aiplatform.{location}.rep.googleapis.com/v1"),
        _ => format!("https://{location}-aiplatform.googleapis.com/v1"),
    }
}

/// Google Cloud project, location and credentials of a `vertex-*` upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcpSpec {
    /// Project id (or number) that is billed, e.g. `my-project`.
    #[cfg_attr(feature = "kube", schemars(length(max = 128)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z0-9][-a-z0-9.:]{0,127}$')").message(crate::schema::msg::GCP_PROJECT)))]
    pub project: String,
    /// Location, e.g. `us-east5`; `global`, `us` and `eu` pick those endpoints.
    #[cfg_attr(feature = "kube", schemars(length(max = 63)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$')").message(crate::schema::msg::GCP_LOCATION)))]
    pub location: String,
    /// Service-account key; without it, the metadata server (workload identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<GcpCredentials>,
}

/// Where a service-account JSON key lives.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcpCredentials {
    /// The Secret (same namespace) and the key holding the service-account JSON.
    pub secret_ref: SecretKeyRef,
}

/// AWS region and credentials of a `bedrock` upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsSpec {
    /// Region, e.g. `us-east-1`; also the SigV4 signing region.
    #[cfg_attr(feature = "kube", schemars(length(max = 32)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$')").message(crate::schema::msg::AWS_REGION)))]
    pub region: String,
    /// Access keys; without them, the standard AWS credential chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsCredentials>,
}

/// Where AWS access keys live.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsCredentials {
    /// A Secret (same namespace) with keys `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
    /// and optionally `AWS_SESSION_TOKEN`.
    pub secret_ref: SecretNameRef,
}

/// Keys of the Secret named by `aws.credentials.secretRef`; the session token is optional.
pub const AWS_SECRET_KEYS: [&str; 3] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

/// A Secret of the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretNameRef {
    /// Secret name.
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 253)))]
    pub name: String,
}

/// Azure OpenAI settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AzureSpec {
    /// The `api-version` query parameter, e.g. `2024-10-21`.
    #[cfg_attr(feature = "kube", schemars(length(max = 64)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9][-A-Za-z0-9.]{0,63}$')").message(crate::schema::msg::AZURE_API_VERSION)))]
    pub api_version: String,
}

/// Anthropic settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnthropicSpec {
    /// The `anthropic-version` header; default `2023-06-01`.
    #[cfg_attr(feature = "kube", schemars(length(max = 64)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9][-A-Za-z0-9.]{0,63}$')").message(crate::schema::msg::ANTHROPIC_VERSION)))]
    pub version: String,
}

/// CEL rules over the whole spec: which block each protocol needs, and which it ignores.
/// `(rule, fieldPath, message)`; `validate::upstream` mirrors them.
#[cfg(feature = "kube")]
pub mod rules {
    /// `baseUrl` has no default for openai and azure-openai.
    pub const BASE_URL_REQUIRED: &str =
        "has(self.baseUrl) || (has(self.protocol) && self.protocol != 'openai' && self.protocol != 'azure-openai')";
    /// vertex-* needs `gcp`.
    pub const GCP_REQUIRED: &str = "has(self.gcp) || !has(self.protocol) || !self.protocol.startsWith('vertex-')";
    /// bedrock needs `aws`.
    pub const AWS_REQUIRED: &str = "has(self.aws) || !has(self.protocol) || self.protocol != 'bedrock'";
    /// azure-openai needs `azure`.
    pub const AZURE_REQUIRED: &str = "has(self.azure) || !has(self.protocol) || self.protocol != 'azure-openai'";
    /// `gcp` only with vertex-*.
    pub const GCP_ONLY: &str = "!has(self.gcp) || (has(self.protocol) && self.protocol.startsWith('vertex-'))";
    /// `aws` only with bedrock.
    pub const AWS_ONLY: &str = "!has(self.aws) || (has(self.protocol) && self.protocol == 'bedrock')";
    /// `azure` only with azure-openai.
    pub const AZURE_ONLY: &str = "!has(self.azure) || (has(self.protocol) && self.protocol == 'azure-openai')";
    /// `anthropic` only with anthropic.
    pub const ANTHROPIC_ONLY: &str = "!has(self.anthropic) || (has(self.protocol) && self.protocol == 'anthropic')";
}
