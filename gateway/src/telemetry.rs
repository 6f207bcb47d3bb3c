//! What the gateway tells about itself: the contract metrics ([`metrics`]) and the
//! per-minute SLI rollups written to the ledger ([`sli`]).

pub mod metrics;
pub mod sli;
