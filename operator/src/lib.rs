//! sluice-operator: reconciles `ModelRoute`, `Upstream` and `ErrorBudget` resources into
//! gateway Deployments, ConfigMaps and Services, and writes what the ledger observes back
//! into their status; writes `AccountLimit`s into the ledger (docs/design.md §7).
//!
//! # Where to start
//!
//! - [`run`] (`run(client, config)`) is the whole operator against any [`kube::Client`];
//!   [`run_until`] stops on a future of your choosing (tests, embedding). `main.rs` only
//!   parses [`Cli`] into a [`Config`].
//! - [`render`] holds the pure `desired_*` builders of the objects of one
//!   (namespace, gateway group), the contract with the chart and the gateway.
//! - [`view`] resolves cached resources per group with `sluice_crds::resolve`.
//! - [`reconcile`] fetches (from watch caches), resolves, applies with server-side apply,
//!   deletes orphans and writes status ([`reconcile::limits`]: AccountLimits into the
//!   ledger); [`controllers`] wires the four kube-runtime
//!   controllers and their triggers; [`triggers`] keeps status writes from triggering.
//! - [`status`] is the pure status maths (conditions, figures from ledger rollups);
//!   [`observe`] reads the ledger.
//! - [`metrics`], [`web`] (`/metrics`, `/healthz`) and [`leader`] (Lease election);
//!   [`forbidden`] reports calls refused for want of RBAC.

pub mod config;
pub mod controllers;
pub mod error;
pub mod forbidden;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod reconcile;
pub mod render;
mod run;
pub mod status;
pub mod status_page;
#[doc(hidden)]
pub mod testing;
pub mod triggers;
pub mod view;
pub mod web;

pub use config::{Cli, Config};
pub use error::Error;
pub use reconcile::Context;
pub use run::{check_crds, run, run_until, shutdown_signal};
pub use sluice_crds::{AccountLimit, ErrorBudget, ModelRoute, Upstream};
