//! Hand-computed cases for the budget maths.

use std::time::Duration;

use super::*;

const MIN: u64 = 60;
const T0: i64 = 1_000_000;

fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * MIN)
}

fn days(n: u64) -> Duration {
    minutes(n * 1440)
}

/// A minute of `route` with `good` fast (100 ms) requests and `bad` bad ones.
pub(super) fn minute(route: &str, at: i64, good: u64, bad: u64) -> RouteMinute {
    let mut m = RouteMinute::new(route, "chat", at);
    for _ in 0..good {
        m.record(false, 100);
    }
    for _ in 0..bad {
        m.record(true, 0);
    }
    m
}

fn timeslices(objective: f64, window: Duration) -> BudgetPolicy {
    BudgetPolicy { method: BudgetMethod::Timeslices, ..BudgetPolicy::new(objective, window) }
}

fn burn(report: &BudgetReport, label: &str) -> String {
    report.burn_rates[label].clone()
}

#[test]
fn empty_timeslice_budget_is_21m36s_for_99_95_over_30d() {
    let r = evaluate(&timeslices(0.9995, days(30)), &[], T0).unwrap();
    assert_eq!(r.budget, "21m36s");
    assert_eq!(r.consumed, "0s");
    assert_eq!((r.consumed_percent.as_str(), r.remaining_percent.as_str()), ("0.0", "100.0"));
    assert_eq!((r.good_events, r.total_events), (0, 0));
    assert_eq!(r.state, BudgetState::Healthy);
    let labels: Vec<&str> = r.burn_rates.keys().map(String::as_str).collect();
    assert_eq!(labels, ["1h", "3d", "5m", "6h"]);
    assert!(r.burn_rates.values().all(|b| b == "0.0"));
}

#[test]
fn five_bad_minutes_consume_23_1_percent_and_fire_the_ticket() {
    // 100 requests every minute of the last 2 hours; minutes now-100..now-96 have 1%
    // errors (> 0.05% allowed), so they are bad slices.
    let mut data: Vec<RouteMinute> = (0..120).map(|k| minute("r", T0 - k, 100, 0)).collect();
    for m in data.iter_mut().filter(|m| (T0 - 100..=T0 - 96).contains(&m.minute)) {
        *m = minute("r", m.minute, 99, 1);
    }
    let r = evaluate(&timeslices(0.9995, days(30)), &data, T0).unwrap();
    assert_eq!(r.consumed, "5m");
    // 300 s of 1296 s = 23.148%
    assert_eq!((r.consumed_percent.as_str(), r.remaining_percent.as_str()), ("23.1", "76.9"));
    assert_eq!((r.good_events, r.total_events), (11_995, 12_000));
    // 5 bad minutes: 5/360 ÷ 0.0005 = 27.78 over 6h; 5/4320 ÷ 0.0005 = 2.31 over 3d.
    assert_eq!(burn(&r, "5m"), "0.0");
    assert_eq!(burn(&r, "1h"), "0.0");
    assert_eq!(burn(&r, "6h"), "27.8");
    assert_eq!(burn(&r, "3d"), "2.3");
    // ticket (3d > 1 and 6h > 1) fires; page needs its short window too.
    assert_eq!(r.firing_alerts, ["ticket"]);
    assert_eq!(r.state, BudgetState::Burning);
}

#[test]
fn a_slice_at_exactly_the_allowed_ratio_is_good() {
    let policy = timeslices(0.9995, days(30));
    // 1 of 2000 = 0.05%: not above 1 − objective. 2 of 2000 is.
    let ok = evaluate(&policy, &[minute("r", T0, 1999, 1)], T0).unwrap();
    assert_eq!(ok.consumed, "0s");
    let bad = evaluate(&policy, &[minute("r", T0, 1998, 2)], T0).unwrap();
    assert_eq!(bad.consumed, "1m");
    assert_eq!(bad.consumed_percent, "4.6"); // 60/1296
}

