//! Balance grants and group-commit settlement (docs/design.md §5a): billing without a
//! database round trip per request.
//!
//! A [`Biller`] (one per process, cheap to clone) holds per account a **grant**: money
//! moved from the account's available balance into `reserved` in one transaction
//! ([`store`]). A request reserves its estimate from the grant in memory ([`book`]) and
//! gets a [`Hold`]; [`Hold::settle`] queues its charge for the one writer task
//! ([`writer`]), which commits settlements in batches, and resolves only once the batch
//! holding it committed. [`Hold::release`] (or dropping the hold) gives the estimate back
//! to the grant in memory.
//!
//! A batch writes the journal and the grant rows only: a settlement moves money from the
//! grant's amount to its `unposted`, both inside the account's `reserved`, so what the
//! account has free is exact at once and the account row is not locked per batch (two
//! processes on one account do not take turns on it). The grant's `unposted` is posted
//! to the account row when the grant renews (a grant in use renews at half its validity:
//! every 15 s by default) or closes; [`Ledger::account`] reads the balance with it
//! taken out. Posting more often would cost a commit that holds the grant's row, which
//! the next batch waits for: a measured rise of the p99 at 5k req/s.
//!
//! Grants are renewed in the background before they run dry, sized to about two seconds
//! of the account's recent reservations, at most [`BillerConfig::grant_max_nanos`] and
//! at most half of what the account has free (down to single requests near a zero
//! balance). A request that finds no room waits at most [`BillerConfig::wait`] for a
//! renewal; it is refused ([`LedgerError::InsufficientFunds`]) only when the grant's room
//! plus the account's free balance cannot cover it, and
//! ([`LedgerError::Unavailable`]) when the database cannot be reached. An idle grant is
//! returned; [`Biller::shutdown`] returns them all; a grant whose holder died is expired
//! by [`Ledger::reap_expired`] at its `expires_at` (validity plus
//! [`Biller::set_deadline_slack`]).
//!
//! With `grant_max_nanos == 0` a biller reserves per request in the database instead
//! (the §5 path, [`Ledger::reserve`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, mpsc, oneshot};

use crate::accounts::non_negative;
use crate::error::LedgerError;
use crate::ledger::{Ledger, unix_ms};
use crate::reservation::{Reservation, SettleOutcome, Usage};

pub mod book;
mod store;
mod writer;

use book::Book;
use store::{Take, Taken};
use writer::{Job, Msg};

/// How many [`BillerConfig::wait`]s a request waits for a renewal that the account can
/// afford but that has not covered it yet.
pub const PATIENCE: u32 = 10;

/// How a [`Biller`] sizes, keeps and returns grants.
#[derive(Clone, Debug)]
pub struct BillerConfig {
    /// This process, in the `grants` table (pod name, or host name and process start).
    pub holder: String,
    /// How long a grant serves new requests without a renewal (`--grant-validity`).
    pub validity: Duration,
    /// The most one grant holds (`--grant-max`); 0 reserves per request in the database.
    pub grant_max_nanos: i64,
    /// How long a settlement batch collects (`--settle-window`).
    pub settle_window: Duration,
    /// A grant unused this long (and with nothing in flight) is returned.
    pub idle: Duration,
    /// How long a request that finds no room waits for a renewal before a known
    /// shortfall is refused (402). While renewals say the account can cover it but have
    /// not yet (a burst, a slow database), it waits up to [`PATIENCE`] times this, then
    /// is refused as unavailable (503).
    pub wait: Duration,
    /// A renewal refused (or failed) this recently is not retried for a request it could
    /// not cover; it also spaces background renewals.
    pub retry_after: Duration,
    /// How much of the recent spend rate a grant is sized for.
    pub horizon: Duration,
    /// Reservation lifetime of the per-request path (`--reservation-ttl`).
    pub reservation_ttl: Duration,
}

