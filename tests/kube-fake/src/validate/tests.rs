//! Schema and CEL errors, as the API server words them.

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
