//! Open-loop load for soak and crash tests: requests are started at a fixed rate
//! whatever the latency (a closed loop would slow down exactly when the gateway does
//! and hide it), bounded in count and time, to 127.0.0.1 only.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

/// One request as the client saw it.
#[derive(Clone, Debug, Default)]
pub struct Shot {
    /// Sequence number.
    pub n: u64,
    /// When it was started, from the start of the run.
    pub at: Duration,
    /// From sending to the end of the answer.
    pub latency: Duration,
    /// HTTP status, if an answer came.
    pub status: Option<u16>,
    /// A complete, successful answer (for streams: `[DONE]` and no error event).
    pub ok: bool,
    /// `x-sluice-upstream`.
    pub upstream: Option<String>,
    /// `x-request-id` sent.
    pub request_id: String,
    /// Usage the client received, if any.
    pub usage: Option<(u64, u64)>,
    /// What went wrong, for messages.
    pub error: Option<String>,
}

/// Starts `shoot(n)` every `1/rate` seconds for `run`, with at most `max_in_flight`
/// requests outstanding (a request that would exceed it is counted as a client-side
/// failure, so an overloaded gateway shows up instead of slowing the load down).
/// Returns every shot, in start order.
pub async fn open_loop<F, Fut>(rate: f64, run: Duration, max_in_flight: usize, shoot: F) -> Vec<Shot>
where
    F: Fn(u64, Duration) -> Fut,
    Fut: Future<Output = Shot> + Send + 'static,
{
    let period = Duration::from_secs_f64(1.0 / rate);
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut running: JoinSet<Shot> = JoinSet::new();
    let mut done = Vec::new();
    let total = (run.as_secs_f64() * rate).round() as u64;
    for n in 0..total {
        tick.tick().await;
        while let Some(Ok(shot)) = running.try_join_next() {
            done.push(shot);
        }
        let at = t0.elapsed();
        if running.len() >= max_in_flight {
            done.push(Shot {
                n,
                at,
                error: Some(format!("over {max_in_flight} requests in flight")),
                ..Shot::default()
            });
            continue;
        }
        running.spawn(shoot(n, at));
    }
    while let Some(shot) = running.join_next().await {
        if let Ok(shot) = shot {
            done.push(shot);
        }
    }
    done.sort_by_key(|s| s.n);
    done
}

/// The `p`-quantile (0..=1) of some durations, nearest rank.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut v = samples.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((v.len() as f64) * p).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
