//! The CEL rules of the three CRDs, evaluated offline by kube's CEL engine
//! (`kube::core::cel::Validator`, the `cel` feature) against the generated schemas, and the
//! same fixtures through file mode (`Manifests::parse_str` + `resolve()`), whose Rust
//! mirror of the rules (`validate.rs`) must refuse them with the same field and message.
//!
//! Fixtures: `testdata/cel/<kind>/{valid,invalid}/*.yaml`; see `testdata/cel/README.md`.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube::core::cel::{ErrorKind, ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use serde_json::Value;
use sluice_crds::Severity;

use common::{read, schema_at, schema_of, testdata};

const KINDS: [(&str, &str); 4] = [
    ("upstream", "Upstream"),
    ("modelroute", "ModelRoute"),
    ("errorbudget", "ErrorBudget"),
    ("accountlimit", "AccountLimit"),
];

/// One fixture file.
struct Fixture {
    path: PathBuf,
    kind: &'static str,
    valid: bool,
    json: Value,
    text: String,
    /// `field: message` lines from `# expect:` comments.
    expect: BTreeSet<String>,
}

impl Fixture {
    fn name(&self) -> String {
        let rel = self.path.strip_prefix(testdata("cel")).unwrap_or(&self.path);
        rel.display().to_string()
    }
}

fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for (dir, kind) in KINDS {
        for valid in [true, false] {
            let sub = testdata(&format!("cel/{dir}/{}", if valid { "valid" } else { "invalid" }));
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&sub)
                .unwrap_or_else(|e| panic!("{}: {e}", sub.display()))
                .map(|e| e.expect("directory entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect();
            paths.sort();
            assert!(!paths.is_empty(), "no fixtures in {}", sub.display());
            for path in paths {
                out.push(load(&path, kind, valid));
            }
        }
    }
    out
}

fn load(path: &Path, kind: &'static str, valid: bool) -> Fixture {
    let text = read(path);
    let expect: BTreeSet<String> =
        text.lines().filter_map(|l| l.strip_prefix("# expect: ")).map(str::to_string).collect();
    assert_eq!(valid, expect.is_empty(), "{}: invalid fixtures (only) need `# expect:` lines", path.display());
    let json: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(json["kind"], kind, "{}: fixture of the wrong kind", path.display());
    assert_eq!(json["metadata"]["name"], "fixture", "{}: fixtures are named `fixture`", path.display());
    Fixture { path: path.to_path_buf(), kind, valid, json, text, expect }
}

/// A refusal by kube's CEL engine.
struct CelError {
    rule: String,
    field_path: String,
    line: String,
}

/// Runs kube's CEL engine; panics when a rule could not be evaluated at all (a function
/// kube's CEL lacks, a type error), which would make the rule useless client-side.
fn cel_errors(f: &Fixture) -> Vec<CelError> {
    let Err(errors) = Validator::new().validate(&schema_of(f.kind), &f.json, None) else {
        return Vec::new();
    };
    errors
        .into_vec()
        .into_iter()
        .map(|e| {
            assert_eq!(e.kind, ErrorKind::ValidationFailure, "{}: rule {:?} not evaluated: {e}", f.name(), e.rule);
            CelError {
                rule: e.rule.clone(),
                field_path: e.field_path.clone(),
                line: format!("{}: {}", e.field_path, e.message),
            }
        })
        .collect()
}

/// What file mode makes of a fixture (with `support.yaml` beside it): the fixture's own
/// problems as `field: message` with their severity, and whether it was served. An
/// AccountLimit is not read by file mode: its Rust mirror is `account_limit::resolve`,
/// whose every problem is an error and which "serves" what it resolves.
fn file_mode(f: &Fixture) -> (Vec<(Severity, String)>, bool) {
    if f.kind == "AccountLimit" {
        let al: sluice_crds::AccountLimit = serde_json::from_value(f.json.clone()).expect("an AccountLimit");
        return match sluice_crds::account_limit::resolve(&al.spec) {
            Ok(_) => (Vec::new(), true),
            Err(errors) => (
                errors.into_iter().map(|(field, message)| (Severity::Error, format!("{field}: {message}"))).collect(),
                false,
            ),
        };
    }
    let support = read(&testdata("cel/support.yaml"));
    let resolved = common::resolve_docs(&[("support.yaml", &support), (&f.name(), &f.text)]);
    let resource = format!("{} default/fixture", f.kind);
    let mut own = Vec::new();
    for p in &resolved.problems {
        assert_eq!(p.resource, resource, "{}: unexpected problem elsewhere: {p}", f.name());
        own.push((p.severity, format!("{}: {}", p.field, p.message)));
    }
    let snapshot = &resolved.snapshot;
    let served = match f.kind {
        "Upstream" => snapshot.upstreams.contains_key("default/fixture"),
        "ModelRoute" => snapshot.routes.iter().any(|r| r.key == "default/fixture"),
        _ => snapshot.budgets.iter().any(|b| b.key == "default/fixture"),
    };
    (own, served)
}

