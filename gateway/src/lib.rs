//! sluice-gateway: the OpenAI-compatible data plane (docs/design.md §3–4, §6).
//!
//! Where to start: a request's path reads from the module names, in the order it
//! passes them.
//!
//! - [`server`] accepts connections and routes each to a handler ([`server::router()`]);
//!   [`server::handle`] is one request from start to end, on one of the inbound APIs
//!   of [`endpoint`].
//! - [`request`] parses the client's request, reading only what the gateway needs.
//! - [`billing`] finds the paying account, admits the request by its limits and
//!   reserves the most it can cost.
//! - [`cache`] answers what it already knows (embeddings per input item).
//! - [`route`] decides which candidate comes next: by each upstream's [`health`]
//!   (success ratio, circuit breaker), in [`route::order`], through the walks with
//!   failover, [`backoff`] and hedging of [`route::walk`].
//! - [`checks`] run outside any request: endpoint probes and the synthetic checks of
//!   each candidate of the routes that ask for them (docs/design.md §10).
//! - [`attempt`] is one upstream call, bounded and classified into an
//!   [`outcome::Outcome`] ([`attempt::native`] when the upstream speaks a
//!   provider's own protocol, with credentials from [`auth`]); a committed attempt is
//!   finished once ([`attempt::Committed::finish`]). Every attempt is made with and
//!   booked into the gateway's [`attempt::Books`].
//! - [`answer`] answers the client: a whole body, a stream through [`relay`], or an
//!   [`error`]; then [`answer::conclude`] counts the request and settles its
//!   reservation ([`billing::settle`]) at what the answer used ([`usage`]).
//!
//! The modules import one another in one direction only (docs/architecture.md,
//! "Layers of the gateway"; `tests/layers.rs` checks it). Around the path: [`config`] (manifests or an operator snapshot, compiled by
//! [`config::Runtime::build`]), [`egress`] (the HTTP client), [`telemetry`] (metrics
//! and SLI rollups) and [`cmd`] (the commands, among them `chaos`, which serves the
//! fake upstream of the `sluice-chaos` crate).

pub mod answer;
pub mod attempt;
pub mod auth;
pub mod backoff;
pub mod billing;
pub mod cache;
pub mod checks;
pub mod cmd;
pub mod config;
pub mod egress;
pub mod endpoint;
pub mod error;
pub mod headers;
pub mod health;
pub mod outcome;
pub mod relay;
pub mod request;
pub mod route;
pub mod server;
pub mod telemetry;
pub mod usage;
