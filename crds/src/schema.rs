//! Schema fragments and CEL rules shared by the kinds, and the messages that the rules
//! and `validate` share. The rules and fragments are the CRDs' only (`kube` feature).

#[cfg(feature = "kube")]
use schemars::{Schema, generate::SchemaGenerator, json_schema};

/// Longest string of each kind that a CEL rule reads and no pattern already bounds.
///
/// A real API server estimates every rule's cost from the declared sizes of what it
/// reads, and refuses a CRD whose rule may cost more than 10,000,000 (or whose rules
/// together exceed 100,000,000). A string without `maxLength` is costed at about 3 MB,
/// times the `maxItems` of every list above it, so each string a rule reads carries a
/// `maxLength`: these where nothing else bounds it, the pattern's own longest match where
/// the pattern does (docs/design.md §2).
pub mod max_len {
    /// A duration such as `1m30s`.
    pub const DURATION: usize = 32;
    /// A URL (`baseUrl`) or a URL path (`probe.path`).
    pub const URL: usize = 2048;
    /// An HTTP header name.
    pub const HEADER: usize = 256;
}

/// One or more `<int><unit>` groups, units ms, s, m, h; not zero.
#[cfg(feature = "kube")]
pub const DURATION_RULE: &str = "self.matches('^([0-9]+(ms|s|m|h))+$') && !self.matches('^(0+(ms|s|m|h))+$')";
/// Message for `DURATION_RULE`.
pub const DURATION_MESSAGE: &str = "must be a positive duration such as 50ms, 2s, 1m30s or 1h";
/// [`DURATION_RULE`] or the word `auto`.
#[cfg(feature = "kube")]
pub const DURATION_OR_AUTO_RULE: &str =
    "self == 'auto' || (self.matches('^([0-9]+(ms|s|m|h))+$') && !self.matches('^(0+(ms|s|m|h))+$'))";
/// A [`DURATION_RULE`] duration of at least one second (a synthetic check's interval);
/// CEL's `duration()` reads the same `<int><unit>` groups.
#[cfg(feature = "kube")]
pub const SYNTHETIC_INTERVAL_RULE: &str = "self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1s')";
/// A [`DURATION_RULE`] duration between one second and 720h (30 days): a cache entry's
/// `ttl` and `staleIfError`. A number too large for its unit is refused before
/// `duration()` reads it (4 digits of hours, 6 of minutes, 8 of seconds, 11 of
/// milliseconds, leading zeros aside, are all beyond 30 days), so that no value within
/// `maxLength` overflows CEL's duration and fails to evaluate instead of being refused.
#[cfg(feature = "kube")]
pub const CACHE_DURATION_RULE: &str = "self.matches('^([0-9]+(ms|s|m|h))+$') \
    && !self.matches('[1-9][0-9]{3,}h|[1-9][0-9]{5,}m([0-9]|$)|[1-9][0-9]{7,}s|[1-9][0-9]{10,}ms') \
    && duration(self) >= duration('1s') && duration(self) <= duration('720h')";
/// A non-negative USD amount with at most 9 decimals.
#[cfg(feature = "kube")]
pub const MONEY_RULE: &str = "self.matches('^[0-9]{1,7}(\\\\.[0-9]{1,9})?$')";
/// Message for `MONEY_RULE`.
pub const MONEY_MESSAGE: &str = "price must be a decimal string of USD per 1M tokens, e.g. \"15.00\"";

/// `conditions` as a map list keyed by `type`, so server-side apply merges per condition.
#[cfg(feature = "kube")]
pub fn conditions_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
                "message": {"type": "string"}
            }
        }
    })
}

