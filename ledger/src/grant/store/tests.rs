//! The database side of grants on both databases: a settlement batch retried after an
//! unknown commit outcome moves nothing twice, a batch never waits for its account's
//! row, and grants post what they settled; `walk` runs random orders of all of it
//! against a model, `upgrade` a ledger from before posting existed.

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
        usage: Usage { input_tokens: 3, output_tokens: 4, web_searches: 0, upstream: Some("default/up".into()) },
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
    let Taken::Took { grant_id, amount, .. } = l.take_grant(&take).await.unwrap() else { panic!("no grant") };
    assert_eq!(amount, 500);
    let first = [job(account.id, grant_id, 1, 10), job(account.id, grant_id, 2, 20)];
    assert_eq!(l.settle_batch(&first).await.unwrap(), [true, true]);
    // The same batch again (its commit was not acknowledged): nothing moves.
    assert_eq!(l.settle_batch(&first).await.unwrap(), [true, true]);
    let a = l.account("retry").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (970, 470));
    // A batch that overlaps one already committed: only the new row goes in.
    let overlapping = [job(account.id, grant_id, 2, 20), job(account.id, grant_id, 3, 40)];
    l.settle_batch(&overlapping).await.unwrap();
    let a = l.account("retry").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (930, 430));
    assert_eq!(stored(&l, account.id).await, (1_000, 500), "not posted yet");
    let settles = db.settlements().await.unwrap();
    assert_eq!(settles.iter().map(|j| j.amount).collect::<Vec<_>>(), [10, 20, 40]);
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
    let Taken::Took { grant_id, .. } = l.take_grant(&take_500(account.id)).await.unwrap() else { panic!("no grant") };

    let mut taker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut taker).await.unwrap();
    // What a take, a post or a close does first.
    sqlx::query("SELECT balance_nanos FROM accounts WHERE id = $1 FOR NO KEY UPDATE")
        .bind(account.id)
        .fetch_one(&mut taker)
        .await
        .unwrap();
    let jobs = [job(account.id, grant_id, 1, 10), job(account.id, grant_id, 2, 5)];
    let applied = tokio::time::timeout(std::time::Duration::from_secs(10), l.settle_batch(&jobs)).await;
    sqlx::query("COMMIT").execute(&mut taker).await.unwrap();
    assert_eq!(applied.expect("the batch waited for the account row").unwrap(), [true, true]);

    assert_eq!(stored(&l, account.id).await, (1_000, 500), "the account row is not touched by a batch");
    let a = l.account("apart").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (985, 485), "read with the unposted settlements out");
    let check = l.journal_verify("apart").await.unwrap();
    assert!(check.is_consistent() && check.unposted_nanos == 15, "{check:?}");

    assert_eq!(l.post_grant(account.id, grant_id, 2).await.unwrap(), 15);
    assert_eq!(l.post_grant(account.id, grant_id, 3).await.unwrap(), 0, "nothing left to post");
    assert_eq!(stored(&l, account.id).await, (985, 485));
    let check = l.journal_verify("apart").await.unwrap();
    assert!(check.is_consistent() && check.unposted_nanos == 0, "{check:?}");
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
    let Taken::Took { grant_id, .. } = l.take_grant(&take_500(account.id)).await.unwrap() else { panic!("no grant") };
    let consistent = async |unposted: i64| {
        let c = l.journal_verify("posts").await.unwrap();
        assert!(c.is_consistent() && c.unposted_nanos == unposted, "{c:?}");
    };
    l.settle_batch(&[job(account.id, grant_id, 1, 100)]).await.unwrap();
    assert_eq!(stored(&l, account.id).await, (1_000, 500));
    consistent(100).await;

    // A renewal posts, and takes from what is free (unchanged by settling: 500).
    let grow = Take { grant_id: Some(grant_id), need: 0, target: 100, now_ms: 2, ..take_500(account.id) };
    assert_eq!(l.take_grant(&grow).await.unwrap(), Taken::Took { grant_id, amount: 100, free: 400 });
    assert_eq!(stored(&l, account.id).await, (900, 500));
    consistent(0).await;

    l.settle_batch(&[job(account.id, grant_id, 2, 50)]).await.unwrap();
    consistent(50).await;
    // A return posts and gives the rest back.
    assert!(l.close_grant(account.id, grant_id, false, 3, None).await.unwrap());
    assert_eq!(stored(&l, account.id).await, (850, 0));
    let a = l.account("posts").await.unwrap().unwrap();
    assert_eq!((a.balance_nanos, a.reserved_nanos), (850, 0));
    consistent(0).await;
    let kinds: Vec<String> =
        db.journal().await.unwrap().into_iter().filter(|j| j.grant_id.is_some()).map(|j| j.kind).collect();
    assert_eq!(kinds, ["reserve", "settle", "post", "reserve", "settle", "post", "release"]);

    // A settlement after the close moves nothing, and a closed grant cannot hold
    // unposted money (the schema refuses it).
    assert_eq!(l.settle_batch(&[job(account.id, grant_id, 3, 10)]).await.unwrap(), [false]);
    assert_eq!(stored(&l, account.id).await, (850, 0));
    let refused =
        sqlx::query("UPDATE grants SET unposted_nanos = 1 WHERE id = $1").bind(grant_id).execute(&l.inner.writer).await;
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

mod upgrade;
mod walk;
