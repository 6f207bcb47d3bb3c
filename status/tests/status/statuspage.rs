#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

//! `/status/api/v2/summary.json` has the Statuspage v2 summary's fields, types and
//! values, and `/status` shows the same states.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_ledger::testing::TestDb;

use crate::support::{get, router, seeded};

const STATUSES: [&str; 4] = ["operational", "degraded_performance", "partial_outage", "major_outage"];

#[derive(Clone, Copy, Debug)]
enum Kind {
    Str,
    OptStr,
    Num,
    Bool,
    Time,
    OptTime,
    Date,
    Obj,
    Arr,
    Null,
}

/// Checks that `v` is an object with exactly `fields`, each of its kind.
fn shape(what: &str, v: &Value, fields: &[(&str, Kind)]) {
    let obj = v.as_object().unwrap_or_else(|| panic!("{what} is not an object: {v}"));
    let mut want: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    want.sort();
    let mut have: Vec<&str> = obj.keys().map(String::as_str).collect();
    have.sort();
    assert_eq!(have, want, "{what}: field names");
    for (name, kind) in fields {
        let f = &obj[*name];
        let ok = match kind {
            Kind::Str => f.is_string(),
            Kind::OptStr => f.is_string() || f.is_null(),
            Kind::Num => f.is_u64(),
            Kind::Bool => f.is_boolean(),
            Kind::Time => f.as_str().is_some_and(is_rfc3339),
            Kind::OptTime => f.is_null() || f.as_str().is_some_and(is_rfc3339),
            Kind::Date => {
                f.as_str().is_some_and(|s| s.len() == 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-')
            }
            Kind::Obj => f.is_object(),
            Kind::Arr => f.is_array(),
            Kind::Null => f.is_null(),
        };
        assert!(ok, "{what}.{name} should be {kind:?}, is {f}");
    }
}

fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && s.ends_with('Z')
}

#[tokio::test]
async fn the_summary_has_statuspage_v2_fields_types_and_values() {
    let db = TestDb::sqlite();
    let (ledger, catalog) = seeded(&db).await;
    let app = router(ledger, catalog);
    let (status, ct, body) = get(&app, "/status/api/v2/summary.json").await;
    assert_eq!(status, 200, "{body}");
    assert!(ct.starts_with("application/json"), "{ct}");
    let v: Value = serde_json::from_str(&body).unwrap();
    use Kind::*;
    shape(
        "summary",
        &v,
        &[("page", Obj), ("status", Obj), ("components", Arr), ("incidents", Arr), ("scheduled_maintenances", Arr)],
    );
    shape("page", &v["page"], &[("id", Str), ("name", Str), ("url", Str), ("time_zone", Str), ("updated_at", Time)]);
    assert_eq!(v["page"]["url"], "http://status.example/status", "the url as requested");
    shape("status", &v["status"], &[("indicator", Str), ("description", Str)]);
    assert!(["none", "minor", "major", "critical"].contains(&v["status"]["indicator"].as_str().unwrap()));
    assert_eq!(v["scheduled_maintenances"], serde_json::json!([]));

    let member = [
        ("id", Str),
        ("name", Str),
        ("status", Str),
        ("created_at", Time),
        ("updated_at", Time),
        ("position", Num),
        ("description", OptStr),
        ("showcase", Bool),
        ("start_date", Date),
        ("group_id", OptStr),
        ("page_id", Str),
        ("group", Bool),
        ("only_show_if_degraded", Bool),
    ];
    let mut group_fields = member.to_vec();
    group_fields.push(("components", Arr));
    let components = v["components"].as_array().unwrap();
    assert_eq!(components.len(), 2 + 3, "two groups, three candidates");
    let by_id: BTreeMap<&str, &Value> = components.iter().map(|c| (c["id"].as_str().unwrap(), c)).collect();
    for c in components {
        assert!(STATUSES.contains(&c["status"].as_str().unwrap()), "{c}");
        assert_eq!(c["page_id"], v["page"]["id"]);
        if c["group"] == true {
            shape("group", c, &group_fields);
            assert!(c["group_id"].is_null());
            for member_id in c["components"].as_array().unwrap() {
                let m = by_id[member_id.as_str().unwrap()];
                assert_eq!(m["group_id"], c["id"], "{m}");
                assert!(
                    m["name"].as_str().unwrap().starts_with(&format!("{} via ", c["name"].as_str().unwrap())),
                    "{m}"
                );
            }
        } else {
            shape("component", c, &member);
            assert!(by_id.contains_key(c["group_id"].as_str().unwrap()), "{c}");
        }
    }
    let status_of = |name: &str| {
        components.iter().find(|c| c["name"] == name).map(|c| c["status"].as_str().unwrap().to_owned()).unwrap()
    };
    assert_eq!(status_of("gpt via default/primary"), "major_outage");
    assert_eq!(status_of("gpt via default/backup"), "operational");
    assert_eq!(status_of("gpt"), "degraded_performance", "clients are served by the backup");
    assert_eq!(status_of("claude"), "operational");
    assert_eq!(v["status"]["indicator"], "minor");

    let incidents = v["incidents"].as_array().unwrap();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    let i = &incidents[0];
    shape(
        "incident",
        i,
        &[
            ("id", Str),
            ("name", Str),
            ("status", Str),
            ("created_at", Time),
            ("updated_at", Time),
            ("monitoring_at", OptTime),
            ("resolved_at", Null),
            ("impact", Str),
            ("shortlink", OptStr),
            ("started_at", Time),
            ("page_id", Str),
            ("incident_updates", Arr),
            ("components", Arr),
        ],
    );
    assert_eq!(i["name"], "gpt: degraded performance");
    assert_eq!(i["impact"], "minor");
    assert!(["investigating", "identified", "monitoring"].contains(&i["status"].as_str().unwrap()));
    for u in i["incident_updates"].as_array().unwrap() {
        shape(
            "incident update",
            u,
            &[
                ("id", Str),
                ("status", Str),
                ("body", Str),
                ("incident_id", Str),
                ("created_at", Time),
                ("updated_at", Time),
                ("display_at", Time),
                ("affected_components", Arr),
                ("deliver_notifications", Bool),
                ("custom_tweet", OptStr),
                ("tweet_id", OptStr),
            ],
        );
        assert_eq!(u["incident_id"], i["id"]);
        for a in u["affected_components"].as_array().unwrap() {
            shape("affected component", a, &[("code", Str), ("name", Str), ("old_status", Str), ("new_status", Str)]);
            assert!(STATUSES.contains(&a["new_status"].as_str().unwrap()));
        }
    }
    for c in i["components"].as_array().unwrap() {
        shape("incident component", c, &member);
    }
}

