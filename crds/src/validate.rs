//! Field validation for file mode, mirroring the CRD schema (bounds and CEL rules) with
//! the same messages, so a manifest refused by `kubectl apply` is refused here too.
//!
//! Each function returns every problem at once as `(field path, message)` pairs.

use std::sync::LazyLock;

use regex::Regex;

use crate::account_limit::AccountLimitSpec;
use crate::error_budget::{BudgetMethod, ErrorBudgetSpec};
use crate::model_route::ModelRouteSpec;
use crate::schema::{DURATION_MESSAGE, MONEY_MESSAGE, max_len, msg};
use crate::upstream::{Protocol, UpstreamSpec};

/// A field path and what is wrong with it.
pub type FieldError = (String, String);

// The patterns below are the ones in the CEL rules of the CRD types; the CEL fixture
// tests run every fixture through both, so a drift between them fails a test.
macro_rules! pattern {
    ($name:ident, $re:expr) => {
        static $name: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new($re).ok());
    };
}
pattern!(BASE_URL, r"^https?://[^/?#[:space:]]+");
pattern!(HEADER, r"^[A-Za-z0-9-]+$");
pattern!(DURATION, r"^([0-9]+(ms|s|m|h))+$");
pattern!(ZERO_DURATION, r"^(0+(ms|s|m|h))+$");
pattern!(MODEL, r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$");
pattern!(GATEWAY, r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$");
pattern!(UPSTREAM_NAME, r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$");
pattern!(MONEY, r"^[0-9]{1,7}(\.[0-9]{1,9})?$");
pattern!(OBJECTIVE, r"^[0-9]{1,2}(\.[0-9]{1,6})?$");
pattern!(WINDOW_DAYS, r"^([1-9]|[1-8][0-9]|90)d$");
pattern!(WINDOW_HOURS, r"^([1-9][0-9]{0,2}|1[0-9]{3}|20[0-9]{2}|21[0-5][0-9]|2160)h$");
pattern!(TIMESLICE_S, r"^([1-9][0-9]{0,2}|[1-2][0-9]{3}|3[0-5][0-9]{2})s$");
pattern!(TIMESLICE_M, r"^([1-9]|[1-5][0-9])m$");
pattern!(ALERT_NAME, r"^[a-z][a-z0-9-]{0,30}$");
pattern!(ALERT_WINDOW, r"^[1-9][0-9]{0,4}(m|h|d)$");
pattern!(BURN_RATE, r"^[0-9]{1,4}(\.[0-9]{1,3})?$");
pattern!(GCP_PROJECT, r"^[a-z0-9][-a-z0-9.:]{0,127}$");
pattern!(GCP_LOCATION, r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$");
pattern!(AWS_REGION, r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$");
pattern!(VERSION, r"^[A-Za-z0-9][-A-Za-z0-9.]{0,63}$");
pattern!(ACCOUNT, r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$");

fn matches(re: &LazyLock<Option<Regex>>, text: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(text))
}

/// The checks of one resource, accumulating problems.
#[derive(Default)]
struct Checks(Vec<FieldError>);

impl Checks {
    fn fail(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push((field.into(), message.into()));
    }

    fn rule(&mut self, ok: bool, field: impl Into<String>, message: &str) {
        if !ok {
            self.fail(field, message);
        }
    }

    fn range(&mut self, value: Option<u32>, field: &str, min: u32, max: u32) {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            self.fail(field, format!("must be between {min} and {max}, got {v}"));
        }
    }

    fn len(&mut self, len: usize, field: &str, min: usize, max: usize, what: &str) {
        if !(min..=max).contains(&len) {
            self.fail(field, format!("must list {min} to {max} {what}, got {len}"));
        }
    }

    /// A string's length in characters, as the schema's `minLength`/`maxLength` count it.
    fn chars(&mut self, value: &str, field: &str, min: usize, max: usize) {
        let n = value.chars().count();
        if n < min || n > max {
            self.fail(field, format!("must be {min} to {max} characters"));
        }
    }

    /// A `maxLength` that no pattern implies: true when `value` is within it.
    fn max_chars(&mut self, value: &str, field: &str, max: usize) -> bool {
        let ok = value.chars().count() <= max;
        if !ok {
            self.fail(field, format!("must be at most {max} characters"));
        }
        ok
    }

    /// A string of at most `max` characters that must pass `rule` (checked only when
    /// within the length, so an over-long value gets one message).
    fn bounded_rule(&mut self, value: &str, max: usize, ok: impl FnOnce(&str) -> bool, field: &str, message: &str) {
        if self.max_chars(value, field, max) {
            self.rule(ok(value), field, message);
        }
    }

    fn duration(&mut self, value: Option<&str>, field: &str) {
        if let Some(v) = value {
            self.bounded_rule(v, max_len::DURATION, is_schema_duration, field, DURATION_MESSAGE);
        }
    }
}

/// The CRD's duration rule: `<int><unit>` groups in ms, s, m, h, not zero.
pub fn is_schema_duration(text: &str) -> bool {
    matches(&DURATION, text) && !matches(&ZERO_DURATION, text)
}

/// The timeouts' rule: a [`is_schema_duration`] duration or the word `auto`.
fn duration_or_auto(text: &str) -> bool {
    text == "auto" || is_schema_duration(text)
}

/// The CRD's synthetic interval rule: a duration in ms, s, m, h of at least one second.
/// One too long for [`crate::duration::parse`] (over a century) is long enough.
pub fn is_synthetic_interval(text: &str) -> bool {
    matches(&DURATION, text) && crate::duration::parse(text).ok().is_none_or(|d| d >= std::time::Duration::from_secs(1))
}

/// The CRD's cache duration rule (`cache.ttl`, `cache.staleIfError`): a duration in
/// ms, s, m, h between one second and 720h (30 days). One too long for
/// [`crate::duration::parse`] (over a century) is too long here too.
pub fn is_cache_duration(text: &str) -> bool {
    const MIN: std::time::Duration = std::time::Duration::from_secs(1);
    const MAX: std::time::Duration = std::time::Duration::from_secs(720 * 3_600);
    matches(&DURATION, text) && crate::duration::parse(text).is_ok_and(|d| (MIN..=MAX).contains(&d))
}

/// An alert window in minutes, as the CEL rule computes it; `None` unless it matches
/// the alert window pattern.
fn alert_window_minutes(window: &str) -> Option<u64> {
    if !matches(&ALERT_WINDOW, window) {
        return None;
    }
    let (number, unit) = window.split_at(window.len() - 1);
    let per_unit = match unit {
        "d" => 1440,
        "h" => 60,
        _ => 1,
    };
    number.parse::<u64>().ok().map(|n| n * per_unit)
}

/// Validates an Upstream spec.
pub fn upstream(spec: &UpstreamSpec) -> Vec<FieldError> {
    let mut c = Checks::default();
    if let Some(url) = &spec.base_url {
        c.bounded_rule(url, max_len::URL, |u| matches(&BASE_URL, u), "spec.baseUrl", msg::BASE_URL);
    }
    protocol_blocks(&mut c, spec);
    if let Some(region) = &spec.region
        && region.chars().count() > 63
    {
        c.fail("spec.region", "must be at most 63 characters");
    }
    if let Some(auth) = &spec.auth {
        if let Some(header) = &auth.header {
            c.bounded_rule(header, max_len::HEADER, |h| matches(&HEADER, h), "spec.auth.header", msg::HEADER);
        }
        c.chars(&auth.secret_ref.name, "spec.auth.secretRef.name", 1, 253);
        c.chars(&auth.secret_ref.key, "spec.auth.secretRef.key", 1, 253);
    }
    if let Some(t) = &spec.timeouts {
        c.duration(t.connect.as_deref(), "spec.timeouts.connect");
        if let Some(idle) = &t.idle {
            c.bounded_rule(idle, max_len::DURATION, duration_or_auto, "spec.timeouts.idle", msg::IDLE);
        }
        if let Some(fb) = &t.first_byte {
            c.bounded_rule(fb, max_len::DURATION, duration_or_auto, "spec.timeouts.firstByte", msg::FIRST_BYTE);
        }
    }
    c.range(spec.max_concurrent_requests, "spec.maxConcurrentRequests", 1, 1_000_000);
    if let Some(cb) = &spec.circuit_breaker {
        c.range(cb.failure_rate_percent, "spec.circuitBreaker.failureRatePercent", 1, 100);
        c.range(cb.minimum_requests, "spec.circuitBreaker.minimumRequests", 1, 10_000);
        c.range(cb.half_open_requests, "spec.circuitBreaker.halfOpenRequests", 1, 100);
        c.duration(cb.open_for.as_deref(), "spec.circuitBreaker.openFor");
    }
    if let Some(p) = &spec.probe {
        c.duration(p.interval.as_deref(), "spec.probe.interval");
        if let Some(path) = &p.path {
            c.bounded_rule(path, max_len::URL, |p| p.starts_with('/'), "spec.probe.path", msg::PROBE_PATH);
        }
    }
    c.0
}

/// The spec-wide rules of `upstream::rules`: the block each protocol needs, no block it
/// would ignore, and the fields of those blocks.
fn protocol_blocks(c: &mut Checks, spec: &UpstreamSpec) {
    let p = spec.protocol;
    c.rule(spec.base_url.is_some() || !p.needs_base_url(), "spec.baseUrl", msg::BASE_URL_REQUIRED);
    c.rule(spec.gcp.is_some() || !p.is_vertex(), "spec.gcp", msg::GCP_REQUIRED);
    c.rule(spec.aws.is_some() || p != Protocol::Bedrock, "spec.aws", msg::AWS_REQUIRED);
    c.rule(spec.azure.is_some() || p != Protocol::AzureOpenai, "spec.azure", msg::AZURE_REQUIRED);
    c.rule(spec.gcp.is_none() || p.is_vertex(), "spec.gcp", msg::GCP_ONLY);
    c.rule(spec.aws.is_none() || p == Protocol::Bedrock, "spec.aws", msg::AWS_ONLY);
    c.rule(spec.azure.is_none() || p == Protocol::AzureOpenai, "spec.azure", msg::AZURE_ONLY);
    c.rule(spec.anthropic.is_none() || p == Protocol::Anthropic, "spec.anthropic", msg::ANTHROPIC_ONLY);
    if let Some(g) = &spec.gcp {
        c.rule(matches(&GCP_PROJECT, &g.project), "spec.gcp.project", msg::GCP_PROJECT);
        c.rule(matches(&GCP_LOCATION, &g.location), "spec.gcp.location", msg::GCP_LOCATION);
        if let Some(cred) = &g.credentials {
            c.chars(&cred.secret_ref.name, "spec.gcp.credentials.secretRef.name", 1, 253);
            c.chars(&cred.secret_ref.key, "spec.gcp.credentials.secretRef.key", 1, 253);
        }
    }
    if let Some(a) = &spec.aws {
        c.rule(matches(&AWS_REGION, &a.region), "spec.aws.region", msg::AWS_REGION);
        if let Some(cred) = &a.credentials {
            c.chars(&cred.secret_ref.name, "spec.aws.credentials.secretRef.name", 1, 253);
        }
    }
    if let Some(a) = &spec.azure {
        c.rule(matches(&VERSION, &a.api_version), "spec.azure.apiVersion", msg::AZURE_API_VERSION);
    }
    if let Some(a) = &spec.anthropic {
        c.rule(matches(&VERSION, &a.version), "spec.anthropic.version", msg::ANTHROPIC_VERSION);
    }
}

/// Validates a ModelRoute spec.
pub fn model_route(spec: &ModelRouteSpec) -> Vec<FieldError> {
    let mut c = Checks::default();
    c.rule(matches(&MODEL, &spec.model), "spec.model", msg::MODEL);
    if let Some(g) = &spec.gateway {
        c.rule(matches(&GATEWAY, g), "spec.gateway", msg::GATEWAY);
    }
    c.duration(spec.deadline.as_deref(), "spec.deadline");
    c.len(spec.candidates.len(), "spec.candidates", 1, 8, "candidates");
    let unique =
        spec.candidates.iter().all(|a| spec.candidates.iter().filter(|b| b.upstream == a.upstream).count() == 1);
    c.rule(unique, "spec.candidates", msg::CANDIDATES_UNIQUE);
    for (i, cand) in spec.candidates.iter().enumerate() {
        let at = format!("spec.candidates[{i}]");
        c.rule(matches(&UPSTREAM_NAME, &cand.upstream), format!("{at}.upstream"), msg::UPSTREAM_NAME);
        if let Some(m) = &cand.model {
            c.chars(m, &format!("{at}.model"), 1, 256);
        }
        c.range(cand.weight, &format!("{at}.weight"), 1, 1000);
        if let Some(p) = &cand.price {
            c.rule(matches(&MONEY, &p.input), format!("{at}.price.input"), MONEY_MESSAGE);
            c.rule(matches(&MONEY, &p.output), format!("{at}.price.output"), MONEY_MESSAGE);
            for (value, field) in [(&p.cached_input, "cachedInput"), (&p.cache_write, "cacheWrite")] {
                if let Some(v) = value {
                    c.rule(matches(&MONEY, v), format!("{at}.price.{field}"), MONEY_MESSAGE);
                }
            }
            if let Some(v) = &p.web_search {
                c.rule(matches(&MONEY, v), format!("{at}.price.webSearch"), msg::WEB_SEARCH_PRICE);
            }
        }
    }
    if let Some(f) = &spec.failover
        && let Some(retry_on) = &f.retry_on
    {
        c.len(retry_on.len(), "spec.failover.retryOn", 1, 16, "statuses");
        let ok = retry_on.iter().all(|&s| s == 408 || s == 429 || (500..=599).contains(&s));
        c.rule(ok, "spec.failover.retryOn", msg::RETRY_ON);
    }
    if let Some(b) = &spec.backoff {
        c.range(b.max_attempts, "spec.backoff.maxAttempts", 1, 20);
        c.duration(b.base.as_deref(), "spec.backoff.base");
        c.duration(b.max_total.as_deref(), "spec.backoff.maxTotal");
    }
    c.range(spec.default_max_tokens, "spec.defaultMaxTokens", 1, 10_000_000);
    if let Some(s) = &spec.synthetic {
        if let Some(interval) = &s.interval {
            let field = "spec.synthetic.interval";
            c.bounded_rule(interval, max_len::DURATION, is_synthetic_interval, field, msg::SYNTHETIC_INTERVAL);
        }
        c.range(s.max_tokens, "spec.synthetic.maxTokens", 1, 4096);
    }
    if let Some(cache) = &spec.cache {
        for (value, field, message) in [
            (&cache.ttl, "spec.cache.ttl", msg::CACHE_TTL),
            (&cache.stale_if_error, "spec.cache.staleIfError", msg::CACHE_STALE_IF_ERROR),
        ] {
            if let Some(v) = value {
                c.bounded_rule(v, max_len::DURATION, is_cache_duration, field, message);
            }
        }
        if let Some(price) = &cache.price {
            c.rule(matches(&MONEY, price), "spec.cache.price", msg::CACHE_PRICE);
        }
    }
    c.0
}

/// Validates an ErrorBudget spec.
pub fn error_budget(spec: &ErrorBudgetSpec) -> Vec<FieldError> {
    let mut c = Checks::default();
    c.len(spec.routes.len(), "spec.routes", 1, 64, "routes");
    for (i, r) in spec.routes.iter().enumerate() {
        c.chars(r, &format!("spec.routes[{i}]"), 1, 253);
    }
    let unique = spec.routes.iter().all(|a| spec.routes.iter().filter(|b| *b == a).count() == 1);
    c.rule(unique, "spec.routes", msg::ROUTES_UNIQUE);
    let objective_ok =
        matches(&OBJECTIVE, &spec.objective) && spec.objective.parse::<f64>().is_ok_and(|v| v > 50.0 && v < 100.0);
    c.rule(objective_ok, "spec.objective", msg::OBJECTIVE);
    let window_ok = matches(&WINDOW_DAYS, &spec.window) || matches(&WINDOW_HOURS, &spec.window);
    c.rule(window_ok, "spec.window", msg::WINDOW);
    match &spec.timeslice {
        Some(ts) => {
            let ok = matches(&TIMESLICE_S, ts) || matches(&TIMESLICE_M, ts);
            c.rule(ok, "spec.timeslice", msg::TIMESLICE);
        }
        None => c.rule(spec.method != BudgetMethod::Timeslices, "spec", msg::TIMESLICE_REQUIRED),
    }
    if let Some(l) = &spec.latency {
        c.duration(Some(&l.threshold), "spec.latency.threshold");
        c.range(l.percentile, "spec.latency.percentile", 50, 99);
    }
    if let Some(alerts) = &spec.alerts {
        c.len(alerts.len(), "spec.alerts", 1, 8, "alerts");
        for (i, a) in alerts.iter().enumerate() {
            let at = format!("spec.alerts[{i}]");
            c.rule(matches(&ALERT_NAME, &a.name), format!("{at}.name"), msg::ALERT_NAME);
            c.rule(matches(&ALERT_WINDOW, &a.long_window), format!("{at}.longWindow"), msg::LONG_WINDOW);
            c.rule(matches(&ALERT_WINDOW, &a.short_window), format!("{at}.shortWindow"), msg::SHORT_WINDOW);
            let burn_ok = matches(&BURN_RATE, &a.burn_rate) && a.burn_rate.parse::<f64>().is_ok_and(|v| v > 0.0);
            c.rule(burn_ok, format!("{at}.burnRate"), msg::BURN_RATE);
            let shorter = match (alert_window_minutes(&a.short_window), alert_window_minutes(&a.long_window)) {
                (Some(s), Some(l)) => s < l,
                _ => true, // already reported above
            };
            c.rule(shorter, at, msg::ALERT_WINDOWS);
        }
    }
    c.0
}

/// Validates an AccountLimit spec: its bounds and CEL rules (the transition rules that
/// keep `account` and `keyId` from changing aside: they judge an update, not a spec).
pub fn account_limit(spec: &AccountLimitSpec) -> Vec<FieldError> {
    let mut c = Checks::default();
    c.rule(matches(&ACCOUNT, &spec.account), "spec.account", msg::ACCOUNT);
    let numbers = [
        ("keyId", spec.key_id),
        ("rpm", spec.rpm),
        ("tpm", spec.tpm),
        ("tpd", spec.tpd),
        ("concurrency", spec.concurrency),
    ];
    for (field, value) in numbers {
        if let Some(v) = value
            && v < 1
        {
            c.fail(format!("spec.{field}"), format!("must be at least 1, got {v}"));
        }
    }
    for (field, value, message) in
        [("dailySpend", &spec.daily_spend, msg::DAILY_SPEND), ("monthlySpend", &spec.monthly_spend, msg::MONTHLY_SPEND)]
    {
        if let Some(v) = value {
            c.rule(matches(&MONEY, v), format!("spec.{field}"), message);
        }
    }
    let any = spec.rpm.is_some()
        || spec.tpm.is_some()
        || spec.tpd.is_some()
        || spec.concurrency.is_some()
        || spec.daily_spend.is_some()
        || spec.monthly_spend.is_some();
    c.rule(any, "spec", msg::ANY_LIMIT);
    c.0
}
