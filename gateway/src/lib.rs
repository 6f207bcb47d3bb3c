//! sluice-gateway: the OpenAI-compatible data plane (docs/design.md §3–4, §6).
//!
//! Where to start: [`server::app`] is the router; [`handler::handle`] is one request's
//! path (auth, validation, reservation, dispatch, answer, settlement); [`dispatch`] walks
//! a route's candidates; [`relay`] forwards streams. Config comes from manifests or an
//! operator snapshot through [`config::source`], compiled by [`config::Runtime::build`].

pub mod app;
pub mod budgets;
pub mod demo;
pub mod chaos;
pub mod config;
pub mod dispatch;
pub mod egress;
pub mod error;
pub mod handler;
pub mod headers;
pub mod health;
pub mod metrics;
pub mod outcome;
pub mod probe;
pub mod relay;
pub mod request;
pub mod serve;
pub mod server;
pub mod sli;
pub mod sse;