/// What a [`Biller`] reports, for metrics. Every method has a no-op default.
pub trait BillerObserver: Send + Sync + std::fmt::Debug {
    /// A renewal (take) finished.
    fn renewal(&self, _result: RenewalResult) {}
    /// Open grants of this process went up or down by `delta`.
    fn grants_open(&self, _delta: i64) {}
    /// A settlement batch of `size` committed.
    fn batch(&self, _size: usize) {}
    /// A settlement batch failed and will be retried.
    fn settle_retry(&self) {}
}

/// How a renewal ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenewalResult {
    /// Money was taken (or the validity extended).
    Ok,
    /// The account had less free than needed.
    Refused,
    /// The database failed or could not be reached.
    Failed,
}

impl RenewalResult {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RenewalResult::Ok => "ok",
            RenewalResult::Refused => "refused",
            RenewalResult::Failed => "failed",
        }
    }
}

/// The process's billing: grants per account and the settlement writer. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Biller {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
}

/// An estimate reserved for one request. End it with [`Hold::settle`] or
/// [`Hold::release`]; dropped unsettled, it is released (in memory for a grant) and
/// counted in [`Biller::dropped_holds`].
#[must_use = "a hold must be settled or released"]
#[derive(Debug)]
pub struct Hold {
    kind: HoldKind,
}

#[derive(Debug)]
enum HoldKind {
    Grant(GrantHold),
    Reservation(Reservation),
}

#[derive(Debug)]
struct GrantHold {
    biller: Biller,
    slot: Arc<Slot>,
    grant_id: i64,
    hold_id: i64,
    estimate: i64,
    request_id: String,
    armed: bool,
}

/// What a settlement did, once committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Billed {
    /// `Settled`, or `AfterRelease` when the grant (or reservation) had been expired
    /// first: nothing moved, the charge is uncollected.
    pub outcome: SettleOutcome,
    /// Taken from the balance: `min(actual, estimate)`.
    pub charged_nanos: i64,
    /// Actual cost that could not be charged.
    pub uncollected_nanos: i64,
}

#[derive(Debug)]
pub(crate) struct Shared {
    ledger: Ledger,
    cfg: BillerConfig,
    slots: Mutex<HashMap<i64, Arc<Slot>>>,
    pub(crate) observer: Arc<dyn BillerObserver>,
    slack_ms: AtomicI64,
    /// Holds not settled or released yet: while there are none, a batch does not wait
    /// for its window (nothing else could join it).
    pub(crate) open_holds: AtomicI64,
    dropped: AtomicU64,
    closing: AtomicBool,
}

/// One account in this process.
#[derive(Debug)]
struct Slot {
    account_id: i64,
    book: Mutex<Book>,
    renewing: AtomicBool,
    changed: Notify,
    last: Mutex<Option<Attempt>>,
    next_hold: AtomicI64,
    /// Estimates of requests waiting for room (a renewal is sized to cover them).
    waiting: AtomicI64,
    /// Grants closed here whose return did not reach the database yet.
    unreturned: Mutex<Vec<i64>>,
}

/// The last renewal's outcome.
#[derive(Clone, Debug)]
struct Attempt {
    at_ms: i64,
    result: Result<i64, Failure>,
    refused: bool,
}

#[derive(Clone, Debug)]
enum Failure {
    Unavailable(String),
    UnknownAccount,
}

#[derive(Debug)]
struct NoObserver;
impl BillerObserver for NoObserver {}

