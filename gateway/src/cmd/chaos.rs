//! `sluice-gateway chaos`: the scriptable fake upstream of [`crate::chaos`] on a port of
//! its own (docs/design.md §6).

pub use crate::chaos::{ChaosArgs, run};
