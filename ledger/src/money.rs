//! USD ⇄ nanodollar conversion at the edges (CLI, manifests, display).

/// Nanodollars in one US dollar.
pub const NANOS_PER_USD: i64 = 1_000_000_000;

/// A USD amount string that [`parse_usd`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid USD amount {input:?}: {reason}")]
pub struct UsdError {
    /// The text given.
    pub input: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// Parses a non-negative decimal USD amount such as `"15.00"`, `"15"`, `".5"` or
/// `"0.000000001"` into nanodollars.
///
/// Refused: signs (so negatives), exponents, separators, `$`, more than nine decimals
/// (finer than a nanodollar) and amounts above `i64::MAX` nanodollars.
pub fn parse_usd(input: &str) -> Result<i64, UsdError> {
    let fail = |reason| UsdError { input: input.to_owned(), reason };
    let text = input.trim();
    if text.starts_with('-') {
        return Err(fail("amounts must not be negative"));
    }
    let (whole, frac) = match text.split_once('.') {
        Some((whole, frac)) => (whole, frac),
        None => (text, ""),
    };
    if whole.is_empty() && frac.is_empty() {
        return Err(fail("expected a decimal such as 15.00"));
    }
    if !whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(fail("expected a decimal such as 15.00 (digits and one '.')"));
    }
    if frac.len() > 9 {
        return Err(fail("more than 9 decimals is finer than a nanodollar"));
    }
    let too_large = || fail("amount is too large");
    let mut nanos: i64 = 0;
    for digit in whole.bytes() {
        nanos = nanos.checked_mul(10).and_then(|n| n.checked_add(i64::from(digit - b'0'))).ok_or_else(too_large)?;
    }
    nanos = nanos.checked_mul(NANOS_PER_USD).ok_or_else(too_large)?;
    let mut scale = NANOS_PER_USD;
    for digit in frac.bytes() {
        scale /= 10;
        nanos = nanos.checked_add(i64::from(digit - b'0') * scale).ok_or_else(too_large)?;
    }
    Ok(nanos)
}

/// Formats nanodollars as USD with at least two and at most nine decimals, dropping
/// trailing zeros past the cents: `15.00`, `12.345`, `0.000000001`, `-0.50`. No `$` sign.
/// The output always parses back to the same value with [`parse_usd`] (when ≥ 0).
pub fn format_usd(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.unsigned_abs();
    let per_usd = NANOS_PER_USD.unsigned_abs();
    let whole = abs / per_usd;
    let frac = format!("{:09}", abs % per_usd);
    let trimmed = frac.trim_end_matches('0');
    let decimals = if trimmed.len() < 2 { &frac[..2] } else { trimmed };
    format!("{sign}{whole}.{decimals}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_common_amounts() {
        assert_eq!(parse_usd("15.00"), Ok(15 * NANOS_PER_USD));
        assert_eq!(parse_usd("15"), Ok(15 * NANOS_PER_USD));
        assert_eq!(parse_usd(".5"), Ok(NANOS_PER_USD / 2));
        assert_eq!(parse_usd("0.000000001"), Ok(1));
        assert_eq!(parse_usd("  2.5 "), Ok(2_500_000_000));
        assert_eq!(parse_usd("9223372036.854775807"), Ok(i64::MAX));
    }

    #[test]
    fn refuses_garbage_with_a_clear_message() {
        let err = parse_usd("-1.00").unwrap_err();
        assert_eq!(err.to_string(), "invalid USD amount \"-1.00\": amounts must not be negative");
        for bad in ["", ".", "abc", "1e3", "+5", "$5", "1,000", "1.2.3", "0.0000000001"] {
            assert!(parse_usd(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(parse_usd("9223372037").unwrap_err().reason, "amount is too large");
    }

    #[test]
    fn formats_trimmed() {
        assert_eq!(format_usd(15 * NANOS_PER_USD), "15.00");
        assert_eq!(format_usd(12_345_000_000), "12.345");
        assert_eq!(format_usd(1), "0.000000001");
        assert_eq!(format_usd(0), "0.00");
        assert_eq!(format_usd(-500_000_000), "-0.50");
        assert_eq!(format_usd(i64::MIN), "-9223372036.854775808");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(nanos in 0..=i64::MAX) {
            prop_assert_eq!(parse_usd(&format_usd(nanos)), Ok(nanos));
        }
    }
}
