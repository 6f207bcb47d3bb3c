//! sluice-tests: the end-to-end harness. Start with `tests/` in this crate: each file
//! there is one scenario family, driven over real sockets on ephemeral ports.
//!
//! The harness runs everything in the test's own process and runtime:
//! - [`upstream::ChaosUpstream`] starts a chaos upstream (docs/design.md §6) on `127.0.0.1:0`
//!   and exposes its base URL, its script and its counters; [`upstream::refused_url`]
//!   gives a URL whose port refuses connections.
//! - [`manifest`] builds Upstream and ModelRoute manifests as YAML.
//! - [`gateway::TestGateway`] serves a gateway from those manifests (written to a
//!   tempdir, SQLite ledger beside them), with the background loops running.
//! - [`client::Client`] sends OpenAI requests and records replies, SSE events included,
//!   with their arrival times.
//! - [`metrics`] reads values out of `/metrics`.
//!
//! For resilience and billing scenarios:
//! - [`rollups`] reads the ledger's SLI rollups back after a flush;
//! - `sluice_ledger::testing::TestDb` (the workspace's one test database, also used
//!   by the ledger's tests) is a private SQLite file or Postgres schema, with the
//!   reservation and journal rows; [`billing`] has prices, costs and an account sampler;
//! - [`canned::CannedUpstream`] answers with a usage the test chooses;
//! - [`process::GatewayProcess`] runs the real binary (to kill it with SIGKILL);
//! - [`load::open_loop`] drives fixed-rate load.
//!
//! For the operator: [`controlplane::ControlPlane`] starts a real etcd and kube-apiserver
//! (those tests/kube/build caches, with the flags of the Python suites' control plane) and
//! gives an admin client, the chart's ServiceAccount for the operator and the audit log.
//!
//! Tests wait for state with `sluice_ledger::testing::eventually` (the workspace's one
//! polling helper), never with a fixed sleep.
//!
//! Everything stops when its handle is dropped (tasks are aborted) or when the test's
//! runtime ends. No fixed ports are used.

pub mod billing;
pub mod canned;
pub mod client;
pub mod controlplane;
pub mod gateway;
pub mod load;
pub mod manifest;
pub mod metrics;
pub mod process;
pub mod redis;
pub mod rollups;
pub mod upstream;

use std::time::Duration;

pub use client::{Client, Reply, SseEvent, SseReply};
pub use gateway::{GatewayOptions, TestGateway};
pub use manifest::{Doc, error_budget, manifests_file, route, upstream_doc, yaml};
pub use rollups::Rollups;
pub use upstream::{ChaosUpstream, refused_url};

/// Serialises the scenario tests that measure time and the ones that make heavy load
/// (all of them modules of one binary): the test harness runs tests in parallel
/// threads, and a 2-core CI box cannot time a test fairly next to another's load.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=sluice_gateway=debug`).
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The median of some durations (the upper one of an even count).
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Milliseconds as `f64`, for messages.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
