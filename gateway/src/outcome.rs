//! What one upstream attempt came to, and whether the request may move on.
//!
//! Retry safety is data (docs/contributing.md (conventions, rule 4)): the attempt that fails decides its outcome
//! label, whether another candidate may be tried, and whether the upstream may be
//! tried again in a later walk of the same request.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// Outcome label of an attempt, as in `sluice_upstream_attempts_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// 2xx.
    Ok,
    /// A 4xx other than 429 (408 included).
    Http4xx,
    /// Throttled.
    Http429,
    /// Server error.
    Http5xx,
    /// TCP or TLS connect failed.
    Connect,
    /// No byte of the body within the first-byte watchdog.
    FirstByteTimeout,
    /// A gap between stream chunks longer than the idle timeout.
    IdleTimeout,
    /// The connection broke.
    Reset,
    /// The candidate's share of the deadline ran out.
    Budget,
}

impl Outcome {
    /// Every outcome, for pre-registering metric series.
    pub const ALL: [Outcome; 9] = [
        Outcome::Ok,
        Outcome::Http4xx,
        Outcome::Http429,
        Outcome::Http5xx,
        Outcome::Connect,
        Outcome::FirstByteTimeout,
        Outcome::IdleTimeout,
        Outcome::Reset,
        Outcome::Budget,
    ];

    /// The label text.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Http4xx => "http_4xx",
            Outcome::Http429 => "http_429",
            Outcome::Http5xx => "http_5xx",
            Outcome::Connect => "connect",
            Outcome::FirstByteTimeout => "first_byte_timeout",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::Reset => "reset",
            Outcome::Budget => "budget",
        }
    }

    /// Outcome of an upstream HTTP status: 2xx is `Ok`; anything else that is neither
    /// 429 nor 5xx counts as `http_4xx` (a 3xx is passed through like a client error).
    pub fn of_status(status: StatusCode) -> Outcome {
        match status.as_u16() {
            200..=299 => Outcome::Ok,
            429 => Outcome::Http429,
            500..=599 => Outcome::Http5xx,
            _ => Outcome::Http4xx,
        }
    }

    /// A silent upstream is not tried again in the same request: retrying it only
    /// multiplies the wait (docs/design.md §4.2).
    pub fn timed_out(self) -> bool {
        matches!(self, Outcome::FirstByteTimeout | Outcome::Budget | Outcome::IdleTimeout)
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// A failed attempt.
#[derive(Debug)]
pub struct AttemptError {
    /// The outcome label.
    pub outcome: Outcome,
    /// Human detail for logs and the 503 message, e.g. `503 Service Unavailable`.
    pub detail: String,
    /// May the next candidate be tried?
    pub retryable: bool,
    /// Throttling hint from the upstream (Retry-After and friends).
    pub retry_after: Option<Duration>,
    /// The upstream said it is overloaded (Anthropic's 529): like throttling, it says
    /// "come back later" rather than "broken" (docs/design.md §12).
    pub overloaded: bool,
    /// For a non-retryable HTTP answer: passed to the client unchanged.
    pub passthrough: Option<Passthrough>,
    /// Nothing was sent: the request cannot be expressed in this candidate's protocol
    /// (a member it lacks). The walk passes the candidate over; when no candidate could
    /// take the request, `passthrough` is the 400 that names the member.
    pub refused: bool,
}

/// An upstream answer passed to the client as it is.
#[derive(Debug, Clone)]
pub struct Passthrough {
    /// Upstream status.
    pub status: StatusCode,
    /// Upstream headers worth keeping (content type).
    pub headers: HeaderMap,
    /// Upstream body.
    pub body: Bytes,
}

impl AttemptError {
    /// A retryable failure without an HTTP answer.
    pub fn transport(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: detail.into(),
            retryable: true,
            retry_after: None,
            overloaded: false,
            passthrough: None,
            refused: false,
        }
    }
}
