//! UTC timestamps as the page writes them (RFC 3339), without a date library.

/// `2026-12-01T10:44:46.123Z` for unix milliseconds `ms`.
pub fn rfc3339(ms: i64) -> String {
    let (date, rest) = split(ms);
    let secs = rest / 1000;
    format!(
        "{date}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        rest % 1000
    )
}

/// `2026-12-01 10:44 UTC`, for people.
pub fn human(ms: i64) -> String {
    let (date, rest) = split(ms);
    let secs = rest / 1000;
    format!("{date} {:02}:{:02} UTC", secs / 3600, secs / 60 % 60)
}

/// `2026-12-01` for a unix day.
pub fn date_of_day(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// (date, milliseconds into the day).
fn split(ms: i64) -> (String, i64) {
    let day = ms.div_euclid(86_400_000);
    (date_of_day(day), ms.rem_euclid(86_400_000))
}

/// Howard Hinnant's days → civil date (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
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
