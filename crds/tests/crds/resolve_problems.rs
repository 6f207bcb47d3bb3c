//! `resolve()` on broken manifests: what is kept, what is left out, and the exact
//! messages (`Problem`'s Display), all reported at once.

use crate::common;

use sluice_crds::{Manifests, resolve};

use common::{problems, resolve_text};

const UPSTREAMS: &str = r#"---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: primary}
spec: {baseUrl: "http://127.0.0.1:9101/v1"}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: secondary}
spec: {baseUrl: "http://127.0.0.1:9102/v1"}
"#;

/// A ModelRoute named `name` serving `model` from `candidates` (upstream names).
fn route(name: &str, model: &str, candidates: &[&str]) -> String {
    let list: Vec<String> = candidates.iter().map(|c| format!("{{upstream: {c}}}")).collect();
    format!(
        "---\napiVersion: sluice.dev/v1alpha1\nkind: ModelRoute\nmetadata: {{name: {name}}}\nspec:\n  model: {model}\n  candidates: [{}]\n",
        list.join(", ")
    )
}

const BUDGET: &str = r#"
---
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata: {name: slo}
spec: {routes: [chat], objective: "99.9", window: 30d}
"#;

fn route_keys(text: &str) -> Vec<String> {
    resolve_text(text).snapshot.routes.iter().map(|r| r.key.clone()).collect()
}

#[test]
fn a_missing_upstream_degrades_the_route_with_a_warning() {
    let text = format!("{UPSTREAMS}{}", route("chat", "gpt-4o", &["primary", "ghost", "secondary"]));
    let resolved = resolve_text(&text);
    assert_eq!(
        problems(&resolved),
        [
            "warning: ModelRoute default/chat: spec.candidates[1].upstream: Upstream \"ghost\" not found in namespace \"default\"; the candidate is skipped",
        ]
    );
    assert!(resolved.is_clean(), "a warning leaves nothing out");
    let upstreams: Vec<&str> = resolved.snapshot.routes[0].candidates.iter().map(|c| c.upstream.as_str()).collect();
    assert_eq!(upstreams, ["default/primary", "default/secondary"]);
}

#[test]
fn a_route_without_any_upstream_is_left_out_with_an_error() {
    let text = format!(
        "{UPSTREAMS}{}{}{BUDGET}",
        route("chat", "gpt-4o", &["ghost", "phantom"]),
        route("other", "o1", &["primary"])
    );
    let resolved = resolve_text(&text);
    assert_eq!(
        problems(&resolved),
        [
            "error: ModelRoute default/chat: spec.candidates: no candidate resolved to an Upstream; the route is left out",
            "warning: ErrorBudget default/slo: spec.routes[0]: ModelRoute \"chat\" is not served in namespace \"default\"; it is not counted",
            "warning: ModelRoute default/chat: spec.candidates[0].upstream: Upstream \"ghost\" not found in namespace \"default\"; the candidate is skipped",
            "warning: ModelRoute default/chat: spec.candidates[1].upstream: Upstream \"phantom\" not found in namespace \"default\"; the candidate is skipped",
        ]
    );
    assert!(!resolved.is_clean());
    assert_eq!(route_keys(&text), ["default/other"], "one bad route never blocks the others");
    assert_eq!(resolved.snapshot.budgets[0].routes, Vec::<String>::new());
}

#[test]
fn a_candidate_may_only_use_an_upstream_of_its_own_namespace() {
    let text = format!(
        "{UPSTREAMS}{}",
        route("chat", "gpt-4o", &["primary"]).replace("{name: chat}", "{name: chat, namespace: team-a}")
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: ModelRoute team-a/chat: spec.candidates: no candidate resolved to an Upstream; the route is left out",
            "warning: ModelRoute team-a/chat: spec.candidates[0].upstream: Upstream \"primary\" not found in namespace \"team-a\"; the candidate is skipped",
        ]
    );
}

#[test]
fn a_duplicate_candidate_is_refused() {
    let text = format!("{UPSTREAMS}{}", route("chat", "gpt-4o", &["primary", "secondary", "primary"]));
    assert_eq!(
        problems(&resolve_text(&text)),
        ["error: ModelRoute default/chat: spec.candidates: candidates must name each upstream at most once",]
    );
    assert_eq!(route_keys(&text), Vec::<String>::new());
}

