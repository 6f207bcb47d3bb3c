//! A process's limits (docs/design.md §5b): per limited key or account and meter, a
//! **lease** on the meter's current window, taken from the ledger and spent in memory.
//!
//! A request asks each meter that limits it ([`Limiter::admit`]); a meter whose lease
//! covers the ask admits it without the database. One that does not takes more for its
//! lease (one transaction, one request at a time per meter, the others wait for it),
//! sized to about [`LimiterConfig::horizon`] of the meter's recent asks and at most
//! [`LimiterConfig::lease_permille`] of the limit. A take that finds the window full is
//! refused and not retried for [`LimiterConfig::backoff`]: requests over the limit are
//! refused in memory, and a hot key costs the database a few statements a second.
//!
//! Together the leases of every process never hold more than the window allows, so the
//! limit is exact while no process dies. A process that dies holding a lease may have
//! used what it had not reported yet (it reports its use with every take and return):
//! at most one lease, which the reaper gives back at the lease's expiry. That is the
//! bound docs/design.md §5b states.
//!
//! [`Limiter::tick`] (every [`TICK`]) returns what a window that ended, or an idle
//! meter, holds, and renews a lease in use before it runs out or expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::store::{LeaseReturn, LeaseTake, LeaseTaken, WindowState};
use super::{Limits, Meter, Subject, Window};
use crate::error::LedgerError;
use crate::ledger::Ledger;

/// How often the gateway calls [`Limiter::tick`].
pub const TICK: Duration = Duration::from_millis(250);

/// How a [`Limiter`] sizes, keeps and returns leases.
#[derive(Clone, Debug)]
pub struct LimiterConfig {
    /// This process, in the `limit_leases` table (as for balance grants).
    pub holder: String,
    /// How long a lease serves without a renewal.
    pub validity: Duration,
    /// After its validity, how long until the reaper closes a lease whose holder is gone.
    pub slack: Duration,
    /// How much of a meter's recent asks a lease is sized for.
    pub horizon: Duration,
    /// The most a lease takes beyond the request at hand, in thousandths of the limit:
    /// the bound on what a process that dies can have used unreported
    /// (`--limit-lease-max`, default 20 = 2 %).
    pub lease_permille: u32,
    /// A lease unused this long gives back what it holds beyond its use.
    pub idle: Duration,
    /// A take that found the window full is not repeated for this long.
    pub backoff: Duration,
}

impl LimiterConfig {
    /// The defaults for `holder`.
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            validity: Duration::from_secs(10),
            slack: Duration::from_secs(5),
            horizon: Duration::from_secs(2),
            lease_permille: 20,
            idle: Duration::from_secs(2),
            backoff: Duration::from_millis(250),
        }
    }
}

/// What a [`Limiter`] reports, for metrics.
pub trait LimiterObserver: Send + Sync + std::fmt::Debug {
    /// A take for `meter` ended with `result`: `ok`, `short` (the window is full) or
    /// `failed` (the database).
    fn take(&self, _meter: Meter, _result: &'static str) {}
}

/// What one request asks of its meters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    /// The most input plus output tokens it can use.
    pub tokens: i64,
    /// The most it can cost, nanodollars.
    pub spend_nanos: i64,
}

impl Ask {
    fn of(&self, meter: Meter) -> i64 {
        match meter {
            Meter::Requests | Meter::Concurrency => 1,
            Meter::Tokens | Meter::DailyTokens => self.tokens.max(0),
            Meter::DailySpend | Meter::MonthlySpend => self.spend_nanos.max(0),
        }
    }
}

/// Where a subject stands on one meter, for the `x-ratelimit-*` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Which meter.
    pub meter: Meter,
    /// Whose limit.
    pub subject: Subject,
    /// The limit.
    pub limit: i64,
    /// What is left of it now (as this process last saw the other processes' use).
    pub remaining: i64,
    /// How long until what is in use now no longer counts.
    pub reset: Duration,
}

/// A request over a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Where the subject stands on the meter that refused.
    pub standing: Standing,
    /// When to try again.
    pub retry_after: Duration,
    /// What the request asked of the meter.
    pub asked: i64,
}

/// Why [`Limiter::admit`] did not admit.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// Over a limit.
    #[error("over the {} limit", .0.standing.meter.as_str())]
    Refused(Refusal),
    /// The ledger could not be asked for a lease the request needs.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A request's share of its meters. Dropped, it ends the request's concurrency and keeps
