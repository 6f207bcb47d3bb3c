//! Limits of keys and accounts on the request path (docs/design.md §5b): a request is
//! admitted by every meter that limits its key or account, from leases held in memory
//! ([`Limiter`]), before its reservation; over a limit it is refused with 429 and
//! `retry-after`; every answer to a limited key says where it stands in the OpenAI
//! `x-ratelimit-*` headers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use sluice_ledger::limits::{Admission, Ask, LimitError, Limiter, Refusal, Standing};
use sluice_ledger::{AccountRef, Meter, Subject, format_usd};

use super::Billing;
use crate::error::ApiError;
use crate::telemetry::metrics::LimitLabel;

/// Admits a request of `account`'s key asking `ask`, or refuses it over a limit.
/// `None` when neither the key nor its account is limited (or limits are off).
pub async fn admit(billing: &Billing, account: &AccountRef, ask: Ask) -> Result<Option<Admission>, ApiError> {
    let Some(limiter) = &billing.limiter else { return Ok(None) };
    admit_with(limiter, billing, account, ask).await
}

async fn admit_with(
    limiter: &Limiter,
    billing: &Billing,
    account: &AccountRef,
    ask: Ask,
) -> Result<Option<Admission>, ApiError> {
    let Some(l) = &account.limits else { return Ok(None) };
    let mut subjects = Vec::with_capacity(2);
    if !l.key.is_empty() {
        subjects.push((Subject::Key(l.key_id), l.key));
    }
    if !l.account.is_empty() {
        subjects.push((Subject::Account(account.id), l.account));
    }
    match limiter.admit(&subjects, ask, unix_ms_now()).await {
        Ok(admission) => Ok(Some(admission)),
        Err(LimitError::Refused(r)) => {
            let label = LimitLabel { limit: r.standing.meter.as_str(), key_kind: r.standing.subject.kind() };
            billing.limit_rejections.get_or_create(&label).inc();
            Err(refused(&r, &account.name))
        }
        Err(LimitError::Ledger(e)) => Err(super::ledger_failure("taking a limit lease", e)),
    }
}

