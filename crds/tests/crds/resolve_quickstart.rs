//! `resolve()` on the quick start (`examples/quickstart/`): every field of the Snapshot,
//! in milliseconds and nanodollars, defaults filled in; and the defaults of minimal
//! manifests.

use crate::common;

use std::collections::BTreeMap;

use sluice_crds::error_budget::BudgetMethod;
use sluice_crds::model_route::{CompletionCaching, FirstByteAction, HostedTools, Selection, SyntheticApi};
use sluice_crds::resolve::{defaults, usd_to_nanos};
use sluice_crds::snapshot::{
    AlertConfig, AuthConfig, BudgetConfig, CacheConfig, CandidateConfig, CircuitBreakerConfig, FirstByte, GcpConfig,
    LatencyConfig, PriceConfig, ProbeConfig, Protocol, RouteConfig, SNAPSHOT_FORMAT, SecretKeyConfig, SyntheticConfig,
    UpstreamConfig,
};
use sluice_crds::{Snapshot, load_paths, resolve};

const S: u64 = 1_000;
const MIN: u64 = 60 * S;
const H: u64 = 60 * MIN;
const D: u64 = 24 * H;
const USD: u64 = 1_000_000_000;

fn auth(secret: &str, header: &str, scheme: &str) -> Option<AuthConfig> {
    Some(AuthConfig { secret: secret.into(), key: "apiKey".into(), header: header.into(), scheme: scheme.into() })
}

fn upstream(name: &str, protocol: Protocol, base_url: &str, region: Option<&str>) -> UpstreamConfig {
    UpstreamConfig {
        key: format!("default/{name}"),
        name: name.into(),
        namespace: "default".into(),
        protocol,
        base_url: base_url.into(),
        region: region.map(str::to_string),
        auth: None,
        connect_timeout_ms: 2 * S,
        first_byte: FirstByte::Auto,
        idle_timeout_ms: 60 * S,
        idle_auto: false,
        max_concurrent_requests: None,
        circuit_breaker: CircuitBreakerConfig {
            failure_rate_percent: 50,
            minimum_requests: 20,
            open_for_ms: 30 * S,
            half_open_requests: 3,
        },
        probe: None,
        assistant_prefill: false,
        gcp: None,
        aws: None,
        azure_api_version: None,
        anthropic_version: None,
    }
}

/// A price in cents per million tokens: input, output, cache read, cache write.
fn price(input: u64, output: u64, cached_input: u64, cache_write: u64) -> Option<PriceConfig> {
    Some(PriceConfig {
        input_per_mtok_nanos: input * USD / 100,
        output_per_mtok_nanos: output * USD / 100,
        cached_input_per_mtok_nanos: cached_input * USD / 100,
        cache_write_per_mtok_nanos: cache_write * USD / 100,
        web_search_per_k_nanos: 0,
    })
}

/// Claude's price: Opus's tokens, and $10.00 per 1,000 web searches.
fn claude_price() -> Option<PriceConfig> {
    price(1500, 7500, 150, 1875).map(|p| PriceConfig { web_search_per_k_nanos: 10 * USD, ..p })
}

fn candidate(upstream: &str, model: &str, weight: u32, price: Option<PriceConfig>) -> CandidateConfig {
    CandidateConfig { upstream: format!("default/{upstream}"), model: model.into(), weight, price }
}

fn default_alerts() -> Vec<AlertConfig> {
    let alert = |name: &str, long, short, burn_rate| AlertConfig {
        name: name.into(),
        long_window_ms: long,
        short_window_ms: short,
        burn_rate,
    };
    vec![alert("page", H, 5 * MIN, 14.4), alert("page", 6 * H, 30 * MIN, 6.0), alert("ticket", 3 * D, 6 * H, 1.0)]
}

