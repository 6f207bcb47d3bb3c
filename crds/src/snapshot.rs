//! The Kubernetes-free configuration a gateway serves: the operator → gateway contract.
//!
//! A `Snapshot` is what `resolve()` makes from manifests. The operator writes it as JSON
//! into a ConfigMap; file mode builds it in process. Durations are milliseconds and money
//! is nanodollars, so the gateway never parses humane strings on the request path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error_budget::BudgetMethod;
pub use crate::model_route::CompletionCaching;
use crate::model_route::{FirstByteAction, HostedTools, MidStreamAction, Selection, SyntheticApi};
use crate::upstream::AWS_SECRET_KEYS;
pub use crate::upstream::Protocol;

/// Version of the snapshot format; bumped on incompatible changes.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// Everything one gateway group serves.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    /// [`SNAPSHOT_FORMAT`] at the time of writing.
    pub format: u32,
    /// Upstreams by key (`namespace/name`).
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// Routes, sorted by key; model names are unique.
    pub routes: Vec<RouteConfig>,
    /// Error budgets over these routes.
    pub budgets: Vec<BudgetConfig>,
}

/// A resolved upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `namespace/name`, used as ledger key.
    pub key: String,
    /// Upstream name, used as metric label and in `x-sluice-upstream`.
    pub name: String,
    /// Namespace of the resource.
    pub namespace: String,
    /// Wire protocol; snapshots written before protocols existed read as `openai`.
    #[serde(default)]
    pub protocol: Protocol,
    /// Base URL without a trailing slash: the manifest's, or the protocol's default.
    pub base_url: String,
    /// Region label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Where the API key lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthConfig>,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// First-byte watchdog.
    pub first_byte: FirstByte,
    /// Longest allowed gap between stream chunks; with `idle_auto`, the cap.
    pub idle_timeout_ms: u64,
    /// `idle: auto`: the limit follows the upstream's observed gaps (10 × p99, at least
    /// 1 s, at most `idle_timeout_ms`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle_auto: bool,
    /// In-flight requests above which the upstream counts as saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u32>,
    /// Circuit breaker thresholds.
    pub circuit_breaker: CircuitBreakerConfig,
    /// Synthetic probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeConfig>,
    /// Whether a trailing assistant message may be sent for the upstream to continue.
    #[serde(default)]
    pub assistant_prefill: bool,
    /// Google Cloud settings (`vertex-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpConfig>,
    /// AWS settings (`bedrock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsConfig>,
    /// The `api-version` query parameter (`azure-openai`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_api_version: Option<String>,
    /// The `anthropic-version` header (`anthropic`; its default filled in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<String>,
}

impl UpstreamConfig {
    /// Every `(secret, key)` this upstream reads from `--secrets-dir/<secret>/<key>`: the
    /// API key, the service-account JSON, and the AWS access keys (the session token
    /// among them, though a Secret may leave it out).
    pub fn secret_refs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(a) = &self.auth {
            out.push((a.secret.clone(), a.key.clone()));
        }
        if let Some(c) = self.gcp.as_ref().and_then(|g| g.credentials.as_ref()) {
            out.push((c.secret.clone(), c.key.clone()));
        }
        if let Some(secret) = self.aws.as_ref().and_then(|a| a.credentials_secret.as_ref()) {
            out.extend(AWS_SECRET_KEYS.iter().map(|k| (secret.clone(), (*k).to_string())));
        }
        out
    }
}

/// Google Cloud project, location and service-account key of a `vertex-*` upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcpConfig {
    /// Project id or number.
    pub project: String,
    /// Location, e.g. `us-east5` or `global`.
    pub location: String,
    /// The service-account JSON key; `None`: the metadata server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretKeyConfig>,
}

/// AWS region and access keys of a `bedrock` upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsConfig {
    /// Region, also the SigV4 signing region.
    pub region: String,
    /// Secret with `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and optionally
    /// `AWS_SESSION_TOKEN`; `None`: the standard AWS credential chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
}

/// A key in a Secret, read from `--secrets-dir/<secret>/<key>` at run time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyConfig {
    /// Secret name.
    pub secret: String,
    /// Key within the secret.
    pub key: String,
}

/// A secret reference; the value is read from `--secrets-dir/<secret>/<key>` at run time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthConfig {
    /// Secret name.
    pub secret: String,
    /// Key within the secret.
    pub key: String,
    /// Header name, lowercase.
    pub header: String,
    /// Prefix such as `Bearer`; empty sends the bare key.
    pub scheme: String,
}

/// First-byte watchdog setting.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum FirstByte {
    /// max(50 ms, 3 × rolling p99 first-byte time); 5 s until 20 samples exist.
    Auto,
    /// A fixed limit in milliseconds.
    FixedMs(u64),
}

