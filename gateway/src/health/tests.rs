use super::*;

fn cb() -> CircuitBreakerConfig {
    CircuitBreakerConfig { failure_rate_percent: 50, minimum_requests: 20, open_for_ms: 30_000, half_open_requests: 3 }
}

#[test]
fn no_data_counts_as_healthy() {
    let h = Health::default();
    let s = HealthSettings::default();
    assert_eq!(h.success_ratio(&s, Instant::now()), 1.0);
    assert_eq!(h.availability(&cb(), &s, Instant::now()), Availability::Available(1.0));
}

#[test]
fn ratio_counts_the_last_hundred_attempts_in_the_window() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    for i in 0..150 {
        h.record(if i < 75 { Outcome::Http5xx } else { Outcome::Ok }, false, None, &cb(), &s, t0);
    }
    // 100 newest: 25 failures, 75 successes.
    assert_eq!(h.success_ratio(&s, t0), 0.75);
    // Old failures age out of the window.
    assert_eq!(h.success_ratio(&s, t0 + Duration::from_secs(61)), 1.0);
}

#[test]
fn circuit_opens_then_half_open_trial_success_clears_history() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    for _ in 0..20 {
        h.record(Outcome::Http5xx, false, None, &cb(), &s, t0);
    }
    assert_eq!(h.circuit(t0), Circuit::Open);
    assert_eq!(h.availability(&cb(), &s, t0), Availability::Skipped);
    let later = t0 + Duration::from_secs(31);
    assert_eq!(h.availability(&cb(), &s, later), Availability::Trial);
    h.record(Outcome::Ok, true, None, &cb(), &s, later);
    assert_eq!(h.circuit(later), Circuit::Closed);
    assert_eq!(h.success_ratio(&s, later), 1.0);
}

#[test]
fn failed_trial_reopens_the_circuit() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    for _ in 0..20 {
        h.record(Outcome::Connect, false, None, &cb(), &s, t0);
    }
    let later = t0 + Duration::from_secs(31);
    assert_eq!(h.availability(&cb(), &s, later), Availability::Trial);
    h.record(Outcome::Connect, true, None, &cb(), &s, later);
    assert_eq!(h.circuit(later), Circuit::Open);
}

#[test]
fn demoted_upstream_gets_a_trial_after_open_for() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    h.record(Outcome::Http5xx, false, None, &cb(), &s, t0);
    assert_eq!(h.availability(&cb(), &s, t0), Availability::Available(0.0));
    // Half of openFor (30 s) later.
    assert_eq!(h.availability(&cb(), &s, t0 + Duration::from_secs(14)), Availability::Available(0.0));
    let later = t0 + Duration::from_secs(15);
    assert_eq!(h.availability(&cb(), &s, later), Availability::Trial);
    // Only one trial at a time.
    assert_eq!(h.availability(&cb(), &s, later), Availability::Available(0.0));
}

#[test]
fn throttled_upstream_cools_down_then_gets_a_trial() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    h.record(Outcome::Http429, false, Some(Duration::from_secs(2)), &cb(), &s, t0);
    assert_eq!(h.availability(&cb(), &s, t0 + Duration::from_secs(1)), Availability::Skipped);
    // Its one attempt failed (ratio 0), but it said when to come back: a trial then,
    // not after half of openFor as for a 5xx.
    let back = t0 + Duration::from_secs(2);
    assert_eq!(h.availability(&cb(), &s, back), Availability::Trial);
    assert_eq!(h.availability(&cb(), &s, back), Availability::Available(0.0), "one trial at a time");
    h.record(Outcome::Ok, true, None, &cb(), &s, back);
    assert_eq!(h.availability(&cb(), &s, back), Availability::Available(1.0));
}

#[test]
fn a_throttled_trial_cools_down_again_and_a_later_5xx_waits_half_of_open_for() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    h.record(Outcome::Http429, false, None, &cb(), &s, t0);
    let back = t0 + s.default_cooldown;
    assert_eq!(h.availability(&cb(), &s, back), Availability::Trial);
    h.record(Outcome::Http429, true, None, &cb(), &s, back);
    assert_eq!(h.availability(&cb(), &s, back), Availability::Skipped, "cooling down again");
    let again = back + s.default_cooldown;
    assert_eq!(h.availability(&cb(), &s, again), Availability::Trial);
    h.record(Outcome::Http5xx, true, None, &cb(), &s, again);
    assert_eq!(h.availability(&cb(), &s, again + Duration::from_secs(14)), Availability::Available(0.0));
    assert_eq!(h.availability(&cb(), &s, again + Duration::from_secs(15)), Availability::Trial);
}

#[test]
fn client_errors_do_not_touch_health() {
    let h = Health::default();
    let s = HealthSettings::default();
    h.record(Outcome::Http4xx, false, None, &cb(), &s, Instant::now());
    assert_eq!(h.success_ratio(&s, Instant::now()), 1.0);
}

