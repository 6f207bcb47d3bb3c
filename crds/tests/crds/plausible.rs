//! Property tests on structurally plausible manifests: the right shape and types, values
//! within the schema's bounds, but field values drawn near and across the CEL rules' edges.
//!
//! - `resolve()` never panics on sets of them and keeps the Snapshot's invariants;
//! - kube's CEL engine and file mode (`validate.rs`, after serde) refuse exactly the same
//!   fields with the same messages, resource by resource: a drift between a CEL rule and
//!   its Rust mirror shows up here even where no fixture probes it.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_crds::{ErrorBudget, Manifests, ModelRoute, Upstream, validate};

use kube::core::cel::{CompiledSchema, Validator, compile_schema};

fn duration() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9]{1,3}(ms|s|m|h|d)", "([0-9]{1,2}(ms|s|m|h)){1,3}", "0{1,2}(ms|s|m)(0(s|ms))?", "[0-9a-z. ]{0,5}",]
}

/// Durations near and across the cache's bounds (1s, 720h) and CEL's duration range, all
/// within the schema's 32 characters.
fn cache_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        duration(),
        "(0|999|1000|1001)ms|(0|1)s|(719|720|721)h|(43199|43200|43201)m|(2591999|2592000|2592001)s",
        "(2591999999|2592000000|2592000001|10000000000)ms|(719h59m(59|60|61)s|720h1ms|719h60m)",
        "0{0,19}[1-9][0-9]{0,10}(ms|s|m|h)",
        "([1-9][0-9]{0,6}(ms|s|m|h)){2,3}",
    ]
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.6, s)
}

/// Adds `key: value` to `object` unless the value is `None`.
fn put(object: &mut Value, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        object[key] = v;
    }
}

fn meta(name: &str, namespace: Option<&str>) -> Value {
    match namespace {
        Some(ns) => json!({"name": name, "namespace": ns}),
        None => json!({"name": name}),
    }
}

const NAMES: [&str; 5] = ["primary", "secondary", "eu.backup-2", "Bad_Name", "chat"];

fn name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(NAMES.to_vec())
}

fn namespace() -> impl Strategy<Value = Option<&'static str>> {
    prop::option::weighted(0.2, Just("team-a"))
}

/// The protocol and the protocol blocks, each present or not whatever the protocol, with
/// values near and across their patterns: `(protocol, gcp, aws, azure, anthropic,
/// assistantPrefill)` as JSON to merge into the spec.
fn provider() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    let protocols =
        ["openai", "azure-openai", "anthropic", "bedrock", "vertex-anthropic", "vertex-gemini", "gemini"].to_vec();
    let secret = ("[a-z-]{1,12}", "[a-zA-Z.]{1,8}");
    let gcp = ("[a-z0-9][-a-z0-9.:/ ]{0,12}", "[a-z0-9][-a-z0-9. ]{0,10}", opt(secret));
    let aws = ("[a-z0-9][-a-z0-9.]{0,12}-?", opt("[a-z-]{1,12}"));
    let version = "[A-Za-z0-9][-A-Za-z0-9. &]{0,12}";
    (opt(prop::sample::select(protocols)), opt(gcp), opt(aws), opt(version), opt(version), opt(any::<bool>())).prop_map(
        |(protocol, gcp, aws, azure, anthropic, prefill)| {
            let mut out = Vec::new();
            if let Some(p) = protocol {
                out.push(("protocol", json!(p)));
            }
            if let Some((project, location, credentials)) = gcp {
                let mut g = json!({"project": project, "location": location});
                put(
                    &mut g,
                    "credentials",
                    credentials.map(|(name, key)| json!({"secretRef": {"name": name, "key": key}})),
                );
                out.push(("gcp", g));
            }
            if let Some((region, credentials)) = aws {
                let mut a = json!({"region": region});
                put(&mut a, "credentials", credentials.map(|name| json!({"secretRef": {"name": name}})));
                out.push(("aws", a));
            }
            if let Some(v) = azure {
                out.push(("azure", json!({"apiVersion": v})));
            }
            if let Some(v) = anthropic {
                out.push(("anthropic", json!({"version": v})));
            }
            if let Some(b) = prefill {
                out.push(("assistantPrefill", json!(b)));
            }
            out
        },
    )
}

