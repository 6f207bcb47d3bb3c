//! Integration tests of the ledger against real databases: a temporary SQLite file,
//! and Postgres at `SLUICE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), each test in its own schema. Without
//! Postgres the Postgres variants skip with a printed reason, unless `CI` is set: then
//! they fail.
//!
//! One test binary (modules under `tests/ledger/`) keeps link time down.

// clippy.toml allows these in #[test] functions only; here the shared test bodies are
// plain async fns called by the generated #[test]s.
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "integration tests fail by panicking")]

#[path = "ledger/support.rs"]
mod support;

#[path = "ledger/changes.rs"]
mod changes;
#[path = "ledger/grants.rs"]
mod grants;
#[path = "ledger/migrations.rs"]
mod migrations;
#[path = "ledger/money.rs"]
mod money;
#[path = "ledger/overdraft.rs"]
mod overdraft;
#[path = "ledger/rollups.rs"]
mod rollups;
#[path = "ledger/synthetic.rs"]
mod synthetic;
#[path = "ledger/tls.rs"]
mod tls;
