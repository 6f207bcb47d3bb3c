//! The `x-kubernetes-validations` CEL rules, through kube's validator.

use serde_json::Value;

use super::FieldError;

/// The schema node at a CEL error's field path (`spec.candidates[0].upstream`).
fn schema_at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            let key = &r[..end];
            node = if node.get("items").is_some() && key.parse::<usize>().is_ok() {
                &node["items"]
            } else {
                &node["additionalProperties"]
            };
            rest = r.get(end + 1..).unwrap_or_default();
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            node = if node["properties"].get(key).is_some() {
                &node["properties"][key]
            } else {
                &node["additionalProperties"]
            };
            rest = &r[end..];
        }
    }
    node
}

/// Runs the `x-kubernetes-validations` rules (with `oldSelf` on updates).
pub fn validate_cel(schema: &Value, value: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let Err(found) = kube::core::cel::Validator::new().validate(schema, value, old) else { return };
    for e in found.into_vec() {
        let field = e.field_path.clone();
        let err = match e.reason.as_deref() {
            Some("FieldValueRequired") => FieldError::required(&field, &e.message),
            Some("FieldValueForbidden") => FieldError::forbidden(&field, &e.message),
            Some("FieldValueDuplicate") => {
                FieldError::new(&field, "FieldValueDuplicate", format!("Duplicate value: {:?}", e.message))
            }
            _ => {
                let ty = schema_at(schema, &field)["type"].as_str().unwrap_or("object").to_string();
                FieldError::invalid(&field, &Value::String(ty), &e.message)
            }
        };
        errs.push(err);
    }
}