/// its token and spend estimates counted; [`Admission::settle`] counts what it used.
#[derive(Debug)]
pub struct Admission {
    parts: Vec<Part>,
    /// Requests and tokens standings, the tightest subject of each.
    pub standings: Vec<Standing>,
}

#[derive(Debug)]
struct Part {
    cell: Arc<Cell>,
    window_start_ms: i64,
    asked: i64,
}

/// The process's limits. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Limiter {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    ledger: Ledger,
    config: LimiterConfig,
    /// Looked up per meter of every limited request: hashed with foldhash, not SipHash
    /// (the keys are the ledger's ids, not a client's text).
    cells: Mutex<HashMap<(Subject, Meter), Arc<Cell>, foldhash::fast::RandomState>>,
    observer: Option<Arc<dyn LimiterObserver>>,
}

/// One meter of one subject in this process.
#[derive(Debug)]
struct Cell {
    subject: Subject,
    meter: Meter,
    state: Mutex<State>,
    /// Held by the one take in progress.
    taking: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct State {
    window: Window,
    limit: i64,
    /// What the lease holds in `window` (as the ledger has it).
    held: i64,
    /// What this process admitted in `window` (concurrency: what is in flight).
    used: i64,
    /// The lease serves until then (unix ms); 0 before the first take.
    valid_until_ms: i64,
    /// The window's use over every process, and the previous window's, at the last take.
    in_use: i64,
    prev: i64,
    /// No take before then (the window was full).
    not_before_ms: i64,
    /// The ledger said the subject has no such limit: admit without counting until then.
    unlimited_until_ms: i64,
    /// Windows that ended with something held: `(start, held, used)`, to return.
    ended: Vec<(i64, i64, i64)>,
    /// Asks per second, smoothed; the current second and its count.
    rate: f64,
    second: i64,
    count: i64,
    last_use_ms: i64,
}

impl State {
    fn new(meter: Meter, limit: i64, now_ms: i64) -> Self {
        Self {
            window: meter.window(now_ms),
            limit,
            held: 0,
            used: 0,
            valid_until_ms: 0,
            in_use: 0,
            prev: 0,
            not_before_ms: 0,
            unlimited_until_ms: 0,
            ended: Vec::new(),
            rate: 0.0,
            second: now_ms / 1000,
            count: 0,
            last_use_ms: now_ms,
        }
    }

    /// Moves to the window holding `now_ms`, keeping the one that ended for return.
    fn roll(&mut self, meter: Meter, now_ms: i64) {
        if now_ms < self.window.end_ms {
            return;
        }
        let next = meter.window(now_ms);
        if self.held > 0 {
            self.ended.push((self.window.start_ms, self.held, self.used));
        }
        // What this process used in the window that ended is the next one's weighted
        // past, at least (the other processes' comes with the next take).
        self.prev = if next.start_ms == self.window.end_ms && next.sliding { self.in_use.max(self.used) } else { 0 };
        self.in_use = 0;
        self.window = next;
        self.held = 0;
        self.used = 0;
        self.valid_until_ms = 0;
        self.not_before_ms = 0;
    }

    fn note_ask(&mut self, now_ms: i64, amount: i64) {
        let second = now_ms / 1000;
        if second != self.second {
            let gap = (second - self.second).clamp(1, 60);
            // Halve per second elapsed: the rate follows a change within a few seconds.
            self.rate = (self.rate + self.count as f64) / 2f64.powi(gap as i32);
            self.second = second;
            self.count = 0;
        }
        self.count += amount;
        self.last_use_ms = now_ms;
    }

    fn covers(&self, now_ms: i64, amount: i64) -> bool {
        now_ms < self.valid_until_ms && self.used + amount <= self.held
    }

    fn standing(&self, subject: Subject, meter: Meter, now_ms: i64) -> Standing {
        let free = self.window.allowance(self.limit, self.prev, now_ms) - self.in_use;
        let remaining = (free + (self.held - self.used).max(0)).clamp(0, self.limit);
        let to_end = (self.window.end_ms - now_ms).max(0);
        let reset_ms = match meter {
            Meter::Concurrency => 0,
            _ if self.in_use > 0 || self.used > 0 => {
                if self.window.sliding {
                    to_end + self.window.len_ms()
                } else {
                    to_end
                }
            }
            _ if self.prev > 0 => to_end,
            _ => 0,
        };
        Standing { meter, subject, limit: self.limit, remaining, reset: Duration::from_millis(reset_ms as u64) }
    }

