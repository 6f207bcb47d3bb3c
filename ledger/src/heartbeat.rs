//! Gateway heartbeats: one row per gateway process with its circuits and weights,
//! upserted every flush and read by the operator for upstream status.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::error::LedgerError;
use crate::ledger::{Ledger, from_unix_ms, unix_ms};

/// One gateway process's view of its upstreams, upserted by `gateway_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Unique per process (e.g. pod name + start time).
    pub gateway_id: String,
    /// When it was taken (stored with millisecond precision).
    pub at: SystemTime,
    /// Per-upstream state.
    pub upstreams: Vec<UpstreamHeartbeat>,
}

/// Circuit and weight of one upstream as one gateway process sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpstreamHeartbeat {
    /// Upstream key.
    pub upstream: String,
    /// `Closed`, `Open` or `HalfOpen`.
    pub circuit: String,
    /// Configured weight × recent success ratio.
    pub effective_weight: f64,
    /// Recent successful attempts.
    pub successes: u64,
    /// Recent failed attempts.
    pub failures: u64,
}

impl Ledger {
    /// Upserts the heartbeat row of `heartbeat.gateway_id` (an older one never replaces
    /// a newer one).
    pub async fn heartbeat(&self, mut heartbeat: Heartbeat) -> Result<(), LedgerError> {
        for u in &mut heartbeat.upstreams {
            // JSON has no NaN/Inf; store something that reads back.
            if !u.effective_weight.is_finite() {
                u.effective_weight = 0.0;
            }
        }
        let json = serde_json::to_string(&heartbeat.upstreams)
            .map_err(|source| LedgerError::BadHeartbeat { gateway_id: heartbeat.gateway_id.clone(), source })?;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO heartbeats (gateway_id, at_ms, upstreams) VALUES ($1, $2, $3) \
             ON CONFLICT (gateway_id) DO UPDATE SET at_ms = excluded.at_ms, \
             upstreams = excluded.upstreams WHERE heartbeats.at_ms <= excluded.at_ms",
        )
        .bind(&heartbeat.gateway_id)
        .bind(unix_ms(heartbeat.at))
        .bind(json)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Heartbeats taken at or after `since`, ordered by gateway id.
    pub async fn heartbeats(&self, since: SystemTime) -> Result<Vec<Heartbeat>, LedgerError> {
        let rows = sqlx::query(
            "SELECT gateway_id, at_ms, upstreams FROM heartbeats WHERE at_ms >= $1 \
             ORDER BY gateway_id",
        )
        .bind(unix_ms(since))
        .fetch_all(&self.inner.reader)
        .await?;
        rows.iter()
            .map(|row| {
                let gateway_id: String = row.try_get(0)?;
                let json: String = row.try_get(2)?;
                let upstreams = serde_json::from_str(&json)
                    .map_err(|source| LedgerError::BadHeartbeat { gateway_id: gateway_id.clone(), source })?;
                Ok(Heartbeat { gateway_id, at: from_unix_ms(row.try_get(1)?), upstreams })
            })
            .collect()
    }
}