/// Circuit breaker thresholds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Failure percentage that opens the circuit.
    pub failure_rate_percent: u32,
    /// Attempts needed before the rate is judged.
    pub minimum_requests: u32,
    /// Open duration before half-open trials.
    pub open_for_ms: u64,
    /// Trials let through while half-open.
    pub half_open_requests: u32,
}

/// Synthetic probe settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeConfig {
    /// Interval between probes.
    pub interval_ms: u64,
    /// Path under the base URL.
    pub path: String,
}

/// A resolved route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteConfig {
    /// `namespace/name`, used as ledger key.
    pub key: String,
    /// Route name, used as metric label.
    pub name: String,
    /// Namespace of the resource.
    pub namespace: String,
    /// Model name clients send.
    pub model: String,
    /// Gateway group.
    pub gateway: String,
    /// Hard cap over all attempts.
    pub deadline_ms: u64,
    /// Candidate selection.
    pub selection: Selection,
    /// Candidates whose upstream resolved, in spec order.
    pub candidates: Vec<CandidateConfig>,
    /// Upstream statuses that fail over.
    pub retry_on: Vec<u16>,
    /// First-byte timeout action.
    pub on_first_byte_timeout: FirstByteAction,
    /// Mid-stream break action; snapshots without it read as `error`.
    #[serde(default, skip_serializing_if = "MidStreamAction::is_error")]
    pub mid_stream: MidStreamAction,
    /// Walks over the candidates at most.
    pub max_walks: u32,
    /// First backoff step.
    pub backoff_base_ms: u64,
    /// Total backoff waiting allowed.
    pub backoff_max_total_ms: u64,
    /// `max_tokens` for reservations when a request sets none.
    pub default_max_tokens: u32,
    /// Synthetic checks of every candidate (docs/design.md §10); `None`: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticConfig>,
    /// What the route caches (docs/design.md §13); snapshots without it read as the
    /// defaults.
    #[serde(default, skip_serializing_if = "CacheConfig::is_default")]
    pub cache: CacheConfig,
    /// Hosted tools a translated request cannot carry: refused or omitted.
    #[serde(default, skip_serializing_if = "HostedTools::is_refuse")]
    pub hosted_tools: HostedTools,
}

/// A route's response and embedding cache, resolved (docs/design.md §13).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheConfig {
    /// How long an entry is served fresh.
    pub ttl_ms: u64,
    /// Every caller of the route reads the same entries (`scope: shared`); else each
    /// account has its own.
    pub shared: bool,
    /// `/v1/embeddings` cached per input item.
    pub embeddings: bool,
    /// Which completions are cached, whole.
    pub completions: CompletionCaching,
    /// How long past `ttl` an entry may still answer when every candidate failed; 0: never.
    #[serde(default)]
    pub stale_if_error_ms: u64,
    /// Charged per answer served from the cache (a completion, or one embedding input).
    #[serde(default)]
    pub price_nanos: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl_ms: crate::resolve::defaults::CACHE_TTL_MS,
            shared: false,
            embeddings: true,
            completions: CompletionCaching::Never,
            stale_if_error_ms: 0,
            price_nanos: 0,
        }
    }
}

impl CacheConfig {
    /// The defaults, which snapshots leave out.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A route's synthetic checks, resolved.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Time between two checks of one candidate, at least 1000.
    pub interval_ms: u64,
    /// `max_tokens` of each check.
    pub max_tokens: u32,
    /// The inbound API the checks are sent through.
    #[serde(default, skip_serializing_if = "SyntheticApi::is_chat")]
    pub api: SyntheticApi,
}

/// A resolved candidate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CandidateConfig {
    /// Key of the upstream in [`Snapshot::upstreams`].
    pub upstream: String,
    /// Model id at that upstream.
    pub model: String,
    /// Configured weight, 1..1000.
    pub weight: u32,
    /// Price, if billed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceConfig>,
}

/// Nanodollars per one million tokens.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", from = "PriceWire")]
pub struct PriceConfig {
    /// Per 1M input tokens (not read from or written to a prompt cache).
    pub input_per_mtok_nanos: u64,
    /// Per 1M output tokens.
    pub output_per_mtok_nanos: u64,
    /// Per 1M input tokens read from the prompt cache.
    pub cached_input_per_mtok_nanos: u64,
    /// Per 1M input tokens written to the prompt cache.
    pub cache_write_per_mtok_nanos: u64,
    /// Per 1,000 web searches run by the provider (0: not billed).
    #[serde(skip_serializing_if = "is_zero")]
    pub web_search_per_k_nanos: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What an answer used, in the quantities a [`PriceConfig`] prices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metered {
    /// Input tokens neither read from nor written to the prompt cache.
    pub input_uncached: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// Output tokens.
    pub output: u64,
    /// Web searches the provider ran.
    pub web_searches: u64,
}

/// [`PriceConfig`] as read: snapshots written before cache prices existed price cache
/// reads and writes as input.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PriceWire {
    input_per_mtok_nanos: u64,
    output_per_mtok_nanos: u64,
    #[serde(default)]
    cached_input_per_mtok_nanos: Option<u64>,
    #[serde(default)]
    cache_write_per_mtok_nanos: Option<u64>,
    #[serde(default)]
    web_search_per_k_nanos: u64,
}

