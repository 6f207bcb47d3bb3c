//! The CRDs' outward shape, docs/design.md §2: group, version, scope, names, status
//! subresource and printer columns, as `kubectl` users see them.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn crd(kind: &str) -> CustomResourceDefinition {
    sluice_crds::crds().into_iter().find(|c| c.spec.names.kind == kind).expect("CRD of that kind")
}

/// `(NAME, type, jsonPath)` of the printer columns, names upper-cased as kubectl prints them.
fn columns(kind: &str) -> Vec<(String, String, String)> {
    let crd = crd(kind);
    let columns = crd.spec.versions[0].additional_printer_columns.clone().unwrap_or_default();
    columns.into_iter().map(|c| (c.name.to_uppercase(), c.type_, c.json_path)).collect()
}

fn names(list: &[(String, String, String)]) -> Vec<&str> {
    list.iter().map(|(n, _, _)| n.as_str()).collect()
}

#[test]
fn every_kind_is_namespaced_in_sluice_dev_v1alpha1_with_status_and_short_name() {
    for (kind, plural, short) in [
        ("Upstream", "upstreams", "ups"),
        ("ModelRoute", "modelroutes", "mr"),
        ("ErrorBudget", "errorbudgets", "eb"),
        ("AccountLimit", "accountlimits", "al"),
    ] {
        let crd = crd(kind);
        assert_eq!(crd.metadata.name.as_deref(), Some(format!("{plural}.sluice.dev").as_str()));
        assert_eq!(crd.spec.group, sluice_crds::GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["sluice".to_string()]));
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, sluice_crds::VERSION);
        assert!(version.served && version.storage);
        assert!(
            version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            "{kind} has a status subresource"
        );
    }
    assert_eq!(sluice_crds::API_VERSION, format!("{}/{}", sluice_crds::GROUP, sluice_crds::VERSION));
}

#[test]
fn printer_columns_are_the_documented_ones_ending_with_age() {
    let expected: [(&str, &[&str]); 4] = [
        ("Upstream", &["PROTOCOL", "REGION", "SUCCESS", "TTFB-P99", "CIRCUIT", "AGE"]),
        ("ModelRoute", &["MODEL", "GATEWAY", "CANDIDATES", "AVAILABILITY", "FAILOVERS", "READY", "AGE"]),
        ("ErrorBudget", &["OBJECTIVE", "WINDOW", "CONSUMED", "REMAINING", "BURN-1H", "STATE", "AGE"]),
        ("AccountLimit", &["ACCOUNT", "KEY", "RPM", "TPM", "CONCURRENCY", "DAILY-SPEND", "APPLIED", "AGE"]),
    ];
    for (kind, want) in expected {
        let cols = columns(kind);
        assert_eq!(names(&cols), want, "{kind}");
        let age = cols.last().expect("AGE column");
        assert_eq!((age.1.as_str(), age.2.as_str()), ("date", ".metadata.creationTimestamp"), "{kind}");
    }
}

#[test]
fn printer_columns_point_at_fields_that_exist() {
    let paths: Vec<(String, String)> = ["Upstream", "ModelRoute", "ErrorBudget", "AccountLimit"]
        .iter()
        .flat_map(|k| columns(k).into_iter().map(move |(_, _, p)| (k.to_string(), p)))
        .collect();
    for (kind, path) in paths {
        if path == ".metadata.creationTimestamp" {
            continue;
        }
        let schema = {
            let crd = crd(&kind);
            let s = crd.spec.versions[0].schema.clone().and_then(|s| s.open_api_v3_schema).expect("schema");
            serde_json::to_value(s).expect("JSON")
        };
        // `.status.conditions[?(@.type=="Ready")].status` → status.conditions.status
        let plain = path.replace("[?(@.type==\"Ready\")]", "");
        let mut node = &schema;
        for part in plain.trim_start_matches('.').split('.') {
            let next = &node["properties"][part];
            node = if next.is_null() {
                let items = &node["items"]["properties"][part];
                let map_values = &node["additionalProperties"];
                if items.is_null() { map_values } else { items }
            } else {
                next
            };
            assert!(!node.is_null(), "{kind}: printer column {path} names no field ({part})");
        }
    }
}
