//! The in-memory side of one account's grants in one process (docs/design.md §5a): what
//! is held, what requests have reserved from it, what waits to be committed. Pure: no
//! I/O, time is an argument (docs/contributing.md (conventions, rule 13)), so every
//! interleaving is tested against a model of the database (`book/tests.rs`).
//!
//! Per grant, `held` is the grant's `amount_nanos` in the database as this process
//! knows it: settlements leave it only once their batch committed. The room for a new
//! request is `held − in_flight − pending`, where `in_flight` is the estimates of open
//! holds and `pending` the charges queued for the writer. So
//! `in_flight + pending ≤ held` at every step: nothing is promised that the database
//! does not hold in `reserved`.

use std::collections::BTreeMap;

/// How long the spend rate is measured over, milliseconds.
const RATE_WINDOW_MS: i64 = 1_000;

/// One account's grants in this process.
#[derive(Clone, Debug, Default)]
pub struct Book {
    /// Grants by id; at most one is `current` (the one new requests reserve from).
    grants: BTreeMap<i64, Grant>,
    current: Option<i64>,
    /// Estimates reserved in the running window, and the window's start (ms).
    window_sum: i64,
    window_start_ms: i64,
    /// Estimates per second in the last full window.
    rate_per_s: i64,
    /// When a request last reserved (ms).
    last_use_ms: i64,
    /// When a take last opened the current grant or added to it (ms). Idleness is
    /// measured from the later of this and `last_use_ms`: a take is made for requests
    /// (one waiting for room, or the recent rate), so a grant that just got room is not
    /// idle, even for an account this process has not reserved for in a long time (or
    /// ever) and before the request it was taken for has reserved.
    last_take_ms: i64,
}

/// One grant as this process knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// In the account's `reserved` for this grant (the database's `amount_nanos`).
    pub held: i64,
    /// Estimates of open holds.
    pub in_flight: i64,
    /// Charges settled in memory, not committed yet.
    pub pending: i64,
    /// New requests may reserve until then (unix ms).
    pub valid_until_ms: i64,
    /// The database no longer has it open (returned or expired): no new reservations;
    /// kept until its holds and settlements are done.
    pub closed: bool,
}

/// What [`Book::reserve`] did not find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// Room left in the current grant (0 without one).
    pub room: i64,
}

impl Grant {
    /// What a new request may still reserve.
    pub fn room(&self) -> i64 {
        self.held - self.in_flight - self.pending
    }

    fn busy(&self) -> bool {
        self.in_flight > 0 || self.pending > 0
    }
}

impl Book {
    /// The current grant's id and state, if any.
    pub fn current(&self) -> Option<(i64, Grant)> {
        let id = self.current?;
        self.grants.get(&id).map(|g| (id, *g))
    }

    /// Every grant this process knows of the account (tests, shutdown).
    pub fn grants(&self) -> impl Iterator<Item = (i64, &Grant)> {
        self.grants.iter().map(|(id, g)| (*id, g))
    }

    /// Room for a new request in the current grant at `now_ms` (0 if none or expired).
    pub fn room(&self, now_ms: i64) -> i64 {
        match self.current() {
            Some((_, g)) if !g.closed && now_ms < g.valid_until_ms => g.room(),
            _ => 0,
        }
    }

    /// Reserves `estimate` from the current grant; returns its id.
    pub fn reserve(&mut self, estimate: i64, now_ms: i64) -> Result<i64, Short> {
        let room = self.room(now_ms);
        let id = match self.current {
            Some(id) if room >= estimate && estimate >= 0 => id,
            _ => return Err(Short { room }),
        };
        if let Some(g) = self.grants.get_mut(&id) {
            g.in_flight += estimate;
        }
        self.count(estimate, now_ms);
        Ok(id)
    }

    /// A hold of `estimate` on grant `id` ended without a charge.
    pub fn release(&mut self, id: i64, estimate: i64) {
        if let Some(g) = self.grants.get_mut(&id) {
            g.in_flight -= estimate;
        }
        self.forget_done(id);
    }