fn expected_quickstart() -> Snapshot {
    let mut anthropic = upstream("anthropic", Protocol::Anthropic, "http://127.0.0.1:9101/v1", None);
    anthropic.auth = auth("anthropic-key", "x-api-key", "");
    anthropic.first_byte = FirstByte::FixedMs(2 * S);
    anthropic.idle_timeout_ms = 30 * S;
    anthropic.circuit_breaker.open_for_ms = 10 * S;
    // Protocol defaults: Anthropic can continue an assistant turn and is sent its API version.
    anthropic.assistant_prefill = true;
    anthropic.anthropic_version = Some("2023-06-01".into());
    let mut vertex =
        upstream("vertex-us-east5", Protocol::VertexAnthropic, "http://127.0.0.1:9102/v1", Some("us-east5"));
    vertex.first_byte = FirstByte::FixedMs(2 * S);
    vertex.assistant_prefill = true;
    vertex.gcp = Some(GcpConfig {
        project: "sluice-demo".into(),
        location: "us-east5".into(),
        credentials: Some(SecretKeyConfig { secret: "vertex-sa".into(), key: "key.json".into() }),
    });
    let mut openai = upstream("openai", Protocol::Openai, "http://127.0.0.1:9103/v1", Some("us"));
    openai.auth = auth("openai-key", "authorization", "Bearer");
    let mut azure = upstream("azure-eastus", Protocol::AzureOpenai, "http://127.0.0.1:9104/openai", Some("eastus"));
    azure.auth = auth("azure-key", "api-key", "");
    azure.azure_api_version = Some("2024-10-21".into());
    let mut gemini = upstream("gemini", Protocol::Gemini, "http://127.0.0.1:9105/v1beta", None);
    gemini.auth = auth("gemini-key", "x-goog-api-key", "");
    let upstreams: BTreeMap<String, UpstreamConfig> =
        [anthropic, vertex, openai, azure, gemini].into_iter().map(|u| (u.key.clone(), u)).collect();

    let claude = RouteConfig {
        key: "default/claude-opus".into(),
        name: "claude-opus".into(),
        namespace: "default".into(),
        model: "claude-opus-4".into(),
        gateway: "default".into(),
        deadline_ms: 120 * S,
        selection: Selection::Ordered,
        candidates: vec![
            candidate("anthropic", "claude-opus-4-20250514", 100, claude_price()),
            candidate("vertex-us-east5", "claude-opus-4@20250514", 50, claude_price()),
        ],
        retry_on: vec![408, 429, 500, 502, 503, 504],
        on_first_byte_timeout: FirstByteAction::Failover,
        mid_stream: Default::default(),
        max_walks: 3,
        backoff_base_ms: 250,
        backoff_max_total_ms: 10 * S,
        default_max_tokens: 4096,
        synthetic: Some(SyntheticConfig { interval_ms: 90 * S, max_tokens: 1, api: SyntheticApi::Chat }),
        cache: CacheConfig::default(),
        hosted_tools: HostedTools::Refuse,
    };
    let gpt = RouteConfig {
        key: "default/gpt-4o".into(),
        name: "gpt-4o".into(),
        model: "gpt-4o".into(),
        deadline_ms: 540 * S,
        candidates: vec![
            candidate("openai", "gpt-4o-2024-08-06", 100, price(250, 1000, 125, 250)),
            candidate("azure-eastus", "gpt-4o", 50, price(250, 1000, 125, 250)),
        ],
        max_walks: 5,
        backoff_max_total_ms: 30 * S,
        ..claude.clone()
    };
    let gemini = RouteConfig {
        key: "default/gemini-pro".into(),
        name: "gemini-pro".into(),
        model: "gemini-2.5-pro".into(),
        candidates: vec![candidate("gemini", "gemini-2.5-pro", 100, price(125, 1000, 31, 125))],
        synthetic: None,
        ..gpt.clone()
    };

    let availability = BudgetConfig {
        key: "default/chat-availability".into(),
        name: "chat-availability".into(),
        namespace: "default".into(),
        routes: vec!["default/claude-opus".into(), "default/gpt-4o".into(), "default/gemini-pro".into()],
        objective: "99.9".into(),
        objective_ratio: 99.9 / 100.0,
        window_ms: 30 * D,
        method: BudgetMethod::Occurrences,
        timeslice_ms: None,
        latency: None,
        alerts: default_alerts(),
    };
    let timeslices = BudgetConfig {
        key: "default/opus-timeslices".into(),
        name: "opus-timeslices".into(),
        routes: vec!["default/claude-opus".into()],
        objective: "99.95".into(),
        objective_ratio: 99.95 / 100.0,
        method: BudgetMethod::Timeslices,
        timeslice_ms: Some(MIN),
        latency: Some(LatencyConfig { threshold_ms: 10 * S, percentile: 99 }),
        ..availability.clone()
    };
    Snapshot {
        format: SNAPSHOT_FORMAT,
        upstreams,
        routes: vec![claude, gemini, gpt],
        budgets: vec![availability, timeslices],
    }
}

