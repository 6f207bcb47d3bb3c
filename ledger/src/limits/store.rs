//! The database side of limit leases (docs/design.md §5b), one SQL text for both
//! databases: take (grow this process's slice of a window, or only report its use and
//! extend it), return, the reaper, and a window's use.
//!
//! A take locks the subject's `limits` row first, so the takes of every process on one
//! subject are serial and what they hold of a window together never passes the
//! allowance. Returns and the reaper only lower a lease, which cannot pass it either,
//! and take no lock.

use sqlx::Row;

use super::{Meter, Subject, Window};
use crate::error::LedgerError;
use crate::ledger::Ledger;

/// A request to grow (or keep) one process's lease on one window.
#[derive(Clone, Debug)]
pub(crate) struct LeaseTake<'a> {
    pub subject: Subject,
    pub meter: Meter,
    pub window: Window,
    pub holder: &'a str,
    /// Nothing is taken unless the lease can reach this (its use plus the request).
    pub need: i64,
    /// What the lease should hold: taken when free, else what is free (at least `need`).
    pub want: i64,
    /// What the holder has used of the lease in this window; the reaper keeps it counted.
    pub used: i64,
    pub now_ms: i64,
    pub expires_at_ms: i64,
}

/// What a process gives back of one lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseReturn<'a> {
    pub subject: Subject,
    pub meter: Meter,
    pub window_start_ms: i64,
    pub holder: &'a str,
    /// What the lease keeps.
    pub keep: i64,
    /// What the holder used of it (the reaper keeps this counted).
    pub used: i64,
    /// Until when a lease that keeps more than its use stays open.
    pub expires_at_ms: i64,
}

/// What a take found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseTaken {
    /// The lease holds `held` now (`need` was covered).
    Held(WindowState),
    /// Less than `need` is free: the lease was only extended (it still holds `held`).
    Short(WindowState),
    /// The subject has no such limit (any more): nothing was written.
    Unlimited,
}

/// A window as a take left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowState {
    /// The limit, as stored now.
    pub limit: i64,
    /// What this holder's lease holds.
    pub held: i64,
    /// What every lease of the window holds (this one included).
    pub in_use: i64,
    /// The previous window's use (0 unless sliding).
    pub prev: i64,
}

