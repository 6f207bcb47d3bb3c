//! The OpenAPI value checks of a structural schema: types, formats, bounds, enums,
//! patterns, required fields and list uniqueness, in the real server's words.

use serde_json::{Map, Value};

use super::{FieldError, child, is_true, json_type};
use crate::util::go_value;

fn list_map_key(item: &Value, keys: &[String]) -> Value {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), item[k.as_str()].clone());
    }
    Value::Object(m)
}

fn go_map(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k:?}:{}", go_value(v))).collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
        other => go_value(other),
    }
}

/// The OpenAPI value checks, in the real server's words.
pub fn validate_schema(schema: &Value, value: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let name = if path.is_empty() { "body" } else { path };
    if value.is_null() {
        if !is_true(&schema["nullable"]) && schema.get("type").is_some() {
            errs.push(FieldError::type_invalid(path, "null", schema["type"].as_str().unwrap_or("object")));
        }
        return;
    }
    let int_or_string = is_true(&schema["x-kubernetes-int-or-string"]);
    if let Some(ty) = schema["type"].as_str()
        && !int_or_string
    {
        let actual = json_type(value);
        let ok = actual == ty || (ty == "number" && actual == "integer");
        if !ok {
            errs.push(FieldError::type_invalid(path, actual, ty));
            return;
        }
    } else if int_or_string && !matches!(json_type(value), "integer" | "string") {
        errs.push(FieldError::type_invalid(path, json_type(value), "integer,string"));
        return;
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        let supported: Vec<String> = values.iter().map(go_value).collect();
        errs.push(FieldError::new(
            path,
            "FieldValueNotSupported",
            format!("Unsupported value: {}: supported values: {}", go_value(value), supported.join(", ")),
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema["maxLength"].as_u64()
                && len > max
            {
                let unit = if max == 1 { "byte" } else { "bytes" };
                errs.push(FieldError::new(
                    path,
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {max} {unit}"),
                ));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && len < min
            {
                errs.push(FieldError::invalid(
                    path,
                    value,
                    &format!("{name} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = schema["pattern"].as_str() {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(s) => {
                        errs.push(FieldError::invalid(path, value, &format!("{name} in body should match '{p}'")));
                    }
                    _ => {}
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            let num = |v: &Value| v.as_f64();
            if let Some(min) = num(&schema["minimum"]) {
                let excl = is_true(&schema["exclusiveMinimum"]);
                if (excl && x <= min) || (!excl && x < min) {
                    let op = if excl { "greater than" } else { "greater than or equal to" };
                    errs.push(FieldError::invalid(
                        path,
                        value,
                        &format!("{name} in body should be {op} {}", fmt_f(min)),
                    ));
                }
            }
            if let Some(max) = num(&schema["maximum"]) {
                let excl = is_true(&schema["exclusiveMaximum"]);
                if (excl && x >= max) || (!excl && x > max) {
                    let op = if excl { "less than" } else { "less than or equal to" };
                    errs.push(FieldError::invalid(
                        path,
                        value,
                        &format!("{name} in body should be {op} {}", fmt_f(max)),
                    ));
                }
            }
            if let Some(m) = num(&schema["multipleOf"])
                && m != 0.0
                && (x / m).fract() != 0.0
            {
                errs.push(FieldError::invalid(
                    path,
                    value,
                    &format!("{name} in body should be a multiple of {}", fmt_f(m)),
                ));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema["maxItems"].as_u64()
                && len > max
            {
                errs.push(FieldError::new(
                    path,
                    "FieldValueTooMany",
                    format!("Too many: {len}: must have at most {max} items"),
                ));
            }
            if let Some(min) = schema["minItems"].as_u64()
                && len < min
            {
                errs.push(FieldError::invalid(
                    path,
                    &Value::from(len),
                    &format!("{name} in body should have at least {min} items"),
                ));
            }
            let list_type = schema["x-kubernetes-list-type"].as_str();
            if list_type == Some("set") || is_true(&schema["uniqueItems"]) {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        errs.push(FieldError::new(
                            &format!("{path}[{i}]"),
                            "FieldValueDuplicate",
                            format!("Duplicate value: {}", go_value(item)),
                        ));
                    }
                }
            }
            if list_type == Some("map") {
                let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect();
                let ids: Vec<Value> = items.iter().map(|it| list_map_key(it, &keys)).collect();
                for i in 0..ids.len() {
                    if ids[..i].contains(&ids[i]) {
                        errs.push(FieldError::new(
                            &format!("{path}[{i}]"),
                            "FieldValueDuplicate",
                            format!("Duplicate value: {}", go_map(&ids[i])),
                        ));
                    }
                }
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_schema(s, item, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(map) => {
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if map.get(r).is_none_or(Value::is_null) {
                    errs.push(FieldError::required(&child(path, r), ""));
                }
            }
            if let Some(max) = schema["maxProperties"].as_u64()
                && map.len() as u64 > max
            {
                errs.push(FieldError::new(
                    path,
                    "FieldValueTooMany",
                    format!("Too many: {}: must have at most {max} items", map.len()),
                ));
            }
            if let Some(min) = schema["minProperties"].as_u64()
                && (map.len() as u64) < min
            {
                errs.push(FieldError::invalid(
                    path,
                    &Value::from(map.len()),
                    &format!("{name} in body should have at least {min} properties"),
                ));
            }
            let props = schema["properties"].as_object();
            for (k, v) in map {
                if root && matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    validate_schema(s, v, &child(path, k), false, errs);
                } else if schema["additionalProperties"].is_object() {
                    validate_schema(&schema["additionalProperties"], v, &format!("{path}[{k}]"), false, errs);
                }
            }
        }
        _ => {}
    }
    // Value-validation combinators.
    let count_ok = |subs: &Value| -> (usize, usize) {
        let subs = subs.as_array().map(Vec::as_slice).unwrap_or_default();
        let ok = subs
            .iter()
            .filter(|s| {
                let mut e = Vec::new();
                validate_schema(s, value, path, root, &mut e);
                e.is_empty()
            })
            .count();
        (ok, subs.len())
    };
    if let Some(all) = schema["allOf"].as_array() {
        for s in all {
            validate_schema(s, value, path, root, errs);
        }
    }
    if schema["anyOf"].is_array() {
        let (ok, n) = count_ok(&schema["anyOf"]);
        if n > 0 && ok == 0 {
            errs.push(FieldError::invalid(
                path,
                value,
                &format!("{name} in body must validate at least one schema (anyOf)"),
            ));
        }
    }
    if schema["oneOf"].is_array() {
        let (ok, n) = count_ok(&schema["oneOf"]);
        if n > 0 && ok != 1 {
            errs.push(FieldError::invalid(
                path,
                value,
                &format!("{name} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if schema["not"].is_object() {
        let mut e = Vec::new();
        validate_schema(&schema["not"], value, path, root, &mut e);
        if e.is_empty() {
            errs.push(FieldError::invalid(
                path,
                value,
                &format!("{name} in body should not validate the schema provided"),
            ));
        }
    }
}

fn fmt_f(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 { format!("{}", f as i64) } else { f.to_string() }
}
