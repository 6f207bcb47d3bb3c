//! Validation of custom resources against their CRD's structural `openAPIV3Schema`:
//! pruning of unknown fields and non-nullable nulls, defaults, the OpenAPI value checks,
//! and the `x-kubernetes-validations` CEL rules (through kube's `cel` feature, as
//! `crds/tests/crds/cel.rs` does). Errors read like the real API server's.
//!
//! Start at [`custom_resource`]; the value checks are in [`schema`], the CEL rules in
//! [`cel`].

use serde_json::Value;

use crate::util::go_value;

mod cel;
mod schema;
#[cfg(test)]
mod tests;

pub use cel::validate_cel;
pub use schema::validate_schema;

/// One field error, as `k8s.io/apimachinery/pkg/util/validation/field.Error`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// `spec.candidates[0].weight`; empty for the root.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, …
    pub reason: &'static str,
    /// What follows `field: ` (`Invalid value: 0: … should be greater than or equal to 1`).
    pub body: String,
}

impl FieldError {
    fn new(field: &str, reason: &'static str, body: String) -> Self {
        Self { field: field.to_string(), reason, body }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self::new(field, "FieldValueInvalid", format!("Invalid value: {}: {detail}", go_value(value)))
    }

    pub fn required(field: &str, detail: &str) -> Self {
        let body = if detail.is_empty() { "Required value".to_string() } else { format!("Required value: {detail}") };
        Self::new(field, "FieldValueRequired", body)
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(field, "FieldValueForbidden", format!("Forbidden: {detail}"))
    }

    fn type_invalid(field: &str, actual: &str, expected: &str) -> Self {
        let name = if field.is_empty() { "body" } else { field };
        Self::new(
            field,
            "FieldValueTypeInvalid",
            format!("Invalid value: \"{actual}\": {name} in body must be of type {expected}: \"{actual}\""),
        )
    }

    /// The whole line: `spec.x: Invalid value: …` (`<nil>` for the root, as Go prints it).
    pub fn render(&self) -> String {
        let field = if self.field.is_empty() { "<nil>" } else { &self.field };
        format!("{field}: {}", self.body)
    }
}

/// `a.b` + `c`.
fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                "integer"
            } else {
                "number"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

/// Removes fields the schema does not know (recording their paths), drops `null`s that
/// the schema does not allow, and applies `default`s. `root` keeps `apiVersion`, `kind`
/// and `metadata`.
pub fn prune_and_default(schema: &Value, value: &mut Value, path: &str, root: bool, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let preserve = is_true(&schema["x-kubernetes-preserve-unknown-fields"]);
            let embedded = root || is_true(&schema["x-kubernetes-embedded-resource"]);
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let p = child(path, &key);
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    if let Some(s) = props.and_then(|p| p.get(&key)).filter(|_| key != "metadata")
                        && let Some(v) = map.get_mut(&key)
                    {
                        prune_and_default(s, v, &p, false, unknown);
                    }
                    continue;
                }
                let sub =
                    props.and_then(|p| p.get(&key)).or(if additional.is_object() { Some(additional) } else { None });
                match sub {
                    Some(s) => {
                        if map.get(&key).is_some_and(Value::is_null) && !is_true(&s["nullable"]) {
                            map.remove(&key);
                            continue;
                        }
                        let p =
                            if props.is_some_and(|pr| pr.contains_key(&key)) { p } else { format!("{path}[{key}]") };
                        if let Some(v) = map.get_mut(&key) {
                            prune_and_default(s, v, &p, false, unknown);
                        }
                    }
                    None if preserve || is_true(additional) => {}
                    None => {
                        map.remove(&key);
                        unknown.push(p);
                    }
                }
            }
            if let Some(props) = props {
                for (key, s) in props {
                    if !map.contains_key(key)
                        && let Some(d) = s.get("default")
                    {
                        let mut d = d.clone();
                        prune_and_default(s, &mut d, &child(path, key), false, &mut Vec::new());
                        map.insert(key.clone(), d);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_and_default(s, item, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// The outcome of validating one custom resource.
#[derive(Debug, Default)]
pub struct Outcome {
    pub errors: Vec<FieldError>,
    /// Paths of fields that were pruned because the schema does not know them.
    pub unknown_fields: Vec<String>,
}

/// Prunes, defaults and validates `obj` in place against `schema`.
pub fn custom_resource(schema: &Value, obj: &mut Value, old: Option<&Value>) -> Outcome {
    let mut out = Outcome::default();
    prune_and_default(schema, obj, "", true, &mut out.unknown_fields);
    validate_schema(schema, obj, "", true, &mut out.errors);
    // As the API server does: CEL does not run over values of the wrong type.
    if !out.errors.iter().any(|e| e.reason == "FieldValueTypeInvalid") {
        validate_cel(schema, obj, old, &mut out.errors);
    }
    out
}
