//! Throttling hints and jittered backoff between walks (docs/design.md §4.2).

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use rand::Rng;

/// Upper bound on any hint: a provider asking for more than this is treated as "give up now".
const MAX_HINT: Duration = Duration::from_secs(24 * 3600);

/// Reads how long an upstream asks us to wait: the hints of every protocol, read by
/// `sluice_providers::retry::from_headers` (`retry-after-ms`, `Retry-After` in seconds or
/// as an HTTP date, `x-ratelimit-reset*`, `anthropic-ratelimit-*-reset`, …), capped.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let now_ms = sluice_providers::retry::unix_ms(now);
    sluice_providers::retry::from_headers(headers, now_ms).map(|d| d.min(MAX_HINT))
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
    fn hints_are_read_by_the_shared_parser_and_capped_at_a_day() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)), "an HTTP date, against the time given");
        assert_eq!(retry_after(&headers(&[("retry-after", "999999")]), now), Some(MAX_HINT));
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
