//! `resolve()`: manifests → [`Snapshot`], the one path shared by the operator and file mode.
//!
//! It never fails as a whole. Every problem is reported at once with its resource and
//! field; a resource with errors is left out, a route that lost some candidates is kept
//! (degraded), and a route left with none is left out.
//!
//! (Just over ~400 lines: one walk over the three kinds in dependency order, kept in one
//! file so that the order in which problems are found reads top to bottom.)

use std::collections::{BTreeMap, BTreeSet};

use crate::error_budget::{BurnAlert, ErrorBudget};
use crate::manifests::Manifests;
use crate::model_route::{CacheScope, CacheSpec, ModelRoute, Price};
use crate::problem::{Problem, Severity};
use crate::snapshot::{
    AlertConfig, AuthConfig, AwsConfig, BudgetConfig, CacheConfig, CandidateConfig, CircuitBreakerConfig, FirstByte,
    GcpConfig, LatencyConfig, PriceConfig, ProbeConfig, RouteConfig, SNAPSHOT_FORMAT, SecretKeyConfig, Snapshot,
    SyntheticConfig, UpstreamConfig,
};
use crate::upstream::{ANTHROPIC_VERSION, AWS_SECRET_KEYS, Protocol, Upstream, UpstreamSpec};
use crate::{duration, validate};

/// Defaults of docs/design.md §2, in one place.
pub mod defaults {
    /// Upstream connect timeout.
    pub const CONNECT_MS: u64 = 2_000;
    /// Idle gap between stream chunks.
    pub const IDLE_MS: u64 = 60_000;
    /// Route deadline.
    pub const DEADLINE_MS: u64 = 540_000;
    /// Candidate weight.
    pub const WEIGHT: u32 = 100;
    /// Statuses that fail over.
    pub const RETRY_ON: [u16; 6] = [408, 429, 500, 502, 503, 504];
    /// Walks over the candidates.
    pub const MAX_WALKS: u32 = 5;
    /// First backoff step.
    pub const BACKOFF_BASE_MS: u64 = 250;
    /// Total backoff waiting.
    pub const BACKOFF_MAX_TOTAL_MS: u64 = 30_000;
    /// Reservation `max_tokens`.
    pub const MAX_TOKENS: u32 = 4_096;
    /// Time between two synthetic checks of one candidate.
    pub const SYNTHETIC_INTERVAL_MS: u64 = 90_000;
    /// `max_tokens` of a synthetic check.
    pub const SYNTHETIC_MAX_TOKENS: u32 = 1;
    /// How long a cache entry is served fresh (`cache.ttl`).
    pub const CACHE_TTL_MS: u64 = 24 * 3_600_000;
    /// Gateway group.
    pub const GATEWAY: &str = "default";
    /// Namespace of a manifest without one.
    pub const NAMESPACE: &str = "default";
}

/// Tells whether a Secret key exists, without revealing its value.
pub trait SecretLookup {
    /// True when Secret `name` in `namespace` has `key`.
    fn contains(&self, namespace: &str, name: &str, key: &str) -> bool;
}

/// A lookup that knows of no secrets (every reference is reported missing).
pub struct NoSecrets;

impl SecretLookup for NoSecrets {
    fn contains(&self, _: &str, _: &str, _: &str) -> bool {
        false
    }
}

/// Any closure `(namespace, name, key) -> bool` is a lookup.
impl<F: Fn(&str, &str, &str) -> bool> SecretLookup for F {
    fn contains(&self, namespace: &str, name: &str, key: &str) -> bool {
        self(namespace, name, key)
    }
}

/// The outcome of [`resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// What can be served.
    pub snapshot: Snapshot,
    /// Everything found wrong, loading problems included, errors first.
    pub problems: Vec<Problem>,
}

impl Resolved {
    /// Problems that left something out.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| p.severity == Severity::Error)
    }

    /// True when nothing was left out.
    pub fn is_clean(&self) -> bool {
        self.errors().next().is_none()
    }
}

