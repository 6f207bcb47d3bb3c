//! sluice-operator: reconciles `Upstream`, `ModelRoute` and `ErrorBudget` resources into
//! gateway Deployments, ConfigMaps and Services (DESIGN.md §7).
//!
//! Not built yet: this crate currently only re-exports the CRD types it will reconcile.

pub use sluice_crds::{ErrorBudget, ModelRoute, Upstream};
