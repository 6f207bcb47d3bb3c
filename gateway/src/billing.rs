//! Money, against the ledger (docs/design.md §5): the account that pays for a request
//! ([`authenticate`]), the reservation of the most it can cost ([`reserve`]), and its
//! settlement once the answer is known ([`settle`]).

use http::HeaderMap;
use http::header;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use sluice_crds::snapshot::Metered;
use sluice_ledger::limits::{Admission, Ask, Limiter};
use sluice_ledger::{AccountRef, Biller, Hold, Ledger, LedgerError, format_usd};

use crate::config::Route;
use crate::error::ApiError;
use crate::headers::RequestId;
use crate::request::ClientRequest;
use crate::telemetry::metrics::{LimitLabel, Metrics};
use keys::KeyCache;

pub mod keys;
pub mod limits;
mod settle;

pub use settle::settle;

/// How clients authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// `Authorization: Bearer sk-sluice-…` keys from the ledger; requests are billed.
    Keys,
    /// No keys and no billing; SLI rollups still flow.
    None,
}

/// Who pays for a request and what they may still spend: client auth, the key cache,
/// the ledger, balance grants (docs/design.md §5a) and limits (§5b), with the metrics
/// they keep.
pub struct Billing {
    /// Client auth.
    pub auth: AuthMode,
    /// Key → account answers of the ledger, briefly (docs/design.md §5a).
    pub keys: KeyCache,
    /// The ledger, if any.
    pub ledger: Option<Ledger>,
    /// Balance grants and the settlement writer; `None` without billing.
    pub biller: Option<Biller>,
    /// Limits of keys and accounts; `None` without a ledger.
    pub limiter: Option<Limiter>,
    /// `sluice_reservations_open`.
    reservations_open: Gauge,
    /// `sluice_limit_rejections_total`.
    limit_rejections: Family<LimitLabel, Counter>,
}

impl Billing {
    /// Billing against `ledger` (none: nothing is billed), without grants or limits
    /// yet; its metrics count into `metrics`.
    pub fn new(auth: AuthMode, ledger: Option<Ledger>, metrics: &Metrics) -> Self {
        // Only keys need the change feed (it costs a LISTEN connection on Postgres).
        let keys = KeyCache::watching(ledger.as_ref().filter(|_| auth == AuthMode::Keys));
        Self {
            auth,
            keys,
            ledger,
            biller: None,
            limiter: None,
            reservations_open: metrics.reservations_open.clone(),
            limit_rejections: metrics.limits.rejections.clone(),
        }
    }
}

/// The account of the request's API key (`None` with `--auth none`), from the gateway's
/// key cache ([`keys::KeyCache`]: at most 1 s old, and dropped at once when the ledger's
/// change feed says the key was created or revoked).
pub async fn authenticate(billing: &Billing, headers: &HeaderMap) -> Result<Option<AccountRef>, ApiError> {
    if billing.auth == AuthMode::None {
        return Ok(None);
    }
    let Some(ledger) = &billing.ledger else {
        return Err(ApiError::NotReady("auth is keys but no ledger is configured".into()));
    };
    // `x-api-key` is how Anthropic's clients send it (docs/design.md §12).
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            ApiError::InvalidApiKey("missing API key: send Authorization: Bearer sk-sluice-… (or x-api-key)".into())
        })?;
    match billing.keys.authenticate(ledger, key).await {
        Ok(Some(account)) => Ok(Some(account)),
        Ok(None) => Err(ApiError::InvalidApiKey("incorrect API key provided".into())),
        Err(e) => Err(ledger_failure("authenticating the API key", e)),
    }
}

/// The most a request can use: tokens (its input bound plus the output it may ask for)
/// and cost: on its route's dearest candidate, with the most web searches it allows,
/// plus `from_cache` answers at the route's cache price, the most a partial cache hit
/// can add (docs/design.md §5, §13).
pub fn ask(route: &Route, req: &ClientRequest, from_cache: u64) -> Ask {
    let output = req.reserved_output(route.cfg.default_max_tokens);
    let most =
        Metered { input_uncached: req.input_bound, output, web_searches: req.web_searches, ..Metered::default() };
    let estimate = route
        .candidates
        .iter()
        .filter_map(|c| c.cfg.price)
        .map(|p| p.cost_of(&most))
        .max()
        .unwrap_or(0)
        .saturating_add(route.cache.price_nanos.saturating_mul(from_cache));
    Ask {
        tokens: i64::try_from(req.input_bound.saturating_add(output)).unwrap_or(i64::MAX),
        spend_nanos: i64::try_from(estimate).unwrap_or(i64::MAX),
    }
}

