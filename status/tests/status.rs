//! The status page over a real ledger (docs/design.md §10): the Statuspage v2 summary's
//! shape, the HTML and the JSON agreeing, and the ledger reads on both databases.

#[path = "status/support.rs"]
mod support;

#[path = "status/statuspage.rs"]
mod statuspage;

#[path = "status/reads.rs"]
mod reads;
