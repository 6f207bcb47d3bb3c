//! Windows, the sliding allowance and its wait, and limits stored, changed and read
//! back with a key.

use super::*;
use crate::parse_usd;
use crate::testing::TestDb;

/// 2026-12-05T00:00:00Z.
const T0: i64 = 1_796_428_800_000;

#[test]
fn windows_are_minutes_days_and_calendar_months() {
    let at = T0 + 90_500;
    assert_eq!(Meter::Requests.window(at), Window { start_ms: T0 + 60_000, end_ms: T0 + 120_000, sliding: true });
    assert_eq!(Meter::DailyTokens.window(at), Window { start_ms: T0, end_ms: T0 + 86_400_000, sliding: true });
    assert_eq!(Meter::DailySpend.window(at), Window { start_ms: T0, end_ms: T0 + 86_400_000, sliding: false });
    // December 2026 has 31 days.
    let december = Meter::MonthlySpend.window(at);
    assert_eq!(december.start_ms, T0 - 4 * 86_400_000);
    assert_eq!(december.end_ms, T0 + 27 * 86_400_000);
    assert_eq!(Meter::Concurrency.window(at).end_ms, i64::MAX);
}

#[test]
fn the_previous_window_weighs_what_lies_within_a_window_length() {
    let w = Meter::Requests.window(T0);
    // At the start the whole previous minute counts, half-way half of it, at the end none.
    assert_eq!(w.allowance(600, 600, T0), 0);
    assert_eq!(w.allowance(600, 600, T0 + 30_000), 300);
    assert_eq!(w.allowance(600, 599, T0 + 30_000), 300, "299.5 of the past rounds up");
    assert_eq!(w.allowance(600, 1, T0 + 59_999), 599, "rounded so the past is never under-counted");
    assert_eq!(w.allowance(600, 0, T0), 600);
    // Room for 1 more grows at 600 a minute: every 100 ms.
    assert_eq!(w.wait_ms(1, 600, T0), 100);
    assert_eq!(w.wait_ms(0, 600, T0), 0);
    // Without a previous window, only the next window frees anything.
    assert_eq!(w.wait_ms(1, 0, T0 + 45_000), 15_000);
    let day = Meter::DailySpend.window(T0 + 1_000);
    assert_eq!(day.allowance(100, 100, T0 + 1_000), 100, "calendar windows do not slide");
}

#[test]
fn settings_are_positive_numbers_or_none() {
    assert_eq!("600".parse::<Setting>(), Ok(Setting(Some(600))));
    assert_eq!("60_000".parse::<Setting>(), Ok(Setting(Some(60_000))));
    assert_eq!("none".parse::<Setting>(), Ok(Setting(None)));
    let e = "0".parse::<Setting>().unwrap_err();
    assert!(e.contains("\"0\" is not a positive whole number"), "{e}");
    assert!("-5".parse::<Setting>().is_err());
}

#[tokio::test]
async fn limits_are_stored_changed_and_authenticated_with_the_key() {
    let db = TestDb::sqlite();
    let ledger = db.connect().await.unwrap();
    ledger.create_account("acme", parse_usd("1").unwrap()).await.unwrap();
    let key = ledger.create_key("acme").await.unwrap();
    let first = LimitsUpdate(vec![(Meter::Requests, Some(600)), (Meter::DailySpend, Some(parse_usd("2.5").unwrap()))]);
    let (info, limits) = ledger.update_key_limits(crate::KeySelector::Key(&key), &first).await.unwrap();
    assert_eq!(limits.to_string(), "rpm 600, daily_spend 2.50 USD");
    // A second update changes only what it names.
    let second = LimitsUpdate(vec![(Meter::Requests, None), (Meter::Tokens, Some(60_000))]);
    let (_, limits) = ledger.update_key_limits(crate::KeySelector::Id(info.id), &second).await.unwrap();
    assert_eq!(limits.to_string(), "tpm 60000, daily_spend 2.50 USD");
    let account =
        ledger.update_account_limits("acme", &LimitsUpdate(vec![(Meter::Concurrency, Some(8))])).await.unwrap();
    assert_eq!(account.concurrency, Some(8));
    let auth = ledger.authenticate(&key).await.unwrap().unwrap();
    assert_eq!(auth.limits.as_deref(), Some(&KeyLimits { key_id: info.id, key: limits, account }));
    assert_eq!(ledger.limits(Subject::Key(info.id)).await.unwrap(), limits);
    let e = ledger.update_account_limits("nobody", &LimitsUpdate::default()).await.unwrap_err();
    assert!(matches!(e, LedgerError::UnknownAccount(_)), "{e}");
    // Another key of the account carries only the account's limits.
    let other = ledger.create_key("acme").await.unwrap();
    let of_other = ledger.authenticate(&other).await.unwrap().unwrap().limits.unwrap();
    assert_eq!((of_other.key.is_empty(), of_other.account), (true, account));
    // A key of an account without limits carries none.
    ledger.create_account("free", 0).await.unwrap();
    let free = ledger.create_key("free").await.unwrap();
    assert_eq!(ledger.authenticate(&free).await.unwrap().unwrap().limits, None);
}