fn upstream() -> impl Strategy<Value = Value> {
    let base_url = prop::option::weighted(
        0.85,
        prop_oneof!["https?://[a-z0-9.:\\[\\]]{0,10}(/v1)?/?", "(ftp|http|https):/{0,3}[ a-z/?#]{0,6}", ".{0,8}"],
    );
    let auth = (("[a-z-]{1,12}", "[a-zA-Z]{1,8}"), opt("[A-Za-z0-9: _-]{0,8}"), opt("[A-Za-z ]{0,7}"));
    let timeouts = (
        opt(duration()),
        opt(prop_oneof![duration(), Just("auto".to_string())]),
        opt(prop_oneof![duration(), Just("auto".to_string())]),
    );
    let breaker = (opt(1..=100u32), opt(1..=10_000u32), opt(duration()), opt(1..=100u32));
    let probe = (opt(duration()), opt("/?[a-z/]{0,6}"));
    (
        name(),
        namespace(),
        base_url,
        opt("[a-z0-9-]{0,63}"),
        opt(auth),
        opt(timeouts),
        opt(1..=1_000_000u32),
        opt(breaker),
        opt(probe),
        provider(),
    )
        .prop_map(|(name, ns, base_url, region, auth, timeouts, max, breaker, probe, provider)| {
            let mut spec = json!({});
            put(&mut spec, "baseUrl", base_url.map(Value::from));
            for (key, value) in provider {
                spec[key] = value;
            }
            put(&mut spec, "region", region.map(Value::from));
            put(
                &mut spec,
                "auth",
                auth.map(|((secret, key), header, scheme)| {
                    let mut a = json!({"secretRef": {"name": secret, "key": key}});
                    put(&mut a, "header", header.map(Value::from));
                    put(&mut a, "scheme", scheme.map(Value::from));
                    a
                }),
            );
            put(
                &mut spec,
                "timeouts",
                timeouts.map(|(connect, first_byte, idle)| {
                    let mut t = json!({});
                    put(&mut t, "connect", connect.map(Value::from));
                    put(&mut t, "firstByte", first_byte.map(Value::from));
                    put(&mut t, "idle", idle.map(Value::from));
                    t
                }),
            );
            put(&mut spec, "maxConcurrentRequests", max.map(Value::from));
            put(
                &mut spec,
                "circuitBreaker",
                breaker.map(|(rate, min, open_for, half)| {
                    let mut b = json!({});
                    put(&mut b, "failureRatePercent", rate.map(Value::from));
                    put(&mut b, "minimumRequests", min.map(Value::from));
                    put(&mut b, "openFor", open_for.map(Value::from));
                    put(&mut b, "halfOpenRequests", half.map(Value::from));
                    b
                }),
            );
            put(
                &mut spec,
                "probe",
                probe.map(|(interval, path)| {
                    let mut p = json!({});
                    put(&mut p, "interval", interval.map(Value::from));
                    put(&mut p, "path", path.map(Value::from));
                    p
                }),
            );
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream", "metadata": meta(name, ns), "spec": spec})
        })
}

fn money() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9]{1,8}(\\.[0-9]{0,10})?", "-?[0-9.e$]{0,5}"]
}

