//! Random orders of takes, settlements, retried batches, posts, returns, reaps and
//! top-ups by two holders on one account, against a model (docs/design.md §5a).

use std::collections::BTreeMap;

use super::*;

/// One step of [`walk`]: what processes (holders `0` and `1`) and admins do to one
/// account's grants in the database, in any order.
#[derive(Clone, Debug)]
enum Step {
    /// Holder `h` opens or grows its grant.
    Take {
        h: usize,
        need: i64,
        target: i64,
    },
    /// Holder `h` commits settlements of these fractions (per mille) of what its grant
    /// holds, each at most what is left; some on a closed grant.
    Settle {
        h: usize,
        parts: Vec<i64>,
    },
    /// The last batch again (its commit outcome was unknown).
    Retry,
    Post {
        h: usize,
    },
    Return {
        h: usize,
    },
    /// The reaper, at a time past every grant's `expires_at`.
    Reap,
    Topup(i64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0usize..2, 0i64..200, 0i64..400).prop_map(|(h, need, target)| Step::Take { h, need, target }),
        4 => (0usize..2, prop::collection::vec(0i64..=600, 1..6)).prop_map(|(h, parts)| Step::Settle { h, parts }),
        1 => Just(Step::Retry),
        2 => (0usize..2).prop_map(|h| Step::Post { h }),
        1 => (0usize..2).prop_map(|h| Step::Return { h }),
        1 => Just(Step::Reap),
        1 => (0i64..300).prop_map(Step::Topup),
    ]
}