#[test]
fn longer_slices_and_overspending() {
    // 1h at 99% = 36 s of budget; 5-minute slices ending at now.
    let policy = BudgetPolicy { timeslice: Some(minutes(5)), alerts: vec![], ..timeslices(0.99, minutes(60)) };
    // One bad minute (now-7) spoils the slice now-9..now-5; the other slices have traffic
    // but no errors; minutes without traffic are neither good nor bad.
    let data = [minute("r", T0 - 7, 0, 1), minute("r", T0 - 8, 10, 0), minute("r", T0, 10, 0)];
    let r = evaluate(&policy, &data, T0).unwrap();
    assert_eq!(r.budget, "36s");
    assert_eq!(r.consumed, "5m");
    assert_eq!((r.consumed_percent.as_str(), r.remaining_percent.as_str()), ("833.3", "-733.3"));
    assert_eq!(r.state, BudgetState::Exhausted);
    // Burn over 1h: 5 bad minutes of 60 = 8.33% ÷ 1% = 8.3.
    assert_eq!(burn(&r, "1h"), "8.3");
}

#[test]
fn an_occurrences_budget_under_ten_events_keeps_its_tenths() {
    // 401 requests at 99.9 %: 0.401 bad events allowed, shown as 0.4, not 0.
    let data = [minute("r", T0, 401, 0)];
    let r = evaluate(&BudgetPolicy::new(0.999, days(30)), &data, T0).unwrap();
    assert_eq!(r.budget, "0.4");
    let data = [minute("r", T0, 9_999, 0)];
    let r = evaluate(&BudgetPolicy::new(0.999, days(30)), &data, T0).unwrap();
    assert_eq!(r.budget, "9.9", "rounded down, as whole events are");
    let data = [minute("r", T0, 2_000, 0)];
    let r = evaluate(&BudgetPolicy::new(0.999, days(30)), &data, T0).unwrap();
    assert_eq!(r.budget, "2", "a whole number stays whole");
    let data = [minute("r", T0, 10_999, 0)];
    let r = evaluate(&BudgetPolicy::new(0.999, days(30)), &data, T0).unwrap();
    assert_eq!(r.budget, "10", "from ten on, whole events");
}

#[test]
fn occurrences_count_bad_events() {
    // 1000 minutes × 1000 requests, 250 bad in the oldest one; 99.9% → 1000 allowed.
    let mut data: Vec<RouteMinute> = (0..1000).map(|k| minute("r", T0 - k, 1000, 0)).collect();
    data[999] = minute("r", T0 - 999, 750, 250);
    let r = evaluate(&BudgetPolicy::new(0.999, days(30)), &data, T0).unwrap();
    assert_eq!((r.budget.as_str(), r.consumed.as_str()), ("1000", "250"));
    assert_eq!((r.consumed_percent.as_str(), r.remaining_percent.as_str()), ("25.0", "75.0"));
    assert_eq!((r.good_events, r.total_events), (999_750, 1_000_000));
    // 250 / 1e6 ÷ 0.001 = 0.25, shown rounded half up.
    assert_eq!(burn(&r, "3d"), "0.3");
    assert_eq!(burn(&r, "5m"), "0.0");
    assert_eq!(r.state, BudgetState::Healthy);
}

#[test]
fn occurrences_exhaust_at_100_percent() {
    let policy = BudgetPolicy::new(0.999, days(30));
    let r = evaluate(&policy, &[minute("r", T0, 999, 1)], T0).unwrap();
    assert_eq!((r.budget.as_str(), r.consumed_percent.as_str()), ("1", "100.0"));
    assert_eq!(r.state, BudgetState::Exhausted);
    let r = evaluate(&policy, &[minute("r", T0, 998, 2)], T0).unwrap();
    assert_eq!((r.consumed_percent.as_str(), r.remaining_percent.as_str()), ("200.0", "-100.0"));
    // Less than one allowed event shows its fraction, and the percentage is exact.
    let r = evaluate(&policy, &[minute("r", T0, 500, 0)], T0).unwrap();
    assert_eq!((r.budget.as_str(), r.consumed_percent.as_str()), ("0.5", "0.0"));
}

