//! Formatting of durations, tenths and rounding helpers for budget reports.

use std::time::Duration;

/// Formats a duration with its largest units and no zero parts: `21m36s`, `1h`,
/// `2d3h`, `1h5s`, `1s800ms`, `0s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let units: [(&str, u128); 5] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let mut rest = ms;
    let mut out = String::new();
    for (suffix, size) in units {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(suffix);
        }
    }
    out
}

/// `num / den` rounded half up, as tenths for [`format_tenths`]; 0 when `den` is 0.
pub(super) fn round_div(num: u128, den: u128) -> i64 {
    if den == 0 {
        return 0;
    }
    i64::try_from((num * 2 + den) / (den * 2)).unwrap_or(i64::MAX)
}

/// Tenths as a decimal with one digit: 233 → `23.3`, −5 → `-0.5`.
pub(super) fn format_tenths(tenths: i64) -> String {
    let sign = if tenths < 0 { "-" } else { "" };
    let abs = tenths.unsigned_abs();
    format!("{sign}{}.{}", abs / 10, abs % 10)
}
