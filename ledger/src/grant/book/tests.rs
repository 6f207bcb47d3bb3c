//! The grant state machine against a model of the database (docs/design.md §5a): any
//! order of reserve, settle, release, renew, commit, post, expiry by a reaper, a frozen
//! account and top-ups never overdraws, never makes `reserved` negative, never promises
//! more than a grant holds, and accounts for every nanodollar, whether posted to the
//! account row yet or not.

use proptest::prelude::*;

use super::Book;
use crate::grant::store::take_size;

/// The database as the book's process sees it: one account (its row as stored) and its
/// grants.
#[derive(Debug, Default)]
struct Db {
    balance: i64,
    reserved: i64,
    topups: i64,
    charged: i64,
    uncollected: i64,
    /// Grant id → (amount held for new requests, settled and not posted) while open.
    open: std::collections::BTreeMap<i64, (i64, i64)>,
    next_grant: i64,
    frozen: bool,
}

impl Db {
    /// A batch committed a settlement of `charged` on grant `id`: into the grant, not
    /// the account row. Whether money moved.
    fn commit(&mut self, id: i64, charged: i64) -> bool {
        match self.open.get_mut(&id) {
            Some((amount, unposted)) => {
                *amount -= charged;
                *unposted += charged;
                self.charged += charged;
                true
            }
            None => {
                self.uncollected += charged;
                false
            }
        }
    }

    /// What grant `id` settled leaves the account row's balance and reserved.
    fn post(&mut self, id: i64) {
        if let Some((_, unposted)) = self.open.get_mut(&id) {
            self.balance -= *unposted;
            self.reserved -= *unposted;
            *unposted = 0;
        }
    }

    /// Grant `id` closes (returned or expired): it posts, and the rest goes back.
    fn close(&mut self, id: i64) {
        self.post(id);
        if let Some((amount, _)) = self.open.remove(&id) {
            self.reserved -= amount;
        }
    }

    fn unposted(&self) -> i64 {
        self.open.values().map(|(_, u)| u).sum()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Reserve(i64),
    Settle(usize, i64),
    Release(usize),
    Renew(i64, i64),
    Commit,
    Post,
    Expire,
    Return,
    Freeze(bool),
    Topup(i64),
    Tick(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..=50).prop_map(Op::Reserve),
        3 => (any::<usize>(), 0i64..=80).prop_map(|(i, c)| Op::Settle(i, c)),
        1 => any::<usize>().prop_map(Op::Release),
        3 => (0i64..=60, 0i64..=200).prop_map(|(n, t)| Op::Renew(n, t)),
        2 => Just(Op::Commit),
        1 => Just(Op::Post),
        1 => Just(Op::Expire),
        1 => Just(Op::Return),
        1 => any::<bool>().prop_map(Op::Freeze),
        1 => (0i64..=100).prop_map(Op::Topup),
        1 => (0i64..=40_000).prop_map(Op::Tick),
    ]
}

/// A hold: grant, estimate.
type Held = (i64, i64);
/// A settlement queued for the writer: grant, charged.
type Queued = (i64, i64);

