//! The configuration a gateway serves: a [`Snapshot`] compiled into lookup tables with
//! per-upstream health, HTTP clients and metric handles resolved once at load time
//! (docs/contributing.md (conventions, rule 8)), swapped atomically on reload.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use http::Uri;
use sluice_crds::Snapshot;
use sluice_crds::snapshot::{CacheConfig, CandidateConfig, CompletionCaching, Protocol, RouteConfig, UpstreamConfig};
use sluice_ledger::{Heartbeat, UpstreamHeartbeat};

use crate::auth::{self, Credentials};
use crate::egress;
use crate::endpoint::Endpoint;
use crate::health::{Health, HealthSettings};
use crate::telemetry::metrics::{Metrics, RouteMetrics, UpstreamMetrics};

pub mod source;

/// One upstream, ready to be called.
pub struct UpstreamHandle {
    /// Resolved config.
    pub cfg: UpstreamConfig,
    /// The name as the `x-sluice-upstream` header value (`None` if it cannot be one).
    pub name_header: Option<http::HeaderValue>,
    /// Health, shared across config versions.
    pub health: Arc<Health>,
    /// HTTP client with this upstream's connect timeout and egress route.
    pub client: crate::egress::UpstreamClient,
    /// Metric handles.
    pub metrics: UpstreamMetrics,
    /// Requests in flight, against `maxConcurrentRequests`.
    pub in_flight: Arc<AtomicU32>,
    /// `{baseUrl}/chat/completions`, `/completions`, `/embeddings`, parsed once per
    /// config version rather than on every attempt.
    pub urls: EndpointUrls,
    /// An `azure-openai` upstream's deployment URLs.
    pub azure: Option<AzureUrls>,
    /// A native upstream's call URLs, parsed on first use (see [`NativeUris`]).
    pub native_uris: NativeUris,
    /// Google tokens or AWS signing keys, shared across config versions; `None` for
    /// upstreams that send an API key (or nothing).
    pub credentials: Option<Arc<Credentials>>,
}

impl UpstreamHandle {
    /// Whether requests to this upstream are translated (not OpenAI-compatible).
    pub fn is_native(&self) -> bool {
        !matches!(self.cfg.protocol, Protocol::Openai | Protocol::AzureOpenai)
    }
}

/// The URLs of an Azure OpenAI resource's deployments (docs/design.md §9):
/// `{baseUrl}/deployments/{model}/chat/completions?api-version={azure.apiVersion}`.
#[derive(Clone, Debug)]
pub struct AzureUrls {
    base: String,
    api_version: String,
}

impl AzureUrls {
    /// The URI of `endpoint` at the deployment named `deployment`.
    pub fn uri(&self, endpoint: Endpoint, deployment: &str) -> Result<Uri, http::uri::InvalidUri> {
        let version = sluice_providers::encode_segment(&self.api_version);
        if endpoint == Endpoint::Responses {
            // Azure's Responses API takes the deployment as the body's `model`.
            return format!("{}/responses?api-version={version}", self.base).parse();
        }
        let deployment = sluice_providers::encode_segment(deployment);
        format!("{}/deployments/{deployment}{}?api-version={version}", self.base, endpoint.upstream_path()).parse()
    }
}

/// The parsed URI of each OpenAI endpoint of an upstream.
#[derive(Clone, Debug)]
pub struct EndpointUrls {
    /// The base URL itself (the proxy decision and probes start from it).
    pub base: Uri,
    /// Chat completions.
    pub chat: Uri,
    /// Legacy completions.
    pub completions: Uri,
    /// Embeddings.
    pub embeddings: Uri,
    /// Responses.
    pub responses: Uri,
}

impl EndpointUrls {
    fn parse(base: &str) -> Result<Self, BuildError> {
        let base_uri = uri(base)?;
        Ok(Self {
            base: base_uri,
            chat: uri(&format!("{base}{}", Endpoint::Chat.upstream_path()))?,
            completions: uri(&format!("{base}{}", Endpoint::Completions.upstream_path()))?,
            embeddings: uri(&format!("{base}{}", Endpoint::Embeddings.upstream_path()))?,
            responses: uri(&format!("{base}{}", Endpoint::Responses.upstream_path()))?,
        })
    }

    /// The URI of an endpoint.
    pub fn of(&self, endpoint: Endpoint) -> &Uri {
        match endpoint {
            Endpoint::Chat | Endpoint::Messages => &self.chat,
            Endpoint::Completions => &self.completions,
            Endpoint::Embeddings => &self.embeddings,
            Endpoint::Responses => &self.responses,
        }
    }
}

