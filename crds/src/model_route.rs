//! The `ModelRoute` resource: one model name that clients call, served by 1..8
//! candidate upstream paths of that same model.

#[cfg(feature = "kube")]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

#[cfg(feature = "kube")]
use crate::schema::{DURATION_MESSAGE, DURATION_RULE, MONEY_MESSAGE, MONEY_RULE, conditions_schema};
#[cfg(feature = "kube")]
use crate::upstream::CircuitState;

/// A model name and the candidate upstreams that can serve it.
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
        kind = "ModelRoute",
        namespaced,
        status = "ModelRouteStatus",
        shortname = "mr",
        category = "sluice",
        derive = "PartialEq",
        printcolumn(name = "Model", type_ = "string", json_path = ".spec.model"),
        printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway"),
        printcolumn(name = "Candidates", type_ = "integer", json_path = ".status.candidateCount"),
        printcolumn(name = "Availability", type_ = "string", json_path = ".status.availability5m"),
        printcolumn(name = "Failovers", type_ = "integer", json_path = ".status.failovers5m"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRouteSpec {
    /// The name clients send in `"model"`.
    #[cfg_attr(feature = "kube", schemars(length(max = 128)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$')").message(crate::schema::msg::MODEL)))]
    pub model: String,
    /// Gateway group serving this route; default `default`.
    #[cfg_attr(feature = "kube", schemars(length(max = 40)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$')").message(crate::schema::msg::GATEWAY)))]
    pub gateway: Option<String>,
    /// Hard cap over all attempts; default `540s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE)))]
    pub deadline: Option<String>,
    /// How the first candidate is chosen; default `ordered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// Candidate upstream paths, 1..8, upstream names unique.
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 8)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.all(c, self.exists_one(d, d.upstream == c.upstream))").message(crate::schema::msg::CANDIDATES_UNIQUE)))]
    pub candidates: Vec<Candidate>,
    /// When to move to the next candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// Backoff between walks over the candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffSpec>,
    /// `max_tokens` used for reservations (and sent upstream) when a request sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 10_000_000)))]
    pub default_max_tokens: Option<u32>,
    /// Synthetic checks: a minimal real completion sent to each candidate every
    /// `interval` (docs/design.md §10); off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticSpec>,
    /// The route's response and embedding cache (docs/design.md §13); embeddings are
    /// cached and completions are not unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    /// What a translated request does with a hosted tool (`web_search`, `file_search`,
    /// …; Anthropic's server tools) that its candidate has no equivalent for:
    /// `refuse` (default: a 400 naming the tool) or `omit` (sent without it, and the
    /// answer's `x-sluice-dropped` names it); docs/gateway.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_tools: Option<HostedTools>,
}

/// A model name and its candidates as a manifest holds them, `metadata` and `spec`
/// ([`Object`](crate::object::Object)); with the `kube` feature, kube's `CustomResource`.
#[cfg(not(feature = "kube"))]
pub type ModelRoute = crate::object::Object<ModelRouteSpec>;

/// A route's synthetic checks (docs/design.md §10).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Time between two checks of one candidate, at least `1s`; default `90s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::SYNTHETIC_INTERVAL_RULE).message(crate::schema::msg::SYNTHETIC_INTERVAL)))]
    pub interval: Option<String>,
    /// `max_tokens` of each check, 1..4096; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 4096)))]
    pub max_tokens: Option<u32>,
    /// The inbound API each check is sent through, as a client of that API would send
    /// it: `chat` (default), `messages` or `responses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<SyntheticApi>,
}

/// The inbound API of a route's synthetic checks (`synthetic.api`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SyntheticApi {
    /// `POST /v1/chat/completions` (the default).
    #[default]
    Chat,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/responses`.
    Responses,
}

impl SyntheticApi {
    /// Whether this is the default, which snapshots leave out.
    pub fn is_chat(&self) -> bool {
        *self == Self::Chat
    }
}

/// What a translated request does with a hosted tool its candidate lacks (`hostedTools`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum HostedTools {
    /// A 400 naming the tool (the default): nothing is dropped unless the route says so.
    #[default]
    Refuse,
    /// The tool is left out, and named in the answer's `x-sluice-dropped`.
    Omit,
}

impl HostedTools {
    /// Whether this is the default, which snapshots leave out.
    pub fn is_refuse(&self) -> bool {
        *self == Self::Refuse
    }
}

/// A route's response and embedding cache (docs/design.md §13).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheSpec {
    /// How long an entry is served fresh, 1s..720h (30 days); default `24h`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::CACHE_DURATION_RULE).message(crate::schema::msg::CACHE_TTL)))]
    pub ttl: Option<String>,
    /// Who reads an entry: the `account` of the request's key (default) or every
    /// caller of the route (`shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<CacheScope>,
    /// `/v1/embeddings` cached per input item; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<bool>,
    /// Which completions are cached, whole: `never` (default), `deterministic` or `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<CompletionCaching>,
    /// How long past `ttl` an entry may still answer when every candidate failed,
    /// 1s..720h (30 days); default none.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(crate::schema::CACHE_DURATION_RULE).message(crate::schema::msg::CACHE_STALE_IF_ERROR)))]
    pub stale_if_error: Option<String>,
    /// USD per answer served from the cache (one completion, or one embedding input),
    /// e.g. `"0.0001"`; default `"0"`.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(crate::schema::msg::CACHE_PRICE)))]
    pub price: Option<String>,
}