/// Resolves manifests into a snapshot, reporting every problem at once.
pub fn resolve(manifests: &Manifests, secrets: &dyn SecretLookup) -> Resolved {
    let mut problems = manifests.problems.clone();
    let upstreams = resolve_upstreams(&manifests.upstreams, secrets, &mut problems);
    let routes = resolve_routes(&manifests.routes, &upstreams, &mut problems);
    let budgets = resolve_budgets(&manifests.budgets, &routes, &mut problems);
    problems.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.resource.cmp(&b.resource)));
    Resolved { snapshot: Snapshot { format: SNAPSHOT_FORMAT, upstreams, routes, budgets }, problems }
}

fn namespace_of(ns: &Option<String>) -> &str {
    ns.as_deref().unwrap_or(defaults::NAMESPACE)
}

fn report(problems: &mut Vec<Problem>, resource: &str, errors: Vec<validate::FieldError>) -> bool {
    let clean = errors.is_empty();
    problems.extend(errors.into_iter().map(|(field, message)| Problem::error(resource, field, message)));
    clean
}

/// A validated duration field in milliseconds, or `default` when it is not set.
///
/// The schema's patterns bound the form of a duration, not its size; one they accept that
/// [`duration::parse`] finds too long (over a century) is capped at a century rather than
/// silently replaced by the default.
fn ms(value: Option<&str>, default: u64) -> u64 {
    const CENTURY_MS: u64 = 100 * 365 * 86_400_000;
    match value.map(duration::parse) {
        None => default,
        Some(Ok(d)) => u64::try_from(d.as_millis()).unwrap_or(CENTURY_MS).min(CENTURY_MS),
        Some(Err(_)) => CENTURY_MS,
    }
}