/// The URIs a native upstream is called at (`{baseUrl}{path}`), each parsed on its first
/// call and kept for the config version rather than formatted and parsed per attempt.
/// The paths are a function of the candidate's model and of streaming, so an upstream
/// has a few; past [`NativeUris::MAX`] a URI is parsed each time.
#[derive(Debug, Default)]
pub struct NativeUris(RwLock<Vec<(String, Uri)>>);

impl NativeUris {
    const MAX: usize = 64;

    /// The URI of `path` at `base_url`; why not, if it does not parse.
    pub(crate) fn get(&self, base_url: &str, path: &str) -> Result<Uri, String> {
        if let Ok(known) = self.0.read()
            && let Some((_, uri)) = known.iter().find(|(p, _)| p == path)
        {
            return Ok(uri.clone());
        }
        let url = format!("{}{path}", base_url.trim_end_matches('/'));
        let uri: Uri = url.parse().map_err(|e| format!("upstream URL {url:?}: {e}"))?;
        if let Ok(mut known) = self.0.write()
            && known.len() < Self::MAX
            && !known.iter().any(|(p, _)| p == path)
        {
            known.push((path.to_owned(), uri.clone()));
        }
        Ok(uri)
    }
}

/// Parses a URL as the WHATWG parser does (percent-encoding, IDNA, default ports), then
/// into the `Uri` the HTTP client sends.
pub(crate) fn uri(text: &str) -> Result<Uri, BuildError> {
    let url = url::Url::parse(text).map_err(|e| BuildError::Url(text.to_string(), e.to_string()))?;
    Uri::try_from(url.as_str()).map_err(|e| BuildError::Url(text.to_string(), e.to_string()))
}

/// Why a snapshot could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(#[from] crate::egress::EgressError),
    /// A base URL does not parse.
    #[error("upstream URL {0:?}: {1}")]
    Url(String, String),
}

/// One candidate of a route.
pub struct Candidate {
    /// Resolved config.
    pub cfg: CandidateConfig,
    /// The upstream.
    pub upstream: Arc<UpstreamHandle>,
}

/// One route, ready to dispatch.
pub struct Route {
    /// Resolved config.
    pub cfg: RouteConfig,
    /// Candidates in spec order.
    pub candidates: Vec<Candidate>,
    /// Metric handles.
    pub metrics: RouteMetrics,
    /// What the route caches, for how long, and for whom (docs/design.md §13).
    pub cache: CachePolicy,
}

impl Route {
    /// The upstream and config of the candidate at `index`, as traces record who served.
    pub fn served(&self, index: Option<usize>) -> Option<(&UpstreamConfig, &CandidateConfig)> {
        index.and_then(|i| self.candidates.get(i)).map(|c| (&c.upstream.cfg, &c.cfg))
    }
}

/// A route's cache policy (docs/design.md §13).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// How long an entry is served fresh.
    pub ttl: Duration,
    /// How long past `ttl` an entry may still answer when every candidate failed.
    pub stale_if_error: Duration,
    /// Every caller of the route shares its entries (else each account has its own).
    pub shared: bool,
    /// `/v1/embeddings` cached per input item (on by default).
    pub embeddings: bool,
    /// Which completions are cached, whole (none by default).
    pub completions: CompletionCaching,
    /// Charged per answer served from the cache (a completion, or one embedding input).
    pub price_nanos: u64,
    /// The route's candidates as `upstream/model`, comma-separated: part of every key, so
    /// a route that changes models starts afresh.
    pub models: String,
}

impl CachePolicy {
    /// The policy of `route`.
    pub fn of(route: &RouteConfig) -> Self {
        let models: Vec<String> = route.candidates.iter().map(|c| format!("{}/{}", c.upstream, c.model)).collect();
        Self { models: models.join(","), ..Self::from(&route.cache) }
    }

    /// How long an entry is kept: served fresh for `ttl`, then only when every
    /// candidate failed, for `stale_if_error`.
    pub fn lifetime(&self) -> Duration {
        self.ttl + self.stale_if_error
    }
}

impl From<&CacheConfig> for CachePolicy {
    fn from(c: &CacheConfig) -> Self {
        Self {
            ttl: Duration::from_millis(c.ttl_ms),
            stale_if_error: Duration::from_millis(c.stale_if_error_ms),
            shared: c.shared,
            embeddings: c.embeddings,
            completions: c.completions,
            price_nanos: c.price_nanos,
            models: String::new(),
        }
    }
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self::from(&CacheConfig::default())
    }
}