/// Runs `steps` against a fresh account on `db` and a model of it; after every step the
/// account as read, the stored row and the journal audit agree with the model: never
/// overdrawn, never negative reserved, every nanodollar charged exactly once whether
/// posted yet or not.
async fn walk(l: &Ledger, name: &str, steps: Vec<Step>) {
    #[derive(Debug, Default)]
    struct Model {
        effective: i64,
        /// Per grant id: (open, amount, unposted).
        grants: BTreeMap<i64, (bool, i64, i64)>,
        holder: [Option<i64>; 2],
        next_hold: i64,
    }
    let opening = 1_000;
    let account = l.create_account(name, opening).await.unwrap();
    let mut m = Model { effective: opening, ..Model::default() };
    let mut last: Vec<Job> = Vec::new();
    let mut now = 10;
    for (i, s) in steps.into_iter().enumerate() {
        now += 1;
        let held = |m: &Model| m.grants.values().filter(|g| g.0).map(|g| g.1 + g.2).sum::<i64>();
        let unposted = |m: &Model| m.grants.values().map(|g| g.2).sum::<i64>();
        match s {
            Step::Take { h, need, target } => {
                let grant_id = m.holder[h];
                let take = Take {
                    account_id: account.id,
                    grant_id,
                    holder: if h == 0 { "gw-0" } else { "gw-1" },
                    need,
                    target: target.max(need),
                    now_ms: now,
                    valid_until_ms: now + 1_000,
                    expires_at_ms: now + 2_000,
                };
                let free = m.effective - (held(&m) - unposted(&m));
                let got = l.take_grant(&take).await.unwrap();
                match (take_size(free, need, target.max(need)), grant_id) {
                    (None, _) => assert_eq!(got, Taken::Short { free }),
                    (Some(_), Some(id)) if !m.grants[&id].0 => {
                        assert_eq!(got, Taken::GrantGone);
                        m.holder[h] = None;
                    }
                    (Some(amount), _) => {
                        let Taken::Took { grant_id: id, amount: took, free: left } = got else { panic!("{got:?}") };
                        assert_eq!((took, left), (amount, free - amount));
                        let g = m.grants.entry(id).or_insert((true, 0, 0));
                        g.1 += amount;
                        g.2 = 0;
                        m.holder[h] = Some(id);
                    }
                }
            }
            Step::Settle { h, parts } => {
                let Some(id) = m.holder[h] else { continue };
                let mut jobs = Vec::new();
                let (open, mut amount) = (m.grants[&id].0, m.grants[&id].1);
                for p in parts {
                    let charged = if open { (amount * p / 1000).min(amount) } else { p };
                    amount -= if open { charged } else { 0 };
                    m.next_hold += 1;
                    jobs.push(job(account.id, id, m.next_hold, charged));
                }
                let applied = l.settle_batch(&jobs).await.unwrap();
                assert!(applied.iter().all(|&a| a == open), "{applied:?}");
                if open {
                    let total: i64 = jobs.iter().map(|j| j.charged).sum();
                    let g = m.grants.get_mut(&id).unwrap();
                    (g.1, g.2) = (g.1 - total, g.2 + total);
                    m.effective -= total;
                }
                last = jobs;
            }
            Step::Retry => {
                let before = l.journal_verify(name).await.unwrap();
                l.settle_batch(&last).await.unwrap();
                assert_eq!(l.journal_verify(name).await.unwrap(), before, "a retried batch moved money");
            }
            Step::Post { h } => {
                let Some(id) = m.holder[h] else { continue };
                let posted = l.post_grant(account.id, id, now).await.unwrap();
                let g = m.grants.get_mut(&id).unwrap();
                assert_eq!(posted, if g.0 { g.2 } else { 0 });
                g.2 = 0;
            }
            Step::Return { h } => {
                let Some(id) = m.holder[h].take() else {
                    continue;
                };
                let g = m.grants.get_mut(&id).unwrap();
                assert_eq!(l.close_grant(account.id, id, false, now, None).await.unwrap(), g.0);
                *g = (false, 0, 0);
            }
            Step::Reap => {
                let open = m.grants.values().filter(|g| g.0).count() as u64;
                now += 10_000;
                assert_eq!(l.reap_grants(now).await.unwrap(), open);
                for g in m.grants.values_mut() {
                    *g = (false, 0, 0);
                }
            }
            Step::Topup(x) => {
                l.topup(name, x).await.unwrap();
                m.effective += x;
            }
        }
        let a = l.account(name).await.unwrap().unwrap();
        let reserved = held(&m) - unposted(&m);
        assert_eq!((a.balance_nanos, a.reserved_nanos), (m.effective, reserved), "step {i}: {m:?}");
        assert_eq!(stored(l, account.id).await, (m.effective + unposted(&m), held(&m)), "step {i}: {m:?}");
        let check = l.journal_verify(name).await.unwrap();
        assert!(check.is_consistent() && check.unposted_nanos == unposted(&m), "step {i}: {check:?} {m:?}");
        assert!(a.balance_nanos >= a.reserved_nanos && a.reserved_nanos >= 0, "step {i}: {a:?}");
    }
    // The rest expires: everything posted, the row is the balance.
    l.reap_grants(i64::MAX / 2).await.unwrap();
    assert_eq!(stored(l, account.id).await, (m.effective, 0));
    assert!(l.journal_verify(name).await.unwrap().is_consistent());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    #[test]
    fn any_order_of_takes_settlements_posts_and_closes_adds_up_on_sqlite(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let db = TestDb::sqlite();
            let l = db.connect().await.unwrap();
            walk(&l, "walk", steps).await;
            l.close().await;
        });
    }
}

/// The same walks on Postgres: a few sequences from proptest's deterministic runner, on
/// one database (a schema per case would be slow).
#[tokio::test]
async fn any_order_of_takes_settlements_posts_and_closes_adds_up_on_postgres() {
    use proptest::strategy::{Strategy, ValueTree};
    let Some(db) = TestDb::postgres().await.unwrap() else {
        return;
    };
    let l = db.connect().await.unwrap();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let steps = proptest::collection::vec(step(), 20..60);
    for case in 0..6 {
        let walk_steps = steps.new_tree(&mut runner).unwrap().current();
        walk(&l, &format!("walk-{case}"), walk_steps).await;
    }
    l.close().await;
}
