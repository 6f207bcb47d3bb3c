//! The `Upstream` resource: one provider endpoint that candidates point at.

#[cfg(feature = "kube")]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

#[cfg(feature = "kube")]
use crate::schema::{conditions_schema, msg};

mod provider;

#[cfg(feature = "kube")]
pub use provider::rules;
pub use provider::{
    ANTHROPIC_VERSION, AWS_SECRET_KEYS, AnthropicSpec, AwsCredentials, AwsSpec, AzureSpec, GcpCredentials, GcpSpec,
    Protocol, SecretNameRef, vertex_base_url,
};

/// One provider endpoint, e.g. Anthropic's API, or Claude on Vertex AI in us-east5.
// kube's `printcolumn(.., type_ = "string", ..)` repeats arguments, not attributes.
#[cfg_attr(
    feature = "kube",
    expect(clippy::duplicated_attributes, reason = "false positive on kube's printcolumn arguments")
)]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(CustomResource, KubeSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "sluice.dev",
        version = "v1alpha1",
        kind = "Upstream",
        namespaced,
        status = "UpstreamStatus",
        shortname = "ups",
        category = "sluice",
        derive = "PartialEq",
        printcolumn(name = "Protocol", type_ = "string", json_path = ".spec.protocol"),
        printcolumn(name = "Region", type_ = "string", json_path = ".spec.region"),
        printcolumn(name = "Success", type_ = "string", json_path = ".status.successRate"),
        printcolumn(name = "TTFB-P99", type_ = "string", json_path = ".status.ttfbP99"),
        printcolumn(name = "Circuit", type_ = "string", json_path = ".status.circuit"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::BASE_URL_REQUIRED).field_path(".baseUrl").message(msg::BASE_URL_REQUIRED)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::GCP_REQUIRED).field_path(".gcp").message(msg::GCP_REQUIRED)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::AWS_REQUIRED).field_path(".aws").message(msg::AWS_REQUIRED)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::AZURE_REQUIRED).field_path(".azure").message(msg::AZURE_REQUIRED)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::GCP_ONLY).field_path(".gcp").message(msg::GCP_ONLY)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::AWS_ONLY).field_path(".aws").message(msg::AWS_ONLY)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::AZURE_ONLY).field_path(".azure").message(msg::AZURE_ONLY)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(rules::ANTHROPIC_ONLY).field_path(".anthropic").message(msg::ANTHROPIC_ONLY)))]
pub struct UpstreamSpec {
    /// Wire format spoken by the upstream; default `openai` (docs/design.md §9).
    #[serde(default)]
    pub protocol: Protocol,
    /// Base URL; requests go to `{baseUrl}/chat/completions` and so on. Required for
    /// `openai` and `azure-openai`; the other protocols default to the provider's endpoint.
    // `[:space:]`, not `\s`: RE2 (the apiserver) and Rust's `regex` (file mode, kube's CEL)
    // disagree on `\s` beyond ASCII, and both read `[:space:]` as ASCII whitespace.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::URL)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^https?://[^/?#[:space:]]+')").message(msg::BASE_URL)))]
    pub base_url: Option<String>,
    /// Free-form region label, shown by `kubectl get upstreams`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(max = 63)))]
    pub region: Option<String>,
    /// Credentials sent with every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<UpstreamAuth>,
    /// Connect, first-byte and idle timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<UpstreamTimeouts>,
    /// Above this many in-flight requests the candidate counts as saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 1_000_000)))]
    pub max_concurrent_requests: Option<u32>,
    /// Circuit breaker thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreakerSpec>,
    /// Optional synthetic health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSpec>,
    /// Can the upstream continue a trailing assistant message? Default true for
    /// `anthropic` and `vertex-anthropic`, false otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assistant_prefill: Option<bool>,
    /// Project, location and credentials; `vertex-*` only, and required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpSpec>,
    /// Region and credentials; `bedrock` only, and required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsSpec>,
    /// API version; `azure-openai` only, and required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureSpec>,
    /// `anthropic-version` override; `anthropic` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<AnthropicSpec>,
}

