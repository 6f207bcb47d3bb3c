//! How figures are written into status: percentages with two decimals, durations in
//! the project's humane form, times in RFC 3339.

use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{Timestamp, Unit};
use sluice_ledger::LATENCY_BUCKETS_MS;

/// `100 × part ÷ whole` with two decimals (`"99.20"`), rounded half up; `None` when
/// `whole` is zero.
pub fn percent(part: u64, whole: u64) -> Option<String> {
    if whole == 0 {
        return None;
    }
    let hundredths = (u128::from(part) * 10_000 * 2 + u128::from(whole)) / (u128::from(whole) * 2);
    Some(format!("{}.{:02}", hundredths / 100, hundredths % 100))
}

/// A quantile of a latency histogram (bounds [`LATENCY_BUCKETS_MS`] plus +Inf),
/// interpolated linearly inside its bucket as Prometheus' `histogram_quantile` does.
/// The +Inf bucket reads as its lower bound (60 s). `None` without samples.
pub fn histogram_quantile(buckets: &[u64], q: f64) -> Option<Duration> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n == 0 || ((below + n) as f64) < rank {
            below += n;
            continue;
        }
        let Some(&upper) = LATENCY_BUCKETS_MS.get(i) else {
            return LATENCY_BUCKETS_MS.last().map(|ms| Duration::from_millis(*ms));
        };
        let lower = if i == 0 { 0 } else { LATENCY_BUCKETS_MS[i - 1] };
        let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
        let ms = lower as f64 + within * (upper - lower) as f64;
        return Some(Duration::from_millis(ms.round() as u64));
    }
    LATENCY_BUCKETS_MS.last().map(|ms| Duration::from_millis(*ms))
}

/// `180ms`, `1s500ms`, `2m` (see `sluice_crds::duration::format`).
pub fn duration(d: Duration) -> String {
    sluice_crds::duration::format(d)
}

/// RFC 3339 at second precision, e.g. `2025-05-01T12:00:00Z`.
pub fn rfc3339(t: SystemTime) -> String {
    timestamp(t).to_string()
}

/// The Kubernetes `Time` of `t`, at second precision (what the API server keeps).
pub fn time(t: SystemTime) -> Time {
    Time(timestamp(t))
}

fn timestamp(t: SystemTime) -> Timestamp {
    let ts = Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH);
    ts.round(Unit::Second).unwrap_or(ts)
}

/// One decimal, e.g. `97.5`.
pub fn one_decimal(x: f64) -> String {
    format!("{x:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_has_two_decimals_and_rounds_half_up() {
        assert_eq!(percent(992, 1000).as_deref(), Some("99.20"));
        assert_eq!(percent(1, 3).as_deref(), Some("33.33"));
        assert_eq!(percent(2, 3).as_deref(), Some("66.67"));
        assert_eq!(percent(5, 5).as_deref(), Some("100.00"));
        assert_eq!(percent(0, 7).as_deref(), Some("0.00"));
        assert_eq!(percent(1, 0), None);
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let mut b = [0u64; sluice_ledger::LATENCY_BUCKET_COUNT];
        // 10 samples in (150, 250]: the median sits in the middle of that bucket.
        b[7] = 10;
        assert_eq!(histogram_quantile(&b, 0.5), Some(Duration::from_millis(200)));
        assert_eq!(histogram_quantile(&b, 0.99), Some(Duration::from_millis(249)));
        // 98 fast, 2 very slow: p50 fast, p99 in the slow bucket.
        let mut b = [0u64; sluice_ledger::LATENCY_BUCKET_COUNT];
        b[0] = 98;
        b[15] = 2; // (3000, 5000]
        assert_eq!(histogram_quantile(&b, 0.5), Some(Duration::from_millis(3)));
        assert_eq!(histogram_quantile(&b, 0.99), Some(Duration::from_millis(4000)));
        // Everything slower than 60 s reads as 60 s.
        let mut b = [0u64; sluice_ledger::LATENCY_BUCKET_COUNT];
        b[22] = 1;
        assert_eq!(histogram_quantile(&b, 0.5), Some(Duration::from_secs(60)));
        assert_eq!(histogram_quantile(&[0; 23], 0.5), None);
    }

    #[test]
    fn durations_and_times_are_humane() {
        assert_eq!(duration(Duration::from_millis(180)), "180ms");
        assert_eq!(duration(Duration::from_millis(1500)), "1s500ms");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_746_100_800_400);
        assert_eq!(rfc3339(t), "2025-05-01T12:00:00Z");
        assert_eq!(one_decimal(97.46), "97.5");
    }
}
