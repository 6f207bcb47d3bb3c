//! Loading manifests from YAML files and directories (file mode), into the same typed
//! resources the operator reads from the API server.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::API_VERSION;
use crate::error_budget::ErrorBudget;
use crate::model_route::ModelRoute;
use crate::problem::Problem;
use crate::upstream::Upstream;

/// Parsed resources, plus the problems met while reading them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifests {
    /// Upstreams, in reading order.
    pub upstreams: Vec<Upstream>,
    /// ModelRoutes, in reading order.
    pub routes: Vec<ModelRoute>,
    /// ErrorBudgets, in reading order.
    pub budgets: Vec<ErrorBudget>,
    /// Documents that could not be read or parsed, and ignored kinds (as warnings).
    pub problems: Vec<Problem>,
}

/// Reads every path: a YAML file (multi-document) or a directory of `.yaml`/`.yml` files,
/// recursively, in name order.
pub fn load_paths(paths: &[PathBuf]) -> Manifests {
    let mut manifests = Manifests::default();
    for path in paths {
        for file in yaml_files(path, &mut manifests.problems) {
            match std::fs::read_to_string(&file) {
                Ok(text) => manifests.parse_str(&file.display().to_string(), &text),
                Err(e) => {
                    manifests.problems.push(Problem::error(file.display().to_string(), "", format!("cannot read: {e}")))
                }
            }
        }
    }
    manifests
}

/// The YAML files a path stands for, in a stable order. Hidden entries are skipped; a
/// directory reached again through a symlink is read once.
pub fn yaml_files(path: &Path, problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    yaml_files_in(path, problems, &mut BTreeSet::new())
}

fn yaml_files_in(path: &Path, problems: &mut Vec<Problem>, seen: &mut BTreeSet<PathBuf>) -> Vec<PathBuf> {
    if !path.is_dir() {
        if !path.exists() {
            problems.push(Problem::error(path.display().to_string(), "", "no such file or directory"));
            return Vec::new();
        }
        return vec![path.to_path_buf()];
    }
    // A symlink loop would otherwise recurse until the stack overflows.
    if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())) {
        return Vec::new();
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            problems.push(Problem::error(path.display().to_string(), "", format!("cannot read directory: {e}")));
            return Vec::new();
        }
    };
    entries.sort();
    let mut files = Vec::new();
    for entry in entries {
        let hidden = entry.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue; // editors' swap files and mounted-Secret/ConfigMap `..data` links
        }
        if entry.is_dir() {
            files.extend(yaml_files_in(&entry, problems, seen));
        } else if entry.extension().and_then(|e| e.to_str()).is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(entry);
        }
    }
    files
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

impl Manifests {
    /// Parses a multi-document YAML text; `source` names it in problems.
    pub fn parse_str(&mut self, source: &str, text: &str) {
        for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let at = format!("{source} (document {})", i + 1);
            let value = match serde_yaml::Value::deserialize(document) {
                Ok(serde_yaml::Value::Null) => continue,
                Ok(v) => v,
                Err(e) => {
                    self.problems.push(Problem::error(at, "", format!("not valid YAML: {e}")));
                    // A syntax error leaves the rest of the stream unreadable.
                    break;
                }
            };
            match serde_json::to_value(&value) {
                Ok(json) => self.add_value(&at, json),
                Err(e) => self.problems.push(Problem::error(at, "", format!("not a Kubernetes object: {e}"))),
            }
        }
    }

    /// Adds one object given as JSON; `at` names it in problems.
    pub fn add_value(&mut self, at: &str, json: serde_json::Value) {
        // Checked first: a struct also deserializes from a sequence, by position.
        if !json.is_object() {
            self.problems.push(Problem::error(
                at,
                "",
                "not a Kubernetes object (expected a mapping with apiVersion and kind)",
            ));
            return;
        }
        let meta: TypeMeta = match serde_json::from_value(json.clone()) {
            Ok(m) => m,
            Err(_) => {
                self.problems.push(Problem::error(
                    at,
                    "",
                    "not a Kubernetes object (expected a mapping with apiVersion and kind)",
                ));
                return;
            }
        };
        let (Some(api_version), Some(kind)) = (meta.api_version, meta.kind) else {
            self.problems.push(Problem::error(at, "", "apiVersion and kind are required"));
            return;
        };
        // Judged by group, not by kind name: other projects have kinds called `Upstream`
        // (Gloo's `gloo.solo.io/v1`), and a directory may hold them next to ours.
        let group = api_version.split_once('/').map_or(api_version.as_str(), |(group, _)| group);
        if group != crate::GROUP {
            self.problems.push(Problem::warning(
                at,
                "kind",
                format!("{api_version} {kind} is not a sluice kind; ignored"),
            ));
            return;
        }
        if kind == "AccountLimit" {
            // Applied to the ledger by the operator; file-mode gateways read limits from
            // the ledger, where `admin` sets them (docs/design.md §5b).
            self.problems.push(Problem::warning(
                at,
                "kind",
                "AccountLimit is applied by the operator on Kubernetes; without it set limits with \
                 `sluice-gateway admin key update` or `admin account update`; ignored",
            ));
            return;
        }
        if !["Upstream", "ModelRoute", "ErrorBudget"].contains(&kind.as_str()) {
            self.problems.push(Problem::error(
                at,
                "kind",
                format!("unknown kind {kind:?} (expected Upstream, ModelRoute or ErrorBudget)"),
            ));
            return;
        }
        if api_version != API_VERSION {
            self.problems.push(Problem::error(
                at,
                "apiVersion",
                format!("{api_version:?} is not served; use {API_VERSION}"),
            ));
            return;
        }
        let resource = resource_name(&kind, &json).unwrap_or_else(|| at.to_string());
        match kind.as_str() {
            "Upstream" => push_typed(&mut self.upstreams, &mut self.problems, &resource, json),
            "ModelRoute" => push_typed(&mut self.routes, &mut self.problems, &resource, json),
            _ => push_typed(&mut self.budgets, &mut self.problems, &resource, json),
        }
    }
}

fn resource_name(kind: &str, json: &serde_json::Value) -> Option<String> {
    let name = json.pointer("/metadata/name")?.as_str()?;
    let ns =
        json.pointer("/metadata/namespace").and_then(|v| v.as_str()).unwrap_or(crate::resolve::defaults::NAMESPACE);
    Some(format!("{kind} {ns}/{name}"))
}

fn push_typed<T: DeserializeOwned>(
    into: &mut Vec<T>,
    problems: &mut Vec<Problem>,
    resource: &str,
    json: serde_json::Value,
) {
    let has_name = json.pointer("/metadata/name").and_then(|v| v.as_str()).is_some_and(|n| !n.is_empty());
    if !has_name {
        problems.push(Problem::error(resource, "metadata.name", "is required"));
        return;
    }
    match serde_path_to_error::deserialize::<_, T>(json) {
        Ok(obj) => into.push(obj),
        Err(e) => {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            problems.push(Problem::error(resource, field, e.into_inner().to_string()));
        }
    }
}
