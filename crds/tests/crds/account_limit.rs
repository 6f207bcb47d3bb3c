//! The AccountLimit beyond its CEL fixtures (`cel.rs` runs those through the CEL engine
//! and `account_limit::resolve`): its schema bounds mirrored by `validate::account_limit`
//! with exact messages, the values `resolve` gives the operator, and file mode ignoring
//! it with a warning.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sluice_crds::account_limit::{AccountLimitSpec, LimitSubject, LimitValues, resolve};
use sluice_crds::{Severity, schema::msg, validate};

fn spec(value: Value) -> AccountLimitSpec {
    serde_json::from_value(value).expect("an AccountLimit spec")
}

fn errors(value: Value) -> Vec<String> {
    validate::account_limit(&spec(value)).into_iter().map(|(f, m)| format!("{f}: {m}")).collect()
}

#[test]
fn resolve_gives_all_six_values_with_spend_in_nanodollars() {
    let full = spec(json!({
        "account": "team-a", "rpm": 600, "tpm": 60000, "tpd": 5000000, "concurrency": 32,
        "dailySpend": "25.00", "monthlySpend": "500.5",
    }));
    assert_eq!(
        resolve(&full),
        Ok(LimitValues {
            rpm: Some(600),
            tpm: Some(60_000),
            tpd: Some(5_000_000),
            concurrency: Some(32),
            daily_spend_nanos: Some(25_000_000_000),
            monthly_spend_nanos: Some(500_500_000_000),
        })
    );
    let one = spec(json!({"account": "team-a", "keyId": 7, "dailySpend": "0.000000001"}));
    assert_eq!(resolve(&one), Ok(LimitValues { daily_spend_nanos: Some(1), ..LimitValues::default() }));
    assert_eq!(one.subject(), LimitSubject { account: "team-a".into(), key_id: Some(7) });
    assert_eq!(one.subject().to_string(), "key 7 of account team-a");
    assert_eq!(full.subject().to_string(), "account team-a");
}

#[test]
fn every_problem_is_reported_at_once() {
    let got = resolve(&spec(json!({"account": " ", "keyId": 0, "dailySpend": "x"}))).expect_err("refused");
    let got: BTreeSet<String> = got.into_iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let want: BTreeSet<String> = [
        format!("spec.account: {}", msg::ACCOUNT),
        "spec.keyId: must be at least 1, got 0".to_string(),
        format!("spec.dailySpend: {}", msg::DAILY_SPEND),
    ]
    .into();
    assert_eq!(got, want);
}

/// Each bound of the AccountLimit's schema (the `minimum: 1` of every number, the
/// `maxLength` of every string), as the Rust mirror refuses it, and no bound without a row.
#[test]
fn schema_bounds_are_mirrored_with_exact_messages() {
    let base = json!({"account": "team-a", "rpm": 1});
    let mut declared = BTreeSet::new();
    for field in ["keyId", "rpm", "tpm", "tpd", "concurrency"] {
        declared.insert((field.to_string(), "minimum", 1));
        let mut at_bound = base.clone();
        at_bound[field] = json!(1);
        assert_eq!(errors(at_bound), Vec::<String>::new(), "{field} = 1");
        let mut below = base.clone();
        below[field] = json!(0);
        assert_eq!(errors(below), [format!("spec.{field}: must be at least 1, got 0")], "{field} = 0");
    }
    // The strings' bounds restate their patterns' (file mode reports the pattern's message).
    let strings = [
        ("account", 128, "a", msg::ACCOUNT),
        ("dailySpend", 17, "1", msg::DAILY_SPEND),
        ("monthlySpend", 17, "1", msg::MONTHLY_SPEND),
    ];
    for (field, max, unit, message) in strings {
        declared.insert((field.to_string(), "maxLength", max));
        let make =
            |n: usize| if field == "account" { unit.repeat(n) } else { format!("1234567.{}", "1".repeat(n - 8)) };
        let mut at_bound = base.clone();
        at_bound[field] = json!(make(max));
        assert_eq!(errors(at_bound), Vec::<String>::new(), "{field} of {max}");
        let mut over = base.clone();
        over[field] = json!(make(max + 1));
        assert_eq!(errors(over), [format!("spec.{field}: {message}")], "{field} of {}", max + 1);
    }
    let schema = common::schema_of("AccountLimit");
    let mut found = BTreeSet::new();
    for (name, node) in schema["properties"]["spec"]["properties"].as_object().expect("spec properties") {
        for keyword in ["minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"] {
            if let Some(v) = node[keyword].as_f64() {
                found.insert((name.clone(), keyword, v as usize));
            }
        }
    }
    assert_eq!(found, declared);
    assert_eq!(schema["properties"]["spec"]["required"], json!(["account"]));
}

#[test]
fn file_mode_ignores_an_account_limit_with_a_warning() {
    let resolved = common::resolve_text(
        "apiVersion: sluice.dev/v1alpha1\nkind: AccountLimit\nmetadata: {name: team-a}\nspec: {account: team-a, rpm: 600}\n",
    );
    let problems: Vec<(Severity, String)> = resolved.problems.iter().map(|p| (p.severity, p.to_string())).collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].0, Severity::Warning);
    assert!(problems[0].1.contains("AccountLimit is applied by the operator"), "{problems:?}");
    assert!(resolved.is_clean());
}
