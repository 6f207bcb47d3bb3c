//! Test support for every crate of the workspace (cargo feature `test-support`): the
//! one private test database ([`TestDb`]) and the one polling helper ([`eventually`]).
//!
//! It lives here, in the lowest crate that the gateway, the operator and the end-to-end
//! harness all depend on, so that each of their test suites uses the same helpers
//! without a dependency cycle. Enable it from a crate's `[dev-dependencies]`:
//! `sluice-ledger = { workspace = true, features = ["test-support"] }`.

mod db;

use std::time::Duration;

pub use db::{Backend, DEFAULT_POSTGRES_URL, GrantRow, JournalRow, ReservationRow, TestDb, TestDbError};

/// Polls `check` until it holds or `within` has passed; returns whether it held.
///
/// Tests wait for state with this instead of sleeping a fixed time: a busy machine
/// makes them slower, never red. `check` runs at least once, then every 5 ms (on
/// tokio's clock, so a paused clock advances through it).
pub async fn eventually(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_polls_until_the_check_holds_or_time_is_up() {
        let mut calls = 0;
        assert!(
            eventually(Duration::from_secs(1), async || {
                calls += 1;
                calls == 3
            })
            .await
        );
        assert_eq!(calls, 3);
        let started = tokio::time::Instant::now();
        assert!(!eventually(Duration::from_millis(30), async || false).await);
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