impl Ledger {
    /// Grows, or reports on and extends, one lease (one transaction).
    pub(crate) async fn take_lease(&self, t: &LeaseTake<'_>) -> Result<LeaseTaken, LedgerError> {
        let mut tx = self.begin_write().await?;
        let lock = format!(
            "SELECT {} FROM limits WHERE subject = $1 AND subject_id = $2{}",
            t.meter.column(),
            if self.is_postgres() { " FOR UPDATE" } else { "" }
        );
        let limit: Option<Option<i64>> =
            sqlx::query_scalar(&lock).bind(t.subject.kind()).bind(t.subject.id()).fetch_optional(&mut *tx).await?;
        let Some(Some(limit)) = limit else {
            tx.rollback().await?;
            return Ok(LeaseTaken::Unlimited);
        };
        let prev_start = if t.window.sliding { t.window.prev_start_ms() } else { t.window.start_ms };
        let row = sqlx::query(
            "SELECT \
               CAST(COALESCE(SUM(CASE WHEN window_start_ms = $4 THEN amount ELSE 0 END), 0) AS BIGINT), \
               CAST(COALESCE(SUM(CASE WHEN window_start_ms = $5 AND window_start_ms <> $4 THEN amount ELSE 0 END), 0) AS BIGINT), \
               CAST(COALESCE(SUM(CASE WHEN window_start_ms = $4 AND holder = $6 THEN amount ELSE 0 END), 0) AS BIGINT) \
             FROM limit_leases WHERE subject = $1 AND subject_id = $2 AND meter = $3 AND window_start_ms IN ($4, $5)",
        )
        .bind(t.subject.kind())
        .bind(t.subject.id())
        .bind(t.meter.as_str())
        .bind(t.window.start_ms)
        .bind(prev_start)
        .bind(t.holder)
        .fetch_one(&mut *tx)
        .await?;
        let (in_use, prev, mine): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let free = t.window.allowance(limit, prev, t.now_ms) - in_use;
        let need = (t.need - mine).max(0);
        let want = (t.want - mine).max(need);
        let grant = if free >= need { want.min(free).max(need) } else { 0 };
        // A holder that used more than it held (usage above its estimate) is counted
        // for all of it.
        let held = (mine + grant).max(t.used);
        sqlx::query(
            "INSERT INTO limit_leases (subject, subject_id, meter, window_start_ms, window_end_ms, holder, amount, used, expires_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (subject, subject_id, meter, window_start_ms, holder) \
             DO UPDATE SET amount = excluded.amount, used = excluded.used, expires_at_ms = excluded.expires_at_ms",
        )
        .bind(t.subject.kind())
        .bind(t.subject.id())
        .bind(t.meter.as_str())
        .bind(t.window.start_ms)
        .bind(t.window.end_ms)
        .bind(t.holder)
        .bind(held)
        .bind(t.used.max(0))
        .bind(t.expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let state = WindowState { limit, held, in_use: in_use - mine + held, prev };
        Ok(if free >= need { LeaseTaken::Held(state) } else { LeaseTaken::Short(state) })
    }

    /// Gives back all of a lease but `keep` (what is in use: the use of a windowed
    /// meter, the requests in flight of concurrency), reporting `used`. A lease that
    /// keeps no more than its use is closed; one that keeps more stays open until
    /// `expires_at_ms`.
    pub(crate) async fn return_lease(&self, r: &LeaseReturn<'_>) -> Result<(), LedgerError> {
        let LeaseReturn { subject, meter, window_start_ms, holder, keep, used, expires_at_ms } = *r;
        let expires = (keep > used).then_some(expires_at_ms);
        sqlx::query(
            "UPDATE limit_leases SET amount = $6, used = $7, expires_at_ms = $8 \
             WHERE subject = $1 AND subject_id = $2 AND meter = $3 AND window_start_ms = $4 AND holder = $5",
        )
        .bind(subject.kind())
        .bind(subject.id())
        .bind(meter.as_str())
        .bind(window_start_ms)
        .bind(holder)
        .bind(keep.max(used).max(0))
        .bind(used.max(0))
        .bind(expires)
        .execute(&self.inner.writer)
        .await?;
        Ok(())
    }

    /// Closes every lease whose holder stopped renewing it (a killed process): from
    /// `expires_at_ms` on, it counts only what its holder last reported used. Deletes
    /// leases no window needs any more. Returns how many it closed.
    pub(crate) async fn reap_limit_leases(&self, now_ms: i64) -> Result<u64, LedgerError> {
        let closed = sqlx::query(
            "UPDATE limit_leases SET amount = used, expires_at_ms = NULL \
             WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= $1",
        )
        .bind(now_ms)
        .execute(&self.inner.writer)
        .await?
        .rows_affected();
        // A window is needed until the one after it ended (a sliding window weighs it).
        sqlx::query(
            "DELETE FROM limit_leases WHERE expires_at_ms IS NULL \
             AND (window_end_ms <= $1 - (window_end_ms - window_start_ms) OR amount = 0)",
        )
        .bind(now_ms)
        .execute(&self.inner.writer)
        .await?;
        if closed > 0 {
            tracing::info!(closed, "closed limit leases of processes that did not return them");
        }
        Ok(closed)
    }

    /// What every lease of `window` holds, and of the window before it (sliding only).
    pub(crate) async fn window_use(
        &self,
        subject: Subject,
        meter: Meter,
        window: &Window,
    ) -> Result<(i64, i64), LedgerError> {
        let prev_start = if window.sliding { window.prev_start_ms() } else { window.start_ms };
        let row = sqlx::query(
            "SELECT \
               CAST(COALESCE(SUM(CASE WHEN window_start_ms = $4 THEN amount ELSE 0 END), 0) AS BIGINT), \
               CAST(COALESCE(SUM(CASE WHEN window_start_ms = $5 AND window_start_ms <> $4 THEN amount ELSE 0 END), 0) AS BIGINT) \
             FROM limit_leases WHERE subject = $1 AND subject_id = $2 AND meter = $3 AND window_start_ms IN ($4, $5)",
        )
        .bind(subject.kind())
        .bind(subject.id())
        .bind(meter.as_str())
        .bind(window.start_ms)
        .bind(prev_start)
        .fetch_one(&self.inner.reader)
        .await?;
        Ok((row.try_get(0)?, row.try_get(1)?))
    }
}
