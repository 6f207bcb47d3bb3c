//! What the ledger's per-minute SLI rollups say about a test's traffic (docs/design.md §5):
//! route totals, bad events and failovers, and upstream attempts by outcome, summed
//! over the recent minutes.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_ledger::Ledger;

/// Rollups summed over the minutes read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollups {
    /// Per route name: requests that count for the SLO.
    pub total: BTreeMap<String, u64>,
    /// Per route name: bad events.
    pub bad: BTreeMap<String, u64>,
    /// Per route name: failovers.
    pub failovers: BTreeMap<String, u64>,
    /// Per upstream name: attempts by outcome label.
    pub attempts: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per upstream name: attempts with a first-byte time.
    pub first_bytes: BTreeMap<String, u64>,
}

/// The current unix minute.
pub fn minute_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| (d.as_secs() / 60) as i64)
}

impl Rollups {
    /// Reads the last ten minutes of rollups of `routes` and `upstreams` (names in
    /// namespace `default`, as the harness's manifests are).
    pub async fn read(ledger: &Ledger, routes: &[&str], upstreams: &[&str]) -> anyhow::Result<Self> {
        let now = minute_now();
        let keys = |names: &[&str]| names.iter().map(|n| format!("default/{n}")).collect::<Vec<_>>();
        let mut out = Rollups::default();
        for m in ledger.route_minutes(&keys(routes), now - 10, now + 1).await? {
            let name = m.route.trim_start_matches("default/").to_string();
            *out.total.entry(name.clone()).or_default() += m.total;
            *out.bad.entry(name.clone()).or_default() += m.bad;
            *out.failovers.entry(name).or_default() += m.failovers;
        }
        for m in ledger.upstream_minutes(&keys(upstreams), now - 10, now + 1).await? {
            let name = m.upstream.trim_start_matches("default/").to_string();
            let by_outcome = out.attempts.entry(name.clone()).or_default();
            for (outcome, n) in &m.attempts_by_outcome {
                *by_outcome.entry(outcome.clone()).or_default() += n;
            }
            *out.first_bytes.entry(name).or_default() += m.first_byte_buckets.iter().sum::<u64>();
        }
        Ok(out)
    }

    /// `(total, bad)` of a route.
    pub fn route(&self, name: &str) -> (u64, u64) {
        (self.total.get(name).copied().unwrap_or(0), self.bad.get(name).copied().unwrap_or(0))
    }

    /// Failovers counted for a route.
    pub fn route_failovers(&self, name: &str) -> u64 {
        self.failovers.get(name).copied().unwrap_or(0)
    }

    /// Attempts of an upstream with one outcome.
    pub fn attempts(&self, upstream: &str, outcome: &str) -> u64 {
        self.attempts.get(upstream).and_then(|m| m.get(outcome)).copied().unwrap_or(0)
    }

    /// Attempts of an upstream, all outcomes, as `outcome=n` pairs (for messages).
    pub fn outcomes(&self, upstream: &str) -> BTreeMap<String, u64> {
        self.attempts.get(upstream).cloned().unwrap_or_default().into_iter().filter(|(_, n)| *n > 0).collect()
    }
}
