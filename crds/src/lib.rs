//! sluice-crds: the `Upstream`, `ModelRoute` and `ErrorBudget` custom resources, their
//! validation, and `resolve()`, which turns a set of manifests into the Kubernetes-free
//! [`Snapshot`] that gateways serve; and `AccountLimit` (limits of ledger accounts and
//! keys, applied by the operator, [`account_limit`]).
//!
//! Start with [`resolve::resolve`]: it is the one path from manifests to configuration,
//! shared by the operator (which reads resources from the API server) and by file mode
//! (which reads them with [`manifests::load_paths`]).
//!
//! The feature `kube` (off by default) adds the Kubernetes side: the kinds as kube
//! `CustomResource`s with their statuses, and the CRDs with their schemas and CEL rules
//! (`crds()`, the `crdgen` bin: `cargo run -p sluice-crds --features kube --bin
//! crdgen`). The operator enables it. Without it the kinds are [`object::Object`]s of
//! the same specs, which read the same manifests, and the crate builds without
//! k8s-openapi and kube: the gateway's build (bench/PROFILE.md, "Time to the first demo").

pub mod account_limit;
#[cfg(feature = "kube")]
mod crd;
pub mod duration;
pub mod error_budget;
pub mod manifests;
pub mod model_route;
pub mod object;
pub mod problem;
pub mod resolve;
pub mod schema;
pub mod snapshot;
pub mod upstream;
pub mod validate;

pub use account_limit::{AccountLimit, AccountLimitSpec};
#[cfg(feature = "kube")]
pub use crd::{crd_files, crd_yaml, crds};
pub use error_budget::{ErrorBudget, ErrorBudgetSpec};
pub use manifests::{Manifests, load_paths};
pub use model_route::{ModelRoute, ModelRouteSpec};
pub use problem::{Problem, Severity};
pub use resolve::{Resolved, SecretLookup, resolve};
pub use snapshot::Snapshot;
pub use upstream::{Upstream, UpstreamSpec};
#[cfg(feature = "kube")]
pub use {
    account_limit::AccountLimitStatus, error_budget::ErrorBudgetStatus, model_route::ModelRouteStatus,
    upstream::UpstreamStatus,
};

/// API group of every sluice kind.
pub const GROUP: &str = "sluice.dev";
/// API version of every sluice kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "sluice.dev/v1alpha1";
