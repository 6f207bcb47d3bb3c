//! Billing checks (docs/design.md §5): prices as manifests write them, the cost a settlement
//! must charge, and a sampler that watches an account while traffic runs so that
//! `balance − reserved ≥ 0` is checked *during* the run, not only at its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_ledger::{JournalCheck, Ledger, parse_usd};
use tokio::task::JoinHandle;

/// A candidate price in USD per 1M tokens, as a manifest writes it.
#[derive(Clone, Copy, Debug)]
pub struct Price {
    /// Input, e.g. `"3.00"`.
    pub input: &'static str,
    /// Output, e.g. `"15.00"`.
    pub output: &'static str,
}

impl Price {
    /// The manifest value `{"input", "output"}`.
    pub fn json(self) -> Value {
        json!({"input": self.input, "output": self.output})
    }

    /// What `input_tokens` and `output_tokens` cost, in nanodollars, rounded up: the
    /// contract's "USD per 1M tokens", computed here independently of the gateway.
    pub fn cost(self, input_tokens: u64, output_tokens: u64) -> i64 {
        let per_mtok = |usd: &str| u128::try_from(parse_usd(usd).unwrap_or(0)).unwrap_or(0);
        let total = u128::from(input_tokens) * per_mtok(self.input) + u128::from(output_tokens) * per_mtok(self.output);
        i64::try_from(total.div_ceil(1_000_000)).unwrap_or(i64::MAX)
    }
}

/// `(prompt_tokens, completion_tokens)` of an OpenAI `usage` object.
pub fn usage_of(v: &Value) -> Option<(u64, u64)> {
    Some((v.get("prompt_tokens")?.as_u64()?, v.get("completion_tokens")?.as_u64()?))
}

/// What the sampler saw.
#[derive(Clone, Debug, Default)]
pub struct SampleReport {
    /// Reads of the account.
    pub samples: u64,
    /// The smallest `balance − reserved` read.
    pub min_available: i64,
    /// The largest `reserved` read.
    pub max_reserved: i64,
    /// The smallest `reserved` read.
    pub min_reserved: i64,
    /// Journal checks run during the run, and how many were inconsistent.
    pub journal_checks: u64,
    /// Inconsistent journal checks, with what they read.
    pub inconsistent: Vec<JournalCheck>,
    /// Reads that failed (the ledger was busy or gone).
    pub errors: u64,
}

/// Reads an account every `every` until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<SampleReport>,
}

impl Sampler {
    /// Starts sampling `account` through `ledger`; every tenth read also runs
    /// `journal_verify` (which reads one consistent snapshot).
    pub fn start(ledger: Ledger, account: &str, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let account = account.to_string();
        let task = tokio::spawn(async move {
            let mut r = SampleReport { min_available: i64::MAX, min_reserved: i64::MAX, ..SampleReport::default() };
            while !flag.load(Ordering::Relaxed) {
                match ledger.account(&account).await {
                    Ok(Some(a)) => {
                        r.samples += 1;
                        r.min_available = r.min_available.min(a.balance_nanos - a.reserved_nanos);
                        r.max_reserved = r.max_reserved.max(a.reserved_nanos);
                        r.min_reserved = r.min_reserved.min(a.reserved_nanos);
                    }
                    _ => r.errors += 1,
                }
                if r.samples % 10 == 1 {
                    match ledger.journal_verify(&account).await {
                        Ok(check) => {
                            r.journal_checks += 1;
                            if !check.is_consistent() {
                                r.inconsistent.push(check);
                            }
                        }
                        Err(_) => r.errors += 1,
                    }
                }
                tokio::time::sleep(every).await;
            }
            r
        });
        Self { stop, task }
    }

    /// Stops and reports.
    pub async fn finish(self) -> anyhow::Result<SampleReport> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(self.task.await?)
    }
}