/// One loaded config version.
pub struct Runtime {
    /// What it was built from.
    pub snapshot: Snapshot,
    /// Routes by model name (looked up per request: hashed with foldhash; a lookup
    /// inserts nothing, so a client's model names cannot crowd the map).
    pub routes: HashMap<String, Arc<Route>, foldhash::fast::RandomState>,
    /// Upstreams by key.
    pub upstreams: HashMap<String, Arc<UpstreamHandle>, foldhash::fast::RandomState>,
}

/// State that outlives config versions: health by upstream key, clients, in-flight
/// counters, and credentials (a reload must not throw away a token that is still good).
#[derive(Default)]
pub struct Carry {
    health: Mutex<HashMap<String, Arc<Health>>>,
    in_flight: Mutex<HashMap<String, Arc<AtomicU32>>>,
    clients: Mutex<HashMap<(u64, egress::Route), egress::PooledClient>>,
    /// The pools of plain-HTTP upstreams reached directly, by connect timeout and address.
    plain: Mutex<HashMap<(u64, String), Arc<egress::Plain>>>,
    /// Credentials by upstream key, with the config they were made from.
    credentials: Mutex<HashMap<String, (String, Arc<Credentials>)>>,
    /// `--secrets-dir`, where credential Secrets are read.
    secrets_dir: Option<PathBuf>,
}

impl Carry {
    /// Carried state for a gateway whose Secrets are mounted under `secrets_dir`.
    pub fn new(secrets_dir: Option<&Path>) -> Self {
        Self { secrets_dir: secrets_dir.map(Path::to_path_buf), ..Self::default() }
    }

    /// The credentials an upstream needs besides an API key: a Google token source for
    /// `vertex-*`, a SigV4 signer for `bedrock` without an API key. Kept while the
    /// upstream's credential config stays the same.
    fn credentials(&self, cfg: &UpstreamConfig) -> Option<Arc<Credentials>> {
        let made = match (cfg.protocol, &cfg.gcp, &cfg.aws) {
            (Protocol::VertexAnthropic | Protocol::VertexGemini, Some(gcp), _) => {
                let file = gcp.credentials.as_ref().map(|c| auth::SecretFile {
                    secret: c.secret.clone(),
                    path: self.secrets_dir.clone().unwrap_or_default().join(&c.secret).join(&c.key),
                });
                let fingerprint = format!("gcp {file:?}");
                let make = move || {
                    Credentials::Google(auth::google::GoogleTokens::new(auth::google::TokenSource::new(
                        file,
                        &auth::process_env(),
                    )))
                };
                Some((fingerprint, Box::new(make) as Box<dyn FnOnce() -> Credentials>))
            }
            (Protocol::Bedrock, _, Some(aws)) if cfg.auth.is_none() => {
                let source = match &aws.credentials_secret {
                    Some(name) => auth::aws::CredentialSource::Secret {
                        dir: self.secrets_dir.clone().unwrap_or_default().join(name),
                        name: name.clone(),
                    },
                    None => auth::aws::CredentialSource::Chain(auth::process_env()),
                };
                let fingerprint = format!("aws {} {:?}", aws.region, aws.credentials_secret);
                let region = aws.region.clone();
                Some((
                    fingerprint,
                    Box::new(move || Credentials::Aws(auth::aws::AwsSigner::new(region, source)))
                        as Box<dyn FnOnce() -> Credentials>,
                ))
            }
            _ => None,
        }?;
        let (fingerprint, make) = made;
        let mut map = self.credentials.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kept, creds)) = map.get(&cfg.key)
            && *kept == fingerprint
        {
            return Some(creds.clone());
        }
        let creds = Arc::new(make());
        map.insert(cfg.key.clone(), (fingerprint, creds.clone()));
        Some(creds)
    }

    fn health(&self, key: &str) -> Arc<Health> {
        let mut map = self.health.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    fn in_flight(&self, key: &str) -> Arc<AtomicU32> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// The client of an upstream at `base`: one pooled client (and connection pool) per
    /// connect timeout and egress route, and a pool of its own per connect timeout and
    /// address for a plain-HTTP upstream reached directly.
    fn client(&self, connect_ms: u64, base: &Uri) -> Result<egress::UpstreamClient, egress::EgressError> {
        let route = egress::route_for(base);
        let plain = match (&route, base.authority()) {
            (egress::Route::Direct, Some(authority)) => {
                let mut map = self.plain.lock().unwrap_or_else(|e| e.into_inner());
                let key = (connect_ms, authority.to_string());
                match map.get(&key) {
                    Some(pool) => Some(pool.clone()),
                    None => egress::Plain::new(base, egress::tcp(Duration::from_millis(connect_ms))).inspect(|pool| {
                        map.insert(key, pool.clone());
                    }),
                }
            }
            _ => None,
        };
        let mut map = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let pooled = match map.get(&(connect_ms, route.clone())) {
            Some(c) => c.clone(),
            None => {
                if let egress::Route::Proxy { .. } = &route {
                    tracing::info!(%base, proxy = %route, "upstream connections go through the egress proxy");
                }
                let client = egress::client(Duration::from_millis(connect_ms), &route)?;
                map.insert((connect_ms, route), client.clone());
                client
            }
        };
        Ok(egress::UpstreamClient::new(pooled, plain))
    }
}

