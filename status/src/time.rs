//! UTC timestamps as the page writes them (RFC 3339), on `jiff`.

use jiff::Timestamp;

/// `2026-12-01T10:44:46.123Z` for unix milliseconds `ms`.
pub fn rfc3339(ms: i64) -> String {
    format(ms, "%Y-%m-%dT%H:%M:%S%.3fZ")
}

/// `2026-12-01 10:44 UTC`, for people.
pub fn human(ms: i64) -> String {
    format(ms, "%Y-%m-%d %H:%M UTC")
}

/// `2026-12-01` for a unix day.
pub fn date_of_day(day: i64) -> String {
    format(day.saturating_mul(86_400_000), "%Y-%m-%d")
}

/// `ms` in UTC by `strftime`-style `pattern`; outside jiff's years (-9999 to 9999) the
/// nearest end of its range.
fn format(ms: i64, pattern: &str) -> String {
    let t = Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 { Timestamp::MIN } else { Timestamp::MAX });
    t.strftime(pattern).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_121_886_123), "2026-12-01T10:44:46.123Z");
        assert_eq!(human(1_796_121_886_123), "2026-12-01 10:44 UTC");
        assert_eq!(date_of_day(-1), "1969-12-31");
    }
}
