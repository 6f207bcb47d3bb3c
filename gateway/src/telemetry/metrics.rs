//! The contract metrics of docs/design.md §3, registered once with typed, bounded labels
//! (docs/contributing.md (conventions, rule 7)). Route and upstream names come from config, never from requests.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use sluice_ledger::RenewalResult;

use crate::endpoint::Endpoint;
use crate::outcome::Outcome;

mod billing;
mod cache;

pub use billing::{GrantMetrics, LimitLabel, LimitMetrics, LimitTakeLabel, Renewal, RenewalLabel};
pub use cache::{CacheKind, CacheLabel, CacheMetrics, CacheResult, RouteCache};

/// `{route, code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCode {
    /// Route name.
    pub route: String,
    /// HTTP status answered.
    pub code: u16,
    /// The inbound API (`chat`, `completions`, `embeddings`, `messages`, `responses`).
    pub api: &'static str,
}

/// `{route, api}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteApi {
    /// Route name.
    pub route: String,
    /// The inbound API.
    pub api: &'static str,
}

/// `{route}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// Route name.
    pub route: String,
}

/// `{upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    /// Upstream name.
    pub upstream: String,
}

/// `{upstream, outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamOutcome {
    /// Upstream name.
    pub upstream: String,
    /// Attempt outcome.
    pub outcome: Outcome,
}

/// `{route, upstream, outcome}` of a synthetic check (docs/design.md §10).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyntheticLabel {
    /// Route name.
    pub route: String,
    /// Upstream name.
    pub upstream: String,
    /// `ok` or the attempt's failure.
    pub outcome: Outcome,
}

/// `{route, reason}`: reason is the outcome that caused the failover.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteReason {
    /// Route name.
    pub route: String,
    /// Outcome of the failed attempt.
    pub reason: Outcome,
}

/// Token kind.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum TokenKind {
    /// Prompt tokens.
    Input,
    /// Completion tokens.
    Output,
}

impl EncodeLabelValue for TokenKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let text = match self {
            TokenKind::Input => "input",
            TokenKind::Output => "output",
        };
        std::fmt::Write::write_str(encoder, text)
    }
}

/// `{route, kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteTokens {
    /// Route name.
    pub route: String,
    /// Token kind.
    pub kind: TokenKind,
}

/// Reload result.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReloadResult {
    /// The new config serves.
    Ok,
    /// The new config was refused; the old one keeps serving.
    Rejected,
}

impl EncodeLabelValue for ReloadResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let text = match self {
            ReloadResult::Ok => "ok",
            ReloadResult::Rejected => "rejected",
        };
        std::fmt::Write::write_str(encoder, text)
    }
}

/// Why a stream was resumed (docs/design.md §4.5): a bounded set.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ResumeReason {
    /// The connection broke.
    Reset,
    /// The stream ended without a finish reason.
    Cut,
    /// Nothing arrived within the idle limit.
    IdleTimeout,
    /// The upstream sent an error event.
    ErrorEvent,
}

impl ResumeReason {
    /// The label text.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeReason::Reset => "reset",
            ResumeReason::Cut => "cut",
            ResumeReason::IdleTimeout => "idle_timeout",
            ResumeReason::ErrorEvent => "error_event",
        }
    }
}

impl EncodeLabelValue for ResumeReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// `{route, reason}` of a resume.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteResume {
    /// Route name.
    pub route: String,
    /// Why.
    pub reason: ResumeReason,
}

