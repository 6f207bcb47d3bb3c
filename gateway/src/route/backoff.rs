//! Throttling hints and jittered backoff between walks (docs/design.md §4.2).

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use rand::Rng;

/// Upper bound on any hint: a provider asking for more than this is treated as "give up now".
const MAX_HINT: Duration = Duration::from_secs(24 * 3600);

/// Reads how long an upstream asks us to wait, in order: `retry-after-ms`, `Retry-After`
/// (seconds or HTTP date), `x-ratelimit-reset` (seconds, or an epoch when over 30 days),
/// `x-ratelimit-reset-requests`, `x-ratelimit-reset-tokens` (durations such as `6m0s`).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0).min(MAX_HINT));
    }
    if let Some(v) = text("retry-after") {
        if let Ok(secs) = v.parse::<f64>()
            && secs.is_finite()
            && secs >= 0.0
        {
            return Some(Duration::from_secs_f64(secs).min(MAX_HINT));
        }
        if let Ok(at) = httpdate::parse_http_date(v) {
            return Some(at.duration_since(now).unwrap_or_default().min(MAX_HINT));
        }
    }
    if let Some(v) = text("x-ratelimit-reset").and_then(|v| v.parse::<f64>().ok())
        && v.is_finite()
        && v >= 0.0
    {
        const THIRTY_DAYS: f64 = 30.0 * 86_400.0;
        if v < THIRTY_DAYS {
            return Some(Duration::from_secs_f64(v));
        }
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(v);
        return Some(at.duration_since(now).unwrap_or_default().min(MAX_HINT));
    }
    for name in ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"] {
        if let Some(d) = text(name).and_then(parse_go_duration) {
            return Some(d.min(MAX_HINT));
        }
    }
    None
}

/// Parses OpenAI's reset durations: `1s`, `6m0s`, `20ms`, `1.5s`, `2h3m`.
fn parse_go_duration(text: &str) -> Option<Duration> {
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
    Some(Duration::from_secs_f64(total))
}

/// Full jitter: a random wait in `[0, base × 2^walk]`.
pub fn full_jitter(base: Duration, walk: u32, rng: &mut impl Rng) -> Duration {
    let cap = base.saturating_mul(1u32 << walk.min(20));
    let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.random_range(0..=ms))
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
    fn reads_every_hint_in_order() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "2")]), now), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "1500")]), now),
            Some(Duration::from_millis(1500))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers(&[("x-ratelimit-reset", "3")]), now), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after(&headers(&[("x-ratelimit-reset", "1800000005")]), now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_after(&headers(&[("x-ratelimit-reset-requests", "6m0s")]), now),
            Some(Duration::from_secs(360))
        );
        assert_eq!(
            retry_after(&headers(&[("x-ratelimit-reset-tokens", "20ms")]), now),
            Some(Duration::from_millis(20))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn jitter_stays_within_the_exponential_cap() {
        let mut rng = rand::rng();
        for walk in 0..5 {
            for _ in 0..100 {
                let d = full_jitter(Duration::from_millis(250), walk, &mut rng);
                assert!(d <= Duration::from_millis(250 << walk));
            }
        }
    }
}