/// Who reads a cache entry (`cache.scope`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// The account of the request's key: one tenant never reads another's entry.
    #[default]
    Account,
    /// Every caller of the route.
    Shared,
}

/// Which completions a route caches (`cache.completions`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CompletionCaching {
    /// None (the default).
    #[default]
    Never,
    /// Those whose answer is determined: `temperature` 0, or a `seed`.
    Deterministic,
    /// Every completion, whatever its sampling.
    Always,
}

/// How the first candidate is picked.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    /// Descending effective weight; ties in spec order.
    #[default]
    Ordered,
    /// First pick at random in proportion to effective weight.
    Weighted,
}

/// One upstream path for this model.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Candidate {
    /// Name of an Upstream in the same namespace.
    // `maxLength` restates the pattern's bound; it keeps the apiserver's cost estimate of
    // the candidates' uniqueness rule in budget.
    #[cfg_attr(feature = "kube", schemars(length(max = 253)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$')").message(crate::schema::msg::UPSTREAM_NAME)))]
    pub upstream: String,
    /// Model id at that upstream; default `spec.model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 256)))]
    pub model: Option<String>,
    /// Relative weight, 1..1000; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 1000)))]
    pub weight: Option<u32>,
    /// USD per 1M tokens at this candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}

/// Price in USD per million tokens, as decimal strings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// USD per 1M input tokens, e.g. `"15.00"`.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(MONEY_MESSAGE)))]
    pub input: String,
    /// USD per 1M output tokens, e.g. `"75.00"`.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(MONEY_MESSAGE)))]
    pub output: String,
    /// USD per 1M input tokens read from the provider's prompt cache, e.g. `"1.50"`;
    /// default `input`.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(MONEY_MESSAGE)))]
    pub cached_input: Option<String>,
    /// USD per 1M input tokens written to the provider's prompt cache, e.g. `"18.75"`;
    /// default `input`.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(MONEY_MESSAGE)))]
    pub cache_write: Option<String>,
    /// USD per 1,000 web searches the provider runs for an answer (Anthropic's server-side
    /// search: `"10.00"`), billed from the searches its usage reports; default none.
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(crate::schema::msg::WEB_SEARCH_PRICE)))]
    pub web_search: Option<String>,
}

/// Failover policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailoverSpec {
    /// Upstream statuses that move to the next candidate; default 408, 429, 500, 502, 503, 504.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 16)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.all(s, s == 408 || s == 429 || (s >= 500 && s <= 599))").message(crate::schema::msg::RETRY_ON)))]
    pub retry_on: Option<Vec<u16>>,
    /// What a first-byte timeout does: `failover` (default) or `hedge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_first_byte_timeout: Option<FirstByteAction>,
    /// What a stream that breaks after content reached the client does: `error`
    /// (default; it ends with an error event) or `resume` (it is continued on the next
    /// candidate, docs/design.md §4.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_stream: Option<MidStreamAction>,
}

/// Action on a stream that breaks after content reached the client.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum MidStreamAction {
    /// End the stream with the `upstream_stream_broken` error event.
    #[default]
    Error,
    /// Continue it on the next candidate that can.
    Resume,
}

impl MidStreamAction {
    /// The default, `error`.
    pub fn is_error(&self) -> bool {
        *self == MidStreamAction::Error
    }
}

/// Action on a first-byte timeout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum FirstByteAction {
    /// Abort the attempt and go to the next candidate.
    #[default]
    Failover,
    /// Keep the attempt, start the next one, keep whichever answers first.
    Hedge,
}

/// Backoff between walks when every candidate failed retryably.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackoffSpec {
    /// Walks over the candidates at most; default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1, max = 20)))]
    pub max_attempts: Option<u32>,
    /// First backoff step; default `250ms`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE)))]
    pub base: Option<String>,
    /// Total waiting allowed; default `30s`.
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE)))]
    pub max_total: Option<String>,
}

/// Observed state of a route.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteStatus {
    /// Generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `ResolvedRefs`, `Ready`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Candidates that resolved to an Upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_count: Option<u32>,
    /// Per-candidate health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<CandidateStatus>,
    /// Requests over the last 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests5m: Option<u64>,
    /// Requests that failed over at least once, last 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failovers5m: Option<u64>,
    /// Percent of requests answered without a 5xx, last 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability5m: Option<String>,
}

/// Health of one candidate as seen by the gateways.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CandidateStatus {
    /// Upstream name.
    pub upstream: String,
    /// Configured weight × recent success ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_weight: Option<String>,
    /// Percent of attempts that succeeded, last 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<String>,
    /// Worst circuit state reported by any pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<CircuitState>,
}
