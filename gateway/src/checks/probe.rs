//! Synthetic probes (`Upstream.spec.probe`): a periodic `GET {baseUrl}{path}` per
//! upstream that asks for it.
//!
//! A failed probe counts against the upstream like a failed attempt, so a dead
//! endpoint is demoted even while no traffic reaches it. A passing probe proves only
//! that the endpoint answers, not that the model works (a model-level outage still
//! answers `/models`), so it does not clear failures: recovery stays with the real
//! trial requests of the dispatcher (docs/design.md §4.1).

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::{BodyExt, Full};

use crate::attempt::{self, Books};
use crate::config::source::Secrets;
use crate::config::{Current, UpstreamHandle};
use crate::outcome::Outcome;

/// Runs probes of the upstreams of the `current` config until aborted, booking their
/// failures into `books`; checks every second which are due.
pub async fn run(current: &Current, books: &Books) {
    let mut last: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(rt) = current.get() else { continue };
        for up in rt.upstreams.values() {
            let Some(probe) = &up.cfg.probe else { continue };
            let due = last.get(&up.cfg.key).is_none_or(|t| t.elapsed() >= Duration::from_millis(probe.interval_ms));
            if !due {
                continue;
            }
            last.insert(up.cfg.key.clone(), Instant::now());
            let outcome = match probe_once(&books.secrets, up, &probe.path).await {
                Ok(outcome) => outcome,
                Err(detail) => {
                    tracing::warn!(upstream = %up.cfg.name, %detail, "synthetic probe could not be sent");
                    continue;
                }
            };
            if outcome != Outcome::Ok {
                tracing::warn!(upstream = %up.cfg.name, reason = outcome.as_str(), "synthetic probe failed");
                attempt::record(up, books, outcome, false, None, None);
            }
        }
    }
}

/// One probe: `GET {baseUrl}{path}` with the upstream's credentials, within twice the
/// connect timeout (at least 2s). `Err` when the URL cannot be built.
async fn probe_once(secrets: &Secrets, up: &UpstreamHandle, path: &str) -> Result<Outcome, String> {
    let uri = crate::config::uri(&format!("{}{}", up.cfg.base_url, path)).map_err(|e| e.to_string())?;
    let mut request = http::Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = uri;
    request.headers_mut().insert(http::header::ACCEPT, HeaderValue::from_static("application/json"));
    if let Some((name, value)) = secrets.header(&up.cfg.key) {
        request.headers_mut().insert(name, value);
    }
    let limit = Duration::from_millis(up.cfg.connect_timeout_ms.max(1000) * 2);
    let exchange = async {
        let response = up.client.request(request).await?;
        let status = response.status();
        // Read the body so that the connection goes back to the pool.
        let _ = response.into_body().collect().await;
        Ok::<_, crate::egress::ClientError>(status)
    };
    Ok(match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(status)) if status.is_server_error() => Outcome::Http5xx,
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err(e)) => attempt::classify(&e).outcome,
        Err(_) => Outcome::Budget,
    })
}