#[test]
fn idle_auto_is_ten_times_the_p99_gap_between_one_second_and_the_cap() {
    let cap = Duration::from_secs(60);
    let h = Health::default();
    // Too few gaps: the cap.
    for _ in 0..19 {
        h.record_gap(Duration::from_millis(200));
    }
    assert_eq!(h.idle_limit(true, cap), cap);
    h.record_gap(Duration::from_millis(200));
    assert_eq!(h.idle_limit(true, cap), Duration::from_secs(2));
    // The p99 follows the slow tail: 2 of 100 gaps at 500 ms.
    for i in 0..80 {
        h.record_gap(Duration::from_millis(if i < 2 { 500 } else { 10 }));
    }
    assert_eq!(h.idle_limit(true, cap), Duration::from_secs(5));
    // Fast streams get the floor, slow ones the cap.
    let fast = Health::default();
    for _ in 0..50 {
        fast.record_gap(Duration::from_millis(5));
    }
    assert_eq!(fast.idle_limit(true, cap), Duration::from_secs(1));
    let slow = Health::default();
    for _ in 0..50 {
        slow.record_gap(Duration::from_secs(9));
    }
    assert_eq!(slow.idle_limit(true, cap), cap);
    assert_eq!(slow.idle_limit(true, Duration::from_secs(30)), Duration::from_secs(30));
    // A fixed setting ignores the samples.
    assert_eq!(fast.idle_limit(false, Duration::from_secs(7)), Duration::from_secs(7));
}

#[test]
fn auto_watchdog_uses_three_times_p99_after_twenty_samples() {
    let h = Health::default();
    assert_eq!(h.first_byte_limit(FirstByte::Auto), Duration::from_secs(5));
    for _ in 0..20 {
        h.record_first_byte(Duration::from_millis(100));
    }
    assert_eq!(h.first_byte_limit(FirstByte::Auto), Duration::from_millis(300));
    let fast = Health::default();
    for _ in 0..20 {
        fast.record_first_byte(Duration::from_millis(1));
    }
    assert_eq!(fast.first_byte_limit(FirstByte::Auto), Duration::from_millis(50));
    assert_eq!(h.first_byte_limit(FirstByte::FixedMs(50)), Duration::from_millis(50));
}

#[test]
fn a_synthetic_check_is_the_trial_of_an_open_circuit() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    // Closed and healthy: a plain attempt, no slot taken.
    assert!(!h.check_trial(&cb(), &s, t0));
    for _ in 0..20 {
        h.record(Outcome::Http5xx, false, None, &cb(), &s, t0);
    }
    assert_eq!(h.circuit(t0), Circuit::Open);
    // Open, long before openFor ends: the check is still sent, as a trial.
    let t1 = t0 + Duration::from_secs(5);
    assert!(h.check_trial(&cb(), &s, t1));
    // It failed: open for another openFor from then, not from t0.
    h.record(Outcome::Http5xx, true, None, &cb(), &s, t1);
    assert_eq!(h.circuit(t0 + Duration::from_secs(31)), Circuit::Open);
    assert_eq!(h.circuit(t1 + Duration::from_secs(30)), Circuit::HalfOpen);
    // The next one succeeds: the circuit closes and the failures are forgotten, and its
    // slot was given back (live traffic gets all three half-open trials later).
    let t2 = t1 + Duration::from_secs(6);
    assert!(h.check_trial(&cb(), &s, t2));
    h.record(Outcome::Ok, true, None, &cb(), &s, t2);
    assert_eq!(h.circuit(t2), Circuit::Closed);
    assert_eq!(h.success_ratio(&s, t2), 1.0);
    assert!(!h.check_trial(&cb(), &s, t2));
}

#[test]
fn a_synthetic_check_takes_a_slot_beyond_the_half_open_ones() {
    let h = Health::default();
    let s = HealthSettings::default();
    let t0 = Instant::now();
    for _ in 0..20 {
        h.record(Outcome::Connect, false, None, &cb(), &s, t0);
    }
    let later = t0 + Duration::from_secs(31);
    for _ in 0..3 {
        assert_eq!(h.availability(&cb(), &s, later), Availability::Trial);
    }
    assert_eq!(h.availability(&cb(), &s, later), Availability::Skipped, "three live trials in flight");
    assert!(h.check_trial(&cb(), &s, later), "the check goes anyway, as a fourth trial");
    for _ in 0..4 {
        h.record(Outcome::Connect, true, None, &cb(), &s, later);
    }
    let reopened = later + Duration::from_secs(31);
    assert_eq!(h.availability(&cb(), &s, reopened), Availability::Trial, "every slot was given back");
}

/// The kept-sorted samples give what sorting the latest ones would, through the cap.
#[test]
fn latest_samples_p99_is_the_p99_of_the_last_cap_samples() {
    let (cap, mut latest, mut all) = (50, Latest::default(), Vec::new());
    assert_eq!(latest.p99(), 0);
    // A fixed, irregular sequence with repeats.
    for i in 0..400u32 {
        let ms = (i * 7919) % 113 + (i % 5) * 1000;
        latest.push(ms, cap);
        all.push(ms);
        let mut last: Vec<u32> = all.iter().rev().take(cap).copied().collect();
        last.sort_unstable();
        let rank = ((last.len() as f64) * 0.99).ceil() as usize;
        assert_eq!(latest.p99(), last[rank - 1], "after {} samples", i + 1);
        assert_eq!(latest.len(), last.len());
    }
}