impl Runtime {
    /// Compiles a snapshot. Fails if an HTTP client cannot be built or a URL does not parse.
    pub fn build(snapshot: Snapshot, carry: &Carry, metrics: &Metrics) -> Result<Runtime, BuildError> {
        let mut upstreams = HashMap::default();
        for (key, cfg) in &snapshot.upstreams {
            let urls = EndpointUrls::parse(&cfg.base_url)?;
            let handle = UpstreamHandle {
                health: carry.health(key),
                client: carry.client(cfg.connect_timeout_ms, &urls.base)?,
                metrics: UpstreamMetrics::new(metrics, &cfg.name),
                in_flight: carry.in_flight(key),
                urls,
                azure: (cfg.protocol == Protocol::AzureOpenai).then(|| AzureUrls {
                    base: cfg.base_url.trim_end_matches('/').to_string(),
                    api_version: cfg.azure_api_version.clone().unwrap_or_default(),
                }),
                native_uris: NativeUris::default(),
                credentials: carry.credentials(cfg),
                name_header: http::HeaderValue::from_str(&cfg.name).ok(),
                cfg: cfg.clone(),
            };
            upstreams.insert(key.clone(), Arc::new(handle));
        }
        let mut routes = HashMap::default();
        for r in &snapshot.routes {
            let candidates = r
                .candidates
                .iter()
                .filter_map(|c| upstreams.get(&c.upstream).map(|u| Candidate { cfg: c.clone(), upstream: u.clone() }))
                .collect();
            let route = Route {
                cfg: r.clone(),
                candidates,
                metrics: RouteMetrics::new(metrics, &r.name),
                cache: CachePolicy::of(r),
            };
            routes.insert(r.model.clone(), Arc::new(route));
        }
        Ok(Runtime { snapshot, routes, upstreams })
    }

    /// This process's view of its upstreams, for the operator's status.
    pub fn heartbeat(&self, gateway_id: &str, settings: &HealthSettings) -> Heartbeat {
        let now = Instant::now();
        let mut upstreams: Vec<UpstreamHeartbeat> = self
            .upstreams
            .values()
            .map(|u| {
                let ratio = u.health.success_ratio(settings, now);
                // The highest configured weight among the routes using it.
                let weight = self
                    .routes
                    .values()
                    .flat_map(|r| r.candidates.iter())
                    .filter(|c| c.upstream.cfg.key == u.cfg.key)
                    .map(|c| c.cfg.weight)
                    .max()
                    .unwrap_or(0);
                let (successes, failures) = u.health.counts(settings, now);
                UpstreamHeartbeat {
                    upstream: u.cfg.key.clone(),
                    circuit: u.health.circuit(now).as_str().to_string(),
                    effective_weight: f64::from(weight) * ratio,
                    successes,
                    failures,
                }
            })
            .collect();
        upstreams.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        Heartbeat { gateway_id: gateway_id.to_string(), at: SystemTime::now(), upstreams }
    }
}

/// The current config, swapped whole on reload; requests in flight keep the version
/// they started with.
#[derive(Default)]
pub struct Current {
    inner: RwLock<Option<Arc<Runtime>>>,
}

impl Current {
    /// The serving version, if any.
    pub fn get(&self) -> Option<Arc<Runtime>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Installs a new version.
    pub fn set(&self, runtime: Runtime) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(runtime));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_are_the_base_url_and_the_openai_paths() {
        let urls = EndpointUrls::parse("http://[::1]:8000/v1").unwrap();
        assert_eq!(urls.chat, "http://[::1]:8000/v1/chat/completions");
        // The WHATWG parser drops a scheme's default port.
        let urls = EndpointUrls::parse("https://api.openai.example:443/v1").unwrap();
        assert_eq!(urls.completions, "https://api.openai.example/v1/completions");
        let urls = EndpointUrls::parse("https://api.openai.example/v1").unwrap();
        assert_eq!(urls.chat, "https://api.openai.example/v1/chat/completions");
        assert_eq!(urls.of(Endpoint::Embeddings), "https://api.openai.example/v1/embeddings");
    }
}
