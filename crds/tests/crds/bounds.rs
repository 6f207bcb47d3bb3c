//! Schema bounds (`minimum`/`maximum`, `minItems`/`maxItems`, `minLength`/`maxLength`) in
//! file mode, with exact messages. Each row is checked against the generated CRD schema
//! too, and every bound of the schemas must have a row, so schema and `validate.rs`
//! cannot drift apart.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sluice_crds::Severity;

use common::{read, schema_of, testdata};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    /// `minimum`/`maximum`.
    Number,
    /// `minItems`/`maxItems`.
    Items,
    /// `minLength`/`maxLength`.
    Length,
}

/// One bounded field: where the test sets it (which is also the field reported), its
/// bounds, and the exact file-mode messages below and above them (empty: the range message).
struct Row {
    kind: &'static str,
    at: &'static str,
    unit: Unit,
    min: Option<u64>,
    max: u64,
    /// The value at size `n` (a number, a list of `n` items, a string of `n` characters).
    make: fn(u64) -> Value,
    below: &'static str,
    above: &'static str,
}

impl Row {
    /// `spec.candidates[1].upstream` → `spec.candidates[].upstream`.
    fn schema_path(&self) -> String {
        let mut out = String::new();
        let mut in_index = false;
        for c in self.at.chars() {
            match c {
                '[' => in_index = true,
                ']' => {
                    in_index = false;
                    out.push_str("[]");
                }
                _ if !in_index => out.push(c),
                _ => {}
            }
        }
        out
    }
}

fn number(n: u64) -> Value {
    json!(n)
}
fn letters(n: u64) -> Value {
    json!("a".repeat(n as usize))
}
fn candidates(n: u64) -> Value {
    // `primary` exists in support.yaml; the others only cost a warning each.
    (0..n)
        .map(|i| if i == 0 { json!({"upstream": "primary"}) } else { json!({"upstream": format!("up-{i}")}) })
        .collect()
}
fn statuses(n: u64) -> Value {
    (0..n).map(|i| json!(500 + i)).collect()
}
fn routes(n: u64) -> Value {
    (0..n).map(|i| json!(format!("route-{i}"))).collect()
}
fn alerts(n: u64) -> Value {
    (0..n).map(|i| json!({"name": format!("a{i}"), "longWindow": "1h", "shortWindow": "5m", "burnRate": "1"})).collect()
}
fn window(n: u64) -> Value {
    json!(format!("{}d", "9".repeat(n.saturating_sub(1) as usize)))
}
fn short_window(n: u64) -> Value {
    json!(format!("{}m", "1".repeat(n.saturating_sub(1) as usize)))
}
fn burn_rate(n: u64) -> Value {
    // "1", "1.", "1.1", …: odd lengths above 5 leave the pattern anyway.
    json!(match n {
        0 => String::new(),
        1..=4 => "9".repeat(n as usize),
        _ => format!("9999.{}", "9".repeat(n as usize - 5)),
    })
}

/// A valid duration of `n` characters (`n` ≥ 2): `1s` with leading zeros.
fn duration(n: u64) -> Value {
    json!(format!("{}1s", "0".repeat(n.saturating_sub(2) as usize)))
}
fn url(n: u64) -> Value {
    json!(format!("https://a.example/{}", "a".repeat(n.saturating_sub(18) as usize)))
}
fn url_path(n: u64) -> Value {
    json!(format!("/{}", "a".repeat(n.saturating_sub(1) as usize)))
}
/// `1234567.1…`: valid up to 17 characters (7 digits, a point, 9 decimals).
fn money(n: u64) -> Value {
    json!(format!("1234567.{}", "1".repeat(n.saturating_sub(8) as usize)))
}
/// `99.9…`: valid up to 9 characters.
fn objective(n: u64) -> Value {
    json!(format!("99.{}", "9".repeat(n.saturating_sub(3) as usize)))
}
/// `2160h` (90 days, the longest window) at 5 characters, then too many hours.
fn budget_window(n: u64) -> Value {
    json!(format!("2160{}h", "0".repeat(n.saturating_sub(5) as usize)))
}
/// `3599s` (the longest timeslice in seconds) at 5 characters, then too many seconds.
fn timeslice(n: u64) -> Value {
    json!(format!("3599{}s", "0".repeat(n.saturating_sub(5) as usize)))
}