/// One provider endpoint as a manifest holds it, `metadata` and `spec`
/// ([`Object`](crate::object::Object)); with the `kube` feature, kube's `CustomResource`.
#[cfg(not(feature = "kube"))]
pub type Upstream = crate::object::Object<UpstreamSpec>;

impl UpstreamSpec {
    /// Names of the Secrets (same namespace) the spec reads: the API key's, the
    /// service-account key's and the AWS access keys', without repeats.
    pub fn secret_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = [
            self.auth.as_ref().map(|a| a.secret_ref.name.as_str()),
            self.gcp.as_ref().and_then(|g| g.credentials.as_ref()).map(|c| c.secret_ref.name.as_str()),
            self.aws.as_ref().and_then(|a| a.credentials.as_ref()).map(|c| c.secret_ref.name.as_str()),
        ]
        .into_iter()
        .flatten()
        .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Where the upstream's API key lives and how it is sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamAuth {
    /// The Secret (same namespace) and key holding the API key.
    pub secret_ref: SecretKeyRef,
    /// Header that carries the key; default per protocol (`authorization` for openai).
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::HEADER)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9-]+$')").message(msg::HEADER)))]
    pub header: Option<String>,
    /// Prefix before the key; default per protocol (`Bearer` for openai); `""` sends the bare key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
}

/// A key in a Secret of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name.
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 253)))]
    pub name: String,
    /// Key inside the Secret.
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 253)))]
    pub key: String,
}

/// Timeouts for one upstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamTimeouts {
    /// TCP+TLS connect timeout; default `2s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::DURATION_RULE).message(crate::schema::DURATION_MESSAGE)))]
    pub connect: Option<String>,
    /// First-byte watchdog: a duration or `auto`; default `auto`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::DURATION_OR_AUTO_RULE).message(msg::FIRST_BYTE)))]
    pub first_byte: Option<String>,
    /// Longest gap allowed between stream chunks: a duration, or `auto` (10 × the
    /// upstream's p99 gap, at least 1 s, at most 60 s); default `60s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::DURATION_OR_AUTO_RULE).message(msg::IDLE)))]
    pub idle: Option<String>,
}

/// Circuit breaker thresholds; every field optional.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreakerSpec {
    /// Failure percentage over the window that opens the circuit; default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 100)))]
    pub failure_rate_percent: Option<u32>,
    /// Attempts needed in the window before the rate is judged; default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 10_000)))]
    pub minimum_requests: Option<u32>,
    /// How long the circuit stays open before half-open trials; default `30s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::DURATION_RULE).message(crate::schema::DURATION_MESSAGE)))]
    pub open_for: Option<String>,
    /// Trial requests let through while half-open; default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 100)))]
    pub half_open_requests: Option<u32>,
}

/// Synthetic health check of the upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSpec {
    /// Interval between probes; default `90s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::DURATION_RULE).message(crate::schema::DURATION_MESSAGE)))]
    pub interval: Option<String>,
    /// Path under baseUrl; default `/models`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::URL)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.startsWith('/')").message(msg::PROBE_PATH)))]
    pub path: Option<String>,
}

/// Observed state, written by the operator from the ledger.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    /// Generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Percent of attempts that succeeded over the last 5 minutes, all gateway pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<String>,
    /// Attempts over the last 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests5m: Option<u64>,
    /// Median first-byte time, e.g. `180ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfb_p50: Option<String>,
    /// 99th percentile first-byte time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfb_p99: Option<String>,
    /// Worst circuit state reported by any gateway pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<CircuitState>,
    /// Most recent failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
}

/// Circuit breaker state.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum CircuitState {
    /// Traffic flows.
    #[default]
    Closed,
    /// Trial requests only.
    HalfOpen,
    /// Skipped while other candidates are available.
    Open,
}

/// The most recent failure seen on an upstream.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    /// Outcome label, e.g. `http_5xx`.
    pub reason: String,
    /// RFC 3339 time.
    pub time: String,
}
