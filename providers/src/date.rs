//! The one timestamp parser of the crate (retry hints, AWS credential expiry, SigV4
//! dates), on `jiff`, without a clock: the caller passes the time in.

use std::time::SystemTime;

use jiff::Timestamp;

/// Parses an RFC 3339 timestamp, `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (ISO 8601 as
/// AWS and Anthropic write it), into unix milliseconds; fractions finer than a
/// millisecond are dropped. `None` for anything else, an out-of-range field, or a time
/// before 1970.
pub fn rfc3339_unix_ms(s: &str) -> Option<u64> {
    let t: Timestamp = s.trim().parse().ok()?;
    u64::try_from(t.as_millisecond()).ok()
}

/// `t` formatted with `strftime`-style `format` in UTC (`None` out of jiff's range,
/// years -9999 to 9999).
pub(crate) fn format_utc(t: SystemTime, format: &str) -> Option<String> {
    Some(Timestamp::try_from(t).ok()?.strftime(format).to_string())
}

/// `text` parsed with `strftime`-style `format` as a time in UTC.
pub(crate) fn parse_utc(format: &str, text: &str) -> Option<SystemTime> {
    let civil = jiff::civil::DateTime::strptime(format, text).ok()?;
    let t = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(SystemTime::from(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_in_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400 + 3661);
        assert_eq!(format_utc(t, "%Y%m%dT%H%M%SZ").as_deref(), Some("20000229T010101Z"));
        assert_eq!(parse_utc("%Y%m%dT%H%M%SZ", "20000229T010101Z"), Some(t));
        assert_eq!(parse_utc("%Y%m%dT%H%M%SZ", "20000230T010101Z"), None, "no such day");
    }

    #[test]
    fn refuses_out_of_range_fields_and_other_formats() {
        for s in [
            "2014-13-24T23:00:23Z",
            "2014-10-24T24:00:00Z",
            "2014-10-24T23:00:23",
            "2019-1-9T1:2:3Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(rfc3339_unix_ms(s), None, "{s}");
        }
        assert_eq!(rfc3339_unix_ms("2019-11-09t13:34:41-05:00"), Some(1_573_324_481_000));
        // RFC 3339 lets a space stand for the T.
        assert_eq!(rfc3339_unix_ms("2014-10-24 23:00:23Z"), Some(1_414_191_623_000));
    }
}
