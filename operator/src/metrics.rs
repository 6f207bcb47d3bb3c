//! The operator's own metrics, registered once with typed, bounded labels and served
//! as OpenMetrics on `/metrics`:
//!
//! - `sluice_operator_reconciles_total{controller}`
//! - `sluice_operator_reconcile_failures_total{controller,error}`
//! - `sluice_operator_reconcile_duration_seconds{controller}` (histogram)
//! - `sluice_operator_status_writes_total{kind}`
//! - `sluice_operator_events_total{reason}`
//! - `sluice_operator_ledger_errors_total`
//! - `sluice_operator_forbidden_total{verb,resource}` (calls refused for want of RBAC,
//!   see [`crate::forbidden`])
//! - `sluice_operator_leader` (1 while this replica leads, or always without election)

use std::time::Instant;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A sluice kind (controller or status owner).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    /// `ModelRoute`.
    ModelRoute,
    /// `Upstream`.
    Upstream,
    /// `ErrorBudget`.
    ErrorBudget,
    /// `AccountLimit`.
    AccountLimit,
}

impl Kind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ModelRoute => "ModelRoute",
            Kind::Upstream => "Upstream",
            Kind::ErrorBudget => "ErrorBudget",
            Kind::AccountLimit => "AccountLimit",
        }
    }
}

impl EncodeLabelValue for Kind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// The class of a reconcile failure.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ErrorKind {
    /// A Kubernetes API call.
    Kube,
    /// A Kubernetes API call refused for want of RBAC (HTTP 403).
    Forbidden,
    /// The finalizer patch.
    Finalizer,
    /// The ledger.
    Ledger,
    /// Start-up (listener, lease).
    Startup,
    /// A bug or shutdown.
    Internal,
}

impl EncodeLabelValue for ErrorKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let text = match self {
            ErrorKind::Kube => "kube",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Finalizer => "finalizer",
            ErrorKind::Ledger => "ledger",
            ErrorKind::Startup => "startup",
            ErrorKind::Internal => "internal",
        };
        std::fmt::Write::write_str(encoder, text)
    }
}

/// `{controller}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// The controller's kind.
    pub controller: Kind,
}

/// `{controller, error}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The controller's kind.
    pub controller: Kind,
    /// Failure class.
    pub error: ErrorKind,
}

/// `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The status owner's kind.
    pub kind: Kind,
}

/// `{reason}` of a published event (reasons are constants of this crate).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Event reason.
    pub reason: &'static str,
}

/// `{verb, resource}` of a refused call: the verb and the group-qualified resource the
/// operator's RBAC lacks (bounded by the calls the operator makes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForbiddenLabels {
    /// `list`, `patch`, …
    pub verb: String,
    /// `configmaps`, `deployments.apps`, `modelroutes.sluice.dev/status`.
    pub resource: String,
}

/// Every metric of the operator.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Family<ControllerLabel, Histogram>,
    status_writes: Family<KindLabel, Counter>,
    events: Family<ReasonLabel, Counter>,
    ledger_errors: Counter,
    forbidden: Family<ForbiddenLabels, Counter>,
    leader: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice_operator");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let duration = Family::<ControllerLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.005, 2.0, 12))) as fn() -> Histogram,
        );
        let status_writes = Family::<KindLabel, Counter>::default();
        let events = Family::<ReasonLabel, Counter>::default();
        let ledger_errors = Counter::default();
        let forbidden = Family::<ForbiddenLabels, Counter>::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that failed, by error class", failures.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", duration.clone());
        registry.register("status_writes", "Status patches sent", status_writes.clone());
        registry.register("events", "Kubernetes Events published", events.clone());
        registry.register(
            "ledger_errors",
            "Failed ledger reads (status keeps its previous figures)",
            ledger_errors.clone(),
        );
        registry.register(
            "forbidden",
            "API calls the API server refused for want of RBAC, by the verb and resource the operator's role lacks",
            forbidden.clone(),
        );
        registry.register("leader", "1 while this replica reconciles", leader.clone());
        Metrics { registry, reconciles, failures, duration, status_writes, events, ledger_errors, forbidden, leader }
    }

    /// Counts a reconcile and returns a guard that observes its duration when dropped.
    pub fn reconcile(&self, controller: Kind) -> ReconcileTimer<'_> {
        self.reconciles.get_or_create(&ControllerLabel { controller }).inc();
        ReconcileTimer { metrics: self, controller, start: Instant::now() }
    }

    /// Counts a failed reconcile.
    pub fn failure(&self, controller: Kind, error: ErrorKind) {
        self.failures.get_or_create(&FailureLabels { controller, error }).inc();
    }

    /// Counts a status patch.
    pub fn status_write(&self, kind: Kind) {
        self.status_writes.get_or_create(&KindLabel { kind }).inc();
    }

    /// Counts a published event.
    pub fn event(&self, reason: &'static str) {
        self.events.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts a failed ledger read.
    pub fn ledger_error(&self) {
        self.ledger_errors.inc();
    }

    /// Counts a call refused for want of RBAC.
    pub fn forbidden(&self, verb: &str, resource: &str) {
        self.forbidden.get_or_create(&ForbiddenLabels { verb: verb.into(), resource: resource.into() }).inc();
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Observes a reconcile's duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: Kind,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed().as_secs_f64();
        self.metrics.duration.get_or_create(&ControllerLabel { controller: self.controller }).observe(elapsed);
    }
}
