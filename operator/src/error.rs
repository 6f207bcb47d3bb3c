//! The operator's errors, each classified once for the failure metric.

use crate::forbidden::Forbidden;
use crate::metrics::ErrorKind;

/// Everything that can go wrong in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed (not for want of RBAC: that is [`Error::Forbidden`]).
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The API server refused a call for want of RBAC (HTTP 403).
    #[error("permission denied: {0}")]
    Forbidden(Forbidden),
    /// Adding or removing the ModelRoute finalizer, or the cleanup it guards, failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The ledger could not be opened or read.
    #[error("ledger: {0}")]
    Ledger(#[from] sluice_ledger::LedgerError),
    /// A sluice CRD is not installed.
    #[error(
        "the {kind} CRD is not installed (listing {kind}s failed: {source}); install the CRDs first: \
         `kubectl apply -f charts/sluice/crds/` or \
         `cargo run -p sluice-crds --features kube --bin crdgen | kubectl apply -f -`"
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

/// A refusal (HTTP 403) becomes [`Error::Forbidden`], anything else [`Error::Kube`].
impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Self {
        match Forbidden::from_kube(&error) {
            Some(f) => Error::Forbidden(f),
            None => Error::Kube(error),
        }
    }
}

impl Error {
    /// The refusal for want of RBAC behind this error, if that is what it is (also inside
    /// a finalizer error or the leader election's).
    pub fn forbidden(&self) -> Option<Forbidden> {
        match self {
            Error::Forbidden(f) => Some(f.clone()),
            Error::Kube(e) | Error::CrdMissing { source: e, .. } => Forbidden::from_kube(e),
            Error::Finalizer(e) => match &**e {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.forbidden(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => Forbidden::from_kube(e),
                _ => None,
            },
            Error::Lease(kube_lease_manager::LeaseManagerError::KubeError(e)) => Forbidden::from_kube(e),
            _ => None,
        }
    }

    /// The bounded `error` label of the failure metric.
    pub fn kind(&self) -> ErrorKind {
        if self.forbidden().is_some() {
            return ErrorKind::Forbidden;
        }
        match self {
            Error::Kube(_) | Error::CrdMissing { .. } | Error::Forbidden(_) => ErrorKind::Kube,
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
