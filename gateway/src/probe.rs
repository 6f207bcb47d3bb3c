//! Synthetic probes (`Upstream.spec.probe`): a periodic `GET {baseUrl}{path}` per
//! upstream that asks for it.
//!
//! A failed probe counts against the upstream like a failed attempt, so a dead
//! endpoint is demoted even while no traffic reaches it. A passing probe proves only
//! that the endpoint answers, not that the model works (a model-level outage still
//! answers `/models`), so it does not clear failures: recovery stays with the real
//! trial requests of the dispatcher (DESIGN §4.1).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::Gateway;
use crate::dispatch::{attempt, record_attempt};
use crate::outcome::Outcome;

/// Runs probes until aborted; checks every second which are due.
pub async fn run(gw: Arc<Gateway>) {
    let mut last: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(rt) = gw.current.get() else { continue };
        for up in rt.upstreams.values() {
            let Some(probe) = &up.cfg.probe else { continue };
            let due = last.get(&up.cfg.key).is_none_or(|t| t.elapsed() >= Duration::from_millis(probe.interval_ms));
            if !due {
                continue;
            }
            last.insert(up.cfg.key.clone(), Instant::now());
            let url = format!("{}{}", up.cfg.base_url, probe.path);
            let mut request = up.client.get(url).timeout(Duration::from_millis(up.cfg.connect_timeout_ms.max(1000) * 2));
            if let Some((name, value)) = gw.secrets.header(&up.cfg.key) {
                request = request.header(name, value);
            }
            let outcome = match request.send().await {
                Ok(r) if r.status().is_server_error() => Outcome::Http5xx,
                Ok(_) => Outcome::Ok,
                Err(e) if e.is_timeout() => Outcome::Budget,
                Err(e) => attempt::classify(e).outcome,
            };
            if outcome != Outcome::Ok {
                tracing::warn!(upstream = %up.cfg.name, reason = outcome.as_str(), "synthetic probe failed");
                record_attempt(up, &gw.settings, &gw.sli, outcome, false, None, None);
            }
        }
    }
}