/// `data-component="id" data-status="status"` pairs of the HTML.
fn html_states(html: &str) -> BTreeMap<String, String> {
    let mut states = BTreeMap::new();
    for part in html.split("data-component=\"").skip(1) {
        let id = &part[..part.find('"').unwrap()];
        let rest = &part[part.find("data-status=\"").unwrap() + 13..];
        states.insert(id.to_owned(), rest[..rest.find('"').unwrap()].to_owned());
    }
    states
}

#[tokio::test]
async fn the_html_shows_the_states_of_the_json_in_words() {
    let db = TestDb::sqlite();
    let (ledger, catalog) = seeded(&db).await;
    let app = router(ledger, catalog);
    let (status, ct, html) = get(&app, "/status").await;
    assert_eq!(status, 200, "{html}");
    assert_eq!(ct, "text/html; charset=utf-8");
    let (_, _, json) = get(&app, "/status/api/v2/summary.json").await;
    let v: Value = serde_json::from_str(&json).unwrap();
    let json_states: BTreeMap<String, String> = v["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(html_states(&html), json_states);
    assert!(html.contains(&format!("data-indicator=\"{}\"", v["status"]["indicator"].as_str().unwrap())));
    // In words, not colour alone; readable on a phone; refreshing itself; no script.
    assert!(html.contains(">Degraded performance<"), "{html}");
    assert!(html.contains(">Major outage<"));
    assert!(html.contains(">Operational<"));
    assert!(html.contains("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"));
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"30\">"));
    assert!(!html.contains("<script"));
    // The incident, the bar's day with traffic 10 days ago, the candidate's numbers.
    assert!(html.contains("gpt: degraded performance"));
    assert!(html.contains("ongoing"));
    assert!(html.contains("title=\"") && html.contains(": 50.0 %\""), "the day with one bad of two requests");
    assert!(html.contains("no data\""));
    assert!(html.contains("≤ 150 ms / ≤ 150 ms"), "first byte of the backup");
    assert!(html.contains("<td>open</td>"), "the primary's circuit");
    assert!(html.contains("gw-test"));
    assert!(html.contains("docs/operate.md#upstream-down"));
}

#[tokio::test]
async fn without_synthetic_checks_the_page_says_so() {
    let db = TestDb::sqlite();
    let (ledger, mut catalog) = seeded(&db).await;
    for r in &mut catalog.routes {
        r.synthetic_interval_ms = None;
    }
    let (_, _, html) = get(&router(ledger, catalog), "/status").await;
    assert!(html.contains("id=\"no-synthetic\""), "{html}");
    assert!(html.contains("states come from live traffic and circuits only"));
}