fn check(db: &Db, book: &Book, opening: i64) -> Result<(), TestCaseError> {
    prop_assert!(db.balance - db.reserved >= 0, "overdraft: {db:?}");
    prop_assert!(db.reserved >= 0, "negative reserved: {db:?}");
    prop_assert!(db.open.values().all(|&(a, u)| a >= 0 && u >= 0), "{db:?}");
    prop_assert_eq!(
        db.reserved,
        db.open.values().map(|(a, u)| a + u).sum::<i64>(),
        "reserved is what the open grants hold"
    );
    prop_assert_eq!(db.balance - db.unposted(), opening + db.topups - db.charged, "every nanodollar accounted for");
    for (id, g) in book.grants() {
        prop_assert!(g.in_flight >= 0 && g.pending >= 0, "{g:?}");
        prop_assert!(g.in_flight + g.pending <= g.held, "grant {id} promised more than it holds: {g:?}");
        if let Some(&(amount, _)) = db.open.get(&id) {
            prop_assert_eq!(g.held, amount, "grant {} as the book knows it", id);
        } else {
            prop_assert!(g.closed || g.held == 0, "grant {id} is not open in the database: {g:?}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn grants_never_overdraw_and_account_for_every_nanodollar(opening in 0i64..=300, ops in prop::collection::vec(op(), 1..120)) {
        let mut db = Db { balance: opening, ..Db::default() };
        let mut book = Book::default();
        let mut holds: Vec<Held> = Vec::new();
        let mut queued: Vec<Queued> = Vec::new();
        let mut now = 1_000_000i64;
        for op in ops {
            match op {
                Op::Reserve(e) => {
                    if let Ok(id) = book.reserve(e, now) {
                        holds.push((id, e));
                    }
                }
                Op::Settle(i, actual) if !holds.is_empty() => {
                    let (id, e) = holds.swap_remove(i % holds.len());
                    let charged = actual.min(e);
                    book.settle(id, e, charged);
                    queued.push((id, charged));
                }
                Op::Release(i) if !holds.is_empty() => {
                    let (id, e) = holds.swap_remove(i % holds.len());
                    book.release(id, e);
                }
                Op::Renew(need, target) => {
                    let current = book.current().filter(|(_, g)| !g.closed).map(|(id, _)| id);
                    let free = db.balance - db.reserved;
                    let size = if db.frozen { None } else { take_size(free, need, target.max(need)) };
                    match (size, current) {
                        (Some(amount), Some(id)) if db.open.contains_key(&id) => {
                            db.post(id);
                            db.open.entry(id).and_modify(|(a, _)| *a += amount);
                            db.reserved += amount;
                            book.took(id, amount, now + 30_000, now);
                            // Room a take just added is for requests: not idle yet.
                            prop_assert!(amount == 0 || book.idle(now, 1).is_none(), "grew and idle at once");
                        }
                        // The grant to grow was expired by a reaper: the book closes it.
                        (Some(_), Some(id)) => book.close(id),
                        (Some(amount), None) => {
                            db.next_grant += 1;
                            db.open.insert(db.next_grant, (amount, 0));
                            db.reserved += amount;
                            book.took(db.next_grant, amount, now + 30_000, now);
                            prop_assert!(book.idle(now, 1).is_none(), "opened and idle at once");
                        }
                        (None, _) => {}
                    }
                }
                Op::Commit => {
                    for (id, charged) in queued.drain(..) {
                        let applied = db.commit(id, charged);
                        book.committed(id, charged, applied);
                    }
                }
                Op::Post => {
                    if let Some((id, _)) = book.current() {
                        db.post(id);
                    }
                }
                Op::Expire => {
                    // A reaper, in any state of this process (e.g. it was paused).
                    if let Some(&id) = db.open.keys().next() {
                        db.close(id);
                    }
                }
                Op::Return => {
                    if let Some(id) = book.idle(now, 0) {
                        book.close(id);
                        db.close(id);
                    }
                }
                Op::Freeze(f) => db.frozen = f,
                Op::Topup(x) => {
                    db.balance += x;
                    db.topups += x;
                }
                Op::Tick(ms) => now += ms,
                Op::Settle(..) | Op::Release(_) => {}
            }
            // A grant the reaper expired is noticed by the book at its next renewal;
            // until then it must not hold more than the database did.
            for (id, g) in book.grants() {
                prop_assert!(g.in_flight + g.pending <= g.held, "grant {id}: {g:?}");
            }
            let expired: Vec<i64> = book.grants().filter(|(id, g)| !g.closed && !db.open.contains_key(id)).map(|(id, _)| id).collect();
            for id in expired {
                book.close(id);
            }
            check(&db, &book, opening)?;
        }
        // Everything ends: holds released, settlements committed, grants returned.
        for (id, e) in holds.drain(..) {
            book.release(id, e);
        }
        for (id, charged) in queued.drain(..) {
            let applied = db.commit(id, charged);
            book.committed(id, charged, applied);
        }
        if let Some(id) = book.idle(now + 10_000_000, 0) {
            book.close(id);
            db.close(id);
        }
        for id in db.open.keys().copied().collect::<Vec<_>>() {
            book.close(id);
            db.close(id);
        }
        check(&db, &book, opening)?;
        prop_assert_eq!(db.reserved, 0);
        prop_assert_eq!(db.balance, opening + db.topups - db.charged, "everything posted once closed");
        prop_assert!(!book.busy());
        prop_assert_eq!(book.grants().count(), 0, "every grant forgotten once closed and done");
    }
}

#[test]
fn near_a_zero_balance_grants_shrink_to_the_request() {
    // Half of what is free when that covers the need, else exactly the need.
    assert_eq!(take_size(1000, 10, 100), Some(100));
    assert_eq!(take_size(100, 10, 100), Some(50));
    assert_eq!(take_size(15, 10, 100), Some(10));
    assert_eq!(take_size(9, 10, 100), None);
    assert_eq!(take_size(0, 0, 100), Some(0));
}

#[test]
fn the_rate_follows_reservations_and_decays() {
    let mut b = Book::default();
    b.took(1, 1000, 10_000, 0);
    for i in 0..10 {
        assert!(b.reserve(10, 1000 + i).is_ok());
    }
    assert_eq!(b.rate_per_s(1500), 100);
    assert_eq!(b.reserve(10, 2100), Ok(1));
    assert_eq!(b.rate_per_s(2100), 100, "the last full second");
    assert_eq!(b.rate_per_s(9000), 0, "nothing for a while");
    assert_eq!(b.reserve(10, 10_000).unwrap_err().room, 0, "expired for new requests");
}

/// The maintenance loop may run between a take and the reservation of the request it
/// was taken for (a waiter woken late on a loaded machine): a grant that just got room
/// is not idle then, however long ago (or never) the account last reserved here.
/// Otherwise it is returned unused and the waiter takes another one (or gives up with
/// 503 when that keeps happening).
#[test]
fn a_grant_is_not_idle_right_after_a_take() {
    let idle = 5_000;
    let now = 1_000_000;
    let mut b = Book::default();
    b.took(1, 1000, now + 30_000, now);
    assert_eq!(b.idle(now, idle), None, "opened for a request that has not reserved yet");
    assert_eq!(b.idle(now + idle - 1, idle), None);
    assert_eq!(b.idle(now + idle, idle), Some(1), "unused since it was taken");

    // Used, then unused for long; a request needs more than its room and the renewal
    // grows it: not idle until the request had its chance.
    assert_eq!(b.reserve(1000, now + 1), Ok(1));
    b.release(1, 1000);
    let later = now + 60_000;
    assert_eq!(b.idle(later, idle), Some(1));
    b.took(1, 500, later + 30_000, later);
    assert_eq!(b.idle(later, idle), None, "grown for a waiting request");
    assert_eq!(b.reserve(1500, later), Ok(1));

    // A renewal of the validity alone does not keep an unused grant.
    b.release(1, 1500);
    let much_later = later + 60_000;
    b.took(1, 0, much_later + 30_000, much_later);
    assert_eq!(b.idle(much_later, idle), Some(1), "only its validity was renewed");
}
