//! The cache metrics (docs/design.md §13): lookups per route, kind and result, the bytes
//! held, and the shared tier's errors.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::Metrics;

/// `{route,kind,result}` of a cache lookup.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabel {
    /// Route name.
    pub route: String,
    /// `embeddings` or `completions`.
    pub kind: &'static str,
    /// `hit`, `miss`, `bypass` or `stale`.
    pub result: &'static str,
}

/// What a cache counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// `/v1/embeddings` inputs.
    Embeddings,
    /// Whole completions of the other APIs.
    Completions,
}

impl CacheKind {
    /// The `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheKind::Embeddings => "embeddings",
            CacheKind::Completions => "completions",
        }
    }
}

/// How a request met the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheResult {
    /// Answered from it, no upstream.
    Hit,
    /// Went upstream (an embeddings batch: for at least one input).
    Miss,
    /// Told to neither read nor store.
    Bypass,
    /// Answered from an entry past its `ttl` because every candidate failed.
    Stale,
}

impl CacheResult {
    pub(super) const ALL: [CacheResult; 4] =
        [CacheResult::Hit, CacheResult::Miss, CacheResult::Bypass, CacheResult::Stale];

    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Miss => "miss",
            CacheResult::Bypass => "bypass",
            CacheResult::Stale => "stale",
        }
    }
}

/// The cache metrics.
#[derive(Clone, Debug, Default)]
pub struct CacheMetrics {
    /// `sluice_cache_requests_total{route,kind,result}`.
    pub requests: Family<CacheLabel, Counter>,
    /// `sluice_cache_bytes`.
    pub bytes: Gauge,
    /// `sluice_cache_shared_errors_total`.
    pub shared_errors: Counter,
}

/// A route's cache counter of one kind.
pub struct RouteCache<'a> {
    pub(super) metrics: &'a Metrics,
    pub(super) route: &'a str,
    pub(super) kind: CacheKind,
    pub(super) counters: &'a [OnceLock<Counter>; CacheResult::ALL.len()],
}

impl RouteCache<'_> {
    /// Counts one request (the series is resolved on its first count).
    pub fn count(&self, result: CacheResult) {
        let at = CacheResult::ALL.iter().position(|r| *r == result).unwrap_or(0);
        let counter = self.counters[at].get_or_init(|| {
            let label = CacheLabel { route: self.route.to_owned(), kind: self.kind.as_str(), result: result.as_str() };
            self.metrics.cache.requests.get_or_create(&label).clone()
        });
        counter.inc();
    }
}
