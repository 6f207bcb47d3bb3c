//! The candidate-order rules of docs/design.md §4.1, proven on virtual time: each test
//! drives [`Health`](crate::health::Health) and [`order`](super::order::order) with an
//! explicit `now`, walking the candidates as the dispatcher does, so minutes of traffic
//! run in milliseconds and a busy machine cannot change the answer.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::config::{Carry, Route, Runtime};
use crate::health::{Circuit, HealthSettings};
use crate::outcome::Outcome;
use crate::route::order::order;
use crate::telemetry::metrics::Metrics;

/// A route `chat` over `primary` and `backup` with these weights; `breaker` is the
/// primary's `circuitBreaker` as YAML flow mapping (`{}` for the defaults).
fn route(primary: u32, backup: u32, breaker: &str) -> Arc<Route> {
    let yaml = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: primary}}\n\
         spec: {{protocol: openai, baseUrl: 'http://127.0.0.1:9/v1', circuitBreaker: {breaker}}}\n---\n\
         apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: backup}}\n\
         spec: {{protocol: openai, baseUrl: 'http://127.0.0.1:9/v1'}}\n---\n\
         apiVersion: sluice.dev/v1alpha1\nkind: ModelRoute\nmetadata: {{name: chat}}\n\
         spec: {{model: chat-model, candidates: [{{upstream: primary, weight: {primary}}}, {{upstream: backup, weight: {backup}}}]}}\n"
    );
    let mut manifests = sluice_crds::Manifests::default();
    manifests.parse_str("test.yaml", &yaml);
    let resolved = sluice_crds::resolve(&manifests, &|_: &str, _: &str, _: &str| false);
    assert!(resolved.is_clean(), "{:?}", resolved.problems);
    let runtime = Runtime::build(resolved.snapshot, &Carry::default(), &Metrics::new()).unwrap();
    runtime.routes.get("chat-model").cloned().unwrap()
}

/// Requests against a route on a clock that only moves when told to.
struct Traffic {
    route: Arc<Route>,
    settings: HealthSettings,
    now: Instant,
    rng: SmallRng,
}

/// What one request did.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    /// Upstreams tried, in order.
    tried: Vec<&'static str>,
    /// Whether the first one held a trial slot.
    trial: bool,
}

impl Served {
    fn first(&self) -> &'static str {
        self.tried.first().copied().unwrap_or("none")
    }
}

impl Traffic {
    fn new(route: Arc<Route>) -> Self {
        Self { route, settings: HealthSettings::default(), now: Instant::now(), rng: SmallRng::seed_from_u64(7) }
    }