#[test]
fn valid_fixtures_pass_cel_and_file_mode_without_a_problem() {
    let mut failures = Vec::new();
    for f in fixtures().iter().filter(|f| f.valid) {
        for e in cel_errors(f) {
            failures.push(format!("{}: CEL refused: {}", f.name(), e.line));
        }
        let (problems, served) = file_mode(f);
        for (_, line) in problems {
            failures.push(format!("{}: file mode: {line}", f.name()));
        }
        if !served {
            failures.push(format!("{}: file mode left it out", f.name()));
        }
    }
    assert!(failures.is_empty(), "valid fixtures refused:\n{}", failures.join("\n"));
}

#[test]
fn invalid_fixtures_are_refused_by_cel_with_the_expected_messages() {
    let mut failures = Vec::new();
    for f in fixtures().iter().filter(|f| !f.valid) {
        let got: BTreeSet<String> = cel_errors(f).into_iter().map(|e| e.line).collect();
        if got != f.expect {
            failures.push(format!("{}:\n  expected {:?}\n  CEL gave {:?}", f.name(), f.expect, got));
        }
    }
    assert!(failures.is_empty(), "CEL disagrees with fixtures:\n{}", failures.join("\n"));
}

#[test]
fn invalid_fixtures_are_refused_by_file_mode_with_the_same_messages() {
    let mut failures = Vec::new();
    for f in fixtures().iter().filter(|f| !f.valid) {
        let (problems, served) = file_mode(f);
        let got: BTreeSet<String> = problems.iter().map(|(_, l)| l.clone()).collect();
        if got != f.expect {
            failures.push(format!("{}:\n  expected  {:?}\n  file mode {:?}", f.name(), f.expect, got));
        }
        if problems.iter().any(|(s, _)| *s != Severity::Error) || served {
            failures.push(format!("{}: must be refused with errors and left out; got {problems:?}", f.name()));
        }
    }
    assert!(failures.is_empty(), "file mode disagrees with fixtures (and so with CEL):\n{}", failures.join("\n"));
}

/// A CEL rule of a schema, at its field path with list items as `[]`.
struct SchemaRule {
    kind: &'static str,
    path: String,
    rule: String,
    message: String,
    /// Where a refusal is reported: `path`, or the rule's `fieldPath` below it.
    reported_at: String,
}

fn schema_rules() -> Vec<SchemaRule> {
    fn walk(kind: &'static str, node: &Value, path: &str, out: &mut Vec<SchemaRule>) {
        for v in node["x-kubernetes-validations"].as_array().into_iter().flatten() {
            let reported_at = match v["fieldPath"].as_str() {
                Some(field) => format!("{path}{field}"),
                None => path.to_string(),
            };
            out.push(SchemaRule {
                kind,
                path: path.to_string(),
                rule: v["rule"].as_str().unwrap_or_default().to_string(),
                message: v["message"].as_str().unwrap_or_default().to_string(),
                reported_at,
            });
        }
        for (name, child) in node["properties"].as_object().into_iter().flatten() {
            let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            walk(kind, child, &child_path, out);
        }
        if node["items"].is_object() {
            walk(kind, &node["items"], &format!("{path}[]"), out);
        }
    }
    let mut out = Vec::new();
    for (_, kind) in KINDS {
        walk(kind, &schema_of(kind), "", &mut out);
    }
    out
}

