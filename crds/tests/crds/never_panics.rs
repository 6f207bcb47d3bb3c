//! Property tests: whatever text or values reach `Manifests::parse_str` + `resolve()`,
//! nothing panics, and the Snapshot keeps its invariants (routes have candidates that
//! point at upstreams, models are unique, budgets count only served routes).

use crate::common;

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_crds::Manifests;

use common::resolve_and_check;

fn parse(text: &str) -> Manifests {
    let mut m = Manifests::default();
    m.parse_str("prop.yaml", text);
    m
}

/// Arbitrary JSON values, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "sluice.dev/v1alpha1",
            "Upstream",
            "ModelRoute",
            "ErrorBudget",
            "spec",
            "30d",
            "1h",
            "99.9"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            prop::sample::select(vec![
                "apiVersion",
                "kind",
                "metadata",
                "name",
                "namespace",
                "spec",
                "baseUrl",
                "model",
                "candidates",
                "upstream",
                "weight",
                "price",
                "routes",
                "objective",
                "window",
                "alerts",
                "timeouts",
                "auth",
            ])
            .prop_map(String::from),
            "[a-zA-Z]{1,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text that is mostly YAML syntax.
fn yamlish_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("---".to_string()),
        Just("apiVersion: sluice.dev/v1alpha1".to_string()),
        prop::sample::select(vec!["kind: Upstream", "kind: ModelRoute", "kind: ErrorBudget"]).prop_map(String::from),
        Just("metadata: {name: x}".to_string()),
        Just("spec:".to_string()),
        "[ ]{0,4}[a-zA-Z-]{0,8}: [a-z0-9{}\\[\\],:'\"&*!|>%@ .-]{0,16}",
        "[ ]{0,4}- [a-z0-9{}\\[\\],: ]{0,12}",
        "[&*!][a-z]{0,4} ?[a-z0-9]{0,4}",
    ];
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}", seed in any::<bool>()) {
        resolve_and_check(&parse(&text), seed);
    }

    #[test]
    fn yaml_like_text_never_panics(text in yamlish_text(), seed in any::<bool>()) {
        resolve_and_check(&parse(&text), seed);
    }

    #[test]
    fn arbitrary_values_never_panic(values in prop::collection::vec(any_json(), 0..4), seed in any::<bool>()) {
        let mut by_value = Manifests::default();
        let mut as_yaml = String::new();
        for (i, v) in values.iter().enumerate() {
            by_value.add_value(&format!("value {i}"), v.clone());
            as_yaml.push_str("---\n");
            as_yaml.push_str(&serde_yaml::to_string(v).expect("JSON values serialize as YAML"));
        }
        resolve_and_check(&by_value, seed);
        resolve_and_check(&parse(&as_yaml), seed);
    }

    #[test]
    fn sluice_objects_with_arbitrary_specs_never_panic(
        kinds in prop::collection::vec(prop::sample::select(vec!["Upstream", "ModelRoute", "ErrorBudget"]), 1..4),
        specs in prop::collection::vec(any_json(), 1..4),
        seed in any::<bool>(),
    ) {
        let mut m = Manifests::default();
        for (i, (kind, spec)) in kinds.iter().zip(specs).enumerate() {
            let object = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": kind, "metadata": {"name": format!("o{i}")}, "spec": spec});
            m.add_value(&format!("object {i}"), object);
        }
        resolve_and_check(&m, seed);
    }
}
