//! What the gateway tells about itself: the contract metrics ([`metrics`]), the
//! per-minute SLI rollups written to the ledger ([`sli`]) and, when an OTLP endpoint is
//! set, traces of requests ([`traces`]).

pub mod metrics;
pub mod sli;
pub mod traces;
