//! The `sluice-gateway` commands (docs/design.md §3): each parses its own flags and
//! runs until done or signalled.

pub mod admin;
pub mod budgets;
pub mod chaos;
pub mod demo;
pub mod serve;
