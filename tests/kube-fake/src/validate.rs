//! Validation of custom resources against their CRD's structural `openAPIV3Schema`:
//! pruning of unknown fields and non-nullable nulls, defaults, the OpenAPI value checks,
//! and the `x-kubernetes-validations` CEL rules (through kube's `cel` feature, as
//! `crds/tests/cel.rs` does). Errors read like the real API server's.

use serde_json::{Map, Value};

use crate::util::go_value;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["n"],
                    "properties": {
                        "n": {"type": "integer", "minimum": 1.0, "maximum": 10.0},
                        "s": {"type": "string", "enum": ["a", "b"], "nullable": true},
                        "l": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"},
                              "x-kubernetes-validations": [{"rule": "self.all(x, x > 0)", "message": "positive"}]},
                        "d": {"type": "string", "default": "dflt"}
                    }
                }
            }
        })
    }

    fn lines(obj: Value) -> (Vec<String>, Vec<String>, Value) {
        let mut obj = obj;
        let out = custom_resource(&schema(), &mut obj, None);
        (out.errors.iter().map(FieldError::render).collect(), out.unknown_fields, obj)
    }

    #[test]
    fn schema_errors_read_like_the_api_server() {
        let (errs, unknown, obj) = lines(json!({"spec": {"n": 0, "s": "c", "l": [1, 2, 3], "x": 1, "y": null}}));
        assert_eq!(
            errs,
            vec![
                "spec.l: Too many: 3: must have at most 2 items",
                "spec.n: Invalid value: 0: spec.n in body should be greater than or equal to 1",
                "spec.s: Unsupported value: \"c\": supported values: \"a\", \"b\"",
            ]
        );
        assert_eq!(unknown, vec!["spec.x", "spec.y"]);
        assert_eq!(obj["spec"]["d"], "dflt");
        let (errs, _, _) = lines(json!({"spec": {"n": "x"}}));
        assert_eq!(errs, vec!["spec.n: Invalid value: \"string\": spec.n in body must be of type integer: \"string\""]);
        let (errs, _, _) = lines(json!({"spec": {}}));
        assert_eq!(errs, vec!["spec.n: Required value"]);
    }

    #[test]
    fn cel_errors_name_the_schema_type() {
        let (errs, _, _) = lines(json!({"spec": {"n": 1, "l": [-1]}}));
        assert_eq!(errs, vec!["spec.l: Invalid value: \"array\": positive"]);
    }
}