#[test]
fn a_bad_duration_names_its_field() {
    let text = format!("{UPSTREAMS}{}  deadline: 2 minutes\n", route("chat", "gpt-4o", &["primary"]));
    assert_eq!(
        problems(&resolve_text(&text)),
        ["error: ModelRoute default/chat: spec.deadline: must be a positive duration such as 50ms, 2s, 1m30s or 1h",]
    );
    let text = UPSTREAMS.replace(
        "spec: {baseUrl: \"http://127.0.0.1:9102/v1\"}",
        "spec: {baseUrl: \"http://127.0.0.1:9102/v1\", timeouts: {idle: 30d}}",
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        ["error: Upstream default/secondary: spec.timeouts.idle: idle must be a duration such as 30s, or auto",]
    );
}

#[test]
fn bad_cache_settings_are_refused_at_once_with_the_cel_rules_messages() {
    let with = |cache: &str| {
        let text = format!("{UPSTREAMS}{}  cache: {cache}\n", route("chat", "gpt-4o", &["primary"]));
        let resolved = resolve_text(&text);
        assert_eq!(resolved.snapshot.routes.is_empty(), !resolved.is_clean(), "{cache}: a refused route is left out");
        problems(&resolved)
    };
    let ttl = "error: ModelRoute default/chat: spec.cache.ttl: cache.ttl must be a duration between 1s and 720h (30 days), e.g. 24h";
    let stale = "error: ModelRoute default/chat: spec.cache.staleIfError: cache.staleIfError must be a duration between 1s and 720h (30 days), e.g. 1h";
    let price = "error: ModelRoute default/chat: spec.cache.price: cache.price must be a decimal string of USD per answer served from the cache, e.g. \"0.0001\"";
    assert_eq!(with("{ttl: 30d, staleIfError: 0s, price: \"$0.01\"}"), [ttl, stale, price]);
    for bad in ["999ms", "720h1ms", "721h", "1000h", "99999999999999999999999h", "1.5h", "24"] {
        assert_eq!(with(&format!("{{ttl: \"{bad}\"}}")), [ttl], "ttl {bad}");
    }
    for bad in ["0s", "43201m", "2592001s", "99999999999999999999ms"] {
        assert_eq!(with(&format!("{{staleIfError: \"{bad}\"}}")), [stale], "staleIfError {bad}");
    }
    for bad in ["-1", "0.0000000001", "12345678", "1e-4", ""] {
        assert_eq!(with(&format!("{{price: \"{bad}\"}}")), [price], "price {bad:?}");
    }
    assert_eq!(
        with(&format!("{{ttl: \"{}\"}}", "1".repeat(33))),
        ["error: ModelRoute default/chat: spec.cache.ttl: must be at most 32 characters"]
    );
    assert_eq!(
        with("{scope: tenant}"),
        ["error: ModelRoute default/chat: spec.cache.scope: unknown variant `tenant`, expected `account` or `shared`"]
    );
    // `off` is not a value: `never` is (a plain `off` would be the boolean `false` to kubectl).
    assert_eq!(
        with("{completions: off}"),
        [
            "error: ModelRoute default/chat: spec.cache.completions: unknown variant `off`, expected one of `never`, `deterministic`, `always`"
        ]
    );
    for good in
        ["{ttl: 1s, staleIfError: 720h}", "{ttl: 719h59m60s, staleIfError: 43200m}", "{price: \"9999999.999999999\"}"]
    {
        assert_eq!(with(good), Vec::<String>::new(), "{good}");
    }
}

#[test]
fn an_unknown_field_is_refused_with_its_path() {
    let text = format!(
        "{UPSTREAMS}{}",
        route("chat", "gpt-4o", &["primary"]).replace("{upstream: primary}", "{upstream: primary, wieght: 5}")
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: ModelRoute default/chat: spec.candidates[0].wieght: unknown field `wieght`, expected one of `upstream`, `model`, `weight`, `price`",
        ]
    );
    let text =
        UPSTREAMS.replace("metadata: {name: primary}\nspec: {", "metadata: {name: primary}\nspec: {timeout: 5s, ");
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: Upstream default/primary: spec.timeout: unknown field `timeout`, expected one of `protocol`, `baseUrl`, `region`, `auth`, `timeouts`, `maxConcurrentRequests`, `circuitBreaker`, `probe`, `assistantPrefill`, `gcp`, `aws`, `azure`, `anthropic`",
        ]
    );
}

