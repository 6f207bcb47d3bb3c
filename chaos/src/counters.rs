//! Exact, lock-free counters of what the chaos upstream did.
//!
//! Tests use them to count how often an upstream was really called, so every
//! inference request is counted once on arrival, before any delay or fault.
//! Control endpoints (`/_chaos`) and `GET /models` are not counted as requests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use serde::{Deserialize, Serialize};

use super::protocol::Protocol;

/// Lowest HTTP status with a slot in [`Counters::by_status`].
const STATUS_MIN: u16 = 100;
/// Number of status slots: 100..=599.
const STATUS_SLOTS: usize = 500;

/// A point-in-time copy of the counters, as served by `GET /_chaos`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Inference requests received (chat, completions, embeddings, and every
    /// native protocol's calls).
    pub requests: u64,
    /// Responses by HTTP status, counted when the status line is decided.
    /// Hung requests and resets before headers have no status and are absent.
    pub by_status: BTreeMap<u16, u64>,
    /// SSE streams whose `200` headers were sent.
    pub streams_started: u64,
    /// Connections aborted on purpose (before headers or mid-body).
    pub resets: u64,
    /// Requests or streams that started to hang on purpose.
    pub hangs: u64,
    /// Inference requests whose response is not finished yet (hung ones included).
    pub in_flight: u64,
    /// `GET /models` requests (kept apart so probes do not skew `requests`).
    pub models: u64,
    /// Inference requests by protocol (only protocols seen); they add up to
    /// `requests`.
    #[serde(default)]
    pub by_protocol: BTreeMap<Protocol, u64>,
    /// Access tokens issued by the fake token and metadata endpoints.
    #[serde(default)]
    pub tokens_issued: u64,
    /// Embedding inputs received, over all embeddings requests.
    #[serde(default)]
    pub embedding_inputs: u64,
    /// TCP connections accepted: with requests, how well a client reuses them.
    #[serde(default)]
    pub connections: u64,
    /// Answers that searched the web (Anthropic's web search tool was declared).
    #[serde(default)]
    pub web_searches: u64,
}

/// Shared counters behind [`super::ChaosState`].
pub(crate) struct Counters {
    requests: AtomicU64,
    by_status: Box<[AtomicU64]>,
    streams_started: AtomicU64,
    resets: AtomicU64,
    hangs: AtomicU64,
    in_flight: AtomicU64,
    models: AtomicU64,
    by_protocol: [AtomicU64; Protocol::ALL.len()],
    tokens_issued: AtomicU64,
    embedding_inputs: AtomicU64,
    connections: AtomicU64,
    web_searches: AtomicU64,
}

/// Marks one inference request as in flight until dropped.
///
/// It moves into a response body when there is one, so a stream counts as in
/// flight until its last byte was written or the client went away.
pub(crate) struct InFlight {
    counters: Arc<Counters>,
}