    /// One request at the current instant: one walk over the candidate order, each
    /// attempt answered as `answer` says for that upstream and recorded in its health,
    /// until one succeeds. Trial slots of candidates left untried are given back, as
    /// the dispatcher's held trials are.
    fn request(&mut self, answer: impl Fn(&str) -> Outcome) -> Served {
        let excluded = vec![false; self.route.candidates.len()];
        let picks = order(&self.route, &self.settings, self.now, &excluded, &mut self.rng);
        let mut served = Served { tried: Vec::new(), trial: picks.first().is_some_and(|p| p.trial) };
        for (i, pick) in picks.iter().enumerate() {
            let up = &self.route.candidates[pick.idx].upstream;
            let name: &'static str = if up.cfg.name == "primary" { "primary" } else { "backup" };
            served.tried.push(name);
            let outcome = answer(name);
            up.health.record(outcome, pick.trial, None, &up.cfg.circuit_breaker, &self.settings, self.now);
            if outcome == Outcome::Ok {
                for untried in picks.iter().skip(i + 1).filter(|p| p.trial) {
                    self.route.candidates[untried.idx].upstream.health.cancel_trial();
                }
                break;
            }
        }
        served
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    fn primary_ratio(&self) -> f64 {
        self.route.candidates[0].upstream.health.success_ratio(&self.settings, self.now)
    }

    fn primary_circuit(&self) -> Circuit {
        self.route.candidates[0].upstream.health.circuit(self.now)
    }
}

fn healthy(_: &str) -> Outcome {
    Outcome::Ok
}

fn primary_down(name: &str) -> Outcome {
    if name == "primary" { Outcome::Http5xx } else { Outcome::Ok }
}

#[test]
fn a_failing_primary_drops_below_a_healthy_backup_within_5s_at_20_rps() {
    let gap = Duration::from_millis(50);
    // The hardest case: a primary with a full window of successes behind it.
    let mut t = Traffic::new(route(100, 50, "{}"));
    for _ in 0..100 {
        assert_eq!(t.request(healthy).first(), "primary");
        t.advance(gap);
    }
    let outage = t.now;
    let mut tried_first = 0;
    while t.request(primary_down).first() == "primary" {
        tried_first += 1;
        t.advance(gap);
    }
    assert!(t.now - outage <= Duration::from_secs(5), "still first {:?} into the outage", t.now - outage);
    // 50 of the last 100 attempts failed: the breaker (50 %, at least 20) opened.
    assert_eq!(tried_first, 50);
    assert_eq!(t.primary_circuit(), Circuit::Open);
    // From then on the backup serves alone until a trial is due, openFor (30 s) after
    // the failure that opened the circuit; the trial fails and opens it again.
    let opened = t.now - gap;
    while t.now - opened < Duration::from_secs(30) {
        assert_eq!(t.request(primary_down).tried, ["backup"], "at {:?}", t.now - opened);
        t.advance(gap);
    }
    assert_eq!(t.request(primary_down), Served { tried: vec!["primary", "backup"], trial: true });
    assert_eq!(t.primary_circuit(), Circuit::Open);
}

#[test]
fn a_weight_led_primary_falls_behind_by_the_arithmetic_of_its_ratio() {
    // A breaker that cannot open within 100 samples: only the weights decide.
    let mut t = Traffic::new(route(100, 51, "{minimumRequests: 1000}"));
    for _ in 0..20 {
        t.request(healthy);
        t.advance(Duration::from_millis(50));
    }
    let mut tried_first = 0;
    while t.request(primary_down).first() == "primary" {
        tried_first += 1;
        t.advance(Duration::from_millis(50));
    }
    // 100 × 20/(20 + k) < 51 first holds at k = 20.
    assert_eq!(tried_first, 20);
    assert_eq!(t.primary_ratio(), 0.5);
    let weight = t.route.candidates[0].upstream.metrics.effective_weight.get();
    assert_eq!(weight, 50.0, "sluice_upstream_effective_weight follows the ratio");
}

#[test]
fn a_demoted_upstream_gets_a_trial_after_half_of_open_for() {
    let mut t = Traffic::new(route(100, 51, "{minimumRequests: 1000, openFor: 30s}"));
    for _ in 0..20 {
        t.request(healthy);
    }
    while t.request(primary_down).first() == "primary" {}
    let last_failure = t.now;
    // Recovered at once, but nothing tries it until its trial is due.
    let step = Duration::from_millis(250);
    while t.now - last_failure < Duration::from_secs(15) {
        assert_eq!(t.request(healthy).tried, ["backup"], "at {:?}", t.now - last_failure);
        t.advance(step);
    }
    assert_eq!(t.now - last_failure, Duration::from_secs(15));
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: true });
    // The successful trial cleared its failure history: it leads again, alone.
    assert_eq!(t.primary_ratio(), 1.0);
    for _ in 0..5 {
        assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: false });
    }
    assert_eq!(t.route.candidates[0].upstream.metrics.effective_weight.get(), 100.0);
}

#[test]
fn a_failed_trial_demotes_again_and_only_one_trial_runs_at_a_time() {
    let mut t = Traffic::new(route(100, 51, "{minimumRequests: 1000, openFor: 30s}"));
    t.request(primary_down);
    t.advance(Duration::from_secs(15));
    let excluded = [false, false];
    let picks = order(&t.route, &t.settings, t.now, &excluded, &mut t.rng);
    assert!(picks[0].trial, "{picks:?}");
    // A second request while the trial runs: no second trial, the backup leads.
    assert_eq!(t.request(healthy), Served { tried: vec!["backup"], trial: false });
    // The trial fails: the next one is due openFor/2 after it.
    let primary = &t.route.candidates[0].upstream;
    primary.health.record(Outcome::Http5xx, true, None, &primary.cfg.circuit_breaker, &t.settings, t.now);
    t.advance(Duration::from_millis(14_999));
    assert_eq!(t.request(healthy).first(), "backup");
    t.advance(Duration::from_millis(1));
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: true });
}

#[test]
fn an_open_circuit_gets_its_trial_after_open_for_and_a_success_closes_it() {
    let gap = Duration::from_millis(50);
    let mut t = Traffic::new(route(100, 50, "{openFor: 30s}"));
    for _ in 0..100 {
        t.request(healthy);
        t.advance(gap);
    }
    while t.request(primary_down).first() == "primary" {
        t.advance(gap);
    }
    assert_eq!(t.primary_circuit(), Circuit::Open);
    let opened = t.now - gap;
    t.advance(Duration::from_secs(30) - gap - Duration::from_millis(1));
    assert_eq!(t.request(healthy).tried, ["backup"], "open for less than openFor");
    t.advance(Duration::from_millis(1));
    assert_eq!(t.now - opened, Duration::from_secs(30));
    assert_eq!(t.primary_circuit(), Circuit::HalfOpen);
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: true });
    // Half-open success clears the history: closed, ratio 1.0, full weight.
    assert_eq!(t.primary_circuit(), Circuit::Closed);
    assert_eq!(t.primary_ratio(), 1.0);
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: false });
}