/// `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabel {
    /// Result.
    pub result: ReloadResult,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0])
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// `sluice_requests_total{route,code,api}`.
    pub requests: Family<RouteCode, Counter>,
    /// `sluice_request_duration_seconds{route,api}`.
    pub request_duration: Hist<RouteApi>,
    /// `sluice_upstream_attempts_total{upstream,outcome}`.
    pub attempts: Family<UpstreamOutcome, Counter>,
    /// `sluice_upstream_first_byte_seconds{upstream}`.
    pub first_byte: Hist<UpstreamLabel>,
    /// `sluice_failovers_total{route,reason}`.
    pub failovers: Family<RouteReason, Counter>,
    /// `sluice_stream_resumes_total{route,reason}`.
    pub stream_resumes: Family<RouteResume, Counter>,
    /// `sluice_upstream_effective_weight{upstream}`.
    pub effective_weight: Family<UpstreamLabel, Gauge<f64, AtomicU64>>,
    /// `sluice_circuit_state{upstream}`.
    pub circuit_state: Family<UpstreamLabel, Gauge>,
    /// `sluice_tokens_total{route,kind}`.
    pub tokens: Family<RouteTokens, Counter>,
    /// `sluice_spend_nanodollars_total{route}`.
    pub spend: Family<RouteLabel, Counter>,
    /// `sluice_reservations_open`.
    pub reservations_open: Gauge,
    /// `sluice_config_reloads_total{result}`.
    pub config_reloads: Family<ReloadLabel, Counter>,
    /// Balance grants (docs/design.md §5a): `sluice_grants_open`,
    /// `sluice_grant_renewals_total{result}`, `sluice_settle_batch_size`.
    pub grants: GrantMetrics,
    /// Limits (docs/design.md §5b): `sluice_limit_rejections_total{limit,key_kind}`,
    /// `sluice_limit_lease_takes_total{limit,result}`.
    pub limits: LimitMetrics,
    /// The cache (docs/design.md §13): `sluice_cache_requests_total{route,kind,result}`,
    /// `sluice_cache_bytes`, `sluice_cache_shared_errors_total`.
    pub cache: CacheMetrics,
    /// `sluice_stream_events_dropped_total`: SSE events that were not valid JSON.
    pub dropped_events: Counter,
    /// `sluice_synthetic_checks_total{route,upstream,outcome}`.
    pub synthetic_checks: Family<SyntheticLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `sluice` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice");
        let requests = Family::<RouteCode, Counter>::default();
        let request_duration: Hist<RouteApi> = Family::new_with_constructor(latency_histogram);
        let attempts = Family::<UpstreamOutcome, Counter>::default();
        let first_byte: Hist<UpstreamLabel> = Family::new_with_constructor(latency_histogram);
        let failovers = Family::<RouteReason, Counter>::default();
        let stream_resumes = Family::<RouteResume, Counter>::default();
        let effective_weight = Family::<UpstreamLabel, Gauge<f64, AtomicU64>>::default();
        let circuit_state = Family::<UpstreamLabel, Gauge>::default();
        let tokens = Family::<RouteTokens, Counter>::default();
        let spend = Family::<RouteLabel, Counter>::default();
        let reservations_open = Gauge::default();
        let config_reloads = Family::<ReloadLabel, Counter>::default();
        let dropped_events = Counter::default();
        let synthetic_checks = Family::<SyntheticLabel, Counter>::default();
        let grants = GrantMetrics::default();
        let limits = LimitMetrics::default();
        let cache = CacheMetrics::default();
        registry.register(
            "cache_requests",
            "Requests a route's cache answered (hit), sent upstream (miss) or was told to leave alone (bypass), by kind",
            cache.requests.clone(),
        );
        registry.register("cache_bytes", "Bytes the in-process cache tier holds", cache.bytes.clone());
        registry.register(
            "cache_shared_errors",
            "Failed or slow reads and writes of the shared cache tier (each one a miss)",
            cache.shared_errors.clone(),
        );
        registry.register(
            "limit_rejections",
            "Requests refused over a limit of their key or account, by limit and whose",
            limits.rejections.clone(),
        );
        registry.register(
            "limit_lease_takes",
            "Limit lease takes from the ledger, by limit and result (ok, short: the window is full, failed)",
            limits.takes.clone(),
        );
        registry.register("requests", "Requests answered, by route and HTTP status", requests.clone());
        registry.register(
            "request_duration_seconds",
            "Time to answer a request, whole response",
            request_duration.clone(),
        );
        registry.register("upstream_attempts", "Upstream attempts by outcome", attempts.clone());
        registry.register(
            "upstream_first_byte_seconds",
            "Time to the first body byte of an upstream",
            first_byte.clone(),
        );
        registry.register("failovers", "Attempts that moved on to another candidate, by reason", failovers.clone());
        registry.register(
            "stream_resumes",
            "Broken streams continued on another candidate, by reason",
            stream_resumes.clone(),
        );
        registry.register(
            "upstream_effective_weight",
            "Configured weight times recent success ratio",
            effective_weight.clone(),
        );
        registry.register(
            "circuit_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            circuit_state.clone(),
        );
        registry.register("tokens", "Tokens served, by kind", tokens.clone());
        registry.register("spend_nanodollars", "Settled spend in nanodollars", spend.clone());
        registry.register("reservations_open", "Billing reservations not yet settled", reservations_open.clone());
        registry.register("config_reloads", "Config reloads by result", config_reloads.clone());
        registry.register("grants_open", "Balance grants this process holds", grants.open.clone());
        registry.register("grant_renewals", "Balance grant renewals by result", grants.renewals.clone());
        registry.register("settle_batch_size", "Settlements committed per batch", grants.batch.clone());
        registry.register("settle_retries", "Settlement batches that failed and were retried", grants.retries.clone());
        for result in [RenewalResult::Ok, RenewalResult::Refused, RenewalResult::Failed] {
            let _ = grants.renewals.get_or_create(&RenewalLabel { result: Renewal(result) });
        }
        registry.register(
            "stream_events_dropped",
            "SSE events dropped because they were not valid JSON",
            dropped_events.clone(),
        );
        registry.register(
            "synthetic_checks",
            "Synthetic checks of route candidates, by outcome",
            synthetic_checks.clone(),
        );
        for result in [ReloadResult::Ok, ReloadResult::Rejected] {
            let _ = config_reloads.get_or_create(&ReloadLabel { result });
        }
        Self {
            registry,
            requests,
            request_duration,
            attempts,
            first_byte,
            failovers,
            stream_resumes,
            effective_weight,
            circuit_state,
            tokens,
            spend,
            reservations_open,
            config_reloads,
            grants,
            limits,
            cache,
            dropped_events,
            synthetic_checks,
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Metric handles of one upstream, resolved when config loads (not per request).
#[derive(Clone)]
pub struct UpstreamMetrics {
    /// Attempts by outcome, indexed like [`Outcome::ALL`].
    pub attempts: [Counter; 9],
    /// First-byte histogram.
    pub first_byte: Histogram,
    /// Effective weight gauge.
    pub effective_weight: Gauge<f64, AtomicU64>,
    /// Circuit gauge.
    pub circuit: Gauge,
}

impl UpstreamMetrics {
    /// Resolves the handles of upstream `name`.
    pub fn new(m: &Metrics, name: &str) -> Self {
        let attempts = Outcome::ALL
            .map(|outcome| m.attempts.get_or_create(&UpstreamOutcome { upstream: name.to_string(), outcome }).clone());
        let label = UpstreamLabel { upstream: name.to_string() };
        Self {
            attempts,
            first_byte: m.first_byte.get_or_create(&label).clone(),
            effective_weight: m.effective_weight.get_or_create(&label).clone(),
            circuit: m.circuit_state.get_or_create(&label).clone(),
        }
    }

    /// Counts an attempt.
    pub fn attempt(&self, outcome: Outcome) {
        if let Some(i) = Outcome::ALL.iter().position(|o| *o == outcome)
            && let Some(c) = self.attempts.get(i)
        {
            c.inc();
        }
    }
}

/// Metric handles of one route.
#[derive(Clone)]
pub struct RouteMetrics {
    /// Route name, for the `{route, code}` family.
    pub route: String,
    /// The handles of each inbound API, resolved on its first request (a route that is
    /// only asked in one API exports that API's series only).
    apis: [OnceLock<ApiMetrics>; Endpoint::ALL.len()],
    /// Its cache counters by kind (embeddings, completions) and result, resolved on
    /// first use.
    cache: [[OnceLock<Counter>; CacheResult::ALL.len()]; 2],
    /// Input tokens.
    pub input_tokens: Counter,
    /// Output tokens.
    pub output_tokens: Counter,
    /// Spend.
    pub spend: Counter,
}

/// A route's metric handles for one inbound API.
#[derive(Clone)]
struct ApiMetrics {
    /// `request_duration_seconds{route, api}`.
    duration: Histogram,
    /// `requests_total{route, code, api}` for the statuses the gateway itself answers,
    /// resolved once so that the request path does not build label sets.
    codes: Vec<(u16, Counter)>,
}

impl RouteMetrics {
    /// The route's cache counters of `kind`.
    pub fn cache<'a>(&'a self, metrics: &'a Metrics, kind: CacheKind) -> RouteCache<'a> {
        let counters = &self.cache[usize::from(kind == CacheKind::Completions)];
        RouteCache { metrics, route: &self.route, kind, counters }
    }

    /// Resolves the handles of route `name`.
    pub fn new(m: &Metrics, name: &str) -> Self {
        let route = RouteLabel { route: name.to_string() };
        let tokens = |kind| m.tokens.get_or_create(&RouteTokens { route: name.to_string(), kind }).clone();
        Self {
            route: name.to_string(),
            apis: Default::default(),
            cache: Default::default(),
            input_tokens: tokens(TokenKind::Input),
            output_tokens: tokens(TokenKind::Output),
            spend: m.spend.get_or_create(&route).clone(),
        }
    }

    /// Counts a request of inbound API `api` answered with `code` after `seconds`.
    pub fn answered(&self, m: &Metrics, api: Endpoint, code: u16, seconds: f64) {
        let handles = self.apis[api.index()].get_or_init(|| {
            let route = || self.route.clone();
            let api = api.api();
            ApiMetrics {
                duration: m.request_duration.get_or_create(&RouteApi { route: route(), api }).clone(),
                codes: COMMON_CODES
                    .iter()
                    .map(|&code| (code, m.requests.get_or_create(&RouteCode { route: route(), code, api }).clone()))
                    .collect(),
            }
        });
        handles.duration.observe(seconds);
        match handles.codes.iter().find(|(c, _)| *c == code) {
            Some((_, counter)) => {
                counter.inc();
            }
            // Other statuses are passed through from upstreams; bounded by HTTP itself.
            None => {
                m.requests.get_or_create(&RouteCode { route: self.route.clone(), code, api: api.api() }).inc();
            }
        }
    }
}

const COMMON_CODES: [u16; 11] = [200, 400, 401, 402, 404, 413, 429, 500, 502, 503, 504];
