//! A settlement batch retried after an unknown commit outcome, whole or in part, on both
//! databases: nothing is inserted or moved twice, and the journal still adds up.

use std::collections::BTreeMap;

use sqlx::Row as _;

use super::*;
use crate::reservation::Usage;
use crate::testing::TestDb;

fn job(account_id: i64, grant_id: i64, hold_id: i64, charged: i64) -> Job {
    Job {
        account_id,
        grant_id,
        hold_id,
        request_id: format!("r{hold_id}"),
        charged,
        uncollected: 0,
        usage: Usage {
            input_tokens: 3,
            output_tokens: 4,
            upstream: Some("default/up".into()),
        },
        at_ms: 1,
        reply: None,
    }
}

/// A new grant of 500 that stays valid for the whole test.
fn take_500(account_id: i64) -> Take<'static> {
    Take {
        account_id,
        grant_id: None,
        holder: "gw",
        need: 500,
        target: 500,
        now_ms: 1,
        valid_until_ms: i64::MAX / 4,
        expires_at_ms: i64::MAX / 4,
    }
}

async fn retried_batches(db: &TestDb) {
    let l = db.connect().await.unwrap();
    let account = l.create_account("retry", 1_000).await.unwrap();
    let take = take_500(account.id);
    let Taken::Took {
        grant_id, amount, ..
    } = l.take_grant(&take).await.unwrap()
    else {
        panic!("no grant")
    };
    assert_eq!(amount, 500);
    let first = [
        job(account.id, grant_id, 1, 10),
        job(account.id, grant_id, 2, 20),
    ];
    assert_eq!(l.settle_batch(&first).await.unwrap(), [true, true]);
    // The same batch again (its commit was not acknowledged): nothing moves.
    assert_eq!(l.settle_batch(&first).await.unwrap(), [true, true]);
    let a = l.account("retry").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (970, 470));
    // A batch that overlaps one already committed: only the new row goes in.
    let overlapping = [
        job(account.id, grant_id, 2, 20),
        job(account.id, grant_id, 3, 40),
    ];
    l.settle_batch(&overlapping).await.unwrap();
    let a = l.account("retry").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (930, 430));
    assert_eq!(stored(&l, account.id).await, (1_000, 500), "not posted yet");
    let settles = db.settlements().await.unwrap();
    assert_eq!(
        settles.iter().map(|j| j.amount).collect::<Vec<_>>(),
        [10, 20, 40]
    );
    let check = l.journal_verify("retry").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    l.close().await;
}

