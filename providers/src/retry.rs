//! Retry hints in response headers, for every protocol (the gateway's back-off reads
//! them through here too): `retry-after-ms`, `x-ms-retry-after-ms`, `retry-after`
//! (seconds or an HTTP date), OpenAI's `x-ratelimit-reset` (seconds, or a Unix time when
//! over 30 days) and `x-ratelimit-reset-requests`/`-tokens` (durations such as `6m0s`),
//! and Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339). Time is an input:
//! `now_unix_ms` is passed in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

pub use crate::date::rfc3339_unix_ms;

/// The retry hint the headers give, most precise first; `None` if there is none.
pub fn from_headers(headers: &HeaderMap, now_unix_ms: u64) -> Option<Duration> {
    for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(ms) = header(headers, name).and_then(|v| v.trim().parse::<f64>().ok())
            && ms.is_finite()
            && ms >= 0.0
        {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    if let Some(v) = header(headers, "retry-after") {
        let v = v.trim();
        if let Some(secs) = seconds(v) {
            return Some(secs);
        }
        if let Some(at) = http_date_unix_ms(v) {
            return Some(Duration::from_millis(at.saturating_sub(now_unix_ms)));
        }
    }
    if let Some(v) = header(headers, "x-ratelimit-reset").and_then(|v| seconds(v.trim())) {
        const THIRTY_DAYS: Duration = Duration::from_secs(30 * 86_400);
        if v < THIRTY_DAYS {
            return Some(v);
        }
        let at = u64::try_from(v.as_millis()).unwrap_or(u64::MAX);
        return Some(Duration::from_millis(at.saturating_sub(now_unix_ms)));
    }
    for name in ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"] {
        if let Some(d) = header(headers, name).and_then(|v| go_duration(v.trim())) {
            return Some(d);
        }
    }
    // Anthropic: the earliest reset among the limits that are exhausted is when to come back;
    // without knowing which limit tripped, take the latest request/token reset.
    let mut latest: Option<u64> = None;
    for name in [
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-reset",
    ] {
        if let Some(at) = header(headers, name).and_then(rfc3339_unix_ms) {
            latest = Some(latest.map_or(at, |l| l.max(at)));
        }
    }
    latest.map(|at| Duration::from_millis(at.saturating_sub(now_unix_ms)))
}

/// A non-negative number of seconds, fractions allowed.
fn seconds(text: &str) -> Option<Duration> {
    let secs: f64 = text.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// OpenAI's reset durations: `1s`, `6m0s`, `20ms`, `1.5s`, `2h3m`.
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest.get(..num_len)?.parse().ok()?;
        rest = rest.get(num_len..)?;
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match rest.get(..unit_len)? {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = rest.get(unit_len..)?;
    }
    total.is_finite().then(|| Duration::from_secs_f64(total))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Parses a protobuf `Duration` string such as `"13s"` or `"0.5s"` (Vertex `RetryInfo.retryDelay`).
pub fn proto_duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.trim().strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

fn http_date_unix_ms(s: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(s).ok()?;
    let d = t.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(d.as_millis()).ok()
}

/// Unix milliseconds of a `SystemTime`, for callers that hold one.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn reads_every_hint_format() {
        let now = rfc3339_unix_ms("2015-10-21T07:28:00Z").unwrap();
        assert_eq!(from_headers(&headers(&[("retry-after-ms", "1500")]), now), Some(Duration::from_millis(1500)));
        assert_eq!(from_headers(&headers(&[("x-ms-retry-after-ms", "250")]), now), Some(Duration::from_millis(250)));
        assert_eq!(from_headers(&headers(&[("retry-after", "7")]), now), Some(Duration::from_secs(7)));
        assert_eq!(
            from_headers(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            from_headers(&headers(&[("anthropic-ratelimit-requests-reset", "2015-10-21T07:28:12.5Z")]), now),
            Some(Duration::from_millis(12_500))
        );
        assert_eq!(from_headers(&headers(&[("retry-after", "soon")]), now), None);
    }

    #[test]
    fn reads_openai_reset_headers_and_takes_the_most_precise_hint_first() {
        let now = 1_800_000_000_000;
        let at = |pairs: &[(&'static str, &'static str)]| from_headers(&headers(pairs), now);
        assert_eq!(at(&[("retry-after", "2"), ("retry-after-ms", "1500")]), Some(Duration::from_millis(1500)));
        assert_eq!(at(&[("retry-after", "0.5")]), Some(Duration::from_millis(500)));
        assert_eq!(at(&[("x-ratelimit-reset", "3")]), Some(Duration::from_secs(3)));
        // Over 30 days, a reset is a Unix time.
        assert_eq!(at(&[("x-ratelimit-reset", "1800000005")]), Some(Duration::from_secs(5)));
        assert_eq!(at(&[("x-ratelimit-reset-requests", "6m0s")]), Some(Duration::from_secs(360)));
        assert_eq!(at(&[("x-ratelimit-reset-tokens", "20ms")]), Some(Duration::from_millis(20)));
        assert_eq!(at(&[("x-ratelimit-reset-tokens", "1h2m")]), Some(Duration::from_secs(3720)));
        assert_eq!(at(&[("x-ratelimit-reset-tokens", "6 minutes")]), None);
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn parses_rfc3339_with_offsets() {
        assert_eq!(rfc3339_unix_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_unix_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(rfc3339_unix_ms("2024-02-29T12:00:00.123456Z"), Some(1_709_208_000_123));
        assert_eq!(proto_duration("13s"), Some(Duration::from_secs(13)));
        assert_eq!(proto_duration("0.5s"), Some(Duration::from_millis(500)));
    }
}
