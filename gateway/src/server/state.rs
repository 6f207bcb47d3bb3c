//! The shared state of a serving gateway.

use std::sync::Arc;
use std::time::Duration;

use sluice_ledger::{Biller, Ledger};

use crate::billing::keys::KeyCache;
use crate::config::source::{LoadError, Secrets, Source};
use crate::config::{BuildError, Carry, Current, Runtime};
use crate::route::health::HealthSettings;
use crate::telemetry::metrics::{Metrics, ReloadLabel, ReloadResult};
use crate::telemetry::sli::Sli;

/// Default of [`Gateway::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How clients authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// `Authorization: Bearer sk-sluice-…` keys from the ledger; requests are billed.
    Keys,
    /// No keys and no billing; SLI rollups still flow.
    None,
}

/// Why a reload installed nothing (the old version keeps serving).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The gateway was built without a config source (tests, demo).
    #[error("no config source")]
    NoSource,
    /// The source could not be read, or its manifests have problems.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The snapshot could not be compiled (an HTTP client or a URL).
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// Everything a request handler needs.
pub struct Gateway {
    /// Serving config.
    pub current: Current,
    /// State carried across config versions.
    pub carry: Carry,
    /// Metrics.
    pub metrics: Metrics,
    /// Health settings.
    pub settings: HealthSettings,
    /// Upstream credentials.
    pub secrets: Secrets,
    /// The ledger, if any.
    pub ledger: Option<Ledger>,
    /// Balance grants and the settlement writer (docs/design.md §5a); `None` without
    /// billing.
    pub biller: Option<Biller>,
    /// Limits of keys and accounts (docs/design.md §5b); `None` without a ledger.
    pub limiter: Option<sluice_ledger::limits::Limiter>,
    /// The response and embedding cache (docs/design.md §13); `None` turns it off.
    pub cache: Option<Arc<crate::cache::Cache>>,
    /// Client auth.
    pub auth: AuthMode,
    /// Key → account answers of the ledger, briefly (docs/design.md §5a).
    pub keys: KeyCache,
    /// Request body limit in bytes.
    pub max_body: usize,
    /// How long a request body may take to arrive, from the handler's start (a client
    /// trickling its body must not hold a connection and a task forever).
    pub body_timeout: Duration,
    /// Reservation lifetime before the reaper may release it.
    pub reservation_ttl: Duration,
    /// Rollups not yet flushed.
    pub sli: Sli,
    /// Where config comes from.
    pub source: Option<Source>,
    /// Set on SIGTERM: `/readyz` answers 503 while requests are still served.
    pub draining: std::sync::atomic::AtomicBool,
    /// The trace exporter; `None` (tracing off) unless an OTLP endpoint is set.
    pub traces: Option<crate::telemetry::traces::Tracing>,
}

impl Gateway {
    /// What the dispatcher needs of this gateway for one request.
    pub fn dispatch_ctx<'a>(
        &'a self,
        request_id: &'a crate::headers::RequestId,
        trace: &'a crate::telemetry::traces::RequestTrace,
    ) -> crate::route::DispatchCtx<'a> {
        crate::route::DispatchCtx {
            secrets: &self.secrets,
            settings: &self.settings,
            metrics: &self.metrics,
            request_id,
            sli: &self.sli,
            trace,
        }
    }

    /// A gateway with no config yet.
    pub fn new(settings: HealthSettings, secrets: Secrets, ledger: Option<Ledger>, auth: AuthMode) -> Self {
        // Only keys need the change feed (it costs a LISTEN connection on Postgres).
        let keys = KeyCache::watching(ledger.as_ref().filter(|_| auth == AuthMode::Keys));
        Self {
            current: Current::default(),
            carry: Carry::new(secrets.dir()),
            metrics: Metrics::new(),
            settings,
            secrets,
            ledger,
            biller: None,
            limiter: None,
            cache: Some(Arc::new(crate::cache::Cache::new(crate::cache::DEFAULT_MAX_BYTES, None))),
            auth,
            keys,
            max_body: 8 * 1024 * 1024,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            reservation_ttl: Duration::from_secs(900),
            sli: Sli::default(),
            source: None,
            draining: std::sync::atomic::AtomicBool::new(false),
            traces: None,
        }
    }

    /// Loads the config source once; on success installs it. Returns the outcome for
    /// logging; the old version keeps serving on failure.
    pub fn reload(&self) -> Result<usize, ReloadError> {
        let Some(source) = &self.source else { return Err(ReloadError::NoSource) };
        let result = source.load(self.secrets.dir()).map_err(ReloadError::from).and_then(|loaded| {
            for w in &loaded.warnings {
                tracing::warn!(problem = %w, "config warning");
            }
            self.secrets.refresh(&loaded.snapshot);
            let routes = loaded.snapshot.routes.len();
            let runtime = Runtime::build(loaded.snapshot, &self.carry, &self.metrics)?;
            self.grant_slack(&runtime);
            self.current.set(runtime);
            Ok(routes)
        });
        let label = if result.is_ok() { ReloadResult::Ok } else { ReloadResult::Rejected };
        self.metrics.config_reloads.get_or_create(&ReloadLabel { result: label }).inc();
        result
    }

    /// Installs a snapshot directly (tests, demo).
    pub fn install(&self, snapshot: sluice_crds::Snapshot) -> Result<(), BuildError> {
        self.secrets.refresh(&snapshot);
        let runtime = Runtime::build(snapshot, &self.carry, &self.metrics)?;
        self.grant_slack(&runtime);
        self.current.set(runtime);
        Ok(())
    }

    /// A grant renewed from now on expires the longest route deadline after its
    /// validity, so that a request started just before may still settle (§5a).
    fn grant_slack(&self, runtime: &Runtime) {
        if let Some(b) = &self.biller {
            let longest = runtime.routes.values().map(|r| r.cfg.deadline_ms).max().unwrap_or(0);
            b.set_deadline_slack(Duration::from_millis(longest));
        }
    }
}

/// Shared handle.
pub type SharedGateway = Arc<Gateway>;