#[test]
fn the_quickstart_resolves_to_the_expected_snapshot() {
    let dir = common::repo_root().join("examples/quickstart");
    let manifests = load_paths(std::slice::from_ref(&dir));
    // The quick start's secrets directory has the §3 layout: <secret>/<key>.
    let secrets = |_: &str, name: &str, key: &str| dir.join("secrets").join(name).join(key).is_file();
    let resolved = resolve(&manifests, &secrets);
    assert_eq!(common::problems(&resolved), Vec::<String>::new());
    assert!(resolved.is_clean());
    assert_eq!(resolved.snapshot, expected_quickstart());
}

#[test]
fn the_snapshot_survives_json_and_has_the_documented_shape() {
    let snapshot = expected_quickstart();
    let json = serde_json::to_value(&snapshot).expect("serializes");
    let back: Snapshot = serde_json::from_value(json.clone()).expect("deserializes");
    assert_eq!(back, snapshot);
    let route = &json["routes"][0];
    assert_eq!(route["deadlineMs"], 120_000);
    assert_eq!(route["candidates"][0]["price"]["inputPerMtokNanos"], 15_000_000_000_u64);
    assert_eq!(route["onFirstByteTimeout"], "failover");
    assert_eq!(route["candidates"][0]["price"]["cacheWritePerMtokNanos"], 18_750_000_000_u64);
    assert_eq!(json["upstreams"]["default/openai"]["firstByte"], "auto");
    assert_eq!(json["upstreams"]["default/anthropic"]["firstByte"]["fixedMs"], 2000);
    assert_eq!(json["upstreams"]["default/vertex-us-east5"]["gcp"]["credentials"]["key"], "key.json");
    assert_eq!(json["budgets"][1]["method"], "timeslices");
    assert_eq!(snapshot.route_for_model("gpt-4o").map(|r| r.name.as_str()), Some("gpt-4o"));
    assert_eq!(snapshot.route_for_model("gpt-5"), None);
}

const MINIMAL: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: bare}
spec: {baseUrl: "https://api.example.com/v1/"}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: dressed, namespace: team-a}
spec:
  baseUrl: https://api.example.com
  auth: {secretRef: {name: k, key: v}, header: X-Api-Key, scheme: ""}
  timeouts: {firstByte: 1m30s}
  probe: {}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: minimal}
spec:
  model: m
  candidates: [{upstream: bare, price: {input: "0.000000001", output: "1234567.123456789"}}]
---
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata: {name: minimal}
spec:
  routes: [minimal]
  objective: "99"
  window: 1h
  latency: {threshold: 250ms}
"#;

#[test]
fn minimal_manifests_get_the_documented_defaults() {
    let resolved = common::resolve_text(MINIMAL);
    assert_eq!(common::problems(&resolved), Vec::<String>::new());
    let snap = &resolved.snapshot;

    let bare = &snap.upstreams["default/bare"];
    assert_eq!(bare.base_url, "https://api.example.com/v1", "trailing slash trimmed");
    assert_eq!((bare.region.as_deref(), bare.auth.as_ref(), bare.probe.as_ref()), (None, None, None));
    assert_eq!(bare.connect_timeout_ms, defaults::CONNECT_MS);
    assert_eq!(bare.first_byte, FirstByte::Auto);
    assert_eq!(bare.idle_timeout_ms, defaults::IDLE_MS);
    assert_eq!(
        bare.circuit_breaker,
        CircuitBreakerConfig {
            failure_rate_percent: 50,
            minimum_requests: 20,
            open_for_ms: 30 * S,
            half_open_requests: 3
        }
    );

    let dressed = &snap.upstreams["team-a/dressed"];
    assert_eq!(dressed.namespace, "team-a");
    assert_eq!(
        dressed.auth,
        Some(AuthConfig { secret: "k".into(), key: "v".into(), header: "x-api-key".into(), scheme: String::new() })
    );
    assert_eq!(dressed.first_byte, FirstByte::FixedMs(90 * S));
    assert_eq!(dressed.probe, Some(ProbeConfig { interval_ms: 90 * S, path: "/models".into() }));

    let route = &snap.routes[0];
    assert_eq!(
        (route.gateway.as_str(), route.deadline_ms, route.selection),
        (defaults::GATEWAY, defaults::DEADLINE_MS, Selection::Ordered)
    );
    assert_eq!(
        route.candidates,
        [CandidateConfig {
            upstream: "default/bare".into(),
            model: "m".into(),
            weight: defaults::WEIGHT,
            price: Some(PriceConfig::new(1, 1_234_567_123_456_789)),
        }]
    );
    assert_eq!(route.retry_on, defaults::RETRY_ON);
    assert_eq!(route.on_first_byte_timeout, FirstByteAction::Failover);
    assert_eq!(
        (route.max_walks, route.backoff_base_ms, route.backoff_max_total_ms),
        (defaults::MAX_WALKS, defaults::BACKOFF_BASE_MS, defaults::BACKOFF_MAX_TOTAL_MS)
    );
    assert_eq!(route.default_max_tokens, defaults::MAX_TOKENS);
    assert_eq!(route.synthetic, None, "synthetic checks are off unless set");
    assert_eq!(
        route.cache,
        CacheConfig {
            ttl_ms: 24 * H,
            shared: false,
            embeddings: true,
            completions: CompletionCaching::Never,
            stale_if_error_ms: 0,
            price_nanos: 0
        },
        "embeddings cached per account for 24h, completions not, nothing charged"
    );

    let budget = &snap.budgets[0];
    assert_eq!((budget.objective_ratio, budget.window_ms, budget.method), (0.99, H, BudgetMethod::Occurrences));
    assert_eq!(budget.latency, Some(LatencyConfig { threshold_ms: 250, percentile: 99 }));
    assert_eq!(budget.alerts, default_alerts());
}

