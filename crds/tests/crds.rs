//! The integration tests of sluice-crds, one binary of modules (one link, one process):
//! CEL rules and their Rust mirror (`cel`, `bounds`, `providers`, `stream_timeouts`),
//! `resolve()` (`resolve_quickstart`, `resolve_problems`, `load`, `plausible`,
//! `never_panics`), the AccountLimit (`account_limit`), the printer-column contract, the
//! drift of the generated CRD YAML, and file mode with and without the `kube` feature
//! (`object`).
//! Shared helpers are in `common`.

mod common;

#[path = "crds/account_limit.rs"]
mod account_limit;
#[path = "crds/bounds.rs"]
mod bounds;
#[path = "crds/cel.rs"]
mod cel;
#[path = "crds/contract.rs"]
mod contract;
#[path = "crds/drift.rs"]
mod drift;
#[path = "crds/load.rs"]
mod load;
#[path = "crds/never_panics.rs"]
mod never_panics;
#[path = "crds/object.rs"]
mod object;
#[path = "crds/plausible.rs"]
mod plausible;
#[path = "crds/providers.rs"]
mod providers;
#[path = "crds/resolve_problems.rs"]
mod resolve_problems;
#[path = "crds/resolve_quickstart.rs"]
mod resolve_quickstart;
#[path = "crds/stream_timeouts.rs"]
mod stream_timeouts;
