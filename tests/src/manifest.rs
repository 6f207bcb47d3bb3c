//! Manifests for a test: Upstream and ModelRoute documents built as JSON values and
//! written as multi-document YAML, as a user would write them (docs/design.md §2).

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Map, Value, json};
use tempfile::TempDir;

/// One manifest document.
#[derive(Clone, Debug)]
pub struct Doc(pub Value);

/// An Upstream named `name` at `base_url` (`protocol: openai`).
pub fn upstream_doc(name: &str, base_url: &str) -> Doc {
    Doc(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "Upstream",
        "metadata": {"name": name},
        "spec": {"protocol": "openai", "baseUrl": base_url},
    }))
}

/// A ModelRoute `name` serving `model` with `(upstream, weight)` candidates in spec order.
pub fn route(name: &str, model: &str, candidates: &[(&str, u32)]) -> Doc {
    let candidates: Vec<Value> = candidates.iter().map(|(u, w)| json!({"upstream": u, "weight": w})).collect();
    Doc(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": name},
        "spec": {"model": model, "candidates": candidates},
    }))
}

/// An ErrorBudget `name` over `routes` with `objective` (percent) and `window`, the
/// method and alerts left at their defaults (occurrences, SRE workbook tiers).
pub fn error_budget(name: &str, routes: &[&str], objective: &str, window: &str) -> Doc {
    Doc(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "ErrorBudget",
        "metadata": {"name": name},
        "spec": {"routes": routes, "objective": objective, "window": window},
    }))
}

impl Doc {
    /// Sets a field by dotted path, creating objects on the way:
    /// `.with("spec.timeouts.firstByte", "50ms")`.
    #[must_use]
    pub fn with(mut self, path: &str, value: impl Into<Value>) -> Self {
        let keys: Vec<&str> = path.split('.').collect();
        set_path(&mut self.0, &keys, value.into());
        self
    }

    /// Sets a field of candidate `i` (`.candidate(0, "price", json!(…))`).
    #[must_use]
    pub fn candidate(mut self, i: usize, field: &str, value: impl Into<Value>) -> Self {
        if let Some(Value::Object(c)) = self.0.pointer_mut(&format!("/spec/candidates/{i}")) {
            c.insert(field.to_string(), value.into());
        }
        self
    }
}

fn set_path(at: &mut Value, keys: &[&str], value: Value) {
    let Some((first, rest)) = keys.split_first() else { return };
    if !at.is_object() {
        *at = Value::Object(Map::new());
    }
    if let Value::Object(map) = at {
        if rest.is_empty() {
            map.insert((*first).to_string(), value);
        } else {
            let next = map.entry((*first).to_string()).or_insert_with(|| Value::Object(Map::new()));
            set_path(next, rest, value);
        }
    }
}

/// Documents as one multi-document YAML text.
pub fn yaml(docs: &[Doc]) -> String {
    docs.iter().map(|d| serde_yaml::to_string(&d.0).unwrap_or_default()).collect::<Vec<_>>().join("---\n")
}

/// `text` written to `manifests.yaml` in a new temporary directory (kept while the
/// returned `TempDir` lives; put the gateway's other files, e.g. its ledger, next to it).
pub fn manifests_file(text: &str) -> anyhow::Result<(TempDir, PathBuf)> {
    let dir = tempfile::tempdir().context("making a tempdir")?;
    let path = dir.path().join("manifests.yaml");
    std::fs::write(&path, text).context("writing manifests")?;
    Ok((dir, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_nested_fields_and_multi_document_yaml() {
        let r = route("chat", "m", &[("a", 100), ("b", 50)])
            .with("spec.backoff.maxAttempts", 3)
            .with("spec.deadline", "2s")
            .candidate(1, "price", json!({"input": "1.00", "output": "2.00"}));
        assert_eq!(r.0["spec"]["backoff"], json!({"maxAttempts": 3}));
        assert_eq!(r.0["spec"]["candidates"][1]["price"]["output"], "2.00");
        let text = yaml(&[upstream_doc("a", "http://127.0.0.1:1/v1"), r]);
        assert_eq!(text.matches("---\n").count(), 1);
        assert!(text.contains("kind: ModelRoute"));
    }
}
