//! Rollups add up across writers and a route's inbound APIs; heartbeats upsert.

use std::time::{Duration, SystemTime};

use sluice_ledger::budget::{self, BudgetPolicy, LatencySli, MinuteSeries};
use sluice_ledger::{ALL_APIS, Heartbeat, Ledger, RouteMinute, UpstreamHeartbeat, UpstreamMinute};

use crate::on_both;
use crate::support::Db;

/// A `chat` minute of `route`.
fn route_minute(route: &str, minute: i64, good: u64, bad: u64) -> RouteMinute {
    api_minute(route, "chat", minute, good, bad)
}

/// `good` requests of latencies 40, 140, 240… ms, and `bad` ones with as many failovers.
fn api_minute(route: &str, api: &str, minute: i64, good: u64, bad: u64) -> RouteMinute {
    let mut m = RouteMinute::new(route, api, minute);
    for i in 0..good {
        m.record(false, 40 + i * 100);
    }
    for _ in 0..bad {
        m.record(true, 0);
    }
    m.failovers = bad;
    m
}

fn upstream_minute(upstream: &str, minute: i64, ok: u64, failed: u64) -> UpstreamMinute {
    let mut m = UpstreamMinute::new(upstream, minute);
    for _ in 0..ok {
        m.record("ok", Some(120));
    }
    for _ in 0..failed {
        m.record("first_byte_timeout", None);
    }
    m
}

async fn rollups_add_up(db: &Db) {
    let other = Ledger::connect(&db.url).await.unwrap();
    let writers = [db.ledger.clone(), other.clone()];
    let mut tasks = Vec::new();
    for (w, l) in writers.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for flush in 0..5u64 {
                let routes = [route_minute("ns/a", 100, 3, 1), route_minute("ns/b", 101, w as u64, 0)];
                let ups = [upstream_minute("ns/up", 100, 2, flush % 2)];
                l.write_rollups(&routes, &ups).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let l = &db.ledger;
    let a = l.route_minutes(&["ns/a".into()], 100, 100).await.unwrap();
    assert_eq!(a.len(), 1);
    let mut expected = RouteMinute::new("ns/a", ALL_APIS, 100);
    for _ in 0..10 {
        expected.merge(&route_minute("ns/a", 100, 3, 1));
    }
    assert_eq!(a[0], expected);
    assert_eq!((a[0].total, a[0].bad, a[0].failovers), (40, 10, 10));

    let both = l.route_minutes(&["ns/a".into(), "ns/b".into()], 0, 1000).await.unwrap();
    assert_eq!(
        both.iter().map(|m| (m.route.as_str(), m.minute, m.total)).collect::<Vec<_>>(),
        vec![("ns/a", 100, 40), ("ns/b", 101, 5)]
    );
    assert!(l.route_minutes(&["ns/a".into()], 101, 200).await.unwrap().is_empty());
    assert!(l.route_minutes(&[], 0, 1000).await.unwrap().is_empty());

    let ups = l.upstream_minutes(&["ns/up".into(), "ns/none".into()], 0, 1000).await.unwrap();
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].attempts_by_outcome["ok"], 20);
    assert_eq!(ups[0].attempts_by_outcome["first_byte_timeout"], 4);
    assert_eq!(ups[0].attempts(), 24);
    assert_eq!(ups[0].first_byte_buckets.iter().sum::<u64>(), 20);

    // ns/a@100, ns/up@100 and its two outcome rows.
    assert_eq!(l.prune_rollups(101, SystemTime::UNIX_EPOCH).await.unwrap(), 4);
    assert_eq!(l.route_minutes(&["ns/a".into(), "ns/b".into()], 0, 1000).await.unwrap().len(), 1);
    other.close().await;
}
on_both!(rollups, super::rollups_add_up);