fn resolve_upstreams(
    upstreams: &[Upstream],
    secrets: &dyn SecretLookup,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, UpstreamConfig> {
    let mut out = BTreeMap::new();
    for u in upstreams {
        let name = u.metadata.name.clone().unwrap_or_default();
        let namespace = namespace_of(&u.metadata.namespace).to_string();
        let key = format!("{namespace}/{name}");
        let resource = format!("Upstream {key}");
        if !report(problems, &resource, validate::upstream(&u.spec)) {
            continue;
        }
        if out.contains_key(&key) {
            problems.push(Problem::error(
                &resource,
                "metadata.name",
                "declared more than once; the later one is ignored",
            ));
            continue;
        }
        let spec = &u.spec;
        // Validation guarantees a base URL: the manifest's or the protocol's default.
        let Some(base_url) =
            spec.base_url.clone().or_else(|| spec.protocol.default_base_url(spec.gcp.as_ref(), spec.aws.as_ref()))
        else {
            continue;
        };
        let (default_header, default_scheme) = spec.protocol.default_auth_header();
        let auth = spec.auth.as_ref().map(|a| AuthConfig {
            secret: a.secret_ref.name.clone(),
            key: a.secret_ref.key.clone(),
            header: a.header.clone().unwrap_or_else(|| default_header.into()).to_ascii_lowercase(),
            scheme: a.scheme.clone().unwrap_or_else(|| default_scheme.into()),
        });
        check_secrets(spec, &namespace, secrets, &mut |field, message| {
            problems.push(Problem::warning(&resource, field, message));
        });
        let timeouts = spec.timeouts.clone().unwrap_or_default();
        let first_byte = match timeouts.first_byte.as_deref() {
            None | Some("auto") => FirstByte::Auto,
            Some(d) => FirstByte::FixedMs(ms(Some(d), 5_000)),
        };
        let cb = spec.circuit_breaker.clone().unwrap_or_default();
        out.insert(
            key.clone(),
            UpstreamConfig {
                key,
                name,
                namespace,
                protocol: spec.protocol,
                base_url: base_url.trim_end_matches('/').to_string(),
                region: spec.region.clone(),
                auth,
                connect_timeout_ms: ms(timeouts.connect.as_deref(), defaults::CONNECT_MS),
                first_byte,
                // `auto` is capped by the default limit.
                idle_timeout_ms: match timeouts.idle.as_deref() {
                    Some("auto") => defaults::IDLE_MS,
                    d => ms(d, defaults::IDLE_MS),
                },
                idle_auto: timeouts.idle.as_deref() == Some("auto"),
                max_concurrent_requests: spec.max_concurrent_requests,
                circuit_breaker: CircuitBreakerConfig {
                    failure_rate_percent: cb.failure_rate_percent.unwrap_or(50),
                    minimum_requests: cb.minimum_requests.unwrap_or(20),
                    open_for_ms: ms(cb.open_for.as_deref(), 30_000),
                    half_open_requests: cb.half_open_requests.unwrap_or(3),
                },
                probe: spec.probe.as_ref().map(|p| ProbeConfig {
                    interval_ms: ms(p.interval.as_deref(), 90_000),
                    path: p.path.clone().unwrap_or_else(|| "/models".into()),
                }),
                assistant_prefill: spec.assistant_prefill.unwrap_or(spec.protocol.default_assistant_prefill()),
                gcp: spec.gcp.as_ref().map(|g| GcpConfig {
                    project: g.project.clone(),
                    location: g.location.clone(),
                    credentials: g
                        .credentials
                        .as_ref()
                        .map(|c| SecretKeyConfig { secret: c.secret_ref.name.clone(), key: c.secret_ref.key.clone() }),
                }),
                aws: spec.aws.as_ref().map(|a| AwsConfig {
                    region: a.region.clone(),
                    credentials_secret: a.credentials.as_ref().map(|c| c.secret_ref.name.clone()),
                }),
                azure_api_version: spec.azure.as_ref().map(|a| a.api_version.clone()),
                anthropic_version: (spec.protocol == Protocol::Anthropic).then(|| {
                    spec.anthropic.as_ref().map_or_else(|| ANTHROPIC_VERSION.to_string(), |a| a.version.clone())
                }),
            },
        );
    }
    out
}

/// Warns (as `(field, message)`) about every referenced Secret key that is missing; the
/// AWS session token is optional and not checked.
fn check_secrets(spec: &UpstreamSpec, namespace: &str, secrets: &dyn SecretLookup, warn: &mut dyn FnMut(&str, String)) {
    let mut check = |field: &str, secret: &str, key: &str, without: &str| {
        if !secrets.contains(namespace, secret, key) {
            warn(field, format!("Secret {namespace}/{secret} has no key {key:?}; {without} until it does"));
        }
    };
    if let Some(a) = &spec.auth {
        check("spec.auth.secretRef", &a.secret_ref.name, &a.secret_ref.key, "requests go out without credentials");
    }
    if let Some(c) = spec.gcp.as_ref().and_then(|g| g.credentials.as_ref()) {
        check("spec.gcp.credentials.secretRef", &c.secret_ref.name, &c.secret_ref.key, "requests cannot be authorized");
    }
    if let Some(c) = spec.aws.as_ref().and_then(|a| a.credentials.as_ref()) {
        for key in &AWS_SECRET_KEYS[..2] {
            check("spec.aws.credentials.secretRef", &c.secret_ref.name, key, "requests cannot be signed");
        }
    }
}

fn resolve_routes(
    routes: &[ModelRoute],
    upstreams: &BTreeMap<String, UpstreamConfig>,
    problems: &mut Vec<Problem>,
) -> Vec<RouteConfig> {
    let mut out: Vec<RouteConfig> = Vec::new();
    let mut sorted: Vec<&ModelRoute> = routes.iter().collect();
    sorted.sort_by_key(|r| (namespace_of(&r.metadata.namespace).to_string(), r.metadata.name.clone()));
    for r in sorted {
        let name = r.metadata.name.clone().unwrap_or_default();
        let namespace = namespace_of(&r.metadata.namespace).to_string();
        let key = format!("{namespace}/{name}");
        let resource = format!("ModelRoute {key}");
        if !report(problems, &resource, validate::model_route(&r.spec)) {
            continue;
        }
        if out.iter().any(|o| o.key == key) {
            problems.push(Problem::error(
                &resource,
                "metadata.name",
                "declared more than once; the later one is ignored",
            ));
            continue;
        }
        if let Some(other) = out.iter().find(|o| o.model == r.spec.model) {
            problems.push(Problem::error(
                &resource,
                "spec.model",
                format!(
                    "model {:?} is already served by ModelRoute {}; the route is left out",
                    r.spec.model, other.key
                ),
            ));
            continue;
        }
        let spec = &r.spec;
        let mut candidates = Vec::new();
        for (i, c) in spec.candidates.iter().enumerate() {
            let upstream_key = format!("{namespace}/{}", c.upstream);
            if !upstreams.contains_key(&upstream_key) {
                problems.push(Problem::warning(
                    &resource,
                    format!("spec.candidates[{i}].upstream"),
                    format!("Upstream {:?} not found in namespace {namespace:?}; the candidate is skipped", c.upstream),
                ));
                continue;
            }
            candidates.push(CandidateConfig {
                upstream: upstream_key,
                model: c.model.clone().unwrap_or_else(|| spec.model.clone()),
                weight: c.weight.unwrap_or(defaults::WEIGHT),
                price: c.price.as_ref().and_then(price_config),
            });
        }
        if candidates.is_empty() {
            problems.push(Problem::error(
                &resource,
                "spec.candidates",
                "no candidate resolved to an Upstream; the route is left out",
            ));
            continue;
        }
        let failover = spec.failover.clone().unwrap_or_default();
        let backoff = spec.backoff.clone().unwrap_or_default();
        out.push(RouteConfig {
            key,
            name,
            namespace,
            model: spec.model.clone(),
            gateway: spec.gateway.clone().unwrap_or_else(|| defaults::GATEWAY.into()),
            deadline_ms: ms(spec.deadline.as_deref(), defaults::DEADLINE_MS),
            selection: spec.selection.unwrap_or_default(),
            candidates,
            retry_on: failover.retry_on.unwrap_or_else(|| defaults::RETRY_ON.to_vec()),
            on_first_byte_timeout: failover.on_first_byte_timeout.unwrap_or_default(),
            mid_stream: failover.mid_stream.unwrap_or_default(),
            max_walks: backoff.max_attempts.unwrap_or(defaults::MAX_WALKS),
            backoff_base_ms: ms(backoff.base.as_deref(), defaults::BACKOFF_BASE_MS),
            backoff_max_total_ms: ms(backoff.max_total.as_deref(), defaults::BACKOFF_MAX_TOTAL_MS),
            default_max_tokens: spec.default_max_tokens.unwrap_or(defaults::MAX_TOKENS),
            synthetic: spec.synthetic.as_ref().map(|s| SyntheticConfig {
                interval_ms: ms(s.interval.as_deref(), defaults::SYNTHETIC_INTERVAL_MS),
                max_tokens: s.max_tokens.unwrap_or(defaults::SYNTHETIC_MAX_TOKENS),
                api: s.api.unwrap_or_default(),
            }),
            cache: spec.cache.as_ref().map(cache_config).unwrap_or_default(),
            hosted_tools: spec.hosted_tools.unwrap_or_default(),
        });
    }
    out
}

/// A route's `cache`, defaults filled in (`CacheConfig::default()`: no `cache` at all).
fn cache_config(c: &CacheSpec) -> CacheConfig {
    let d = CacheConfig::default();
    CacheConfig {
        ttl_ms: ms(c.ttl.as_deref(), d.ttl_ms),
        shared: c.scope.unwrap_or_default() == CacheScope::Shared,
        embeddings: c.embeddings.unwrap_or(d.embeddings),
        completions: c.completions.unwrap_or(d.completions),
        stale_if_error_ms: ms(c.stale_if_error.as_deref(), d.stale_if_error_ms),
        // USD per answer → nanodollars per answer (the same ×1e9 as a candidate's
        // price per 1M tokens, whose unit stays per 1M tokens).
        price_nanos: c.price.as_deref().and_then(usd_to_nanos).unwrap_or(d.price_nanos),
    }
}

/// USD (validated decimal string) → nanodollars, exactly: a candidate's price per 1M
/// tokens → nanodollars per 1M tokens, the cache's price per answer → nanodollars per
/// answer.
pub fn usd_to_nanos(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 || whole.is_empty() {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac_nanos: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<9}").parse().ok()? };
    whole.checked_mul(1_000_000_000)?.checked_add(frac_nanos)
}

/// The price in nanodollars; cache reads and writes cost `input` unless priced, web
/// searches nothing.
fn price_config(p: &Price) -> Option<PriceConfig> {
    let input = usd_to_nanos(&p.input)?;
    let or_input = |v: &Option<String>| v.as_deref().map_or(Some(input), usd_to_nanos);
    Some(PriceConfig {
        input_per_mtok_nanos: input,
        output_per_mtok_nanos: usd_to_nanos(&p.output)?,
        cached_input_per_mtok_nanos: or_input(&p.cached_input)?,
        cache_write_per_mtok_nanos: or_input(&p.cache_write)?,
        web_search_per_k_nanos: p.web_search.as_deref().map_or(Some(0), usd_to_nanos)?,
    })
}

/// The Google SRE workbook tiers for a 30-day window.
pub fn default_alerts() -> Vec<BurnAlert> {
    [("page", "1h", "5m", "14.4"), ("page", "6h", "30m", "6"), ("ticket", "3d", "6h", "1")]
        .into_iter()
        .map(|(name, long, short, rate)| BurnAlert {
            name: name.into(),
            long_window: long.into(),
            short_window: short.into(),
            burn_rate: rate.into(),
        })
        .collect()
}

fn resolve_budgets(budgets: &[ErrorBudget], routes: &[RouteConfig], problems: &mut Vec<Problem>) -> Vec<BudgetConfig> {
    let mut out: Vec<BudgetConfig> = Vec::new();
    let mut seen = BTreeSet::new();
    for b in budgets {
        let name = b.metadata.name.clone().unwrap_or_default();
        let namespace = namespace_of(&b.metadata.namespace).to_string();
        let key = format!("{namespace}/{name}");
        let resource = format!("ErrorBudget {key}");
        if !report(problems, &resource, validate::error_budget(&b.spec)) {
            continue;
        }
        if !seen.insert(key.clone()) {
            problems.push(Problem::error(
                &resource,
                "metadata.name",
                "declared more than once; the later one is ignored",
            ));
            continue;
        }
        let spec = &b.spec;
        let mut route_keys = Vec::new();
        for (i, r) in spec.routes.iter().enumerate() {
            let rk = format!("{namespace}/{r}");
            if routes.iter().any(|x| x.key == rk) {
                route_keys.push(rk);
            } else {
                problems.push(Problem::warning(
                    &resource,
                    format!("spec.routes[{i}]"),
                    format!("ModelRoute {r:?} is not served in namespace {namespace:?}; it is not counted"),
                ));
            }
        }
        let alerts = spec.alerts.clone().unwrap_or_else(default_alerts);
        out.push(BudgetConfig {
            key,
            name,
            namespace,
            routes: route_keys,
            objective: spec.objective.clone(),
            objective_ratio: spec.objective.parse::<f64>().unwrap_or(99.9) / 100.0,
            window_ms: ms(Some(&spec.window), 30 * 86_400_000),
            method: spec.method,
            timeslice_ms: spec.timeslice.as_deref().map(|t| ms(Some(t), 60_000)),
            latency: spec.latency.as_ref().map(|l| LatencyConfig {
                threshold_ms: ms(Some(&l.threshold), 10_000),
                percentile: l.percentile.unwrap_or(99),
            }),
            alerts: alerts
                .iter()
                .map(|a| AlertConfig {
                    name: a.name.clone(),
                    long_window_ms: ms(Some(&a.long_window), 3_600_000),
                    short_window_ms: ms(Some(&a.short_window), 300_000),
                    burn_rate: a.burn_rate.parse().unwrap_or(1.0),
                })
                .collect(),
        });
    }
    out
}