    /// A hold of `estimate` on grant `id` was settled for `charged ≤ estimate`: the rest
    /// is room again at once, `charged` waits for its batch.
    pub fn settle(&mut self, id: i64, estimate: i64, charged: i64) {
        if let Some(g) = self.grants.get_mut(&id) {
            g.in_flight -= estimate;
            g.pending += charged;
        }
    }

    /// The batch holding a settlement of `charged` on grant `id` committed; `applied`
    /// says whether the grant was still open (money moved) or not (recorded as
    /// uncollected, nothing moved).
    pub fn committed(&mut self, id: i64, charged: i64, applied: bool) {
        if let Some(g) = self.grants.get_mut(&id) {
            g.pending -= charged;
            if applied {
                g.held -= charged;
            }
        }
        self.forget_done(id);
    }

    /// `amount` more was taken into grant `id` (new when it is not known yet) at
    /// `now_ms`, valid for new requests until `valid_until_ms`; it becomes the current
    /// grant. Opening a grant or adding to it restarts the idle clock ([`Book::idle`]);
    /// a renewal of its validity alone (`amount` 0) does not.
    pub fn took(&mut self, id: i64, amount: i64, valid_until_ms: i64, now_ms: i64) {
        let g =
            self.grants.entry(id).or_insert(Grant { held: 0, in_flight: 0, pending: 0, valid_until_ms, closed: false });
        g.held += amount;
        g.valid_until_ms = g.valid_until_ms.max(valid_until_ms);
        if amount > 0 || self.current != Some(id) {
            self.last_take_ms = self.last_take_ms.max(now_ms);
        }
        if self.current != Some(id)
            && let Some(old) = self.current.replace(id)
        {
            self.close(old);
        }
    }

    /// Grant `id` is no longer open in the database (returned, or expired by a reaper):
    /// nothing more is reserved from it; its remaining holds still end normally.
    pub fn close(&mut self, id: i64) {
        if let Some(g) = self.grants.get_mut(&id) {
            g.closed = true;
        }
        if self.current == Some(id) {
            self.current = None;
        }
        self.forget_done(id);
    }

    /// Whether the current grant may be returned at `now_ms`: neither reserved from nor
    /// taken into for `idle_ms`, and nothing in flight or pending.
    pub fn idle(&self, now_ms: i64, idle_ms: i64) -> Option<i64> {
        let (id, g) = self.current()?;
        let used = self.last_use_ms.max(self.last_take_ms);
        (!g.busy() && now_ms - used >= idle_ms).then_some(id)
    }

    /// Whether anything is in flight or pending in any grant.
    pub fn busy(&self) -> bool {
        self.grants.values().any(Grant::busy)
    }

    /// Recent spend rate: estimates reserved per second (the larger of the last full
    /// window and the running one, so a burst counts at once).
    pub fn rate_per_s(&self, now_ms: i64) -> i64 {
        if now_ms - self.window_start_ms >= 2 * RATE_WINDOW_MS {
            return 0;
        }
        let running = if now_ms - self.window_start_ms >= RATE_WINDOW_MS { 0 } else { self.window_sum };
        self.rate_per_s.max(running)
    }

    /// When a request last reserved (unix ms).
    pub fn last_use_ms(&self) -> i64 {
        self.last_use_ms
    }

    fn count(&mut self, estimate: i64, now_ms: i64) {
        if now_ms - self.window_start_ms >= RATE_WINDOW_MS {
            self.rate_per_s = if now_ms - self.window_start_ms >= 2 * RATE_WINDOW_MS { 0 } else { self.window_sum };
            self.window_sum = 0;
            self.window_start_ms = now_ms;
        }
        self.window_sum = self.window_sum.saturating_add(estimate);
        self.last_use_ms = now_ms;
    }

    /// A closed grant with nothing in flight or pending is forgotten.
    fn forget_done(&mut self, id: i64) {
        if self.current != Some(id) && self.grants.get(&id).is_some_and(|g| g.closed && !g.busy()) {
            self.grants.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests;