#[test]
fn a_recovered_primary_serves_again_within_30s_at_one_request_every_4s() {
    let gap = Duration::from_secs(4);
    // Outages of 60 s to 76 s, so that the recovery falls at every phase of the
    // requests and of the trials (one per openFor/2 = 15 s): the bound holds for all.
    for extra_ms in (0..16_000).step_by(250) {
        let mut t = Traffic::new(route(100, 50, "{}"));
        for _ in 0..2 {
            assert_eq!(t.request(healthy).first(), "primary");
            t.advance(gap);
        }
        let outage = t.now;
        let recovered = outage + Duration::from_secs(60) + Duration::from_millis(extra_ms);
        let mut asked = 0;
        let back = loop {
            let down = t.now < recovered;
            let answer: fn(&str) -> Outcome = if down { primary_down } else { healthy };
            let served = t.request(answer);
            if down {
                assert_eq!(served.tried.last(), Some(&"backup"), "the backup answers every request");
                asked += u32::from(served.tried.contains(&"primary"));
            } else if served.first() == "primary" {
                break t.now - recovered;
            }
            t.advance(gap);
            assert!(t.now < recovered + Duration::from_secs(60), "never back (outage {extra_ms} ms over 60 s)");
        };
        // 100 × 2/(2 + k) < 50 first holds at k = 3; then a trial every 15 s at most.
        assert!((4..=7).contains(&asked), "the failing primary was asked {asked} times");
        assert!(back <= Duration::from_secs(30), "back {back:?} after recovering (outage {extra_ms} ms over 60 s)");
    }
}

#[test]
fn old_failures_age_out_of_the_window() {
    // No trial within the test (openFor 1h: a demoted retry after 30 min): only the
    // 60 s window can bring the primary back.
    let gap = Duration::from_millis(50);
    let mut t = Traffic::new(route(100, 51, "{minimumRequests: 1000, openFor: 1h}"));
    for _ in 0..20 {
        t.request(healthy);
        t.advance(gap);
    }
    while t.request(primary_down).first() == "primary" {
        t.advance(gap);
    }
    let last_failure = t.now - gap;
    t.advance(Duration::from_secs(60) - gap);
    assert_eq!(t.request(healthy).tried, ["backup"], "a failure exactly 60 s old still counts");
    t.advance(Duration::from_millis(1));
    assert_eq!(t.primary_ratio(), 1.0, "no data left counts as healthy");
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: false });
    assert!(t.now - last_failure > Duration::from_secs(60));
}

#[test]
fn when_every_candidate_is_skipped_they_are_tried_anyway_in_order() {
    let mut t = Traffic::new(route(100, 50, "{}"));
    let both_down = |_: &str| Outcome::Http5xx;
    for _ in 0..20 {
        t.request(both_down);
    }
    assert_eq!(t.primary_circuit(), Circuit::Open);
    // The backup's circuit (default breaker) is open too: fail open, by weight.
    assert_eq!(t.request(healthy).tried, ["primary"]);
}

#[test]
fn a_committed_trial_gives_its_slot_back_when_finished_or_abandoned() {
    let mut t = Traffic::new(route(100, 51, "{minimumRequests: 1000, openFor: 30s}"));
    t.request(primary_down);
    t.advance(Duration::from_secs(15));
    let primary = t.route.candidates[0].upstream.clone();
    let excluded = [false, false];
    let trial_first = |t: &mut Traffic| order(&t.route, &t.settings, t.now, &excluded, &mut t.rng)[0];
    let in_flight = || crate::attempt::InFlight::enter(&primary.in_flight);

    // The trial's first byte arrived, then the client went away: dropped unfinished,
    // the attempt gives its slot back, so the next request gets the trial.
    let pick = trial_first(&mut t);
    assert!(pick.trial);
    drop(crate::attempt::Committed::new(
        primary.clone(),
        pick.trial,
        Duration::from_millis(5),
        in_flight(),
        crate::telemetry::traces::AttemptTrace::none(),
    ));
    assert_eq!(primary.in_flight.load(std::sync::atomic::Ordering::Relaxed), 0);
    let pick = trial_first(&mut t);
    assert!(pick.trial, "the abandoned trial's slot was not given back");

    // Finished, it is recorded with its slot: the success clears the history.
    let committed = crate::attempt::Committed::new(
        primary.clone(),
        pick.trial,
        Duration::from_millis(5),
        in_flight(),
        crate::telemetry::traces::AttemptTrace::none(),
    );
    let books = crate::attempt::Books::new(t.settings, crate::config::source::Secrets::new(None));
    committed.finish(Outcome::Ok, &books);
    assert_eq!(t.primary_ratio(), 1.0);
    assert_eq!(t.request(healthy), Served { tried: vec!["primary"], trial: false });
}
