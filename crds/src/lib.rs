//! sluice-crds: the `Upstream`, `ModelRoute` and `ErrorBudget` custom resources, their
//! validation, and `resolve()`, which turns a set of manifests into the Kubernetes-free
//! [`Snapshot`] that gateways serve; and `AccountLimit` (limits of ledger accounts and
//! keys, applied by the operator, [`account_limit`]).
//!
//! Start with [`resolve::resolve`]: it is the one path from manifests to configuration,
//! shared by the operator (which reads resources from the API server) and by file mode
//! (which reads them with [`manifests::load_paths`]).

pub mod account_limit;
mod crd;
pub mod duration;
pub mod error_budget;
pub mod manifests;
pub mod model_route;
pub mod problem;
pub mod resolve;
pub mod schema;
pub mod snapshot;
pub mod upstream;
pub mod validate;

pub use account_limit::{AccountLimit, AccountLimitSpec, AccountLimitStatus};
pub use crd::{crd_files, crd_yaml, crds};
pub use error_budget::{ErrorBudget, ErrorBudgetSpec, ErrorBudgetStatus};
pub use manifests::{Manifests, load_paths};
pub use model_route::{ModelRoute, ModelRouteSpec, ModelRouteStatus};
pub use problem::{Problem, Severity};
pub use resolve::{Resolved, SecretLookup, resolve};
pub use snapshot::Snapshot;
pub use upstream::{Upstream, UpstreamSpec, UpstreamStatus};

/// API group of every sluice kind.
pub const GROUP: &str = "sluice.dev";
/// API version of every sluice kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "sluice.dev/v1alpha1";