    /// How long until `amount` more fits, by the window's arithmetic.
    fn wait_ms(&self, meter: Meter, amount: i64, now_ms: i64) -> i64 {
        if meter == Meter::Concurrency {
            return 1000;
        }
        let free = self.window.allowance(self.limit, self.prev, now_ms) - self.in_use + (self.held - self.used).max(0);
        self.window.wait_ms(amount - free, self.prev, now_ms)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Limiter {
    /// A limiter of `ledger`'s limits, reporting to `observer`.
    pub fn new(ledger: Ledger, config: LimiterConfig, observer: Option<Arc<dyn LimiterObserver>>) -> Self {
        Self { shared: Arc::new(Shared { ledger, config, cells: Mutex::new(HashMap::default()), observer }) }
    }

    /// Admits a request held to `limits` (each subject's, e.g. its key's and its
    /// account's) at `now_ms`, or says which limit it is over and when to try again.
    /// Every meter is asked in [`Meter::ALL`] order; a refusal gives back what the
    /// meters before it admitted.
    pub async fn admit(&self, limits: &[(Subject, Limits)], ask: Ask, now_ms: i64) -> Result<Admission, LimitError> {
        let mut admission = Admission { parts: Vec::new(), standings: Vec::new() };
        for meter in Meter::ALL {
            for (subject, limits) in limits {
                let Some(limit) = limits.get(meter) else { continue };
                let asked = ask.of(meter);
                if asked == 0 && meter.is_spend() {
                    continue;
                }
                let cell = self.cell(*subject, meter, limit, now_ms);
                let (window_start_ms, standing) = match self.acquire(&cell, limit, asked, now_ms).await {
                    Ok(admitted) => admitted,
                    Err(e) => {
                        // Refused: the meters before this one did not serve a request.
                        for part in admission.parts.drain(..) {
                            part.cell.adjust(part.window_start_ms, -part.asked);
                        }
                        return Err(e);
                    }
                };
                if matches!(meter, Meter::Requests | Meter::Tokens) {
                    admission.note(standing);
                }
                admission.parts.push(Part { cell, window_start_ms, asked });
            }
        }
        Ok(admission)
    }

    fn cell(&self, subject: Subject, meter: Meter, limit: i64, now_ms: i64) -> Arc<Cell> {
        let mut cells = lock(&self.shared.cells);
        cells
            .entry((subject, meter))
            .or_insert_with(|| {
                Arc::new(Cell {
                    subject,
                    meter,
                    state: Mutex::new(State::new(meter, limit, now_ms)),
                    taking: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// Admits `amount` on one meter: from the lease, else after a take.
    ///
    /// A take is sized on the use it saw when it started; requests the lease covered
    /// while it ran may have used what it counted as spare. When the grown lease does
    /// not cover their use and this request, it takes again with the use as it is now:
    /// admitting anyway would pass what the ledger granted (a spend cap overdrawn).
    async fn acquire(&self, cell: &Cell, limit: i64, amount: i64, now_ms: i64) -> Result<(i64, Standing), LimitError> {
        if let Some(done) = self.try_local(cell, limit, amount, now_ms, true)? {
            return Ok(done);
        }
        let _taking = cell.taking.lock().await;
        loop {
            // Another request's take, or this one's, may cover this request now.
            if let Some(done) = self.try_local(cell, limit, amount, now_ms, false)? {
                return Ok(done);
            }
            let taken = self.take(cell, amount, now_ms, true).await;
            let mut s = lock(&cell.state);
            match taken {
                Ok(LeaseTaken::Unlimited) => {
                    s.unlimited_until_ms = now_ms + 1000;
                    return Ok((s.window.start_ms, s.standing(cell.subject, cell.meter, now_ms)));
                }
                Ok(LeaseTaken::Held(w)) => self.apply(&mut s, w, now_ms),
                Ok(LeaseTaken::Short(w)) => {
                    self.apply(&mut s, w, now_ms);
                    let backoff = ms(self.shared.config.backoff);
                    let wait = s.wait_ms(cell.meter, amount, now_ms).max(1);
                    s.not_before_ms = now_ms + wait.clamp(backoff, 1000);
                    return Err(LimitError::Refused(self.refusal(&s, cell, amount, now_ms)));
                }
                Err(e) => return Err(LimitError::Ledger(e)),
            }
        }
    }

    /// Admits from the lease when it covers `amount`; refuses while a full window's
    /// backoff runs (when `refuse` is set); else `None`: a take is needed.
    fn try_local(
        &self,
        cell: &Cell,
        limit: i64,
        amount: i64,
        now_ms: i64,
        refuse: bool,
    ) -> Result<Option<(i64, Standing)>, LimitError> {
        let mut s = lock(&cell.state);
        s.roll(cell.meter, now_ms);
        if refuse {
            s.note_ask(now_ms, amount);
        }
        s.limit = limit;
        if now_ms < s.unlimited_until_ms {
            return Ok(Some((s.window.start_ms, s.standing(cell.subject, cell.meter, now_ms))));
        }
        if s.covers(now_ms, amount) {
            s.used += amount;
            return Ok(Some((s.window.start_ms, s.standing(cell.subject, cell.meter, now_ms))));
        }
        if refuse && now_ms < s.not_before_ms {
            return Err(LimitError::Refused(self.refusal(&s, cell, amount, now_ms)));
        }
        Ok(None)
    }

    fn refusal(&self, s: &State, cell: &Cell, amount: i64, now_ms: i64) -> Refusal {
        let wait = s.wait_ms(cell.meter, amount, now_ms).max(s.not_before_ms - now_ms).max(1);
        Refusal {
            standing: s.standing(cell.subject, cell.meter, now_ms),
            retry_after: Duration::from_millis(wait as u64),
            asked: amount,
        }
    }

    fn apply(&self, s: &mut State, w: WindowState, now_ms: i64) {
        s.limit = w.limit;
        s.held = w.held;
        s.in_use = w.in_use;
        s.prev = w.prev;
        s.valid_until_ms = now_ms + ms(self.shared.config.validity);
    }

    /// One take for `cell`: enough for its use plus `amount`, and (with `extra`) a
    /// lease's worth more.
    async fn take(&self, cell: &Cell, amount: i64, now_ms: i64, extra: bool) -> Result<LeaseTaken, LedgerError> {
        let c = &self.shared.config;
        let (window, need, want, used) = {
            let s = lock(&cell.state);
            let most = (i128::from(s.limit) * i128::from(c.lease_permille) / 1000).max(1);
            let recent = (s.rate + s.count as f64) * c.horizon.as_secs_f64();
            let more = if extra { (recent.ceil() as i128).clamp(1, most) as i64 } else { 0 };
            (s.window, s.used + amount, s.used + amount + more, s.used)
        };
        let take = LeaseTake {
            subject: cell.subject,
            meter: cell.meter,
            window,
            holder: &c.holder,
            need,
            want,
            used: if cell.meter == Meter::Concurrency { 0 } else { used },
            now_ms,
            expires_at_ms: now_ms + ms(c.validity) + ms(c.slack),
        };
        let result = self.shared.ledger.take_lease(&take).await;
        if let Some(o) = &self.shared.observer {
            o.take(
                cell.meter,
                match &result {
                    Ok(LeaseTaken::Short(_)) => "short",
                    Ok(_) => "ok",
                    Err(_) => "failed",
                },
            );
        }
        result
    }

    /// Returns what ended windows and idle meters hold, renews leases in use that are
    /// half way to their validity, and forgets meters with nothing held. Call every
    /// [`TICK`]; errors are logged and retried at the next tick.
    pub async fn tick(&self, now_ms: i64) {
        let cells: Vec<Arc<Cell>> = lock(&self.shared.cells).values().cloned().collect();
        let c = &self.shared.config;
        for cell in cells {
            let Ok(_taking) = cell.taking.try_lock() else { continue };
            let (ended, idle_return, renew, forget) = {
                let mut s = lock(&cell.state);
                s.roll(cell.meter, now_ms);
                let ended = std::mem::take(&mut s.ended);
                let idle = now_ms - s.last_use_ms >= ms(c.idle);
                let spare = s.held > s.used;
                let idle_return = (idle && spare).then(|| {
                    // No longer admits from what goes back, while it goes back.
                    s.held = s.used;
                    (s.window.start_ms, s.used)
                });
                // A lease in use is renewed before it expires; so is one of concurrency
                // while requests it admitted run, however idle the meter (the reaper
                // would otherwise free their slots).
                let running = cell.meter == Meter::Concurrency && s.used > 0;
                let renew = (running || !idle) && s.held > 0 && s.valid_until_ms - now_ms < ms(c.validity) / 2;
                let forget = idle && s.held == 0 && s.used == 0 && ended.is_empty();
                (ended, idle_return, renew, forget)
            };
            for (start, _held, used) in ended {
                let keep = if cell.meter == Meter::Concurrency { 0 } else { used };
                self.give_back(&cell, start, keep, used, now_ms).await;
            }
            if let Some((start, used)) = idle_return {
                let reported = if cell.meter == Meter::Concurrency { 0 } else { used };
                // Failed, the ledger counts more for this process than it admits from
                // until the lease expires: the safe side.
                self.give_back(&cell, start, used, reported, now_ms).await;
            } else if renew {
                let idle = now_ms - lock(&cell.state).last_use_ms >= ms(c.idle);
                match self.take(&cell, 0, now_ms, !idle).await {
                    Ok(LeaseTaken::Held(w) | LeaseTaken::Short(w)) => {
                        let mut s = lock(&cell.state);
                        if s.window.start_ms == cell.meter.window(now_ms).start_ms {
                            self.apply(&mut s, w, now_ms);
                        }
                    }
                    Ok(LeaseTaken::Unlimited) => {}
                    Err(e) => tracing::warn!(error = %e, meter = cell.meter.as_str(), "renewing a limit lease failed"),
                }
            }
            if forget {
                lock(&self.shared.cells).remove(&(cell.subject, cell.meter));
            }
        }
    }

    async fn give_back(&self, cell: &Cell, start: i64, keep: i64, used: i64, now_ms: i64) {
        let c = &self.shared.config;
        let expires = now_ms + ms(c.validity) + ms(c.slack);
        let back = LeaseReturn {
            subject: cell.subject,
            meter: cell.meter,
            window_start_ms: start,
            holder: &c.holder,
            keep,
            used,
            expires_at_ms: expires,
        };
        if let Err(e) = self.shared.ledger.return_lease(&back).await {
            tracing::warn!(error = %e, meter = cell.meter.as_str(), "returning a limit lease failed");
        }
    }

    /// Returns every lease (at shutdown): what is in use stays counted.
    pub async fn shutdown(&self) {
        let cells: Vec<Arc<Cell>> = lock(&self.shared.cells).drain().map(|(_, c)| c).collect();
        for cell in cells {
            let (start, used, ended) = {
                let mut s = lock(&cell.state);
                (s.window.start_ms, s.used, std::mem::take(&mut s.ended))
            };
            let now_ms = crate::ledger::unix_ms(std::time::SystemTime::now());
            for (start, _, used) in ended {
                self.give_back(&cell, start, used, used, now_ms).await;
            }
            let keep = if cell.meter == Meter::Concurrency { 0 } else { used };
            self.give_back(&cell, start, keep, keep, now_ms).await;
        }
    }

    /// How many meters this process holds state for.
    pub fn meters(&self) -> usize {
        lock(&self.shared.cells).len()
    }
}

impl Admission {
    fn note(&mut self, standing: Standing) {
        match self.standings.iter_mut().find(|s| s.meter == standing.meter) {
            Some(s) if standing.remaining < s.remaining => *s = standing,
            Some(_) => {}
            None => self.standings.push(standing),
        }
    }

    /// An admission that holds nothing (no limits apply).
    pub fn none() -> Self {
        Self { parts: Vec::new(), standings: Vec::new() }
    }

    /// Counts what the request used (tokens, nanodollars) in place of its estimate.
    pub fn settle(mut self, tokens: i64, spend_nanos: i64) {
        let used = Ask { tokens, spend_nanos };
        for part in std::mem::take(&mut self.parts) {
            let meter = part.cell.meter;
            let delta = match meter {
                Meter::Requests => 0,
                Meter::Concurrency => -part.asked,
                _ => used.of(meter) - part.asked,
            };
            part.cell.adjust(part.window_start_ms, delta);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        for part in self.parts.drain(..) {
            if part.cell.meter == Meter::Concurrency {
                part.cell.adjust(part.window_start_ms, -part.asked);
            }
        }
    }
}

impl Cell {
    fn adjust(&self, window_start_ms: i64, delta: i64) {
        let mut s = lock(&self.state);
        if s.window.start_ms == window_start_ms {
            s.used = (s.used + delta).max(0);
        }
    }
}

#[cfg(test)]
mod tests;