#[test]
fn slow_requests_are_bad_with_the_threshold_rounded_up_to_a_bucket() {
    let mut m = RouteMinute::new("r", "chat", T0);
    m.record(false, 9_000); // ≤ 10 s bucket: fast
    m.record(false, 14_000); // ≤ 15 s bucket: fast, since 12 s rounds up to 15 s
    m.record(false, 16_000); // ≤ 20 s bucket: slow
    m.record(true, 100); // bad by status, never counted twice
    let policy = BudgetPolicy {
        latency: Some(LatencySli { threshold_ms: 12_000, percentile: 99.0 }),
        ..BudgetPolicy::new(0.9, days(1))
    };
    let r = evaluate(&policy, &[m.clone()], T0).unwrap();
    assert_eq!((r.consumed.as_str(), r.good_events, r.total_events), ("2", 2, 4));
    let exact = BudgetPolicy { latency: Some(LatencySli { threshold_ms: 10_000, percentile: 99.0 }), ..policy };
    assert_eq!(evaluate(&exact, &[m], T0).unwrap().consumed, "3");
}

#[test]
fn a_slice_is_bad_when_its_percentile_latency_exceeds_the_threshold() {
    let policy = BudgetPolicy {
        latency: Some(LatencySli { threshold_ms: 1_000, percentile: 99.0 }),
        ..timeslices(0.99, days(1))
    };
    let slice = |slow: u64| {
        let mut m = RouteMinute::new("r", "chat", T0);
        for i in 0..100 {
            m.record(false, if i < slow { 5_000 } else { 200 });
        }
        m
    };
    // p99 of 100 requests with 1 slow is still ≤ 1 s; with 2 slow it is not.
    assert_eq!(evaluate(&policy, &[slice(1)], T0).unwrap().consumed, "0s");
    assert_eq!(evaluate(&policy, &[slice(2)], T0).unwrap().consumed, "1m");
}

#[test]
fn page_fires_when_both_windows_burn_and_resolves_as_they_move() {
    // 100 requests a minute for days; 5% errors during the hour T0..T0+59. 99.9%:
    // that hour burns at 0.05 ÷ 0.001 = 50.
    let data: Vec<RouteMinute> = (T0 - 5000..=T0 + 200)
        .map(|t| if (T0..T0 + 60).contains(&t) { minute("r", t, 95, 5) } else { minute("r", t, 100, 0) })
        .collect();
    let policy = BudgetPolicy::new(0.999, days(30));
    let at = |now| evaluate(&policy, &data, now).unwrap();

    // 10 minutes in: 5m burns at 50 but 1h only at 50/6000 ÷ 0.001 = 8.3 and 6h at 1.4.
    let r = at(T0 + 9);
    assert_eq!((burn(&r, "5m"), burn(&r, "1h"), burn(&r, "6h")), ("50.0".into(), "8.3".into(), "1.4".into()));
    assert!(r.firing_alerts.is_empty());
    assert_eq!(r.state, BudgetState::Healthy);

    // The whole hour: 1h at 50 > 14.4 with 5m at 50; 6h at 8.3 > 6 with 30m at 50. Both
    // page tiers fire, reported once; the 3d burn is 0.7 < 1, so no ticket.
    let r = at(T0 + 59);
    assert_eq!((burn(&r, "1h"), burn(&r, "6h"), burn(&r, "3d")), ("50.0".into(), "8.3".into(), "0.7".into()));
    assert_eq!(r.firing_alerts, ["page"]);
    assert_eq!(r.state, BudgetState::Burning);

    // 5 clean minutes later the fast tier resolves, the 6h/30m tier still fires
    // (30m window: 25 bad minutes → 41.7).
    let r = at(T0 + 64);
    assert_eq!(burn(&r, "5m"), "0.0");
    assert_eq!(r.firing_alerts, ["page"]);

    // 30 clean minutes later the 30m window is clean too: resolved.
    let r = at(T0 + 89);
    assert!(r.firing_alerts.is_empty(), "{r:?}");
    assert_eq!(r.state, BudgetState::Healthy);
    assert_eq!(r.consumed, "300");
}