#[test]
fn wrong_types_and_missing_fields_name_their_path() {
    let text = "apiVersion: sluice.dev/v1alpha1\nkind: ErrorBudget\nmetadata: {name: slo}\nspec: {routes: chat, objective: \"99.9\", window: 1h}\n";
    assert_eq!(
        problems(&resolve_text(text)),
        ["error: ErrorBudget default/slo: spec.routes: invalid type: string \"chat\", expected a sequence",]
    );
    // Percentages are strings in the API; an unquoted 99.9 is a YAML number.
    let text = "apiVersion: sluice.dev/v1alpha1\nkind: ErrorBudget\nmetadata: {name: slo}\nspec: {routes: [chat], objective: 99.9, window: 1h}\n";
    assert_eq!(
        problems(&resolve_text(text)),
        ["error: ErrorBudget default/slo: spec.objective: invalid type: floating point `99.9`, expected a string",]
    );
    let text = "apiVersion: sluice.dev/v1alpha1\nkind: ErrorBudget\nmetadata: {name: slo}\nspec: {routes: [chat], objective: \"99.9\"}\n";
    assert_eq!(problems(&resolve_text(text)), ["error: ErrorBudget default/slo: spec: missing field `window`"]);
    let text = "apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\n";
    assert_eq!(problems(&resolve_text(text)), ["error: Upstream default/u: missing field `spec`"]);
    let text = "apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {baseUrl: \"http://x\", protocol: grpc}\n";
    assert_eq!(
        problems(&resolve_text(text)),
        [
            "error: Upstream default/u: spec.protocol: unknown variant `grpc`, expected one of `openai`, `azure-openai`, `anthropic`, `bedrock`, `vertex-anthropic`, `vertex-gemini`, `gemini`",
        ]
    );
}

#[test]
fn foreign_kinds_are_ignored_with_a_warning_and_wrong_sluice_kinds_are_errors() {
    let text = format!(
        "{UPSTREAMS}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\n\
         ---\napiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: gloo}}\nspec: {{static: {{}}}}\n\
         ---\napiVersion: sluice.dev/v1alpha1\nkind: ModelRoutes\nmetadata: {{name: typo}}\n\
         ---\napiVersion: sluice.dev/v1\nkind: Upstream\nmetadata: {{name: future}}\n\
         ---\napiVersion: sluice.dev\nkind: Upstream\nmetadata: {{name: versionless}}\n"
    );
    let resolved = resolve_text(&text);
    assert_eq!(
        problems(&resolved),
        [
            "error: test.yaml (document 5): kind: unknown kind \"ModelRoutes\" (expected Upstream, ModelRoute or ErrorBudget)",
            "error: test.yaml (document 6): apiVersion: \"sluice.dev/v1\" is not served; use sluice.dev/v1alpha1",
            "error: test.yaml (document 7): apiVersion: \"sluice.dev\" is not served; use sluice.dev/v1alpha1",
            "warning: test.yaml (document 3): kind: v1 ConfigMap is not a sluice kind; ignored",
            "warning: test.yaml (document 4): kind: gloo.solo.io/v1 Upstream is not a sluice kind; ignored",
        ]
    );
    assert_eq!(resolved.snapshot.upstreams.keys().collect::<Vec<_>>(), ["default/primary", "default/secondary"]);
}

#[test]
fn documents_that_are_not_objects_are_reported_and_skipped() {
    let text = format!(
        "{UPSTREAMS}---\n- a list\n---\nkind: Upstream\n---\n# only a comment\n---\napiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{namespace: x}}\nspec: {{}}\n"
    );
    let resolved = resolve_text(&text);
    assert_eq!(
        problems(&resolved),
        [
            "error: test.yaml (document 3): not a Kubernetes object (expected a mapping with apiVersion and kind)",
            "error: test.yaml (document 4): apiVersion and kind are required",
            "error: test.yaml (document 6): metadata.name: is required",
        ]
    );
    assert_eq!(resolved.snapshot.upstreams.len(), 2);
}

#[test]
fn invalid_yaml_keeps_the_documents_before_it() {
    let text = format!("{UPSTREAMS}---\nspec: [unclosed\n---\n{}", route("late", "m", &["primary"]));
    let resolved = resolve_text(&text);
    let all = problems(&resolved);
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].starts_with("error: test.yaml (document 3): not valid YAML: "), "{all:?}");
    assert_eq!(resolved.snapshot.upstreams.len(), 2);
}

#[test]
fn one_model_is_served_by_one_route() {
    let text = format!(
        "{UPSTREAMS}{}{}",
        route("b-route", "gpt-4o", &["secondary"]),
        route("a-route", "gpt-4o", &["primary"])
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: ModelRoute default/b-route: spec.model: model \"gpt-4o\" is already served by ModelRoute default/a-route; the route is left out",
        ]
    );
    assert_eq!(route_keys(&text), ["default/a-route"], "the first by namespace/name wins, whatever the reading order");
}

