//! Humane durations: `50ms`, `2s`, `1m30s`, `540s`, `30d`.

use std::time::Duration;

/// Parses one or more `<integer><unit>` groups, units `ms`, `s`, `m`, `h`, `d`.
///
/// The error is a short reason, to be prefixed with the field path by the caller.
pub fn parse(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let bytes = text.as_bytes();
    let mut total_ms: u128 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(format!("{text:?} is not a duration such as 50ms, 2s, 1m30s or 30d"));
        }
        let number: u128 = text[start..i].parse().map_err(|_| format!("{text:?} has a number too large"))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit_ms: u128 = match &text[unit_start..i] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("{text:?} is missing a unit (ms, s, m, h or d)")),
            other => return Err(format!("{text:?} has unknown unit {other:?} (use ms, s, m, h or d)")),
        };
        total_ms =
            total_ms.checked_add(number.saturating_mul(unit_ms)).ok_or_else(|| format!("{text:?} is too long"))?;
    }
    // A century is far beyond any timeout or SLO window; larger values are typos.
    if total_ms > 100 * 365 * 86_400_000 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_millis(total_ms as u64))
}

/// Formats a duration with its largest units and no zero tails: `21m36s`, `1h`, `2d3h`, `250ms`.
pub fn format(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".into();
    }
    if total_ms < 1_000 {
        return format!("{total_ms}ms");
    }
    let mut secs = duration.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    let ms = total_ms % 1_000;
    if ms != 0 && total_ms < 60_000 {
        // Sub-minute values keep their milliseconds: 1.5s reads as 1s500ms.
        out.push_str(&format!("{ms}ms"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse("540s"), Ok(Duration::from_secs(540)));
    }

    #[test]
    fn refuses_bad_durations_with_reasons() {
        assert_eq!(parse("5"), Err("\"5\" is missing a unit (ms, s, m, h or d)".into()));
        assert_eq!(parse("5w"), Err("\"5w\" has unknown unit \"w\" (use ms, s, m, h or d)".into()));
        assert_eq!(parse("s"), Err("\"s\" is not a duration such as 50ms, 2s, 1m30s or 30d".into()));
        assert_eq!(parse(""), Err("empty duration".into()));
        assert!(parse("99999999999999999999999999999d").is_err());
    }

    #[test]
    fn formats_with_largest_units() {
        assert_eq!(format(Duration::from_secs(1296)), "21m36s");
        assert_eq!(format(Duration::from_secs(3600)), "1h");
        assert_eq!(format(Duration::from_secs(2 * 86_400 + 3 * 3600)), "2d3h");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::from_millis(1500)), "1s500ms");
    }
}