#[test]
fn routes_are_added_up_and_future_minutes_ignored() {
    let data = [minute("a", T0, 50, 0), minute("b", T0, 49, 1), minute("a", T0 + 1, 0, 100)];
    let r = evaluate(&BudgetPolicy::new(0.99, days(1)), &data, T0).unwrap();
    assert_eq!((r.good_events, r.total_events, r.consumed.as_str()), (99, 100, "1"));
    assert_eq!(r.consumed_percent, "100.0");
}

#[test]
fn invalid_policies_name_the_field() {
    let err = |p: BudgetPolicy| evaluate(&p, &[], T0).unwrap_err().to_string();
    assert_eq!(err(BudgetPolicy::new(1.0, days(30))), "objective 1 must be between 0.5 and 1 (exclusive), e.g. 0.9995");
    assert_eq!(
        err(BudgetPolicy::new(0.99, Duration::from_secs(90))),
        "window 90s must be a positive whole number of minutes"
    );
    assert_eq!(
        err(BudgetPolicy { timeslice: Some(minutes(7)), ..timeslices(0.99, minutes(60)) }),
        "timeslice 420s must be a positive whole number of minutes dividing the window 3600s"
    );
    assert_eq!(
        err(BudgetPolicy {
            latency: Some(LatencySli { threshold_ms: 10, percentile: 100.0 }),
            ..BudgetPolicy::new(0.99, days(1))
        }),
        "latency percentile 100 must be between 0 and 100 (exclusive)"
    );
    let mut p = BudgetPolicy::new(0.99, days(1));
    p.alerts[1].burn_rate = 0.0;
    assert_eq!(err(p), "alert \"page\": burnRate must be a positive number");
}

#[test]
fn lookback_covers_window_alerts_and_the_3d_burn_rate() {
    assert_eq!(BudgetPolicy::new(0.99, days(30)).lookback_minutes(), 30 * 1440);
    assert_eq!(BudgetPolicy::new(0.99, minutes(60)).lookback_minutes(), 3 * 1440);
    let mut p = BudgetPolicy::new(0.99, minutes(60));
    p.alerts[0].long = days(7);
    assert_eq!(p.lookback_minutes(), 7 * 1440);
}

#[test]
fn durations_use_their_largest_units_without_zero_parts() {
    let f = |secs| format_duration(Duration::from_secs(secs));
    assert_eq!(f(1296), "21m36s");
    assert_eq!(f(302), "5m2s");
    assert_eq!(f(3600), "1h");
    assert_eq!(f(3605), "1h5s");
    assert_eq!(f(2 * 86_400 + 3 * 3600), "2d3h");
    assert_eq!(f(0), "0s");
    assert_eq!(format_duration(Duration::from_millis(1800)), "1s800ms");
}

#[test]
fn a_minute_series_keeps_what_it_is_told_to() {
    let one = |total| MinuteCounts { total, ..MinuteCounts::default() };
    let mut s = MinuteSeries::new(10);
    s.add(9, &one(100));
    s.add(12, &one(1));
    s.add(12, &one(2));
    s.add(15, &one(4));
    assert_eq!([9, 10, 12, 15, 16].map(|m| s.get(m).total), [0, 0, 3, 4, 0]);
    s.keep(11, 15);
    assert_eq!([10, 12, 15].map(|m| s.get(m).total), [0, 3, 0]);
    s.keep(5, 100);
    assert_eq!(s.get(12).total, 3, "moving the start back keeps the minutes where they were");
    s.add(5, &one(8));
    assert_eq!(s.get(5).total, 8);
    s.keep(13, 13);
    assert_eq!(s, MinuteSeries::new(13));
}
