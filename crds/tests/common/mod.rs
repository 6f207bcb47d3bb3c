//! Helpers shared by the integration tests: fixture paths, file-mode resolution and the
//! generated CRD schemas.
//!
//! (`common/mod.rs` rather than `common.rs`: Cargo would build `tests/common.rs` as a test
//! target of its own.)
#![allow(dead_code, reason = "each test target uses its own subset of these helpers")]
#![expect(clippy::expect_used, reason = "test helpers: a panic is how a test reports")]

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use sluice_crds::{Manifests, Resolved, Severity, Snapshot, resolve};

/// `crds/testdata/<rel>`.
pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata").join(rel)
}

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Reads a file that the test cannot do without.
pub fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A secret lookup that knows every secret.
pub fn all_secrets(_: &str, _: &str, _: &str) -> bool {
    true
}

/// Parses `docs` (named in problems as `source`) and resolves them, every secret present.
pub fn resolve_docs(docs: &[(&str, &str)]) -> Resolved {
    let mut manifests = Manifests::default();
    for (source, text) in docs {
        manifests.parse_str(source, text);
    }
    resolve(&manifests, &all_secrets)
}

/// Parses one YAML text named `test.yaml` and resolves it, every secret present.
pub fn resolve_text(text: &str) -> Resolved {
    resolve_docs(&[("test.yaml", text)])
}

/// Every problem, as `Problem`'s `Display` prints it.
pub fn problems(resolved: &Resolved) -> Vec<String> {
    resolved.problems.iter().map(ToString::to_string).collect()
}

/// The `openAPIV3Schema` of a kind's CRD, as JSON.
pub fn schema_of(kind: &str) -> Value {
    let crd = sluice_crds::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind}"));
    let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("CRD has an openAPIV3Schema")).expect("schema serializes")
}

/// The node of `schema` at a dotted field path (`spec.candidates[].weight`).
pub fn schema_at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        node = &node["properties"][name];
        if items {
            node = &node["items"];
        }
        assert!(!node.is_null(), "no schema at {path}");
    }
    node
}

/// Resolves `manifests` with a lookup that knows some secrets, and checks the invariants.
pub fn resolve_and_check(manifests: &Manifests, secret_seed: bool) -> Resolved {
    let lookup = move |_: &str, name: &str, _: &str| secret_seed ^ name.len().is_multiple_of(2);
    let resolved = resolve(manifests, &lookup);
    check_snapshot(&resolved.snapshot);
    let severities: Vec<Severity> = resolved.problems.iter().map(|p| p.severity).collect();
    let mut sorted = severities.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(severities, sorted, "errors come first");
    for p in &resolved.problems {
        assert!(!p.resource.is_empty() && !p.message.is_empty(), "{p:?}");
    }
    resolved
}

pub fn check_snapshot(s: &Snapshot) {
    let mut models = BTreeSet::new();
    for r in &s.routes {
        assert!(!r.candidates.is_empty(), "route {} has no candidate", r.key);
        assert!(models.insert(r.model.clone()), "model {} served twice", r.model);
        for c in &r.candidates {
            assert!(s.upstreams.contains_key(&c.upstream), "{} points at missing {}", r.key, c.upstream);
            assert!((1..=1000).contains(&c.weight));
        }
        assert!(r.deadline_ms > 0 && r.backoff_base_ms > 0 && r.max_walks > 0);
    }
    for b in &s.budgets {
        for key in &b.routes {
            assert!(s.routes.iter().any(|r| &r.key == key), "budget {} counts unserved {key}", b.key);
        }
        assert!(b.objective_ratio > 0.5 && b.objective_ratio < 1.0);
        assert!(b.window_ms >= 3_600_000);
    }
    let json = serde_json::to_string(s).expect("snapshot serializes");
    let back: Snapshot = serde_json::from_str(&json).expect("snapshot deserializes");
    assert_eq!(&back, s);
}