impl Counters {
    pub(crate) fn new() -> Self {
        Self {
            requests: AtomicU64::new(0),
            by_status: (0..STATUS_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            streams_started: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            hangs: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            models: AtomicU64::new(0),
            by_protocol: std::array::from_fn(|_| AtomicU64::new(0)),
            tokens_issued: AtomicU64::new(0),
            embedding_inputs: AtomicU64::new(0),
            web_searches: AtomicU64::new(0),
            connections: AtomicU64::new(0),
        }
    }

    pub(crate) fn connection(&self) {
        self.connections.fetch_add(1, SeqCst);
    }

    /// Counts a new inference request; returns its 1-based sequence number
    /// (used in response ids) and the in-flight guard.
    pub(crate) fn begin(self: &Arc<Self>, protocol: Protocol) -> (u64, InFlight) {
        self.by_protocol[protocol.index()].fetch_add(1, SeqCst);
        let seq = self.requests.fetch_add(1, SeqCst) + 1;
        self.in_flight.fetch_add(1, SeqCst);
        let guard = InFlight { counters: Arc::clone(self) };
        (seq, guard)
    }

    pub(crate) fn status(&self, status: u16) {
        if let Some(counter) = self.slot(status) {
            counter.fetch_add(1, SeqCst);
        }
    }

    pub(crate) fn stream_started(&self) {
        self.streams_started.fetch_add(1, SeqCst);
    }

    pub(crate) fn reset(&self) {
        self.resets.fetch_add(1, SeqCst);
    }

    pub(crate) fn hang(&self) {
        self.hangs.fetch_add(1, SeqCst);
    }

    pub(crate) fn model_list(&self) {
        self.models.fetch_add(1, SeqCst);
    }

    pub(crate) fn token_issued(&self) {
        self.tokens_issued.fetch_add(1, SeqCst);
    }

    pub(crate) fn web_search(&self) {
        self.web_searches.fetch_add(1, SeqCst);
    }

    pub(crate) fn embedding_inputs(&self, n: u64) {
        self.embedding_inputs.fetch_add(n, SeqCst);
    }

    pub(crate) fn requests_for(&self, protocol: Protocol) -> u64 {
        self.by_protocol[protocol.index()].load(SeqCst)
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(SeqCst)
    }

    pub(crate) fn requests_with_status(&self, status: u16) -> u64 {
        self.slot(status).map_or(0, |c| c.load(SeqCst))
    }

    fn slot(&self, status: u16) -> Option<&AtomicU64> {
        let slot = status.checked_sub(STATUS_MIN)?;
        self.by_status.get(usize::from(slot))
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(SeqCst)
    }

    pub(crate) fn snapshot(&self) -> CounterSnapshot {
        let by_status = (STATUS_MIN..)
            .zip(self.by_status.iter())
            .filter_map(|(status, c)| {
                let n = c.load(SeqCst);
                (n > 0).then_some((status, n))
            })
            .collect();
        CounterSnapshot {
            requests: self.requests.load(SeqCst),
            by_status,
            streams_started: self.streams_started.load(SeqCst),
            resets: self.resets.load(SeqCst),
            hangs: self.hangs.load(SeqCst),
            in_flight: self.in_flight.load(SeqCst),
            models: self.models.load(SeqCst),
            by_protocol: Protocol::ALL
                .into_iter()
                .filter_map(|p| {
                    let n = self.requests_for(p);
                    (n > 0).then_some((p, n))
                })
                .collect(),
            tokens_issued: self.tokens_issued.load(SeqCst),
            embedding_inputs: self.embedding_inputs.load(SeqCst),
            web_searches: self.web_searches.load(SeqCst),
            connections: self.connections.load(SeqCst),
        }
    }

    /// Zeroes every counter but `in_flight`, which tracks live requests.
    pub(crate) fn clear(&self) {
        self.requests.store(0, SeqCst);
        for c in self.by_status.iter() {
            c.store(0, SeqCst);
        }
        self.streams_started.store(0, SeqCst);
        self.resets.store(0, SeqCst);
        self.hangs.store(0, SeqCst);
        self.models.store(0, SeqCst);
        for c in &self.by_protocol {
            c.store(0, SeqCst);
        }
        self.tokens_issued.store(0, SeqCst);
        self.embedding_inputs.store(0, SeqCst);
        self.web_searches.store(0, SeqCst);
        self.connections.store(0, SeqCst);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counters.in_flight.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_lists_only_seen_statuses() {
        let c = Arc::new(Counters::new());
        let (seq, guard) = c.begin(Protocol::Anthropic);
        assert_eq!(seq, 1);
        c.status(503);
        c.status(503);
        c.status(200);
        c.status(42); // out of range: ignored, never a panic
        let snap = c.snapshot();
        assert_eq!(snap.requests, 1);
        assert_eq!(snap.in_flight, 1);
        assert_eq!(snap.by_status, BTreeMap::from([(200, 1), (503, 2)]));
        assert_eq!(snap.by_protocol, BTreeMap::from([(Protocol::Anthropic, 1)]));
        drop(guard);
        assert_eq!(c.in_flight(), 0);
    }
}