/// Reserves the most the request can cost on any candidate, `ask.spend_nanos`
/// (docs/design.md §5).
pub async fn reserve(
    billing: &Billing,
    route: &Route,
    req: &ClientRequest,
    account: &AccountRef,
    request_id: &RequestId,
    ask: Ask,
) -> Result<Option<Held>, ApiError> {
    let output = req.reserved_output(route.cfg.default_max_tokens);
    let estimate = ask.spend_nanos;
    if estimate == 0 {
        return Ok(None);
    }
    let Some(biller) = &billing.biller else { return Ok(None) };
    // From the account's balance grant in memory (docs/design.md §5a); the biller runs
    // its database work in tasks of its own, so a client that goes away cancels none.
    // A hold nobody waits for any more is released when dropped.
    match biller.reserve(account.id, estimate, request_id.as_str()).await {
        Ok(r) => Ok(Some(Held::new(r, &billing.reservations_open))),
        Err(LedgerError::InsufficientFunds { available_nanos, needed_nanos }) => {
            let searches = match req.web_searches {
                0 => String::new(),
                n => format!(", {n} web searches"),
            };
            Err(ApiError::InsufficientQuota(format!(
                "insufficient quota: this request may cost up to ${} ({} input bytes, max_tokens {output}{searches}) and account {:?} has ${} available",
                format_usd(needed_nanos),
                req.input_bound,
                account.name,
                format_usd(available_nanos.max(0)),
            )))
        }
        Err(LedgerError::Unavailable(why)) => Err(ApiError::LedgerUnavailable(format!(
            "the ledger is unavailable and this gateway holds no balance grant that covers the request: {why}"
        ))),
        Err(e) => Err(ledger_failure("reserving", e)),
    }
}

/// A ledger failure while `doing` something for a request, classified once: a ledger
/// that cannot be reached, or that fails a statement (busy, pool exhausted), is 503
/// `ledger_unavailable` and the request may be retried; an account that vanished since
/// its key was checked is 401; anything else is a value the gateway should not have
/// sent, 500. Only a connection failure is called unreachable.
pub fn ledger_failure(doing: &str, e: LedgerError) -> ApiError {
    match &e {
        LedgerError::Database(_) | LedgerError::Migrate(_) if reaches_io_error(&e) => {
            ApiError::LedgerUnavailable(format!("the ledger is unreachable ({doing}): {e}"))
        }
        LedgerError::Database(_) | LedgerError::Migrate(_) | LedgerError::Unavailable(_) => {
            ApiError::LedgerUnavailable(format!("the ledger failed ({doing}): {e}"))
        }
        LedgerError::UnknownAccount(_) | LedgerError::UnknownAccountId(_) => {
            ApiError::InvalidApiKey(format!("the account of this API key no longer exists ({e})"))
        }
        _ => ApiError::Internal(format!("the ledger refused a value ({doing}): {e}")),
    }
}

/// Whether a connection failure (an I/O error) is behind `e`.
fn reaches_io_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = e.source();
    while let Some(c) = cause {
        if c.is::<std::io::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// What a request holds until it is settled: its reservation (docs/design.md §5a),
/// counted in `sluice_reservations_open` for as long as it lives (settled, released, or
/// dropped with a request that nobody waits for any more: a dropped hold is released in
/// memory), and its share of its limits (docs/design.md §5b).
pub struct Held {
    pub(crate) reservation: Option<(Hold, OpenGauge)>,
    pub(crate) limits: Option<Admission>,
    /// Answers served from the cache (a completion, or embedding inputs), charged at the
    /// route's cache price when the hold settles (docs/design.md §13).
    pub(crate) cached: u64,
}

pub(crate) struct OpenGauge(Gauge);

impl Held {
    fn new(reservation: Hold, open: &Gauge) -> Self {
        open.inc();
        Self { reservation: Some((reservation, OpenGauge(open.clone()))), limits: None, cached: 0 }
    }

    /// What a request holds: its reservation and its limits' admission, if either.
    pub fn of(reservation: Option<Held>, limits: Option<Admission>) -> Option<Held> {
        match (reservation, limits) {
            (Some(held), limits) => Some(Held { limits, ..held }),
            (None, Some(limits)) => Some(Held { reservation: None, limits: Some(limits), cached: 0 }),
            (None, None) => None,
        }
    }

    /// Counts `n` answers served from the cache, to be charged with the rest.
    pub fn served_from_cache(held: &mut Option<Held>, n: u64) {
        if let Some(h) = held {
            h.cached += n;
        }
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connecting: {0}")]
    struct Connecting(#[source] std::io::Error);

    #[test]
    fn only_a_connection_failure_is_called_unreachable() {
        let refused = Connecting(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(reaches_io_error(&refused));
        assert!(!reaches_io_error(&LedgerError::UnknownReservation(1)));

        let gone = ledger_failure("reserving", LedgerError::UnknownAccountId(7));
        assert_eq!(gone.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(gone.to_string(), "the account of this API key no longer exists (no account with id 7)");

        let refused_value = ledger_failure("reserving", LedgerError::TooLarge { what: "estimate", value: u64::MAX });
        assert_eq!(refused_value.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(refused_value.body()["error"]["code"], "internal_error");
        assert!(!refused_value.to_string().contains("unreachable"), "{refused_value}");

        let away = ledger_failure("authenticating the API key", LedgerError::Unavailable("pool timed out".into()));
        assert_eq!(
            (away.status(), away.body()["error"]["code"].as_str()),
            (http::StatusCode::SERVICE_UNAVAILABLE, Some("ledger_unavailable"))
        );
        assert!(away.to_string().starts_with("the ledger failed (authenticating the API key)"), "{away}");
    }
}