#[test]
fn durations_the_schema_accepts_but_too_long_to_parse_are_capped_not_defaulted() {
    let century = 100 * 365 * D;
    let text = MINIMAL
        .replace(
            "objective: \"99\"",
            "objective: \"99\"\n  alerts: [{name: forever, longWindow: 99999d, shortWindow: 1h, burnRate: \"1\"}]",
        )
        .replace("model: m\n", "model: m\n  deadline: 99999999999999999999999h\n");
    let resolved = common::resolve_text(&text);
    assert_eq!(common::problems(&resolved), Vec::<String>::new());
    assert_eq!(resolved.snapshot.routes[0].deadline_ms, century);
    assert_eq!(resolved.snapshot.budgets[0].alerts[0].long_window_ms, century);
}

#[test]
fn synthetic_checks_resolve_with_their_defaults() {
    let with = |synthetic: &str| {
        let text = MINIMAL.replace("model: m\n", &format!("model: m\n  synthetic: {synthetic}\n"));
        let resolved = common::resolve_text(&text);
        assert_eq!(common::problems(&resolved), Vec::<String>::new(), "{synthetic}");
        resolved.snapshot.routes[0].synthetic
    };
    let defaults = SyntheticConfig {
        interval_ms: defaults::SYNTHETIC_INTERVAL_MS,
        max_tokens: defaults::SYNTHETIC_MAX_TOKENS,
        api: SyntheticApi::Chat,
    };
    assert_eq!(with("{}"), Some(defaults));
    assert_eq!((defaults.interval_ms, defaults.max_tokens), (90 * S, 1));
    assert_eq!(
        with("{interval: 1000ms, maxTokens: 16, api: messages}"),
        Some(SyntheticConfig { interval_ms: S, max_tokens: 16, api: SyntheticApi::Messages })
    );
    assert_eq!(with("{api: responses}").map(|s| s.api), Some(SyntheticApi::Responses));
}

#[test]
fn hosted_tools_are_refused_unless_the_route_omits_them() {
    let with = |line: &str| {
        let text = MINIMAL.replace("model: m\n", &format!("model: m\n{line}"));
        let resolved = common::resolve_text(&text);
        assert_eq!(common::problems(&resolved), Vec::<String>::new(), "{line}");
        resolved.snapshot.routes[0].hosted_tools
    };
    assert_eq!(with(""), HostedTools::Refuse);
    assert_eq!(with("  hostedTools: refuse\n"), HostedTools::Refuse);
    assert_eq!(with("  hostedTools: omit\n"), HostedTools::Omit);
}

/// The route of `MINIMAL` with `cache: <cache>`, resolved without a problem.
fn cache_of(cache: &str) -> CacheConfig {
    let text = MINIMAL.replace("model: m\n", &format!("model: m\n  cache: {cache}\n"));
    let resolved = common::resolve_text(&text);
    assert_eq!(common::problems(&resolved), Vec::<String>::new(), "{cache}");
    resolved.snapshot.routes[0].cache
}

