//! The shared state of a serving gateway.

use std::sync::Arc;
use std::time::Duration;

use crate::attempt::Books;
use crate::billing::Billing;
use crate::config::source::{LoadError, Source};
use crate::config::{BuildError, Carry, Current, Runtime};
use crate::telemetry::metrics::{ReloadLabel, ReloadResult};

/// Default of [`Gateway::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Everything a request handler needs, as the few parts its phases share: the serving
/// config, the [`Books`] attempts are made with and booked into, [`Billing`] and the
/// cache. A phase takes the part it needs, never the whole gateway.
pub struct Gateway {
    /// Serving config.
    pub current: Current,
    /// State carried across config versions.
    pub carry: Carry,
    /// Where config comes from.
    pub source: Option<Source>,
    /// Credentials, health settings, metrics, SLI rollups and traces.
    pub books: Arc<Books>,
    /// Auth, the ledger, balance grants and limits (docs/design.md §5).
    pub billing: Billing,
    /// The response and embedding cache (docs/design.md §13); `None` turns it off.
    pub cache: Option<Arc<crate::cache::Cache>>,
    /// Request body limit in bytes.
    pub max_body: usize,
    /// How long a request body may take to arrive, from the handler's start (a client
    /// trickling its body must not hold a connection and a task forever).
    pub body_timeout: Duration,
    /// Set on SIGTERM: `/readyz` answers 503 while requests are still served.
    pub draining: std::sync::atomic::AtomicBool,
}

impl Gateway {
    /// What the dispatcher needs of this gateway for one request.
    pub fn dispatch_ctx<'a>(
        &'a self,
        request_id: &'a crate::headers::RequestId,
        trace: &'a crate::telemetry::traces::RequestTrace,
    ) -> crate::route::DispatchCtx<'a> {
        crate::route::DispatchCtx { books: &self.books, request_id, trace }
    }

    /// A gateway with no config yet, the in-process cache and the default limits.
    pub fn new(books: Books, billing: Billing) -> Self {
        Self {
            current: Current::default(),
            carry: Carry::new(books.secrets.dir()),
            source: None,
            books: Arc::new(books),
            billing,
            cache: Some(Arc::new(crate::cache::Cache::new(crate::cache::DEFAULT_MAX_BYTES, None))),
            max_body: 8 * 1024 * 1024,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            draining: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Loads the config source once; on success installs it. Returns the outcome for
    /// logging; the old version keeps serving on failure.
    pub fn reload(&self) -> Result<usize, ReloadError> {
        let Some(source) = &self.source else { return Err(ReloadError::NoSource) };
        let result = source.load(self.books.secrets.dir()).map_err(ReloadError::from).and_then(|loaded| {
            for w in &loaded.warnings {
                tracing::warn!(problem = %w, "config warning");
            }
            self.books.secrets.refresh(&loaded.snapshot);
            let routes = loaded.snapshot.routes.len();
            let runtime = Runtime::build(loaded.snapshot, &self.carry, &self.books.metrics)?;
            self.grant_slack(&runtime);
            self.current.set(runtime);
            Ok(routes)
        });
        let label = if result.is_ok() { ReloadResult::Ok } else { ReloadResult::Rejected };
        self.books.metrics.config_reloads.get_or_create(&ReloadLabel { result: label }).inc();
        result
    }

    /// Installs a snapshot directly (tests, demo).
    pub fn install(&self, snapshot: sluice_crds::Snapshot) -> Result<(), BuildError> {
        self.books.secrets.refresh(&snapshot);
        let runtime = Runtime::build(snapshot, &self.carry, &self.books.metrics)?;
        self.grant_slack(&runtime);
        self.current.set(runtime);
        Ok(())
    }

    /// A grant renewed from now on expires the longest route deadline after its
    /// validity, so that a request started just before may still settle (§5a).
    fn grant_slack(&self, runtime: &Runtime) {
        if let Some(b) = &self.billing.biller {
            let longest = runtime.routes.values().map(|r| r.cfg.deadline_ms).max().unwrap_or(0);
            b.set_deadline_slack(Duration::from_millis(longest));
        }
    }
}

/// Shared handle.
pub type SharedGateway = Arc<Gateway>;