impl BillerConfig {
    /// The defaults of docs/design.md §5a for `holder`: 30 s validity, grants of at most
    /// 10 USD, a 2 ms settlement window.
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            validity: Duration::from_secs(30),
            grant_max_nanos: 10 * crate::NANOS_PER_USD,
            settle_window: Duration::from_millis(2),
            idle: Duration::from_secs(5),
            wait: Duration::from_millis(200),
            retry_after: Duration::from_millis(100),
            horizon: Duration::from_secs(2),
            reservation_ttl: Duration::from_secs(900),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

impl Biller {
    /// Starts the writer and the maintenance loop (idle returns, validity renewals) on
    /// the current tokio runtime.
    pub fn start(ledger: Ledger, cfg: BillerConfig, observer: Option<Arc<dyn BillerObserver>>) -> Biller {
        let (tx, rx) = mpsc::unbounded_channel();
        let tick = (cfg.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let shared = Arc::new(Shared {
            ledger: ledger.clone(),
            cfg,
            slots: Mutex::new(HashMap::new()),
            observer: observer.unwrap_or_else(|| Arc::new(NoObserver)),
            slack_ms: AtomicI64::new(0),
            open_holds: AtomicI64::new(0),
            dropped: AtomicU64::new(0),
            closing: AtomicBool::new(false),
        });
        writer::start(ledger, shared.clone(), shared.cfg.settle_window, rx);
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        let maintenance = tx.clone().downgrade();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let (Some(shared), Some(tx)) = (weak.upgrade(), maintenance.upgrade()) else {
                    return;
                };
                if shared.closing.load(Ordering::Relaxed) {
                    return;
                }
                Biller { shared, tx }.maintain(SystemTime::now()).await;
            }
        });
        Biller { shared, tx }
    }

    /// The configuration.
    pub fn config(&self) -> &BillerConfig {
        &self.shared.cfg
    }

    /// The ledger it bills on.
    pub fn ledger(&self) -> &Ledger {
        &self.shared.ledger
    }

    /// Sets the longest route deadline of the holder's configuration: a grant renewed
    /// from now on expires (for the reaper) that long after its validity ends, so that a
    /// request started just before the end may still settle.
    pub fn set_deadline_slack(&self, slack: Duration) {
        self.shared.slack_ms.store(ms(slack), Ordering::Relaxed);
    }

    /// Holds dropped without settle or release (a bug indicator).
    pub fn dropped_holds(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Reserves `estimate_nanos` of account `account_id` for request `request_id`: in
    /// memory from the account's grant, renewing it (waiting at most
    /// [`BillerConfig::wait`]) when it has no room.
    pub async fn reserve(&self, account_id: i64, estimate_nanos: i64, request_id: &str) -> Result<Hold, LedgerError> {
        non_negative("reservation estimate", estimate_nanos)?;
        let cfg = &self.shared.cfg;
        if cfg.grant_max_nanos == 0 {
            let (ledger, ttl, rid) = (self.shared.ledger.clone(), cfg.reservation_ttl, request_id.to_owned());
            // Its own task: a transaction is never cancelled half way.
            let r = tokio::spawn(async move { ledger.reserve(account_id, estimate_nanos, ttl, &rid).await })
                .await
                .map_err(|e| LedgerError::Unavailable(format!("the reservation task failed: {e}")))??;
            return Ok(Hold { kind: HoldKind::Reservation(r) });
        }
        if self.shared.closing.load(Ordering::Relaxed) {
            return Err(LedgerError::Unavailable("this process is shutting down".into()));
        }
        let slot = self.shared.slot(account_id);
        let started = tokio::time::Instant::now();
        let mut deadline = started + cfg.wait;
        let patience = cfg.wait * PATIENCE;
        let mut waiting = Waiting { slot: &slot, amount: 0 };
        loop {
            let notified = slot.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = now_ms();
            let room = {
                let mut book = lock(&slot.book);
                match book.reserve(estimate_nanos, now) {
                    Ok(grant_id) => {
                        let (after, rate) = (book.room(now), book.rate_per_s(now));
                        drop(book);
                        self.refill_if_low(&slot, after, rate, now);
                        return Ok(self.hold(&slot, grant_id, estimate_nanos, request_id));
                    }
                    Err(short) => short.room,
                }
            };
            if let Some(refusal) = slot.refusal(now, ms(cfg.retry_after), room, estimate_nanos, false) {
                return Err(refusal);
            }
            waiting.set(estimate_nanos - room);
            self.renew(&slot, estimate_nanos - room);
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let now = now_ms();
                let room = lock(&slot.book).room(now);
                // 402 only when the account is known to be short. When the last renewal
                // said the money is there but none has covered this request yet (a
                // burst of new requests, a slow database), that is not a lack of money:
                // wait on, and give up with 503 only once the database has had
                // `patience` to answer.
                if let Some(refusal) = slot.refusal(now, i64::MAX, room, estimate_nanos, true) {
                    return Err(refusal);
                }
                if deadline >= started + patience {
                    return Err(LedgerError::Unavailable(format!(
                        "no balance grant renewal covered the request within {} ms",
                        patience.as_millis()
                    )));
                }
                deadline = (deadline + cfg.wait).min(started + patience);
            }
        }
    }

    fn hold(&self, slot: &Arc<Slot>, grant_id: i64, estimate: i64, request_id: &str) -> Hold {
        self.shared.open_holds.fetch_add(1, Ordering::Relaxed);
        Hold {
            kind: HoldKind::Grant(GrantHold {
                biller: self.clone(),
                slot: slot.clone(),
                grant_id,
                hold_id: slot.next_hold.fetch_add(1, Ordering::Relaxed),
                estimate,
                request_id: request_id.to_owned(),
                armed: true,
            }),
        }
    }

    /// Starts a background renewal when the room left is under a second of spend (not
    /// more often than [`BillerConfig::retry_after`]).
    fn refill_if_low(&self, slot: &Arc<Slot>, room: i64, rate: i64, now: i64) {
        let low = rate.saturating_mul(ms(self.shared.cfg.horizon)) / 2000;
        if room >= low || slot.recent(now, self.shared.cfg.retry_after) {
            return;
        }
        self.renew(slot, 0);
    }

    /// Starts a renewal of `slot`'s grant that must add at least `need` (0: whatever is
    /// sensible, maybe only validity), unless one is running; waiters are woken when it
    /// ends.
    fn renew(&self, slot: &Arc<Slot>, need: i64) {
        if slot.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (biller, slot) = (self.clone(), slot.clone());
        tokio::spawn(async move {
            biller.renew_now(&slot, need).await;
            slot.renewing.store(false, Ordering::Release);
            slot.changed.notify_waiters();
        });
    }

    async fn renew_now(&self, slot: &Slot, need: i64) {
        let cfg = &self.shared.cfg;
        for _ in 0..2 {
            let now = now_ms();
            let (current, rate) = {
                let book = lock(&slot.book);
                (book.current().filter(|(_, g)| !g.closed).map(|(id, _)| id), book.rate_per_s(now))
            };
            let waiting = slot.waiting.load(Ordering::Relaxed).max(0);
            if current.is_none() && need == 0 && waiting == 0 {
                // A background renewal (validity, refill) whose grant was closed
                // meanwhile (idle, reaped): nobody needs a new one; the next request
                // that does takes it.
                return;
            }
            let by_rate = rate.saturating_mul(ms(cfg.horizon)) / 1000;
            let target = by_rate.max(waiting).min(cfg.grant_max_nanos).max(need);
            let valid_until = now.saturating_add(ms(cfg.validity));
            let take = Take {
                account_id: slot.account_id,
                grant_id: current,
                holder: &cfg.holder,
                need,
                target,
                now_ms: now,
                valid_until_ms: valid_until,
                expires_at_ms: valid_until.saturating_add(self.shared.slack_ms.load(Ordering::Relaxed)),
            };
            let (result, outcome) = match self.shared.ledger.take_grant(&take).await {
                Ok(Taken::Took { grant_id, amount, free }) => {
                    let mut book = lock(&slot.book);
                    let unchanged = book.current().filter(|(_, g)| !g.closed).map(|(id, _)| id) == current;
                    if unchanged && !self.shared.closing.load(Ordering::Relaxed) {
                        // Its room starts now (not when the take began): until the
                        // request it was taken for has reserved, the maintenance loop
                        // must not find it idle and return it.
                        book.took(grant_id, amount, valid_until, now_ms());
                        if current != Some(grant_id) {
                            self.shared.observer.grants_open(1);
                        }
                    } else if current != Some(grant_id) {
                        // Closed here meanwhile (idle, shutdown): a new grant nobody
                        // will use goes back. A grown one is returned with what it
                        // holds by the return that closed it.
                        lock(&slot.unreturned).push(grant_id);
                    }
                    (Ok(free), RenewalResult::Ok)
                }
                Ok(Taken::Short { free }) => (Ok(free), RenewalResult::Refused),
                Ok(Taken::GrantGone) => {
                    // A reaper expired it (this process could not renew it in time).
                    if let Some(id) = current {
                        lock(&slot.book).close(id);
                        self.shared.observer.grants_open(-1);
                    }
                    continue;
                }
                Err(LedgerError::UnknownAccountId(_)) => (Err(Failure::UnknownAccount), RenewalResult::Failed),
                Err(e) => (Err(Failure::Unavailable(e.to_string())), RenewalResult::Failed),
            };
            self.shared.observer.renewal(outcome);
            *lock(&slot.last) = Some(Attempt { at_ms: now, result, refused: outcome == RenewalResult::Refused });
            return;
        }
    }

    /// Housekeeping at `now` (the loop runs it every quarter of [`BillerConfig::idle`]):
    /// returns idle grants, renews the validity of grants in use that are past half of
    /// it, and retries returns that did not reach the database. Tests call it with a
    /// `now` of their choosing.
    pub async fn maintain(&self, now: SystemTime) {
        let now = unix_ms(now);
        let cfg = &self.shared.cfg;
        let slots: Vec<Arc<Slot>> = lock(&self.shared.slots).values().cloned().collect();
        for slot in slots {
            let (idle, renew) = {
                let mut book = lock(&slot.book);
                match book.idle(now, ms(cfg.idle)) {
                    Some(id) => {
                        book.close(id);
                        (Some(id), false)
                    }
                    None => (
                        None,
                        book.current().is_some_and(|(_, g)| !g.closed && g.valid_until_ms - now < ms(cfg.validity) / 2),
                    ),
                }
            };
            if let Some(id) = idle {
                self.shared.observer.grants_open(-1);
                lock(&slot.unreturned).push(id);
            }
            if renew {
                self.renew(&slot, 0);
            }
            self.return_closed(&slot, now).await;
        }
    }

    /// Returns the grants `slot` closed here to the database (kept for a retry if it
    /// cannot be reached).
    async fn return_closed(&self, slot: &Slot, now: i64) {
        let ids: Vec<i64> = std::mem::take(&mut *lock(&slot.unreturned));
        for id in ids {
            let (ledger, account) = (self.shared.ledger.clone(), slot.account_id);
            let done = tokio::spawn(async move { ledger.close_grant(account, id, false, now, None).await }).await;
            match done {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(grant_id = id, error = %e, "returning a grant failed; will retry (the reaper expires it otherwise)");
                    lock(&slot.unreturned).push(id);
                }
                Err(e) => {
                    tracing::warn!(grant_id = id, error = %e, "the grant return task failed; the reaper expires it")
                }
            }
        }
    }

    /// Waits until every settlement queued so far has committed.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// On drain: refuses new reservations, waits at most `within` for queued
    /// settlements to commit, and returns every grant (those it cannot return, the
    /// reaper expires). Holds still open keep their grant until they end.
    pub async fn shutdown(&self, within: Duration) {
        self.shared.closing.store(true, Ordering::Relaxed);
        if tokio::time::timeout(within, self.flush()).await.is_err() {
            tracing::warn!("settlements still queued at shutdown; the reaper will expire their grants");
        }
        let end = tokio::time::Instant::now() + within;
        let slots: Vec<Arc<Slot>> = lock(&self.shared.slots).values().cloned().collect();
        for slot in slots {
            {
                let mut book = lock(&slot.book);
                if let Some((id, _)) = book.current() {
                    book.close(id);
                    self.shared.observer.grants_open(-1);
                    lock(&slot.unreturned).push(id);
                }
            }
            while !lock(&slot.unreturned).is_empty() && tokio::time::Instant::now() < end {
                self.return_closed(&slot, now_ms()).await;
                if !lock(&slot.unreturned).is_empty() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Whether this process holds a grant that still serves new requests at `now` (open,
    /// within its validity, with room): while the database is away such a process can
    /// still bill, so it stays ready (docs/design.md §3.1).
    pub fn serving(&self, now: SystemTime) -> bool {
        let now = unix_ms(now);
        let slots: Vec<Arc<Slot>> = lock(&self.shared.slots).values().cloned().collect();
        slots.iter().any(|slot| lock(&slot.book).room(now) > 0)
    }

    /// Waits until no renewal started so far is running (tests: a process that is to
    /// "die" must not renew behind the test's back).
    pub async fn renewals_done(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.shared.slots).values().cloned().collect();
        for slot in slots {
            loop {
                let notified = slot.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !slot.renewing.load(Ordering::Acquire) {
                    break;
                }
                notified.await;
            }
        }
    }

    /// The in-memory state of `account_id`'s grants in this process (tests, audits).
    pub fn book(&self, account_id: i64) -> Option<Book> {
        lock(&self.shared.slots).get(&account_id).map(|s| lock(&s.book).clone())
    }
}

impl Shared {
    fn slot(&self, account_id: i64) -> Arc<Slot> {
        lock(&self.slots)
            .entry(account_id)
            .or_insert_with(|| {
                Arc::new(Slot {
                    account_id,
                    book: Mutex::new(Book::default()),
                    renewing: AtomicBool::new(false),
                    changed: Notify::new(),
                    last: Mutex::new(None),
                    next_hold: AtomicI64::new(1),
                    waiting: AtomicI64::new(0),
                    unreturned: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// A settlement's batch committed (the writer calls this).
    pub(crate) fn committed(&self, account_id: i64, grant_id: i64, charged: i64, moved: bool) {
        let slot = lock(&self.slots).get(&account_id).cloned();
        if let Some(slot) = slot {
            lock(&slot.book).committed(grant_id, charged, moved);
            slot.changed.notify_waiters();
        }
    }
}

impl Slot {
    /// The refusal a request of `estimate` gets from the last renewal when it ended
    /// within `window_ms` of `now` and cannot help: too little free (a refused renewal,
    /// or any when the request `gives_up`), or no database.
    fn refusal(&self, now: i64, window_ms: i64, room: i64, estimate: i64, gives_up: bool) -> Option<LedgerError> {
        let last = lock(&self.last);
        let a = last.as_ref().filter(|a| now.saturating_sub(a.at_ms) < window_ms)?;
        match &a.result {
            Ok(free) if (a.refused || gives_up) && room + free < estimate => {
                Some(LedgerError::InsufficientFunds { available_nanos: room + free, needed_nanos: estimate })
            }
            Ok(_) => None,
            Err(Failure::Unavailable(e)) => Some(LedgerError::Unavailable(e.clone())),
            Err(Failure::UnknownAccount) => Some(LedgerError::UnknownAccountId(self.account_id)),
        }
    }

    fn recent(&self, now: i64, window: Duration) -> bool {
        lock(&self.last).as_ref().is_some_and(|a| now - a.at_ms < ms(window))
    }
}

/// Counts a request's shortfall in [`Slot::waiting`] while it waits.
struct Waiting<'a> {
    slot: &'a Slot,
    amount: i64,
}

impl Waiting<'_> {
    fn set(&mut self, amount: i64) {
        self.slot.waiting.fetch_add(amount - self.amount, Ordering::Relaxed);
        self.amount = amount;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.slot.waiting.fetch_sub(self.amount, Ordering::Relaxed);
    }
}

impl Hold {
    /// The estimate held.
    pub fn amount_nanos(&self) -> i64 {
        match &self.kind {
            HoldKind::Grant(g) => g.estimate,
            HoldKind::Reservation(r) => r.amount_nanos(),
        }
    }

    /// The grant it is held from (`None` on the per-request path).
    pub fn grant_id(&self) -> Option<i64> {
        match &self.kind {
            HoldKind::Grant(g) => Some(g.grant_id),
            HoldKind::Reservation(_) => None,
        }
    }

    /// Charges `min(charge, estimate)` (the excess is uncollected, docs/design.md §5) and
    /// gives the rest of the estimate back to the grant at once. Resolves once the
    /// settlement committed; dropping the future does not cancel it (the writer commits
    /// it all the same).
    pub async fn settle(self, charge_nanos: i64, usage: Usage) -> Result<Billed, LedgerError> {
        non_negative("settlement charge", charge_nanos)?;
        let mut g = match self.kind {
            HoldKind::Reservation(r) => {
                let s = r.settle(charge_nanos, usage).await?;
                return Ok(Billed {
                    outcome: s.outcome,
                    charged_nanos: s.charged_nanos,
                    uncollected_nanos: s.uncollected_nanos,
                });
            }
            HoldKind::Grant(g) => g,
        };
        g.armed = false;
        g.biller.shared.open_holds.fetch_sub(1, Ordering::Relaxed);
        let charged = charge_nanos.min(g.estimate);
        let uncollected = charge_nanos - charged;
        lock(&g.slot.book).settle(g.grant_id, g.estimate, charged);
        g.slot.changed.notify_waiters();
        let (reply, done) = oneshot::channel();
        let job = Job {
            account_id: g.slot.account_id,
            grant_id: g.grant_id,
            hold_id: g.hold_id,
            request_id: std::mem::take(&mut g.request_id),
            charged,
            uncollected,
            usage,
            at_ms: now_ms(),
            reply: Some(reply),
        };
        if let Err(mpsc::error::SendError(Msg::Settle(job))) = g.biller.tx.send(Msg::Settle(job)) {
            lock(&g.slot.book).committed(job.grant_id, charged, false);
            return Err(LedgerError::Unavailable("the settlement writer has stopped".into()));
        }
        match done.await {
            Ok(true) => {
                Ok(Billed { outcome: SettleOutcome::Settled, charged_nanos: charged, uncollected_nanos: uncollected })
            }
            Ok(false) => {
                Ok(Billed { outcome: SettleOutcome::AfterRelease, charged_nanos: 0, uncollected_nanos: charge_nanos })
            }
            Err(_) => Err(LedgerError::Unavailable("the settlement writer has stopped".into())),
        }
    }

    /// Gives the whole estimate back (failure before any output): in memory for a grant.
    pub async fn release(self) -> Result<(), LedgerError> {
        match self.kind {
            HoldKind::Reservation(r) => r.release().await.map(|_| ()),
            HoldKind::Grant(mut g) => {
                g.armed = false;
                g.biller.shared.open_holds.fetch_sub(1, Ordering::Relaxed);
                g.give_back();
                Ok(())
            }
        }
    }
}

impl GrantHold {
    fn give_back(&self) {
        lock(&self.slot.book).release(self.grant_id, self.estimate);
        self.slot.changed.notify_waiters();
    }
}

impl Drop for GrantHold {
    fn drop(&mut self) {
        if self.armed {
            self.biller.shared.open_holds.fetch_sub(1, Ordering::Relaxed);
            self.biller.shared.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(request_id = %self.request_id, estimate = self.estimate, "hold dropped without settle or release; released in memory");
            self.give_back();
        }
    }
}