#[test]
fn the_cache_resolves_with_its_defaults_field_by_field() {
    let defaults = CacheConfig::default();
    assert_eq!(cache_of("{}"), defaults, "`cache: {{}}` resolves as no `cache` at all");
    assert_eq!(defaults.ttl_ms, defaults::CACHE_TTL_MS);
    assert_eq!(cache_of("{ttl: 1h30m}"), CacheConfig { ttl_ms: 90 * MIN, ..defaults });
    assert_eq!(cache_of("{ttl: 1s}").ttl_ms, S);
    assert_eq!(cache_of("{ttl: 720h}").ttl_ms, 30 * D);
    assert_eq!(cache_of("{scope: account}"), defaults);
    assert_eq!(cache_of("{scope: shared}"), CacheConfig { shared: true, ..defaults });
    assert_eq!(cache_of("{embeddings: false}"), CacheConfig { embeddings: false, ..defaults });
    assert_eq!(cache_of("{completions: never}"), defaults);
    assert_eq!(
        cache_of("{completions: deterministic}"),
        CacheConfig { completions: CompletionCaching::Deterministic, ..defaults }
    );
    assert_eq!(cache_of("{completions: always}").completions, CompletionCaching::Always);
    assert_eq!(cache_of("{staleIfError: 2h}"), CacheConfig { stale_if_error_ms: 2 * H, ..defaults });
    assert_eq!(
        cache_of("{ttl: 10m, scope: shared, embeddings: false, completions: always, staleIfError: 1s, price: \"1\"}"),
        CacheConfig {
            ttl_ms: 10 * MIN,
            shared: true,
            embeddings: false,
            completions: CompletionCaching::Always,
            stale_if_error_ms: S,
            price_nanos: USD,
        }
    );
}

/// `cache.price` is USD per answer (not per 1M tokens like a candidate's): nanodollars
/// per answer are USD × 1e9, exactly.
#[test]
fn the_cache_price_is_nanodollars_per_answer() {
    let price = |usd: &str| cache_of(&format!("{{price: \"{usd}\"}}")).price_nanos;
    assert_eq!(price("0.0001"), 100_000, "a tenth of a millidollar per answer");
    assert_eq!(price("0"), 0);
    assert_eq!(price("0.000000001"), 1, "one nanodollar, the smallest step");
    assert_eq!(price("2.5"), 2_500_000_000);
    assert_eq!(price("9999999.999999999"), 9_999_999_999_999_999);
    // The same amount as a candidate's input price would be per 1M tokens: 1e6 times less
    // per token, never per answer.
    let both = MINIMAL
        .replace("price: {input: \"0.000000001\"", "price: {input: \"0.0001\"")
        .replace("model: m\n", "model: m\n  cache: {price: \"0.0001\"}\n");
    let route = &common::resolve_text(&both).snapshot.routes[0];
    let candidate = route.candidates[0].price.expect("priced");
    assert_eq!(candidate.input_per_mtok_nanos, route.cache.price_nanos);
    assert_eq!(candidate.cost_nanos(1, 0), 1, "1e5 nanodollars per 1M tokens: one token costs 0.1, rounded up");
}

#[test]
fn usd_strings_convert_to_exact_nanodollars() {
    assert_eq!(usd_to_nanos("15.00"), Some(15 * USD));
    assert_eq!(usd_to_nanos("2.5"), Some(2_500_000_000));
    assert_eq!(usd_to_nanos("0"), Some(0));
    assert_eq!(usd_to_nanos("0.000000001"), Some(1));
    assert_eq!(usd_to_nanos("9999999.999999999"), Some(9_999_999_999_999_999));
    assert_eq!(usd_to_nanos("0.0000000001"), None, "ten decimals");
    assert_eq!(usd_to_nanos(".5"), None);
    assert_eq!(usd_to_nanos("1e3"), None);
    assert_eq!(usd_to_nanos("99999999999999"), None, "overflows u64 nanodollars");

    let price = PriceConfig::new(15 * USD, 75 * USD);
    assert_eq!(price.cost_nanos(1_000_000, 0), 15 * USD);
    assert_eq!(price.cost_nanos(1, 0), 15_000, "exact: 15e9 / 1e6");
    let odd = PriceConfig::new(1, 0);
    assert_eq!(odd.cost_nanos(1, 0), 1, "rounded up, never down");
    assert_eq!(PriceConfig::new(u64::MAX, u64::MAX).cost_nanos(u64::MAX, u64::MAX), u64::MAX);
}