/// The database's per-minute sums of a budget's routes are what the budget maths makes
/// of the full rows: the same report, whatever the latency threshold.
async fn budget_minutes_sum_in_the_database(db: &Db) {
    let l = &db.ledger;
    let routes = [
        route_minute("ns/a", 100, 7, 1),
        route_minute("ns/b", 100, 3, 2),
        route_minute("ns/a", 101, 12, 0),
        route_minute("ns/c", 101, 50, 50),
    ];
    l.write_rollups(&routes, &[]).await.unwrap();
    let keys: Vec<String> = vec!["ns/a".into(), "ns/b".into()];
    let rows = l.route_minutes(&keys, 0, 1000).await.unwrap();
    for threshold_ms in [None, Some(100), Some(400), Some(100_000)] {
        let mut policy = BudgetPolicy::new(0.99, Duration::from_secs(3600));
        policy.latency = threshold_ms.map(|threshold_ms| LatencySli { threshold_ms, percentile: 90.0 });
        let summed = l.budget_minutes(&keys, 0, 1000, policy.slow_from()).await.unwrap();
        assert_eq!(summed.iter().map(|(m, _)| *m).collect::<Vec<_>>(), [100, 101]);
        assert_eq!((summed[0].1.total, summed[0].1.bad), (13, 3));
        assert_eq!(summed[1].1.timed, 12, "ns/c is not one of the budget's routes");
        let mut series = MinuteSeries::new(0);
        for (minute, counts) in &summed {
            series.add(*minute, counts);
        }
        assert_eq!(
            budget::evaluate_minutes(&policy, &series, 110).unwrap(),
            budget::evaluate(&policy, &rows, 110).unwrap(),
            "threshold {threshold_ms:?}"
        );
        // Per route, the same numbers before they are added up.
        let per_route = l.budget_route_minutes(&keys, 0, 1000, policy.slow_from()).await.unwrap();
        let keyed: Vec<(&str, i64)> = per_route.iter().map(|(r, m, _)| (r.as_str(), *m)).collect();
        assert_eq!(keyed, [("ns/a", 100), ("ns/a", 101), ("ns/b", 100)]);
        let mut added = MinuteSeries::new(0);
        for (_, minute, counts) in &per_route {
            added.add(*minute, counts);
        }
        assert_eq!(added, series);
    }
    let slow = l.budget_minutes(&keys, 0, 1000, Some(0)).await.unwrap();
    assert_eq!(slow[1].1.slow, slow[1].1.timed);
    assert!(l.budget_minutes(&keys, 102, 1000, None).await.unwrap().is_empty());
    assert!(l.budget_minutes(&[], 0, 1000, None).await.unwrap().is_empty());
}
on_both!(budget_minutes, super::budget_minutes_sum_in_the_database);

