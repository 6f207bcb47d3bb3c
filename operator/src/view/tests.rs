use super::*;
use crate::testing::{budget, route, upstream, upstream_with_auth};

fn deleting(mut r: ModelRoute) -> ModelRoute {
    r.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    r
}

#[test]
fn a_group_holds_its_live_routes_and_only_the_upstreams_they_use() {
    let upstreams = [upstream("a", "east"), upstream("a", "west"), upstream("a", "unused"), upstream("b", "east")];
    let routes = [
        route("a", "chat", "gpt-4o", None, &["east", "west"]),
        route("a", "embed", "embed-1", Some("batch"), &["east"]),
        deleting(route("a", "old", "old-1", None, &["east"])),
        route("b", "chat", "gpt-4o", None, &["east"]),
    ];
    let v = group_view("a", "default", &upstreams, &routes, &[]);
    let names: Vec<_> = v.routes.iter().map(|r| r.name_any()).collect();
    assert_eq!(names, ["chat"]);
    let keys: Vec<_> = v.resolved.snapshot.upstreams.keys().cloned().collect();
    assert_eq!(keys, ["a/east", "a/west"]);
    assert_eq!(v.known_upstreams.len(), 3, "every upstream of the namespace that resolved");
    assert_eq!(groups_in("a", &routes).into_iter().collect::<Vec<_>>(), ["batch", "default"]);
}

#[test]
fn owners_are_every_route_sorted_and_none_is_controller() {
    let routes = [route("a", "zeta", "m1", None, &["u"]), route("a", "alpha", "m2", None, &["u"])];
    let refs = owner_references(&routes);
    let names: Vec<_> = refs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert!(
        refs.iter().all(|r| r.controller.is_none() && r.kind == "ModelRoute" && r.api_version == "sluice.dev/v1alpha1")
    );
    assert_eq!(refs[0].uid, "uid-modelroute-alpha");
}

#[test]
fn a_bad_route_is_left_out_and_reported_while_the_others_are_served() {
    let upstreams = [upstream("a", "east")];
    let routes = [
        route("a", "good", "m1", None, &["east", "gone"]),
        route("a", "bad", "m2", None, &["gone"]),
        route("a", "zdup", "m1", None, &["east"]),
    ];
    let v = group_view("a", "default", &upstreams, &routes, &[]);
    let served: Vec<_> = v.resolved.snapshot.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(served, ["good"], "{:?}", v.resolved.problems);
    let bad = v.route_problems("bad");
    assert!(bad.iter().any(|p| p.severity == Severity::Error && p.field == "spec.candidates"), "{bad:?}");
    let dup = v.route_problems("zdup");
    assert!(dup.iter().any(|p| p.field == "spec.model" && p.message.contains("already served")), "{dup:?}");
    let good = v.route_problems("good");
    assert!(good.iter().all(|p| p.severity == Severity::Warning), "{good:?}");
}

#[test]
fn the_same_model_may_be_served_by_two_groups() {
    let upstreams = [upstream("a", "east")];
    let routes = [
        route("a", "public", "gpt-4o", None, &["east"]),
        route("a", "internal", "gpt-4o", Some("internal"), &["east"]),
    ];
    assert_eq!(group_view("a", "default", &upstreams, &routes, &[]).resolved.snapshot.routes.len(), 1);
    assert_eq!(group_view("a", "internal", &upstreams, &routes, &[]).resolved.snapshot.routes.len(), 1);
}

#[test]
fn a_budget_is_resolved_across_groups() {
    let upstreams = [upstream("a", "east")];
    let routes = [
        route("a", "public", "gpt-4o", None, &["east"]),
        route("a", "internal", "gpt-4o", Some("internal"), &["east"]),
    ];
    let b = budget("a", "slo", &["public", "missing", "internal"]);
    let v = budget_view(&b, &upstreams, &routes);
    let config = v.config.expect("valid");
    assert_eq!(config.routes, ["a/public", "a/internal"]);
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert_eq!(v.problems[0].field, "spec.routes[1]");

    // The group snapshot only counts the group's routes.
    let g = group_view("a", "default", &upstreams, &routes, std::slice::from_ref(&b));
    assert_eq!(g.resolved.snapshot.budgets[0].routes, ["a/public"]);
}

#[test]
fn the_snapshot_does_not_depend_on_the_order_of_the_caches() {
    let upstreams = [upstream("a", "west"), upstream("a", "east")];
    let routes = [route("a", "zeta", "m1", None, &["east", "west"]), route("a", "alpha", "m2", None, &["west"])];
    let budgets =
        [budget("a", "slo-b", &["zeta"]), budget("a", "slo-a", &["alpha", "zeta"]), budget("a", "slo-c", &["alpha"])];
    fn rev<T: Clone>(v: &[T]) -> Vec<T> {
        v.iter().rev().cloned().collect()
    }
    let one = group_view("a", "default", &upstreams, &routes, &budgets);
    let two = group_view("a", "default", &rev(&upstreams), &rev(&routes), &rev(&budgets));
    assert_eq!(one.resolved, two.resolved);
    let names: Vec<_> = one.resolved.snapshot.budgets.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["slo-a", "slo-b", "slo-c"]);
}

#[test]
fn a_budget_without_any_served_route_is_valid_but_counts_nothing() {
    let b = budget("a", "slo", &["nothing"]);
    let v = budget_view(&b, &[], &[]);
    assert_eq!(v.config.expect("valid").routes, Vec::<String>::new());
    assert_eq!(v.problems.len(), 1);
}

#[test]
fn an_invalid_budget_has_no_config() {
    let mut b = budget("a", "slo", &["r"]);
    b.spec.objective = "42".into();
    let v = budget_view(&b, &[], &[]);
    assert!(v.config.is_none());
    assert!(
        v.problems.iter().any(|p| p.severity == Severity::Error && p.field == "spec.objective"),
        "{:?}",
        v.problems
    );
}

#[test]
fn upstream_problems_report_a_missing_secret_key() {
    let u = upstream_with_auth("a", "east", "keys", "apiKey");
    let present = |_: &str, name: &str, key: &str| name == "keys" && key == "apiKey";
    assert!(upstream_problems(&u, &present).is_empty());
    let absent = |_: &str, _: &str, _: &str| false;
    let problems = upstream_problems(&u, &absent);
    assert_eq!(problems.len(), 1);
    assert_eq!((problems[0].severity, problems[0].field.as_str()), (Severity::Warning, "spec.auth.secretRef"));
}
