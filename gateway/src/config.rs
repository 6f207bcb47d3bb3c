//! The configuration a gateway serves: a [`Snapshot`] compiled into lookup tables with
//! per-upstream health, HTTP clients and metric handles resolved once at load time
//! (docs/contributing.md (conventions, rule 8)), swapped atomically on reload.

use std::collections::HashMap;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http::Uri;
use sluice_crds::Snapshot;
use sluice_crds::snapshot::{CandidateConfig, RouteConfig, UpstreamConfig};

use crate::egress;
use crate::route::health::Health;
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
}

impl EndpointUrls {
    fn parse(base: &str) -> Result<Self, BuildError> {
        use crate::request::Endpoint;
        Ok(Self {
            base: uri(base)?,
            chat: uri(&format!("{base}{}", Endpoint::Chat.upstream_path()))?,
            completions: uri(&format!("{base}{}", Endpoint::Completions.upstream_path()))?,
            embeddings: uri(&format!("{base}{}", Endpoint::Embeddings.upstream_path()))?,
        })
    }

    /// The URI of an endpoint.
    pub fn of(&self, endpoint: crate::request::Endpoint) -> &Uri {
        match endpoint {
            crate::request::Endpoint::Chat => &self.chat,
            crate::request::Endpoint::Completions => &self.completions,
            crate::request::Endpoint::Embeddings => &self.embeddings,
        }
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
}

/// One loaded config version.
pub struct Runtime {
    /// What it was built from.
    pub snapshot: Snapshot,
    /// Routes by model name.
    pub routes: HashMap<String, Arc<Route>>,
    /// Upstreams by key.
    pub upstreams: HashMap<String, Arc<UpstreamHandle>>,
}

/// State that outlives config versions: health by upstream key, clients, in-flight counters.
#[derive(Default)]
pub struct Carry {
    health: Mutex<HashMap<String, Arc<Health>>>,
    in_flight: Mutex<HashMap<String, Arc<AtomicU32>>>,
    clients: Mutex<HashMap<(u64, egress::Route), egress::UpstreamClient>>,
}

impl Carry {
    fn health(&self, key: &str) -> Arc<Health> {
        let mut map = self.health.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    fn in_flight(&self, key: &str) -> Arc<AtomicU32> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// One client (and connection pool) per connect timeout and egress route.
    fn client(&self, connect_ms: u64, base: &Uri) -> Result<egress::UpstreamClient, egress::EgressError> {
        let route = egress::route_for(base);
        let mut map = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(&(connect_ms, route.clone())) {
            return Ok(c.clone());
        }
        if let egress::Route::Proxy { .. } = &route {
            tracing::info!(%base, proxy = %route, "upstream connections go through the egress proxy");
        }
        let client = egress::client(Duration::from_millis(connect_ms), &route)?;
        map.insert((connect_ms, route), client.clone());
        Ok(client)
    }
}

impl Runtime {
    /// Compiles a snapshot. Fails if an HTTP client cannot be built or a URL does not parse.
    pub fn build(snapshot: Snapshot, carry: &Carry, metrics: &Metrics) -> Result<Runtime, BuildError> {
        let mut upstreams = HashMap::new();
        for (key, cfg) in &snapshot.upstreams {
            let urls = EndpointUrls::parse(&cfg.base_url)?;
            let handle = UpstreamHandle {
                health: carry.health(key),
                client: carry.client(cfg.connect_timeout_ms, &urls.base)?,
                metrics: UpstreamMetrics::new(metrics, &cfg.name),
                in_flight: carry.in_flight(key),
                urls,
                name_header: http::HeaderValue::from_str(&cfg.name).ok(),
                cfg: cfg.clone(),
            };
            upstreams.insert(key.clone(), Arc::new(handle));
        }
        let mut routes = HashMap::new();
        for r in &snapshot.routes {
            let candidates = r
                .candidates
                .iter()
                .filter_map(|c| upstreams.get(&c.upstream).map(|u| Candidate { cfg: c.clone(), upstream: u.clone() }))
                .collect();
            let route = Route { cfg: r.clone(), candidates, metrics: RouteMetrics::new(metrics, &r.name) };
            routes.insert(r.model.clone(), Arc::new(route));
        }
        Ok(Runtime { snapshot, routes, upstreams })
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
        assert_eq!(urls.of(crate::request::Endpoint::Embeddings), "https://api.openai.example/v1/embeddings");
    }
}
