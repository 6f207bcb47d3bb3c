//! The Kubernetes-free configuration a gateway serves: the operator → gateway contract.
//!
//! A `Snapshot` is what `resolve()` makes from manifests. The operator writes it as JSON
//! into a ConfigMap; file mode builds it in process. Durations are milliseconds and money
//! is nanodollars, so the gateway never parses humane strings on the request path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error_budget::BudgetMethod;
use crate::model_route::{FirstByteAction, Selection};

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
    /// Base URL without a trailing slash.
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
    /// Longest allowed gap between stream chunks.
    pub idle_timeout_ms: u64,
    /// In-flight requests above which the upstream counts as saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u32>,
    /// Circuit breaker thresholds.
    pub circuit_breaker: CircuitBreakerConfig,
    /// Synthetic probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeConfig>,
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
    /// Walks over the candidates at most.
    pub max_walks: u32,
    /// First backoff step.
    pub backoff_base_ms: u64,
    /// Total backoff waiting allowed.
    pub backoff_max_total_ms: u64,
    /// `max_tokens` for reservations when a request sets none.
    pub default_max_tokens: u32,
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceConfig {
    /// Per 1M input tokens.
    pub input_per_mtok_nanos: u64,
    /// Per 1M output tokens.
    pub output_per_mtok_nanos: u64,
}

impl PriceConfig {
    /// Cost in nanodollars of a number of input and output tokens, rounded up; saturates at
    /// `u64::MAX` (token counts come from upstreams and are not to be trusted).
    pub fn cost_nanos(&self, input_tokens: u64, output_tokens: u64) -> u64 {
        // Each product fits in u128; their sum may not.
        let total = (u128::from(input_tokens) * u128::from(self.input_per_mtok_nanos))
            .saturating_add(u128::from(output_tokens) * u128::from(self.output_per_mtok_nanos));
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
}