const RANGE: &str = "";
const UPSTREAM: &str = "upstream must be the name of an Upstream (a DNS subdomain)";
const AT_MOST_32: &str = "must be at most 32 characters";
const AT_MOST_2048: &str = "must be at most 2048 characters";
const MONEY: &str = "price must be a decimal string of USD per 1M tokens, e.g. \"15.00\"";
const WEB_SEARCH_PRICE: &str = "price.webSearch must be a decimal string of USD per 1,000 web searches, e.g. \"10.00\"";
const CACHE_PRICE: &str =
    "cache.price must be a decimal string of USD per answer served from the cache, e.g. \"0.0001\"";

#[rustfmt::skip] // one row per line reads as a table
fn rows() -> Vec<Row> {
    use Unit::*;
    let r = |kind, at, unit, min, max, make, below, above| Row { kind, at, unit, min, max, make, below, above };
    vec![
        r("Upstream", "spec.region", Length, None, 63, letters, "", "must be at most 63 characters"),
        r("Upstream", "spec.auth.secretRef.name", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("Upstream", "spec.auth.secretRef.key", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("Upstream", "spec.gcp.credentials.secretRef.name", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("Upstream", "spec.gcp.credentials.secretRef.key", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("Upstream", "spec.aws.credentials.secretRef.name", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("Upstream", "spec.baseUrl", Length, None, 2048, url, "", AT_MOST_2048),
        r("Upstream", "spec.auth.header", Length, None, 256, letters, "", "must be at most 256 characters"),
        r("Upstream", "spec.timeouts.connect", Length, None, 32, duration, "", AT_MOST_32),
        r("Upstream", "spec.timeouts.firstByte", Length, None, 32, duration, "", AT_MOST_32),
        r("Upstream", "spec.timeouts.idle", Length, None, 32, duration, "", AT_MOST_32),
        r("Upstream", "spec.circuitBreaker.openFor", Length, None, 32, duration, "", AT_MOST_32),
        r("Upstream", "spec.probe.interval", Length, None, 32, duration, "", AT_MOST_32),
        r("Upstream", "spec.probe.path", Length, None, 2048, url_path, "", AT_MOST_2048),
        r("Upstream", "spec.gcp.project", Length, None, 128, letters, "", "gcp.project must be a Google Cloud project id or number, e.g. my-project"),
        r("Upstream", "spec.gcp.location", Length, None, 63, letters, "", "gcp.location must be a Google Cloud location such as us-east5, global, us or eu"),
        r("Upstream", "spec.aws.region", Length, None, 32, letters, "", "aws.region must be an AWS region such as us-east-1"),
        r("Upstream", "spec.azure.apiVersion", Length, None, 64, letters, "", "azure.apiVersion must be an API version such as 2024-10-21"),
        r("Upstream", "spec.anthropic.version", Length, None, 64, letters, "", "anthropic.version must be a version such as 2023-06-01"),
        r("Upstream", "spec.maxConcurrentRequests", Number, Some(1), 1_000_000, number, RANGE, RANGE),
        r("Upstream", "spec.circuitBreaker.failureRatePercent", Number, Some(1), 100, number, RANGE, RANGE),
        r("Upstream", "spec.circuitBreaker.minimumRequests", Number, Some(1), 10_000, number, RANGE, RANGE),
        r("Upstream", "spec.circuitBreaker.halfOpenRequests", Number, Some(1), 100, number, RANGE, RANGE),
        r("ModelRoute", "spec.model", Length, None, 128, letters, "", "model must be 1-128 characters of letters, digits and . _ : / @ -"),
        r("ModelRoute", "spec.gateway", Length, None, 40, letters, "", "gateway must be a DNS label of at most 40 characters"),
        r("ModelRoute", "spec.deadline", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.candidates[0].price.input", Length, None, 17, money, "", MONEY),
        r("ModelRoute", "spec.candidates[0].price.output", Length, None, 17, money, "", MONEY),
        r("ModelRoute", "spec.candidates[0].price.cachedInput", Length, None, 17, money, "", MONEY),
        r("ModelRoute", "spec.candidates[0].price.cacheWrite", Length, None, 17, money, "", MONEY),
        r("ModelRoute", "spec.candidates[0].price.webSearch", Length, None, 17, money, "", WEB_SEARCH_PRICE),
        r("ModelRoute", "spec.backoff.base", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.backoff.maxTotal", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.synthetic.interval", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.cache.ttl", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.cache.staleIfError", Length, None, 32, duration, "", AT_MOST_32),
        r("ModelRoute", "spec.cache.price", Length, None, 17, money, "", CACHE_PRICE),
        r("ModelRoute", "spec.candidates", Items, Some(1), 8, candidates, "must list 1 to 8 candidates, got 0", "must list 1 to 8 candidates, got 9"),
        r("ModelRoute", "spec.candidates[1].upstream", Length, None, 253, letters, "", UPSTREAM),
        r("ModelRoute", "spec.candidates[0].model", Length, Some(1), 256, letters, "must be 1 to 256 characters", "must be 1 to 256 characters"),
        r("ModelRoute", "spec.candidates[0].weight", Number, Some(1), 1000, number, RANGE, RANGE),
        r("ModelRoute", "spec.failover.retryOn", Items, Some(1), 16, statuses, "must list 1 to 16 statuses, got 0", "must list 1 to 16 statuses, got 17"),
        r("ModelRoute", "spec.backoff.maxAttempts", Number, Some(1), 20, number, RANGE, RANGE),
        r("ModelRoute", "spec.defaultMaxTokens", Number, Some(1), 10_000_000, number, RANGE, RANGE),
        r("ModelRoute", "spec.synthetic.maxTokens", Number, Some(1), 4096, number, RANGE, RANGE),
        r("ErrorBudget", "spec.routes", Items, Some(1), 64, routes, "must list 1 to 64 routes, got 0", "must list 1 to 64 routes, got 65"),
        r("ErrorBudget", "spec.routes[1]", Length, Some(1), 253, letters, "must be 1 to 253 characters", "must be 1 to 253 characters"),
        r("ErrorBudget", "spec.objective", Length, None, 9, objective, "", "objective must be a decimal string strictly between 50 and 100, e.g. \"99.95\""),
        r("ErrorBudget", "spec.window", Length, None, 5, budget_window, "", "window must be whole hours or days between 1h and 90d, e.g. 30d"),
        r("ErrorBudget", "spec.timeslice", Length, None, 5, timeslice, "", "timeslice must be between 1s and 59m, shorter than the window, e.g. 1m"),
        r("ErrorBudget", "spec.latency.threshold", Length, None, 32, duration, "", AT_MOST_32),
        r("ErrorBudget", "spec.latency.percentile", Number, Some(50), 99, number, RANGE, RANGE),
        r("ErrorBudget", "spec.alerts", Items, Some(1), 8, alerts, "must list 1 to 8 alerts, got 0", "must list 1 to 8 alerts, got 9"),
        r("ErrorBudget", "spec.alerts[0].name", Length, None, 31, letters, "", "alert name must be a lowercase word such as page or ticket"),
        r("ErrorBudget", "spec.alerts[0].longWindow", Length, None, 6, window, "", "longWindow must be a duration in m, h or d, e.g. 1h"),
        r("ErrorBudget", "spec.alerts[3].shortWindow", Length, None, 6, short_window, "", "shortWindow must be a duration in m, h or d, e.g. 5m"),
        r("ErrorBudget", "spec.alerts[0].burnRate", Length, None, 8, burn_rate, "", "burnRate must be a positive decimal string, e.g. \"14.4\""),
    ]
}

/// The valid fixture of a kind with every optional field set that `at` can be; the
/// protocol blocks exclude one another, so their fields have fixtures of their own.
fn base(kind: &str, at: &str) -> Value {
    let file = match at.split('.').nth(1) {
        Some("gcp") => "vertex-anthropic",
        Some("aws") => "bedrock",
        Some("azure") => "azure-openai",
        Some("anthropic") => "anthropic",
        _ => "full",
    };
    let text = read(&testdata(&format!("cel/{}/valid/{file}.yaml", kind.to_lowercase())));
    serde_yaml::from_str(&text).expect("fixture is YAML")
}

/// `spec.candidates[0].weight` → `/spec/candidates/0/weight`.
fn pointer(path: &str) -> String {
    path.split('.')
        .map(|part| match part.split_once('[') {
            Some((name, index)) => format!("/{name}/{}", index.trim_end_matches(']')),
            None => format!("/{part}"),
        })
        .collect()
}

/// The Display of every problem of the fixture after setting `at` to `value`.
fn errors_with(kind: &str, at: &str, value: Value) -> Vec<String> {
    let mut manifest = base(kind, at);
    *manifest.pointer_mut(&pointer(at)).unwrap_or_else(|| panic!("{kind}: nothing at {at}")) = value;
    let support = read(&testdata("cel/support.yaml"));
    let text = serde_yaml::to_string(&manifest).expect("YAML");
    let resolved = common::resolve_docs(&[("support.yaml", &support), ("test.yaml", &text)]);
    resolved.problems.iter().filter(|p| p.severity == Severity::Error).map(ToString::to_string).collect()
}

fn expected(row: &Row, message: &str, value: u64) -> Vec<String> {
    let message = if message.is_empty() {
        format!("must be between {} and {}, got {value}", row.min.unwrap_or(0), row.max)
    } else {
        message.to_string()
    };
    vec![format!("error: {} default/fixture: {}: {message}", row.kind, row.at)]
}

#[test]
fn values_at_the_bounds_are_accepted_and_beyond_them_refused_with_exact_messages() {
    let mut failures = Vec::new();
    for row in rows() {
        let mut check = |n: u64, want: Vec<String>| {
            let got = errors_with(row.kind, row.at, (row.make)(n));
            if got != want {
                failures.push(format!("{} {} = size {n}:\n  expected {want:?}\n  got      {got:?}", row.kind, row.at));
            }
        };
        check(row.max, vec![]);
        check(row.max + 1, expected(&row, row.above, row.max + 1));
        if let Some(min) = row.min {
            check(min, vec![]);
            check(min - 1, expected(&row, row.below, min - 1));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `(kind, schema path, keyword, value)` of every bound in the `spec` schemas.
fn schema_bounds() -> BTreeSet<(String, String, &'static str, u64)> {
    fn walk(kind: &str, node: &Value, path: &str, out: &mut BTreeSet<(String, String, &'static str, u64)>) {
        for keyword in ["minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength"] {
            if let Some(v) = node[keyword].as_f64() {
                out.insert((kind.to_string(), path.to_string(), keyword, v as u64));
            }
        }
        for (name, child) in node["properties"].as_object().into_iter().flatten() {
            walk(kind, child, &format!("{path}.{name}"), out);
        }
        if node["items"].is_object() {
            walk(kind, &node["items"], &format!("{path}[]"), out);
        }
    }
    let mut out = BTreeSet::new();
    for kind in ["Upstream", "ModelRoute", "ErrorBudget"] {
        walk(kind, &schema_of(kind)["properties"]["spec"], "spec", &mut out);
    }
    out
}

#[test]
fn every_schema_bound_has_a_row_and_every_row_is_in_the_schema() {
    let mut declared = BTreeSet::new();
    for row in rows() {
        let (min_kw, max_kw) = match row.unit {
            Unit::Number => ("minimum", "maximum"),
            Unit::Items => ("minItems", "maxItems"),
            Unit::Length => ("minLength", "maxLength"),
        };
        declared.insert((row.kind.to_string(), row.schema_path(), max_kw, row.max));
        if let Some(min) = row.min {
            declared.insert((row.kind.to_string(), row.schema_path(), min_kw, min));
        }
    }
    // u16 items carry their type's range; file mode refuses it while parsing
    // (`status_codes_beyond_u16_are_refused_while_parsing`).
    declared.insert(("ModelRoute".into(), "spec.failover.retryOn[]".into(), "minimum", 0));
    declared.insert(("ModelRoute".into(), "spec.failover.retryOn[]".into(), "maximum", 65_535));
    let schema = schema_bounds();
    let undeclared: Vec<_> = schema.difference(&declared).collect();
    let absent: Vec<_> = declared.difference(&schema).collect();
    assert!(undeclared.is_empty(), "schema bounds without a file-mode row: {undeclared:?}");
    assert!(absent.is_empty(), "rows whose bound is not in the schema: {absent:?}");
}

#[test]
fn values_beyond_the_integer_type_are_refused_while_parsing() {
    let cases = [
        (
            "ModelRoute",
            "spec.failover.retryOn[0]",
            json!(65_536),
            "error: ModelRoute default/fixture: spec.failover.retryOn[0]: invalid value: integer `65536`, expected u16",
        ),
        (
            "ModelRoute",
            "spec.candidates[0].weight",
            json!(-1),
            "error: ModelRoute default/fixture: spec.candidates[0].weight: invalid value: integer `-1`, expected u32",
        ),
        (
            "Upstream",
            "spec.maxConcurrentRequests",
            json!(1.5),
            "error: Upstream default/fixture: spec.maxConcurrentRequests: invalid type: floating point `1.5`, expected u32",
        ),
        (
            "ErrorBudget",
            "spec.latency.percentile",
            json!("99"),
            "error: ErrorBudget default/fixture: spec.latency.percentile: invalid type: string \"99\", expected u32",
        ),
    ];
    for (kind, at, value, want) in cases {
        assert_eq!(errors_with(kind, at, value), [want], "{kind} {at}");
    }
}