fn model_route() -> impl Strategy<Value = Value> {
    let candidate = (
        name(),
        opt("[a-z0-9-]{1,12}"),
        opt(1..=1000u32),
        opt((money(), money(), opt(money()), opt(money()), opt(money()))),
    );
    let candidates = prop::collection::vec(candidate, 1..=8);
    let retry_on = prop::collection::vec(prop_oneof![Just(408u16), Just(429), 500..=599u16, 100..=600u16], 1..=16);
    let failover = (opt(retry_on), opt(prop::sample::select(vec!["failover", "hedge"])));
    let backoff = (opt(1..=20u32), opt(duration()), opt(duration()));
    let model = prop_oneof!["[a-z]{1,4}-[0-9]", "[A-Za-z0-9._:/@ -]{0,10}", "m{120,130}"];
    let gateway = "[a-zA-Z0-9-]{0,4}|g{39,42}";
    let cache = (
        opt(cache_duration()),
        opt(prop::sample::select(vec!["account", "shared"])),
        opt(any::<bool>()),
        opt(prop::sample::select(vec!["never", "deterministic", "always"])),
        opt(cache_duration()),
        opt(money()),
    );
    (
        name(),
        namespace(),
        model,
        opt(gateway),
        opt(duration()),
        opt(prop::sample::select(vec!["ordered", "weighted"])),
        candidates,
        opt(failover),
        opt(backoff),
        opt(1..=10_000_000u32),
        opt(cache),
    )
        .prop_map(|(name, ns, model, gateway, deadline, selection, candidates, failover, backoff, max_tokens, cache)| {
            let candidates: Vec<Value> = candidates
                .into_iter()
                .map(|(upstream, model, weight, price)| {
                    let mut c = json!({"upstream": upstream});
                    put(&mut c, "model", model.map(Value::from));
                    put(&mut c, "weight", weight.map(Value::from));
                    put(
                        &mut c,
                        "price",
                        price.map(|(input, output, cached, write, search)| {
                            let mut p = json!({"input": input, "output": output});
                            put(&mut p, "cachedInput", cached.map(Value::from));
                            put(&mut p, "cacheWrite", write.map(Value::from));
                            put(&mut p, "webSearch", search.map(Value::from));
                            p
                        }),
                    );
                    c
                })
                .collect();
            let mut spec = json!({"model": model, "candidates": candidates});
            put(&mut spec, "gateway", gateway.map(Value::from));
            put(&mut spec, "deadline", deadline.map(Value::from));
            put(&mut spec, "selection", selection.map(Value::from));
            put(
                &mut spec,
                "failover",
                failover.map(|(retry_on, on_fbt)| {
                    let mut f = json!({});
                    put(&mut f, "retryOn", retry_on.map(|r| json!(r)));
                    put(&mut f, "onFirstByteTimeout", on_fbt.map(Value::from));
                    f
                }),
            );
            put(
                &mut spec,
                "backoff",
                backoff.map(|(max, base, total)| {
                    let mut b = json!({});
                    put(&mut b, "maxAttempts", max.map(Value::from));
                    put(&mut b, "base", base.map(Value::from));
                    put(&mut b, "maxTotal", total.map(Value::from));
                    b
                }),
            );
            put(&mut spec, "defaultMaxTokens", max_tokens.map(Value::from));
            put(
                &mut spec,
                "cache",
                cache.map(|(ttl, scope, embeddings, completions, stale, price)| {
                    let mut c = json!({});
                    put(&mut c, "ttl", ttl.map(Value::from));
                    put(&mut c, "scope", scope.map(Value::from));
                    put(&mut c, "embeddings", embeddings.map(Value::from));
                    put(&mut c, "completions", completions.map(Value::from));
                    put(&mut c, "staleIfError", stale.map(Value::from));
                    put(&mut c, "price", price.map(Value::from));
                    c
                }),
            );
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "metadata": meta(name, ns), "spec": spec})
        })
}

