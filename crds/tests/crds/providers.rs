//! The provider side of Upstreams (docs/design.md §9) as `resolve()` makes it: each
//! protocol's default base URL, auth header and settings in the Snapshot, the Secrets it
//! reads, and cache-aware prices.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::collections::BTreeSet;

use sluice_crds::snapshot::{AwsConfig, GcpConfig, Metered, PriceConfig, Protocol, SecretKeyConfig, UpstreamConfig};
use sluice_crds::{Manifests, Snapshot, resolve};

use common::{problems, resolve_text};

/// One Upstream named `u` with `spec` (YAML lines indented by two spaces), resolved with
/// every Secret present; it must resolve without a problem.
fn upstream(spec: &str) -> UpstreamConfig {
    let text = format!("apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: u}}\nspec:\n{spec}\n");
    let resolved = resolve_text(&text);
    assert_eq!(problems(&resolved), Vec::<String>::new(), "{spec}");
    common::check_snapshot(&resolved.snapshot);
    resolved.snapshot.upstreams.get("default/u").cloned().expect("the upstream is served")
}

#[test]
fn anthropic_defaults_its_base_url_key_header_version_and_prefill() {
    let u = upstream("  protocol: anthropic\n  auth: {secretRef: {name: k, key: apiKey}}");
    assert_eq!(u.protocol, Protocol::Anthropic);
    assert_eq!(u.base_url, "https://api.anthropic.com/v1");
    let auth = u.auth.expect("auth");
    assert_eq!((auth.header.as_str(), auth.scheme.as_str()), ("x-api-key", ""));
    assert_eq!(u.anthropic_version.as_deref(), Some("2023-06-01"));
    assert!(u.assistant_prefill);
    assert_eq!((u.gcp, u.aws, u.azure_api_version), (None, None, None));
}

#[test]
fn a_set_base_url_wins_over_the_default_and_loses_its_trailing_slash() {
    let u = upstream(
        "  protocol: anthropic\n  baseUrl: http://127.0.0.1:9200/v1/\n  anthropic: {version: 2024-01-01}\n  assistantPrefill: false",
    );
    assert_eq!(u.base_url, "http://127.0.0.1:9200/v1");
    assert_eq!(u.anthropic_version.as_deref(), Some("2024-01-01"));
    assert!(!u.assistant_prefill);
}

#[test]
fn vertex_base_urls_follow_the_location() {
    for (location, want) in [
        ("us-east5", "https://us-east5-aiplatform.googleapis.com/v1"),
        ("europe-west1", "https://europe-west1-aiplatform.googleapis.com/v1"),
        ("global", "https://aiplatform.googleapis.com/v1"),
        ("us", "https://aiplatform.us.rep.googleapis.com/v1"),
        ("eu", "https://aiplatform.eu.rep.googleapis.com/v1"),
    ] {
        for protocol in ["vertex-anthropic", "vertex-gemini"] {
            let u = upstream(&format!("  protocol: {protocol}\n  gcp: {{project: p-1, location: {location}}}"));
            assert_eq!(u.base_url, want, "{protocol} in {location}");
            assert_eq!(u.assistant_prefill, protocol == "vertex-anthropic", "{protocol}");
            assert_eq!(u.anthropic_version, None, "the Vertex body carries its own version");
        }
    }
}

#[test]
fn vertex_carries_project_location_and_the_service_account_secret() {
    let u = upstream(
        "  protocol: vertex-anthropic\n  gcp:\n    project: my-project\n    location: us-east5\n    credentials: {secretRef: {name: sa, key: key.json}}",
    );
    let credentials = Some(SecretKeyConfig { secret: "sa".into(), key: "key.json".into() });
    assert_eq!(u.gcp, Some(GcpConfig { project: "my-project".into(), location: "us-east5".into(), credentials }));
    assert_eq!(u.secret_refs(), [("sa".to_string(), "key.json".to_string())]);
}

#[test]
fn bedrock_defaults_to_the_regional_runtime_endpoint_and_reads_the_access_keys() {
    let u = upstream("  protocol: bedrock\n  aws: {region: eu-central-1, credentials: {secretRef: {name: aws-keys}}}");
    assert_eq!(u.base_url, "https://bedrock-runtime.eu-central-1.amazonaws.com");
    assert_eq!(u.aws, Some(AwsConfig { region: "eu-central-1".into(), credentials_secret: Some("aws-keys".into()) }));
    assert!(!u.assistant_prefill);
    let keys: Vec<String> = u.secret_refs().into_iter().map(|(s, k)| format!("{s}/{k}")).collect();
    assert_eq!(keys, ["aws-keys/AWS_ACCESS_KEY_ID", "aws-keys/AWS_SECRET_ACCESS_KEY", "aws-keys/AWS_SESSION_TOKEN"]);

    let chain = upstream("  protocol: bedrock\n  aws: {region: us-east-1}");
    assert_eq!(chain.aws, Some(AwsConfig { region: "us-east-1".into(), credentials_secret: None }));
    assert!(chain.secret_refs().is_empty(), "no Secret: the standard AWS chain");
}

