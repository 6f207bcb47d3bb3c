//! The idle limit of a relayed stream (docs/design.md §2, `timeouts.idle`): fixed, or with
//! `auto` following the upstream's observed gaps between chunks, re-read at every gap so
//! that a stream's own pace counts as soon as enough of it was seen.

use std::sync::Arc;
use std::time::Duration;

use crate::config::UpstreamHandle;
use crate::health::Health;

/// How long a stream may stay silent, and where its gaps are recorded.
#[derive(Clone)]
pub struct IdleWatch {
    health: Arc<Health>,
    auto: bool,
    cap: Duration,
}

impl IdleWatch {
    /// The watch of a stream from `upstream`.
    pub fn of(upstream: &UpstreamHandle) -> Self {
        Self::new(upstream.health.clone(), upstream.cfg.idle_auto, Duration::from_millis(upstream.cfg.idle_timeout_ms))
    }

    /// A watch over `health`'s gaps: `cap` as is, or with `auto` at most `cap`.
    pub fn new(health: Arc<Health>, auto: bool, cap: Duration) -> Self {
        Self { health, auto, cap }
    }

    /// The limit for the next gap.
    pub fn limit(&self) -> Duration {
        self.health.idle_limit(self.auto, self.cap)
    }

    /// A gap that ended with a chunk (kept only where a limit follows the gaps: the
    /// upstream's `idle` is `auto`, and only its own streams read them).
    pub fn gap(&self, gap: Duration) {
        if self.auto {
            self.health.record_gap(gap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_own_pace_tightens_an_auto_limit_and_never_a_fixed_one() {
        let health = Arc::new(Health::default());
        let auto = IdleWatch::new(health.clone(), true, Duration::from_secs(60));
        let fixed = IdleWatch::new(health, false, Duration::from_secs(60));
        assert_eq!(auto.limit(), Duration::from_secs(60));
        for _ in 0..30 {
            auto.gap(Duration::from_millis(20));
        }
        // 10 × 20 ms is under the floor.
        assert_eq!(auto.limit(), Duration::from_secs(1));
        assert_eq!(fixed.limit(), Duration::from_secs(60));
        // A steady pace stays well inside its own limit: it cannot trip it.
        for _ in 0..100 {
            auto.gap(Duration::from_millis(300));
        }
        assert_eq!(auto.limit(), Duration::from_secs(3));
    }
}