#[test]
fn a_resource_declared_twice_keeps_the_first() {
    let text = format!(
        "{UPSTREAMS}{UPSTREAMS}{}{}{BUDGET}{BUDGET}",
        route("chat", "a", &["primary"]),
        route("chat", "b", &["primary"])
    );
    let resolved = resolve_text(&text);
    assert_eq!(
        problems(&resolved),
        [
            "error: ErrorBudget default/slo: metadata.name: declared more than once; the later one is ignored",
            "error: ModelRoute default/chat: metadata.name: declared more than once; the later one is ignored",
            "error: Upstream default/primary: metadata.name: declared more than once; the later one is ignored",
            "error: Upstream default/secondary: metadata.name: declared more than once; the later one is ignored",
        ]
    );
    assert_eq!(resolved.snapshot.routes[0].model, "a");
}

#[test]
fn a_missing_secret_is_a_warning_and_the_upstream_is_kept() {
    let text = UPSTREAMS.replace(
        "spec: {baseUrl: \"http://127.0.0.1:9101/v1\"}",
        "spec: {baseUrl: \"http://127.0.0.1:9101/v1\", auth: {secretRef: {name: key, key: apiKey}}}",
    );
    let mut manifests = Manifests::default();
    manifests.parse_str("test.yaml", &text);
    let none = |_: &str, _: &str, _: &str| false;
    let resolved = resolve(&manifests, &none);
    assert_eq!(
        problems(&resolved),
        [
            "warning: Upstream default/primary: spec.auth.secretRef: Secret default/key has no key \"apiKey\"; requests go out without credentials until it does",
        ]
    );
    assert!(resolved.snapshot.upstreams.contains_key("default/primary"));
    let asked = std::cell::RefCell::new(Vec::new());
    let spy = |ns: &str, name: &str, key: &str| {
        asked.borrow_mut().push(format!("{ns}/{name}/{key}"));
        true
    };
    assert!(resolve(&manifests, &spy).problems.is_empty());
    assert_eq!(*asked.borrow(), ["default/key/apiKey"]);
}

#[test]
fn an_invalid_upstream_is_left_out_and_its_routes_warned() {
    let text = format!(
        "{}{}",
        UPSTREAMS.replace("http://127.0.0.1:9102/v1", "127.0.0.1:9102"),
        route("chat", "gpt-4o", &["primary", "secondary"])
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: Upstream default/secondary: spec.baseUrl: baseUrl must be an http:// or https:// URL with a host",
            "warning: ModelRoute default/chat: spec.candidates[1].upstream: Upstream \"secondary\" not found in namespace \"default\"; the candidate is skipped",
        ]
    );
}

#[test]
fn every_problem_is_reported_at_once_errors_first() {
    let text = format!(
        "{}{}{}\
         ---\napiVersion: sluice.dev/v1alpha1\nkind: ErrorBudget\nmetadata: {{name: slo}}\n\
         spec: {{routes: [chat, chat], objective: \"100\", window: 90m, method: timeslices,\n\
         \x20 alerts: [{{name: page, longWindow: 5m, shortWindow: 1h, burnRate: \"0\"}}]}}\n\
         ---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n",
        UPSTREAMS.replace("http://127.0.0.1:9101/v1", "ftp://x"),
        route("chat", "gpt 4o", &["primary", "primary"]),
        route("ok", "o1", &["primary", "secondary"]),
    );
    assert_eq!(
        problems(&resolve_text(&text)),
        [
            "error: ErrorBudget default/slo: spec.routes: routes must not repeat a route",
            "error: ErrorBudget default/slo: spec.objective: objective must be a decimal string strictly between 50 and 100, e.g. \"99.95\"",
            "error: ErrorBudget default/slo: spec.window: window must be whole hours or days between 1h and 90d, e.g. 30d",
            "error: ErrorBudget default/slo: spec: timeslice is required when method is timeslices",
            "error: ErrorBudget default/slo: spec.alerts[0].burnRate: burnRate must be a positive decimal string, e.g. \"14.4\"",
            "error: ErrorBudget default/slo: spec.alerts[0]: shortWindow must be shorter than longWindow",
            "error: ModelRoute default/chat: spec.model: model must be 1-128 characters of letters, digits and . _ : / @ -",
            "error: ModelRoute default/chat: spec.candidates: candidates must name each upstream at most once",
            "error: Upstream default/primary: spec.baseUrl: baseUrl must be an http:// or https:// URL with a host",
            "warning: ModelRoute default/ok: spec.candidates[0].upstream: Upstream \"primary\" not found in namespace \"default\"; the candidate is skipped",
            "warning: test.yaml (document 6): kind: v1 Secret is not a sluice kind; ignored",
        ]
    );
}