/// `spec.alerts[1].name` → `spec.alerts[].name`.
fn wildcard(field_path: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field_path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// True when `json` has a non-null value at `path` (`[]` meaning any item).
fn has_value(json: &Value, path: &str) -> bool {
    fn go(v: &Value, parts: &[&str]) -> bool {
        let Some((first, rest)) = parts.split_first() else { return !v.is_null() };
        match first.strip_suffix("[]") {
            Some(name) => v[name].as_array().is_some_and(|items| items.iter().any(|i| go(i, rest))),
            None => go(&v[*first], rest),
        }
    }
    go(json, &path.split('.').collect::<Vec<_>>())
}

#[test]
fn every_cel_rule_is_covered_by_an_accepted_and_a_refused_fixture() {
    let rules = schema_rules();
    assert!(rules.len() >= 35, "found only {} CEL rules; did the schema walk break?", rules.len());
    let fixtures = fixtures();
    let refusals: Vec<(&Fixture, CelError)> =
        fixtures.iter().filter(|f| !f.valid).flat_map(|f| cel_errors(f).into_iter().map(move |e| (f, e))).collect();
    let mut missing = Vec::new();
    for r in &rules {
        assert!(!r.message.is_empty(), "{} {}: rule {:?} has no message", r.kind, r.path, r.rule);
        if r.rule.contains("oldSelf") {
            // Transition rules judge an update: `transition_rules_refuse_a_changed_subject`.
            continue;
        }
        let accepted = fixtures.iter().any(|f| f.valid && f.kind == r.kind && has_value(&f.json, &r.path));
        if !accepted {
            missing.push(format!("{} {}: no valid fixture sets it", r.kind, r.path));
        }
        let refused = refusals
            .iter()
            .any(|(f, e)| f.kind == r.kind && e.rule == r.rule && wildcard(&e.field_path) == r.reported_at);
        if !refused {
            missing.push(format!("{} {}: no invalid fixture breaks {:?}", r.kind, r.path, r.rule));
        }
    }
    assert!(missing.is_empty(), "CEL rules without fixtures:\n{}", missing.join("\n"));
}

/// kube-cel's scope check also flags the variables that macros bind (`c` in
/// `self.all(c, …)`); those are in scope, so such warnings are dropped.
fn names_macro_variable(rule: &str, warning: &str) -> bool {
    let var = warning.split('\'').nth(1).unwrap_or_default();
    ["all", "exists", "exists_one", "map", "filter"].iter().any(|m| rule.contains(&format!(".{m}({var},")))
}

#[test]
fn every_cel_rule_compiles_and_passes_kube_cel_static_analysis() {
    for (_, kind) in KINDS {
        let schema = schema_of(kind);
        let compiled = compile_schema(&schema);
        let errors: Vec<String> = compiled.compilation_errors().iter().map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{kind}: rules that do not compile: {errors:?}");
    }
    for r in schema_rules() {
        let node = if r.path.is_empty() { schema_of(r.kind) } else { schema_at(&schema_of(r.kind), &r.path).clone() };
        let warnings: Vec<_> = analyze_rule(&r.rule, &compile_schema(&node), ScopeContext::CrdValidation)
            .into_iter()
            .filter(|w| !(w.kind == WarningKind::WrongScope && names_macro_variable(&r.rule, &w.message)))
            .collect();
        assert!(warnings.is_empty(), "{} {}: {:?}: {warnings:?}", r.kind, r.path, r.rule);
    }
}

#[test]
fn quickstart_and_support_manifests_pass_cel() {
    let mut files: Vec<PathBuf> = ["budgets.yaml", "routes.yaml", "upstreams.yaml"]
        .iter()
        .map(|f| common::repo_root().join("examples/quickstart").join(f))
        .collect();
    files.push(testdata("cel/support.yaml"));
    let mut seen = 0;
    for path in files {
        for doc in serde_yaml::Deserializer::from_str(&read(&path)) {
            let json: Value = serde::Deserialize::deserialize(doc).expect("YAML document");
            let kind = json["kind"].as_str().expect("kind").to_string();
            let result = Validator::new().validate(&schema_of(&kind), &json, None);
            assert!(result.is_ok(), "{}: {} refused: {:?}", path.display(), json["metadata"]["name"], result);
            seen += 1;
        }
    }
    assert_eq!(seen, 15);
}

/// The AccountLimit's transition rules: its subject (`account`, `keyId`) never changes
/// (the operator would otherwise leave the old subject's limits behind); its limits do.
#[test]
fn transition_rules_refuse_a_changed_subject() {
    let schema = schema_of("AccountLimit");
    let doc = |spec: Value| serde_json::json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "AccountLimit", "metadata": {"name": "fixture"}, "spec": spec});
    let refusals = |old: Value, new: Value| -> Vec<String> {
        match Validator::new().validate(&schema, &doc(new), Some(&doc(old))) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.into_vec().into_iter().map(|e| format!("{}: {}", e.field_path, e.message)).collect(),
        }
    };
    let account = serde_json::json!({"account": "team-a", "rpm": 600});
    let key = serde_json::json!({"account": "team-a", "keyId": 7, "rpm": 600});
    assert_eq!(
        refusals(account.clone(), serde_json::json!({"account": "team-a", "rpm": 60, "dailySpend": "1"})),
        Vec::<String>::new()
    );
    assert_eq!(
        refusals(key.clone(), serde_json::json!({"account": "team-a", "keyId": 7, "tpm": 10})),
        Vec::<String>::new()
    );
    assert_eq!(
        refusals(account.clone(), serde_json::json!({"account": "team-b", "rpm": 600})),
        [format!("spec.account: {}", sluice_crds::schema::msg::ACCOUNT_IMMUTABLE)]
    );
    let key_refused = [format!("spec.keyId: {}", sluice_crds::schema::msg::KEY_IMMUTABLE)];
    assert_eq!(refusals(account, key.clone()), key_refused);
    assert_eq!(refusals(key.clone(), serde_json::json!({"account": "team-a", "rpm": 600})), key_refused);
    assert_eq!(refusals(key, serde_json::json!({"account": "team-a", "keyId": 8, "rpm": 600})), key_refused);
}