fn error_budget() -> impl Strategy<Value = Value> {
    let window = "[1-9][0-9]{0,4}(m|h|d|s)|[0-9]{1,2}x";
    let alert = ("[a-zA-Z][a-z0-9-]{0,3}", "[0-9]{1,2}(m|h|d)", window, "[0-9]{0,5}(\\.[0-9]{0,4})?");
    let alerts = prop::collection::vec(alert, 1..=8);
    let routes = prop::collection::vec(name(), 1..=4);
    let objective = prop_oneof!["[0-9]{1,3}(\\.[0-9]{0,7})?", "99\\.9[0-9]{0,7}", "(50|100)(\\.0{1,2})?"];
    let budget_window = "[0-9]{1,4}(h|d|m)";
    let method = opt(prop::sample::select(vec!["occurrences", "timeslices"]));
    let timeslice = opt("[0-9]{1,4}(s|m|h)");
    let latency = opt((duration(), opt(50..=99u32)));
    (name(), namespace(), routes, objective, budget_window, method, timeslice, latency, opt(alerts))
        .prop_map(|(name, ns, routes, objective, window, method, timeslice, latency, alerts)| {
            let mut spec = json!({"routes": routes, "objective": objective, "window": window});
            put(&mut spec, "method", method.map(Value::from));
            put(&mut spec, "timeslice", timeslice.map(Value::from));
            put(&mut spec, "latency", latency.map(|(threshold, percentile)| {
                let mut l = json!({"threshold": threshold});
                put(&mut l, "percentile", percentile.map(Value::from));
                l
            }));
            put(&mut spec, "alerts", alerts.map(|alerts| {
                alerts
                    .into_iter()
                    .map(|(name, short, long, rate)| json!({"name": name, "shortWindow": short, "longWindow": long, "burnRate": rate}))
                    .collect::<Vec<_>>()
                    .into()
            }));
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ErrorBudget", "metadata": meta(name, ns), "spec": spec})
        })
}

fn any_resource() -> impl Strategy<Value = Value> {
    prop_oneof![upstream(), model_route(), error_budget()]
}

/// The compiled CEL rules of each kind, compiled once.
fn compiled(kind: &str) -> &'static CompiledSchema {
    use std::sync::OnceLock;
    static SCHEMAS: OnceLock<Vec<(String, CompiledSchema)>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        ["Upstream", "ModelRoute", "ErrorBudget"]
            .iter()
            .map(|k| (k.to_string(), compile_schema(&common::schema_of(k))))
            .collect()
    });
    &schemas.iter().find(|(k, _)| k == kind).expect("known kind").1
}

/// `field: message` of every CEL refusal, sorted.
fn cel(object: &Value) -> Vec<String> {
    let kind = object["kind"].as_str().expect("kind");
    let Err(errors) = Validator::new().validate_compiled(compiled(kind), object, None) else { return Vec::new() };
    let mut out: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field_path, e.message)).collect();
    out.sort();
    out
}

/// `field: message` of every file-mode validation error, sorted.
fn file_mode(object: &Value) -> Vec<String> {
    let errors = match object["kind"].as_str().expect("kind") {
        "Upstream" => validate::upstream(&serde_json::from_value::<Upstream>(object.clone()).expect("typed").spec),
        "ModelRoute" => {
            validate::model_route(&serde_json::from_value::<ModelRoute>(object.clone()).expect("typed").spec)
        }
        _ => validate::error_budget(&serde_json::from_value::<ErrorBudget>(object.clone()).expect("typed").spec),
    };
    let mut out: Vec<String> = errors.into_iter().map(|(field, message)| format!("{field}: {message}")).collect();
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn cel_and_file_mode_refuse_the_same_fields_with_the_same_messages(object in any_resource()) {
        prop_assert_eq!(cel(&object), file_mode(&object), "{}", serde_yaml::to_string(&object).unwrap_or_default());
    }

    #[test]
    fn plausible_manifest_sets_resolve_without_panic(
        objects in prop::collection::vec(any_resource(), 0..12),
        seed in any::<bool>(),
    ) {
        let mut m = Manifests::default();
        for (i, object) in objects.into_iter().enumerate() {
            if i % 2 == 0 {
                m.add_value(&format!("object {i}"), object);
            } else {
                m.parse_str(&format!("object {i}"), &serde_yaml::to_string(&object).expect("YAML"));
            }
        }
        let resolved = common::resolve_and_check(&m, seed);
        prop_assert!(resolved.problems.iter().all(|p| !p.to_string().contains("not valid YAML")));
    }
}