#[tokio::test]
async fn a_retried_batch_moves_nothing_twice_on_sqlite() {
    retried_batches(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn a_retried_batch_moves_nothing_twice_on_postgres() {
    if let Some(db) = TestDb::postgres().await.unwrap() {
        retried_batches(&db).await;
    }
}

/// A batch never locks an account: while another transaction holds the account row (a
/// take, a post or a close of another process), a batch on one of its grants commits at
/// once, and the account row is untouched by it; what the grant settled reaches the row
/// when it posts, and the journal adds up before and after.
#[tokio::test]
async fn a_batch_does_not_wait_for_its_account_on_postgres() {
    use sqlx::Connection;
    let Some(db) = TestDb::postgres().await.unwrap() else {
        return;
    };
    let l = db.connect().await.unwrap();
    let account = l.create_account("apart", 1_000).await.unwrap();
    let Taken::Took { grant_id, .. } = l.take_grant(&take_500(account.id)).await.unwrap() else {
        panic!("no grant")
    };

    let mut taker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut taker).await.unwrap();
    // What a take, a post or a close does first.
    sqlx::query("SELECT balance_nanos FROM accounts WHERE id = $1 FOR NO KEY UPDATE")
        .bind(account.id)
        .fetch_one(&mut taker)
        .await
        .unwrap();
    let jobs = [
        job(account.id, grant_id, 1, 10),
        job(account.id, grant_id, 2, 5),
    ];
    let applied =
        tokio::time::timeout(std::time::Duration::from_secs(10), l.settle_batch(&jobs)).await;
    sqlx::query("COMMIT").execute(&mut taker).await.unwrap();
    assert_eq!(
        applied
            .expect("the batch waited for the account row")
            .unwrap(),
        [true, true]
    );

    assert_eq!(
        stored(&l, account.id).await,
        (1_000, 500),
        "the account row is not touched by a batch"
    );
    let a = l.account("apart").await.unwrap().unwrap();
    assert_eq!(
        (a.balance_nanos, a.reserved_nanos),
        (985, 485),
        "read with the unposted settlements out"
    );
    let check = l.journal_verify("apart").await.unwrap();
    assert!(
        check.is_consistent() && check.unposted_nanos == 15,
        "{check:?}"
    );

    assert_eq!(l.post_grant(account.id, grant_id, 2).await.unwrap(), 15);
    assert_eq!(
        l.post_grant(account.id, grant_id, 3).await.unwrap(),
        0,
        "nothing left to post"
    );
    assert_eq!(stored(&l, account.id).await, (985, 485));
    let check = l.journal_verify("apart").await.unwrap();
    assert!(
        check.is_consistent() && check.unposted_nanos == 0,
        "{check:?}"
    );
    l.close().await;
}

/// The account row as stored: balance and reserved.
async fn stored(l: &Ledger, id: i64) -> (i64, i64) {
    let row = sqlx::query("SELECT balance_nanos, reserved_nanos FROM accounts WHERE id = $1")
        .bind(id)
        .fetch_one(&l.inner.reader)
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// What a grant settled reaches the account row when it posts, renews or closes, each
/// with a `post` row; until then the stored row still holds it in balance and reserved,
/// and the journal explains every step.
async fn posts(db: &TestDb) {
    let l = db.connect().await.unwrap();
    let account = l.create_account("posts", 1_000).await.unwrap();
    let Taken::Took { grant_id, .. } = l.take_grant(&take_500(account.id)).await.unwrap() else {
        panic!("no grant")
    };
    let consistent = async |unposted: i64| {
        let c = l.journal_verify("posts").await.unwrap();
        assert!(c.is_consistent() && c.unposted_nanos == unposted, "{c:?}");
    };
    l.settle_batch(&[job(account.id, grant_id, 1, 100)])
        .await
        .unwrap();
    assert_eq!(stored(&l, account.id).await, (1_000, 500));
    consistent(100).await;

    // A renewal posts, and takes from what is free (unchanged by settling: 500).
    let grow = Take {
        grant_id: Some(grant_id),
        need: 0,
        target: 100,
        now_ms: 2,
        ..take_500(account.id)
    };
    assert_eq!(
        l.take_grant(&grow).await.unwrap(),
        Taken::Took {
            grant_id,
            amount: 100,
            free: 400
        }
    );
    assert_eq!(stored(&l, account.id).await, (900, 500));
    consistent(0).await;

    l.settle_batch(&[job(account.id, grant_id, 2, 50)])
        .await
        .unwrap();
    consistent(50).await;
    // A return posts and gives the rest back.
    assert!(
        l.close_grant(account.id, grant_id, false, 3, None)
            .await
            .unwrap()
    );
    assert_eq!(stored(&l, account.id).await, (850, 0));
    let a = l.account("posts").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (850, 0));
    consistent(0).await;
    let kinds: Vec<String> = db
        .journal()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.grant_id.is_some())
        .map(|j| j.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "reserve", "settle", "post", "reserve", "settle", "post", "release"
        ]
    );

    // A settlement after the close moves nothing, and a closed grant cannot hold
    // unposted money (the schema refuses it).
    assert_eq!(
        l.settle_batch(&[job(account.id, grant_id, 3, 10)])
            .await
            .unwrap(),
        [false]
    );
    assert_eq!(stored(&l, account.id).await, (850, 0));
    let refused = sqlx::query("UPDATE grants SET unposted_nanos = 1 WHERE id = $1")
        .bind(grant_id)
        .execute(&l.inner.writer)
        .await;
    assert!(refused.is_err(), "a closed grant took unposted money");
    consistent(0).await;
    l.close().await;
}