#[test]
fn azure_and_gemini_send_the_key_in_their_own_headers_unless_told_otherwise() {
    let azure = upstream(
        "  protocol: azure-openai\n  baseUrl: https://res.openai.azure.com/openai\n  azure: {apiVersion: 2024-10-21}\n  auth: {secretRef: {name: k, key: apiKey}}",
    );
    assert_eq!(azure.azure_api_version.as_deref(), Some("2024-10-21"));
    let auth = azure.auth.expect("auth");
    assert_eq!((auth.header.as_str(), auth.scheme.as_str()), ("api-key", ""));

    let gemini = upstream("  protocol: gemini\n  auth: {secretRef: {name: k, key: apiKey}}");
    assert_eq!(gemini.base_url, "https://generativelanguage.googleapis.com/v1beta");
    let auth = gemini.auth.expect("auth");
    assert_eq!((auth.header.as_str(), auth.scheme.as_str()), ("x-goog-api-key", ""));

    let told = upstream(
        "  protocol: gemini\n  auth: {secretRef: {name: k, key: apiKey}, header: Authorization, scheme: Bearer}",
    );
    let auth = told.auth.expect("auth");
    assert_eq!((auth.header.as_str(), auth.scheme.as_str()), ("authorization", "Bearer"));

    let openai = upstream("  baseUrl: http://127.0.0.1:9101/v1\n  auth: {secretRef: {name: k, key: apiKey}}");
    assert_eq!(openai.protocol, Protocol::Openai);
    let auth = openai.auth.expect("auth");
    assert_eq!((auth.header.as_str(), auth.scheme.as_str()), ("authorization", "Bearer"));
}

#[test]
fn missing_credential_keys_are_warnings_naming_the_secret_and_key() {
    let text = r#"
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: vertex}
spec:
  protocol: vertex-gemini
  gcp: {project: p-1, location: us-central1, credentials: {secretRef: {name: sa, key: key.json}}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: bedrock}
spec:
  protocol: bedrock
  aws: {region: us-east-1, credentials: {secretRef: {name: aws-keys}}}
"#;
    let mut manifests = Manifests::default();
    manifests.parse_str("test.yaml", text);
    // Only the AWS key id exists: the secret access key and the service account are missing.
    let lookup = |_: &str, name: &str, key: &str| name == "aws-keys" && key == "AWS_ACCESS_KEY_ID";
    let resolved = resolve(&manifests, &lookup);
    assert_eq!(
        problems(&resolved),
        [
            "warning: Upstream default/bedrock: spec.aws.credentials.secretRef: Secret default/aws-keys has no key \"AWS_SECRET_ACCESS_KEY\"; requests cannot be signed until it does",
            "warning: Upstream default/vertex: spec.gcp.credentials.secretRef: Secret default/sa has no key \"key.json\"; requests cannot be authorized until it does",
        ]
    );
    assert_eq!(resolved.snapshot.upstreams.len(), 2, "warnings leave nothing out");
    let refs: BTreeSet<String> = resolved.snapshot.secret_refs().into_iter().map(|(s, k)| format!("{s}/{k}")).collect();
    let want =
        ["aws-keys/AWS_ACCESS_KEY_ID", "aws-keys/AWS_SECRET_ACCESS_KEY", "aws-keys/AWS_SESSION_TOKEN", "sa/key.json"];
    assert_eq!(refs, want.iter().map(ToString::to_string).collect());
}

#[test]
fn a_snapshot_written_before_protocols_and_cache_prices_still_loads() {
    let old = r#"{"format":1,"upstreams":{"default/a":{"key":"default/a","name":"a","namespace":"default",
        "baseUrl":"http://127.0.0.1:9101/v1","connectTimeoutMs":2000,"firstByte":"auto","idleTimeoutMs":60000,
        "circuitBreaker":{"failureRatePercent":50,"minimumRequests":20,"openForMs":30000,"halfOpenRequests":3}}},
        "routes":[{"key":"default/r","name":"r","namespace":"default","model":"m","gateway":"default",
        "deadlineMs":540000,"selection":"ordered","candidates":[{"upstream":"default/a","model":"m","weight":100,
        "price":{"inputPerMtokNanos":3000000000,"outputPerMtokNanos":15000000000}}],"retryOn":[429],
        "onFirstByteTimeout":"failover","maxWalks":5,"backoffBaseMs":250,"backoffMaxTotalMs":30000,
        "defaultMaxTokens":4096}],"budgets":[]}"#;
    let snapshot: Snapshot = serde_json::from_str(old).expect("an old snapshot loads");
    let u = &snapshot.upstreams["default/a"];
    assert_eq!(
        (u.protocol, u.assistant_prefill, u.gcp.is_none(), u.aws.is_none()),
        (Protocol::Openai, false, true, true)
    );
    let price = snapshot.routes[0].candidates[0].price.expect("price");
    assert_eq!(price, PriceConfig::new(3_000_000_000, 15_000_000_000), "cache reads and writes cost input");
    let back: Snapshot = serde_json::from_str(&serde_json::to_string(&snapshot).expect("JSON")).expect("reads back");
    assert_eq!(back, snapshot);
}