impl From<PriceWire> for PriceConfig {
    fn from(w: PriceWire) -> Self {
        Self {
            input_per_mtok_nanos: w.input_per_mtok_nanos,
            output_per_mtok_nanos: w.output_per_mtok_nanos,
            cached_input_per_mtok_nanos: w.cached_input_per_mtok_nanos.unwrap_or(w.input_per_mtok_nanos),
            cache_write_per_mtok_nanos: w.cache_write_per_mtok_nanos.unwrap_or(w.input_per_mtok_nanos),
            web_search_per_k_nanos: w.web_search_per_k_nanos,
        }
    }
}

impl PriceConfig {
    /// A price whose cache reads and writes cost as much as input.
    pub fn new(input_per_mtok_nanos: u64, output_per_mtok_nanos: u64) -> Self {
        Self {
            input_per_mtok_nanos,
            output_per_mtok_nanos,
            cached_input_per_mtok_nanos: input_per_mtok_nanos,
            cache_write_per_mtok_nanos: input_per_mtok_nanos,
            web_search_per_k_nanos: 0,
        }
    }

    /// Cost in nanodollars of a number of input and output tokens, rounded up; saturates at
    /// `u64::MAX` (token counts come from upstreams and are not to be trusted).
    pub fn cost_nanos(&self, input_tokens: u64, output_tokens: u64) -> u64 {
        self.cost_of(&Metered { input_uncached: input_tokens, output: output_tokens, ..Metered::default() })
    }

    /// Cost in nanodollars of what an answer used, each quantity at its price (the
    /// uncached input, cache reads and cache writes add up to the prompt); the sum is
    /// rounded up once, and saturates at `u64::MAX`, as in [`cost_nanos`](Self::cost_nanos).
    pub fn cost_of(&self, m: &Metered) -> u64 {
        // In millionths of a nanodollar: each product fits in u128; their sum may not.
        let total = [
            (m.input_uncached, self.input_per_mtok_nanos),
            (m.cache_read, self.cached_input_per_mtok_nanos),
            (m.cache_write, self.cache_write_per_mtok_nanos),
            (m.output, self.output_per_mtok_nanos),
            (m.web_searches.saturating_mul(1000), self.web_search_per_k_nanos),
        ]
        .into_iter()
        .fold(0u128, |sum, (count, price)| sum.saturating_add(u128::from(count) * u128::from(price)));
        u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

/// A resolved error budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetConfig {
    /// `namespace/name`.
    pub key: String,
    /// Budget name.
    pub name: String,
    /// Namespace of the resource.
    pub namespace: String,
    /// Route keys (`namespace/name`) the budget covers; routes that did not resolve are left out.
    pub routes: Vec<String>,
    /// The objective as written, e.g. `"99.95"`.
    pub objective: String,
    /// The objective as a ratio, e.g. 0.9995.
    pub objective_ratio: f64,
    /// Rolling window.
    pub window_ms: u64,
    /// Counting method.
    pub method: BudgetMethod,
    /// Slice length for timeslices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeslice_ms: Option<u64>,
    /// Latency SLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyConfig>,
    /// Burn-rate alerts.
    pub alerts: Vec<AlertConfig>,
}

/// Latency SLI.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyConfig {
    /// Threshold.
    pub threshold_ms: u64,
    /// Percentile judged for timeslices.
    pub percentile: u32,
}

/// A multi-window burn-rate alert.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertConfig {
    /// Alert name.
    pub name: String,
    /// Long window.
    pub long_window_ms: u64,
    /// Short window.
    pub short_window_ms: u64,
    /// Burn rate both windows must exceed.
    pub burn_rate: f64,
}

impl Snapshot {
    /// The route serving `model`, if any.
    pub fn route_for_model(&self, model: &str) -> Option<&RouteConfig> {
        self.routes.iter().find(|r| r.model == model)
    }

    /// Every `(secret, key)` any upstream reads ([`UpstreamConfig::secret_refs`]), sorted.
    pub fn secret_refs(&self) -> std::collections::BTreeSet<(String, String)> {
        self.upstreams.values().flat_map(UpstreamConfig::secret_refs).collect()
    }
}