#[tokio::test]
async fn a_grant_posts_on_renewal_and_return_on_sqlite() {
    posts(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn a_grant_posts_on_renewal_and_return_on_postgres() {
    if let Some(db) = TestDb::postgres().await.unwrap() {
        posts(&db).await;
    }
}

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
    let mut m = Model {
        effective: opening,
        ..Model::default()
    };
    let mut last: Vec<Job> = Vec::new();
    let mut now = 10;
    for (i, s) in steps.into_iter().enumerate() {
        now += 1;
        let held = |m: &Model| {
            m.grants
                .values()
                .filter(|g| g.0)
                .map(|g| g.1 + g.2)
                .sum::<i64>()
        };
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
                        let Taken::Took {
                            grant_id: id,
                            amount: took,
                            free: left,
                        } = got
                        else {
                            panic!("{got:?}")
                        };
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
                    let charged = if open {
                        (amount * p / 1000).min(amount)
                    } else {
                        p
                    };
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
                assert_eq!(
                    l.journal_verify(name).await.unwrap(),
                    before,
                    "a retried batch moved money"
                );
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
                assert_eq!(
                    l.close_grant(account.id, id, false, now, None)
                        .await
                        .unwrap(),
                    g.0
                );
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
        assert_eq!(
            (a.balance_nanos, a.reserved_nanos),
            (m.effective, reserved),
            "step {i}: {m:?}"
        );
        assert_eq!(
            stored(l, account.id).await,
            (m.effective + unposted(&m), held(&m)),
            "step {i}: {m:?}"
        );
        let check = l.journal_verify(name).await.unwrap();
        assert!(
            check.is_consistent() && check.unposted_nanos == unposted(&m),
            "step {i}: {check:?} {m:?}"
        );
        assert!(
            a.balance_nanos >= a.reserved_nanos && a.reserved_nanos >= 0,
            "step {i}: {a:?}"
        );
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

/// A ledger written before posting existed (schema v4: settlements moved the account row
/// themselves) with a grant open across the upgrade: after migration 5 its journal still
/// adds up, and the new settlements, posts and the return on that same grant keep it so.
async fn upgrade_from_v4(db: &TestDb) {
    use crate::ledger::{Embedded, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
    sqlx::any::install_default_drivers();
    let v4 = match db.backend {
        crate::testing::Backend::Sqlite => Embedded(&SQLITE_MIGRATIONS.0[..4]),
        crate::testing::Backend::Postgres => Embedded(&POSTGRES_MIGRATIONS.0[..4]),
    };
    let url = if db.url.starts_with("sqlite") {
        format!("{}?mode=rwc", db.url)
    } else {
        db.url.clone()
    };
    let raw = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(v4)
        .await
        .unwrap()
        .run(&raw)
        .await
        .unwrap();
    // What the v4 code left (account 1, grant 1 of a fresh database): 1000 opened, a grant of 500 taken, 100 of it settled (the
    // settle row moving balance and reserved), 400 still held.
    for statement in [
        "INSERT INTO accounts (name, balance_nanos, reserved_nanos, created_at_ms) VALUES ('old', 900, 400, 1)",
        "INSERT INTO grants (account_id, holder, amount_nanos, settled_nanos, state, created_at_ms, renewed_at_ms, \
         valid_until_ms, expires_at_ms) VALUES (1, 'gw', 400, 100, 'open', 1, 1, 4611686018427387903, 4611686018427387903)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, at_ms) \
         VALUES (1, 'open', 1000, 1000, 0, 1000, 0, 1)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, grant_id, at_ms) \
         VALUES (1, 'reserve', 500, 0, 500, 1000, 500, 1, 1)",
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after, \
         request_id, grant_id, hold_id, at_ms) VALUES (1, 'settle', 100, -100, -100, 900, 400, 'r1', 1, 1, 2)",
    ] {
        sqlx::query(statement).execute(&raw).await.unwrap();
    }
    raw.close().await;

    let l = db.connect().await.unwrap();
    let check = l.journal_verify("old").await.unwrap();
    assert!(
        check.is_consistent() && check.balance_nanos == 900 && check.unposted_nanos == 0,
        "{check:?}"
    );
    // The same grant goes on under the new code.
    assert_eq!(l.settle_batch(&[job(1, 1, 2, 50)]).await.unwrap(), [true]);
    let check = l.journal_verify("old").await.unwrap();
    assert!(
        check.is_consistent() && check.balance_nanos == 850 && check.unposted_nanos == 50,
        "{check:?}"
    );
    assert!(l.close_grant(1, 1, false, 3, None).await.unwrap());
    let a = l.account("old").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (850, 0));
    assert_eq!(stored(&l, 1).await, (850, 0));
    let check = l.journal_verify("old").await.unwrap();
    assert!(check.is_consistent(), "{check:?}");
    l.close().await;
}

#[tokio::test]
async fn a_v4_ledger_with_an_open_grant_upgrades_on_sqlite() {
    upgrade_from_v4(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn a_v4_ledger_with_an_open_grant_upgrades_on_postgres() {
    if let Some(db) = TestDb::postgres().await.unwrap() {
        upgrade_from_v4(&db).await;
    }
}
