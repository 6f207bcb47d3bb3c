//! `meta.k8s.io/v1` `Table` rendering (what `kubectl get` asks for) and the simple
//! JSONPath subset that CRD `additionalPrinterColumns` use.

use serde_json::{Value, json};

use crate::resources::ResourceType;
use crate::util;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    /// `[?(@.a.b=="x")]` (or `!=`).
    Filter(Vec<String>, bool, Value),
}

fn parse_path(path: &str) -> Option<Vec<Step>> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    if chars.first() == Some(&'$') {
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let start = i + 1;
                let mut depth = 0;
                while i < chars.len() {
                    match chars[i] {
                        '[' => depth += 1,
                        ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                let inner: String = chars[start..i.min(chars.len())].iter().collect();
                i += 1;
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                    let (lhs, eq, rhs) = if let Some((l, r)) = f.split_once("==") {
                        (l, true, r)
                    } else if let Some((l, r)) = f.split_once("!=") {
                        (l, false, r)
                    } else {
                        return None;
                    };
                    let fields = lhs.trim().strip_prefix("@.")?.split('.').map(str::to_string).collect();
                    let rhs = rhs.trim();
                    let value = if let Some(s) = rhs
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .or_else(|| rhs.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
                    {
                        Value::String(s.to_string())
                    } else {
                        serde_json::from_str(rhs).ok()?
                    };
                    steps.push(Step::Filter(fields, eq, value));
                } else if let Some(s) = inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
                    steps.push(Step::Field(s.to_string()));
                } else {
                    return None;
                }
            }
            _ => {
                // A path without a leading dot (`status.x`).
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
        }
    }
    Some(steps)
}

/// Evaluates a simple JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.type=="Ready")]`, `['x']`)
/// and returns every match.
pub fn jsonpath<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse_path(path) else { return Vec::new() };
    let mut cur = vec![obj];
    for step in &steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => {
                    if let Some(x) = v.get(f.as_str()) {
                        next.push(x);
                    }
                }
                Step::Index(n) => {
                    if let Some(x) = v.get(*n) {
                        next.push(x);
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(fields, eq, want) => {
                    for item in v.as_array().into_iter().flatten() {
                        let mut node = item;
                        for f in fields {
                            node = &node[f.as_str()];
                        }
                        if (node == want) == *eq && !node.is_null() {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

/// One printer-column cell as the API server's CRD table convertor renders it.
fn cell(type_: &str, value: Option<&Value>) -> Value {
    let Some(v) = value else { return Value::Null };
    if v.is_null() {
        return Value::Null;
    }
    match type_ {
        "string" => match v {
            Value::String(s) => Value::String(s.clone()),
            Value::Number(n) => Value::String(util::format_number(n)),
            other => Value::String(other.to_string()),
        },
        "integer" => match v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)) {
            Some(i) => json!(i),
            None => Value::Null,
        },
        "number" => v.as_f64().map_or(Value::Null, |f| json!(f)),
        "boolean" => v.as_bool().map_or(Value::Null, Value::Bool),
        "date" => v.as_str().map_or(Value::Null, |s| Value::String(util::age(s))),
        _ => Value::Null,
    }
}

fn name_column() -> Value {
    json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
    })
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"].clone()})
}

/// The `columnDefinitions` of a type.
pub fn columns(rt: &ResourceType) -> Vec<Value> {
    let mut cols = vec![name_column()];
    match &rt.crd {
        Some(crd) if !crd.printer_columns.is_empty() => {
            for c in &crd.printer_columns {
                cols.push(json!({
                    "name": c.name, "type": c.type_, "format": c.format,
                    "description": c.description, "priority": c.priority,
                }));
            }
        }
        Some(_) => cols.push(
            json!({"name": "Age", "type": "date", "format": "", "description": "Creation timestamp", "priority": 0}),
        ),
        None => {
            if rt.plural == "namespaces" {
                cols.push(json!({"name": "Status", "type": "string", "format": "", "description": "The status of the namespace", "priority": 0}));
            }
            cols.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0}));
        }
    }
    cols
}

/// One table row.
pub fn row(rt: &ResourceType, obj: &Value, include_object: &str) -> Value {
    let mut cells = vec![obj["metadata"]["name"].clone()];
    match &rt.crd {
        Some(crd) if !crd.printer_columns.is_empty() => {
            for c in &crd.printer_columns {
                cells.push(cell(&c.type_, jsonpath(obj, &c.json_path).first().copied()));
            }
        }
        _ => {
            if rt.plural == "namespaces" {
                cells.push(obj["status"]["phase"].clone());
            }
            cells.push(Value::String(util::age(util::meta_str(obj, "creationTimestamp"))));
        }
    }
    let object = match include_object {
        "None" => Value::Null,
        "Object" => obj.clone(),
        _ => partial_metadata(obj),
    };
    let mut row = json!({"cells": cells});
    if !object.is_null() {
        row["object"] = object;
    }
    row
}

/// A `Table` of `objects`.
pub fn table(rt: &ResourceType, objects: &[&Value], include_object: &str, resource_version: &str) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns(rt),
        "rows": objects.iter().map(|o| row(rt, o, include_object)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpaths() {
        let obj = json!({
            "status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}],
                       "burnRates": {"1h": "2.5"}},
            "spec": {"list": [1, 2]}
        });
        assert_eq!(jsonpath(&obj, ".status.conditions[?(@.type==\"Ready\")].status"), vec![&json!("True")]);
        assert_eq!(jsonpath(&obj, ".status.burnRates.1h"), vec![&json!("2.5")]);
        assert_eq!(jsonpath(&obj, ".spec.list[1]"), vec![&json!(2)]);
        assert_eq!(jsonpath(&obj, ".spec.list[*]").len(), 2);
        assert!(jsonpath(&obj, ".status.missing").is_empty());
    }

    #[test]
    fn ages() {
        assert_eq!(util::human_duration(5), "5s");
        assert_eq!(util::human_duration(150), "2m30s");
        assert_eq!(util::human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(util::human_duration(86400 * 3), "3d");
    }
}
