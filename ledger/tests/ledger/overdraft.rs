//! docs/design.md §5: balance − reserved ≥ 0 at every instant, under any concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sluice_ledger::{LedgerError, Usage};
use tokio::sync::Barrier;

use crate::on_both;
use crate::support::Db;

const FLOWS: usize = 500;
const AFFORDABLE: usize = 37;
const ESTIMATE: i64 = 1_000_000;

/// 500 concurrent reserve→settle flows against a wallet that covers exactly 37
/// estimates. Every successful reservation is held until all 500 have tried, so
/// exactly 37 can succeed; charges vary (some below, one above the estimate).
async fn overdraft_is_impossible(db: &Db) {
    let l = db.ledger.clone();
    let opening = ESTIMATE * AFFORDABLE as i64 + ESTIMATE - 1;
    let account = l.create_account("wallet", opening).await.unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (l, done, samples) = (l.clone(), done.clone(), samples.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let a = l.account("wallet").await.unwrap().unwrap();
                assert!(a.balance_nanos - a.reserved_nanos >= 0, "overdraft observed: {a:?}");
                assert!(a.reserved_nanos >= 0, "negative reserved: {a:?}");
                samples.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };

    let all_tried = Arc::new(Barrier::new(FLOWS));
    let mut flows = Vec::with_capacity(FLOWS);
    for i in 0..FLOWS {
        let (l, all_tried) = (l.clone(), all_tried.clone());
        flows.push(tokio::spawn(async move {
            let reserved = l.reserve(account.id, ESTIMATE, Duration::from_secs(300), &format!("req-{i}")).await;
            all_tried.wait().await;
            match reserved {
                Ok(r) => {
                    // i % 7 == 0 asks for more than was reserved: capped at the estimate.
                    let charge = if i % 7 == 0 { ESTIMATE * 2 } else { ESTIMATE - (i as i64) * 100 };
                    let s = r.settle(charge, Usage::default()).await.unwrap();
                    Some(s.charged_nanos)
                }
                Err(LedgerError::InsufficientFunds { available_nanos, needed_nanos }) => {
                    assert!(available_nanos < needed_nanos);
                    assert!(available_nanos >= 0);
                    None
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }));
    }
    let mut charged = Vec::new();
    for f in flows {
        if let Some(c) = f.await.unwrap() {
            charged.push(c);
        }
    }
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();

    assert_eq!(charged.len(), AFFORDABLE, "exactly the affordable reservations succeed");
    assert!(samples.load(Ordering::Relaxed) > 0, "the sampler ran");
    assert!(charged.iter().all(|&c| c > 0 && c <= ESTIMATE));
    let total: i64 = charged.iter().sum();
    let a = l.account("wallet").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (opening - total, 0));
    let check = l.journal_verify("wallet").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    // open + 37 reserves + 37 settles
    assert_eq!(check.entries, 1 + 2 * AFFORDABLE as u64);
    assert_eq!(l.open_reservations().await.unwrap(), 0);
    assert_eq!(l.dropped_reservations(), 0);
}
on_both!(concurrent_flows, super::overdraft_is_impossible);
