//! `timeouts.idle: auto` and `failover.midStream` resolve to what the gateway reads
//! (docs/design.md §2, §4.4, §4.5).

use crate::common;

use sluice_crds::resolve::defaults;

use common::{problems, resolve_text};

const MANIFESTS: &str = r#"---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: auto}
spec: {baseUrl: "http://127.0.0.1:9101/v1", timeouts: {idle: auto}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: fixed}
spec: {baseUrl: "http://127.0.0.1:9102/v1", timeouts: {idle: 30s}}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: bare}
spec: {baseUrl: "http://127.0.0.1:9103/v1"}
"#;

#[test]
fn idle_auto_is_capped_by_the_default_and_a_duration_is_fixed() {
    let resolved = resolve_text(MANIFESTS);
    assert_eq!(problems(&resolved), Vec::<String>::new());
    let ups = &resolved.snapshot.upstreams;
    let auto = &ups["default/auto"];
    assert!(auto.idle_auto);
    assert_eq!(auto.idle_timeout_ms, defaults::IDLE_MS);
    let fixed = &ups["default/fixed"];
    assert!(!fixed.idle_auto);
    assert_eq!(fixed.idle_timeout_ms, 30_000);
    let bare = &ups["default/bare"];
    assert!(!bare.idle_auto);
    assert_eq!(bare.idle_timeout_ms, defaults::IDLE_MS);
}

#[test]
fn idle_auto_survives_the_snapshot_round_trip_and_is_absent_otherwise() {
    let resolved = resolve_text(MANIFESTS);
    let json = serde_json::to_value(&resolved.snapshot).unwrap_or_default();
    assert_eq!(json["upstreams"]["default/auto"]["idleAuto"], true);
    // Snapshots without the field read as before.
    assert!(json["upstreams"]["default/fixed"].get("idleAuto").is_none());
    let back: sluice_crds::Snapshot = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, resolved.snapshot);
}

const ROUTES: &str = r#"---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: only}
spec: {baseUrl: "http://127.0.0.1:9101/v1"}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: resumes}
spec:
  model: a
  candidates: [{upstream: only}]
  failover: {midStream: resume}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: plain}
spec:
  model: b
  candidates: [{upstream: only}]
"#;

#[test]
fn mid_stream_defaults_to_error_and_resume_is_kept() {
    use sluice_crds::model_route::MidStreamAction;
    let resolved = resolve_text(ROUTES);
    assert_eq!(problems(&resolved), Vec::<String>::new());
    let route = |name: &str| resolved.snapshot.routes.iter().find(|r| r.name == name).map(|r| r.mid_stream);
    assert_eq!(route("resumes"), Some(MidStreamAction::Resume));
    assert_eq!(route("plain"), Some(MidStreamAction::Error));
    let json = serde_json::to_value(&resolved.snapshot).unwrap_or_default();
    let routes = json["routes"].as_array().cloned().unwrap_or_default();
    let modes: Vec<&serde_json::Value> = routes.iter().map(|r| &r["midStream"]).collect();
    // The default is left out of the snapshot, so older snapshots read the same.
    assert!(modes.contains(&&serde_json::Value::from("resume")));
    assert!(modes.contains(&&serde_json::Value::Null));
}