#[test]
fn cache_and_search_prices_resolve_to_exact_nanodollars() {
    let text = r#"
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: a}
spec: {protocol: anthropic}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: r}
spec:
  model: claude-opus-4
  candidates:
  - {upstream: a, price: {input: "15.00", output: "75.00", cachedInput: "1.50", cacheWrite: "18.75", webSearch: "10.00"}}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: s}
spec:
  model: claude-sonnet-4
  candidates:
  - {upstream: a, price: {input: "3", output: "15", cacheWrite: "3.75"}}
"#;
    let resolved = resolve_text(text);
    assert_eq!(problems(&resolved), Vec::<String>::new());
    let price = |i: usize| resolved.snapshot.routes[i].candidates[0].price.expect("price");
    let opus = PriceConfig {
        input_per_mtok_nanos: 15_000_000_000,
        output_per_mtok_nanos: 75_000_000_000,
        cached_input_per_mtok_nanos: 1_500_000_000,
        cache_write_per_mtok_nanos: 18_750_000_000,
        web_search_per_k_nanos: 10_000_000_000,
    };
    assert_eq!(price(0), opus);
    let sonnet =
        PriceConfig { cache_write_per_mtok_nanos: 3_750_000_000, ..PriceConfig::new(3_000_000_000, 15_000_000_000) };
    assert_eq!(price(1), sonnet, "cachedInput defaults to input, webSearch to nothing");
}

#[test]
fn usage_costs_price_cache_reads_writes_and_searches_apart_exactly() {
    let opus = PriceConfig {
        input_per_mtok_nanos: 15_000_000_000,
        output_per_mtok_nanos: 75_000_000_000,
        cached_input_per_mtok_nanos: 1_500_000_000,
        cache_write_per_mtok_nanos: 18_750_000_000,
        web_search_per_k_nanos: 10_000_000_000,
    };
    let used = |input_uncached, cache_read, cache_write, output, web_searches| Metered {
        input_uncached,
        cache_read,
        cache_write,
        output,
        web_searches,
    };
    // 1000 × 15000 + 100000 × 1500 + 2000 × 18750 + 500 × 75000 nanodollars.
    assert_eq!(opus.cost_of(&used(1_000, 100_000, 2_000, 500, 0)), 15_000_000 + 150_000_000 + 37_500_000 + 37_500_000);
    assert_eq!(opus.cost_of(&used(1_000, 0, 0, 500, 0)), opus.cost_nanos(1_000, 500), "no cache: the plain cost");
    assert_eq!(opus.cost_of(&used(0, 1, 0, 0, 0)), 1_500, "one cache read");
    assert_eq!(opus.cost_of(&used(0, 0, 1, 0, 0)), 18_750, "one cache write");
    // $10.00 per 1,000 searches: one cent each.
    assert_eq!(opus.cost_of(&used(0, 0, 0, 0, 3)), 30_000_000, "three searches");
    assert_eq!(opus.cost_of(&used(1_000, 0, 0, 500, 1)), opus.cost_nanos(1_000, 500) + 10_000_000);

    // Rounded up once over the sum, never per part: 3 × 0.4 = 1.2 nanodollars → 2.
    let tiny = PriceConfig {
        cached_input_per_mtok_nanos: 400_000,
        cache_write_per_mtok_nanos: 400_000,
        ..PriceConfig::new(400_000, 0)
    };
    assert_eq!(tiny.cost_of(&used(1, 1, 1, 0, 0)), 2);
    assert_eq!(tiny.cost_of(&Metered::default()), 0);
    // 0.4 of a nanodollar a search: one search rounds up to 1, five make 2.
    let searches = PriceConfig { web_search_per_k_nanos: 400, ..PriceConfig::new(0, 0) };
    assert_eq!((searches.cost_of(&used(0, 0, 0, 0, 1)), searches.cost_of(&used(0, 0, 0, 0, 5))), (1, 2));

    let max = PriceConfig {
        cached_input_per_mtok_nanos: u64::MAX,
        cache_write_per_mtok_nanos: u64::MAX,
        web_search_per_k_nanos: u64::MAX,
        ..PriceConfig::new(u64::MAX, u64::MAX)
    };
    assert_eq!(max.cost_of(&used(u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX)), u64::MAX, "saturates");
}
