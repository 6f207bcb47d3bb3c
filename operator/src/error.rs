//! The operator's errors, each classified once for the failure metric.

use crate::metrics::ErrorKind;

/// Everything that can go wrong in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing the ModelRoute finalizer, or the cleanup it guards, failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The ledger could not be opened or read.
    #[error("ledger: {0}")]
    Ledger(#[from] sluice_ledger::LedgerError),
    /// A sluice CRD is not installed.
    #[error(
        "the {kind} CRD is not installed (listing {kind}s failed: {source}); install the CRDs first: \
         `kubectl apply -f charts/sluice/crds/` or `cargo run -p sluice-crds --bin crdgen | kubectl apply -f -`"
    )]
    CrdMissing {
        /// `ModelRoute`, `Upstream` or `ErrorBudget`.
        kind: &'static str,
        /// The failed list call.
        #[source]
        source: kube::Error,
    },
    /// A resource came without a namespace (all sluice kinds are namespaced).
    #[error("{0} has no namespace")]
    NoNamespace(String),
    /// A cache was dropped before it was filled (the operator is shutting down).
    #[error("a watch cache closed before it was filled")]
    StoreClosed,
    /// The watch caches did not fill in time (see the watch errors in the log: RBAC?).
    #[error("the watch caches are not filled yet (can every watched kind be listed?)")]
    CachesNotReady,
    /// The metrics/health listener could not be bound.
    #[error("binding the listener {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Leader election failed.
    #[error("leader election: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
    /// Another replica took the lease; the process exits so that it restarts as a follower.
    #[error("lost the leader lease")]
    LeadershipLost,
    /// Leader election is on but no namespace for the Lease is known.
    #[error("--leader-election needs --lease-namespace (or POD_NAMESPACE)")]
    NoLeaseNamespace,
}

impl Error {
    /// The bounded `error` label of the failure metric.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Kube(_) | Error::CrdMissing { .. } => ErrorKind::Kube,
            Error::Finalizer(e) => match &**e {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.kind(),
                _ => ErrorKind::Finalizer,
            },
            Error::Ledger(_) => ErrorKind::Ledger,
            Error::NoNamespace(_) | Error::StoreClosed => ErrorKind::Internal,
            Error::CachesNotReady => ErrorKind::Kube,
            Error::Listen { .. } | Error::Lease(_) | Error::LeadershipLost | Error::NoLeaseNamespace => {
                ErrorKind::Startup
            }
        }
    }
}