/// Messages shared by the CEL rules in the CRD schema and by `validate`, so that
/// `kubectl apply` and file mode refuse a manifest with the same words.
pub mod msg {
    pub const BASE_URL: &str = "baseUrl must be an http:// or https:// URL with a host";
    pub const HEADER: &str = "header must be an HTTP header name";
    pub const FIRST_BYTE: &str = "firstByte must be a duration such as 50ms or 2s, or auto";
    pub const IDLE: &str = "idle must be a duration such as 30s, or auto";
    pub const PROBE_PATH: &str = "probe.path must start with /";
    pub const BASE_URL_REQUIRED: &str = "baseUrl is required for protocol openai and azure-openai";
    pub const GCP_REQUIRED: &str =
        "gcp (project and location) is required for protocol vertex-anthropic and vertex-gemini";
    pub const AWS_REQUIRED: &str = "aws.region is required for protocol bedrock";
    pub const AZURE_REQUIRED: &str = "azure.apiVersion is required for protocol azure-openai";
    pub const GCP_ONLY: &str = "gcp is only read by protocol vertex-anthropic and vertex-gemini; remove it";
    pub const AWS_ONLY: &str = "aws is only read by protocol bedrock; remove it";
    pub const AZURE_ONLY: &str = "azure is only read by protocol azure-openai; remove it";
    pub const ANTHROPIC_ONLY: &str = "anthropic is only read by protocol anthropic; remove it";
    pub const GCP_PROJECT: &str = "gcp.project must be a Google Cloud project id or number, e.g. my-project";
    pub const GCP_LOCATION: &str = "gcp.location must be a Google Cloud location such as us-east5, global, us or eu";
    pub const AWS_REGION: &str = "aws.region must be an AWS region such as us-east-1";
    pub const AZURE_API_VERSION: &str = "azure.apiVersion must be an API version such as 2024-10-21";
    pub const ANTHROPIC_VERSION: &str = "anthropic.version must be a version such as 2023-06-01";
    pub const MODEL: &str = "model must be 1-128 characters of letters, digits and . _ : / @ -";
    pub const GATEWAY: &str = "gateway must be a DNS label of at most 40 characters";
    pub const CANDIDATES_UNIQUE: &str = "candidates must name each upstream at most once";
    pub const UPSTREAM_NAME: &str = "upstream must be the name of an Upstream (a DNS subdomain)";
    pub const RETRY_ON: &str =
        "retryOn may only list 408, 429 and 5xx statuses: other 4xx are client errors and are passed through";
    pub const SYNTHETIC_INTERVAL: &str = "synthetic.interval must be a duration of at least 1s, e.g. 90s";
    pub const CACHE_TTL: &str = "cache.ttl must be a duration between 1s and 720h (30 days), e.g. 24h";
    pub const CACHE_STALE_IF_ERROR: &str =
        "cache.staleIfError must be a duration between 1s and 720h (30 days), e.g. 1h";
    pub const WEB_SEARCH_PRICE: &str =
        "price.webSearch must be a decimal string of USD per 1,000 web searches, e.g. \"10.00\"";
    pub const CACHE_PRICE: &str =
        "cache.price must be a decimal string of USD per answer served from the cache, e.g. \"0.0001\"";
    pub const TIMESLICE_REQUIRED: &str = "timeslice is required when method is timeslices";
    pub const ROUTES_UNIQUE: &str = "routes must not repeat a route";
    pub const OBJECTIVE: &str = "objective must be a decimal string strictly between 50 and 100, e.g. \"99.95\"";
    pub const WINDOW: &str = "window must be whole hours or days between 1h and 90d, e.g. 30d";
    pub const TIMESLICE: &str = "timeslice must be between 1s and 59m, shorter than the window, e.g. 1m";
    pub const ALERT_NAME: &str = "alert name must be a lowercase word such as page or ticket";
    pub const ALERT_WINDOWS: &str = "shortWindow must be shorter than longWindow";
    pub const LONG_WINDOW: &str = "longWindow must be a duration in m, h or d, e.g. 1h";
    pub const SHORT_WINDOW: &str = "shortWindow must be a duration in m, h or d, e.g. 5m";
    pub const BURN_RATE: &str = "burnRate must be a positive decimal string, e.g. \"14.4\"";
    pub const ACCOUNT: &str = "account must be a ledger account name: 1-128 letters, digits and . _ : @ / + = -, starting with a letter or digit";
    pub const ANY_LIMIT: &str = "set at least one limit: rpm, tpm, tpd, concurrency, dailySpend or monthlySpend";
    pub const ACCOUNT_IMMUTABLE: &str = "account cannot be changed: create another AccountLimit and delete this one";
    pub const KEY_IMMUTABLE: &str =
        "keyId cannot be added, removed or changed: create another AccountLimit and delete this one";
    pub const DAILY_SPEND: &str = "dailySpend must be a decimal string of USD, e.g. \"25.00\"";
    pub const MONTHLY_SPEND: &str = "monthlySpend must be a decimal string of USD, e.g. \"500.00\"";
}