/// A route's minute is stored as one row per inbound API, each adding up on its own, and
/// every read for budgets and status sums them back into the route's minute.
async fn apis_are_stored_apart_and_read_summed(db: &Db) {
    let l = &db.ledger;
    let chat = api_minute("ns/a", "chat", 100, 3, 1);
    let messages = api_minute("ns/a", "messages", 100, 2, 2);
    let more_messages = api_minute("ns/a", "messages", 100, 1, 0);
    l.write_rollups(&[chat.clone(), messages.clone(), api_minute("ns/b", "responses", 100, 1, 0)], &[]).await.unwrap();
    l.write_rollups(std::slice::from_ref(&more_messages), &[]).await.unwrap();

    let a = vec!["ns/a".to_owned()];
    let stored = l.route_api_minutes(&a, 0, 1000).await.unwrap();
    let mut messages_sum = messages.clone();
    messages_sum.merge(&more_messages);
    assert_eq!(stored, [chat.clone(), messages_sum.clone()]);
    assert_eq!(
        stored.iter().map(|m| (m.api.as_str(), m.total, m.bad)).collect::<Vec<_>>(),
        [("chat", 4, 1), ("messages", 5, 2)]
    );

    let mut route = RouteMinute::new("ns/a", ALL_APIS, 100);
    route.merge(&chat);
    route.merge(&messages_sum);
    assert_eq!(l.route_minutes(&a, 0, 1000).await.unwrap(), [route.clone()]);
    assert_eq!((route.total, route.bad, route.failovers), (9, 3, 3));

    // Good requests of 40, 140, 240 ms (chat) and 40, 140, 40 ms (messages): with a
    // 100 ms threshold, three are slow.
    let mut policy = BudgetPolicy::new(0.99, Duration::from_secs(3600));
    policy.latency = Some(LatencySli { threshold_ms: 100, percentile: 90.0 });
    let summed = l.budget_minutes(&a, 0, 1000, policy.slow_from()).await.unwrap();
    let c = &summed[0].1;
    assert_eq!((summed.len(), summed[0].0, c.total, c.bad, c.timed, c.slow), (1, 100, 9, 3, 6, 3));
    assert_eq!(
        budget::evaluate_minutes(&policy, &MinuteSeries::from_rows(0, &summed), 110).unwrap(),
        budget::evaluate(&policy, &stored, 110).unwrap(),
        "the budget of the API rows summed is the budget of the API rows"
    );
    let keys = vec!["ns/a".to_owned(), "ns/b".to_owned()];
    let per_route = l.budget_route_minutes(&keys, 0, 1000, None).await.unwrap();
    assert_eq!(
        per_route.iter().map(|(r, m, c)| (r.as_str(), *m, c.total, c.bad)).collect::<Vec<_>>(),
        [("ns/a", 100, 9, 3), ("ns/b", 100, 1, 0)]
    );

    // The status page's reads.
    let counts = l.route_counts(&a, 0).await.unwrap();
    assert_eq!(counts.iter().map(|c| (c.at, c.total, c.bad)).collect::<Vec<_>>(), [(100, 9, 3)]);
    let days = l.route_days(&a, 0, 0).await.unwrap();
    assert_eq!(days.iter().map(|d| (d.at, d.total, d.bad)).collect::<Vec<_>>(), [(0, 9, 3)]);

    // A minute summed over the APIs is not an API: writing it back is refused, and
    // nothing of that write is stored.
    for api in [ALL_APIS, ""] {
        let err = l.write_rollups(&[chat.clone(), api_minute("ns/a", api, 100, 1, 0)], &[]).await.unwrap_err();
        assert_eq!(err.to_string(), format!("route minute 100 of route \"ns/a\": api {api:?} is not an inbound API"));
    }
    assert_eq!(l.route_api_minutes(&a, 0, 1000).await.unwrap(), stored);

    // Retention deletes every API's row.
    assert_eq!(l.prune_rollups(101, SystemTime::UNIX_EPOCH).await.unwrap(), 3);
    assert!(l.route_api_minutes(&keys, 0, 1000).await.unwrap().is_empty());
}
on_both!(apis, super::apis_are_stored_apart_and_read_summed);

async fn heartbeats_upsert(db: &Db) {
    let l = &db.ledger;
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let beat = |id: &str, at: SystemTime, weight: f64| Heartbeat {
        gateway_id: id.into(),
        at,
        upstreams: vec![UpstreamHeartbeat {
            upstream: "ns/up".into(),
            circuit: "Closed".into(),
            effective_weight: weight,
            successes: 99,
            failures: 1,
        }],
    };
    l.heartbeat(beat("gw-1", t0, 100.0)).await.unwrap();
    l.heartbeat(beat("gw-1", t0 + Duration::from_secs(10), 50.0)).await.unwrap();
    // A late, older beat does not replace the newer one.
    l.heartbeat(beat("gw-1", t0 + Duration::from_secs(5), 75.0)).await.unwrap();
    l.heartbeat(beat("gw-2", t0 + Duration::from_secs(1), f64::NAN)).await.unwrap();

    let all = l.heartbeats(t0).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], beat("gw-1", t0 + Duration::from_secs(10), 50.0));
    assert_eq!(all[1].upstreams[0].effective_weight, 0.0);
    let recent = l.heartbeats(t0 + Duration::from_secs(2)).await.unwrap();
    assert_eq!(recent.iter().map(|h| h.gateway_id.as_str()).collect::<Vec<_>>(), ["gw-1"]);
}
on_both!(heartbeats, super::heartbeats_upsert);