fn unix_ms_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The 429 for a refusal, naming the limit as OpenAI does ("Rate limit reached for …
/// on requests per min (RPM): Limit 600, Used 600, Requested 1.").
fn refused(r: &Refusal, account: &str) -> ApiError {
    let s = &r.standing;
    let of = match s.subject {
        Subject::Key(id) => format!("API key {id}"),
        Subject::Account(_) => format!("account {account:?}"),
    };
    let wait = format_reset(r.retry_after);
    let (what, kind) = match s.meter {
        Meter::Requests => ("requests per min (RPM)", "requests"),
        Meter::Tokens => ("tokens per min (TPM)", "tokens"),
        Meter::DailyTokens => ("tokens per day (TPD)", "tokens"),
        Meter::Concurrency => ("requests in flight at once", "requests"),
        Meter::DailySpend => ("spend per day (UTC)", "insufficient_quota"),
        Meter::MonthlySpend => ("spend per month (UTC)", "insufficient_quota"),
    };
    let message = if s.meter.is_spend() {
        format!(
            "Spend limit reached for {of} on {what}: Limit ${}, Left ${}, this request may cost up to ${}. It resets in {wait}.",
            format_usd(s.limit),
            format_usd(s.remaining),
            format_usd(r.asked),
        )
    } else {
        format!(
            "Rate limit reached for {of} on {what}: Limit {}, Used {}, Requested {}. Please try again in {wait}.",
            s.limit,
            s.limit - s.remaining,
            r.asked,
        )
    };
    ApiError::LimitExceeded { message, kind, spend: s.meter.is_spend(), retry_after: r.retry_after }
}

const LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
const REMAINING_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-requests");
const RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
const LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
const REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
const RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");

/// The OpenAI `x-ratelimit-*` headers of the tightest requests and tokens limits.
///
/// On every answer to a limited key, so written cheaply: the values' texts go into one
/// buffer, integers without `fmt`, and each header value is a slice of it (one
/// allocation, not one per value).
pub fn headers(standings: &[Standing], headers: &mut HeaderMap) {
    if standings.is_empty() {
        return;
    }
    let mut text = String::with_capacity(96);
    let mut values: [(Option<HeaderName>, usize, usize); 6] = Default::default();
    let mut n = 0;
    for s in standings {
        let names = match s.meter {
            Meter::Requests => [LIMIT_REQUESTS, REMAINING_REQUESTS, RESET_REQUESTS],
            Meter::Tokens => [LIMIT_TOKENS, REMAINING_TOKENS, RESET_TOKENS],
            _ => continue,
        };
        for (i, name) in names.into_iter().enumerate() {
            let Some(slot) = values.get_mut(n) else { break };
            let start = text.len();
            match i {
                0 => text.push_str(itoa::Buffer::new().format(s.limit)),
                1 => text.push_str(itoa::Buffer::new().format(s.remaining)),
                _ => write_reset(&mut text, s.reset),
            }
            *slot = (Some(name), start, text.len());
            n += 1;
        }
    }
    let text = bytes::Bytes::from(text);
    // Grown once, not rehashed on the way.
    headers.reserve(n);
    for (name, start, end) in values.into_iter().take(n) {
        if let (Some(name), Ok(value)) = (name, HeaderValue::from_maybe_shared(text.slice(start..end))) {
            headers.insert(name, value);
        }
    }
}

/// A duration as OpenAI writes its resets: `120ms`, `1.5s`, `6m0s`.
pub fn format_reset(d: Duration) -> String {
    let mut s = String::new();
    write_reset(&mut s, d);
    s
}

fn write_reset(out: &mut String, d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut digits = itoa::Buffer::new();
    if ms < 1000 {
        out.push_str(digits.format(ms));
        out.push_str("ms");
        return;
    }
    let (minutes, rest) = (ms / 60_000, ms % 60_000);
    if minutes > 0 {
        out.push_str(digits.format(minutes));
        out.push('m');
    }
    out.push_str(digits.format(rest / 1000));
    // Milliseconds without trailing zeros: 1.5s, 1.25s, 1.125s.
    let millis = rest % 1000;
    if millis > 0 {
        let frac = [millis / 100, millis / 10 % 10, millis % 10];
        let len = frac.iter().rposition(|&d| d > 0).map_or(0, |i| i + 1);
        out.push('.');
        out.extend(frac[..len].iter().map(|&d| char::from_digit(u32::try_from(d).unwrap_or(0), 10).unwrap_or('0')));
    }
    out.push('s');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_read_like_openai_s() {
        assert_eq!(format_reset(Duration::from_millis(120)), "120ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
        assert_eq!(format_reset(Duration::from_millis(61_250)), "1m1.25s");
        assert_eq!(format_reset(Duration::ZERO), "0ms");
        assert_eq!(format_reset(Duration::from_millis(2_005)), "2.005s");
        assert_eq!(format_reset(Duration::from_millis(60_010)), "1m0.01s");
        assert_eq!(format_reset(Duration::from_millis(3_000)), "3s");
    }

    fn standing(meter: Meter, limit: i64, remaining: i64) -> Standing {
        Standing { meter, subject: Subject::Key(7), limit, remaining, reset: Duration::from_secs(30) }
    }

    #[test]
    fn a_refusal_names_the_limit_and_its_numbers() {
        let r =
            Refusal { standing: standing(Meter::Requests, 600, 0), retry_after: Duration::from_millis(100), asked: 1 };
        let e = refused(&r, "acme");
        assert_eq!(e.status(), http::StatusCode::TOO_MANY_REQUESTS);
        let body = e.body();
        assert_eq!(
            (body["error"]["type"].as_str(), body["error"]["code"].as_str()),
            (Some("requests"), Some("rate_limit_exceeded"))
        );
        assert_eq!(
            body["error"]["message"],
            "Rate limit reached for API key 7 on requests per min (RPM): Limit 600, Used 600, Requested 1. Please try again in 100ms."
        );
        assert!(!e.is_bad(), "the client's 429 is not an upstream's failure");
        let r = Refusal {
            standing: Standing {
                subject: Subject::Account(1),
                ..standing(Meter::DailySpend, 1_000_000_000, 2_000_000)
            },
            retry_after: Duration::from_secs(3600),
            asked: 5_000_000,
        };
        let e = refused(&r, "acme");
        let body = e.body();
        assert_eq!(body["error"]["code"], "insufficient_quota");
        assert!(body["error"]["message"].as_str().unwrap().starts_with("Spend limit reached for account \"acme\""));
        let response = e.respond(crate::endpoint::Endpoint::Chat);
        assert_eq!(response.headers()["retry-after"], "3600");
        assert_eq!(response.headers()["x-should-retry"], "false");
    }

    #[test]
    fn headers_carry_requests_and_tokens() {
        let mut h = HeaderMap::new();
        headers(&[standing(Meter::Requests, 600, 12), standing(Meter::Tokens, 60_000, 5_000)], &mut h);
        assert_eq!(h["x-ratelimit-limit-requests"], "600");
        assert_eq!(h["x-ratelimit-remaining-requests"], "12");
        assert_eq!(h["x-ratelimit-reset-requests"], "30s");
        assert_eq!(h["x-ratelimit-remaining-tokens"], "5000");
        assert_eq!(h["x-ratelimit-limit-tokens"], "60000");
        assert_eq!(h["x-ratelimit-reset-tokens"], "30s");
        assert_eq!(h.len(), 6);
    }
}
