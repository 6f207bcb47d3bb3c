//! `metav1.Status` failures, worded as the real API server words them.

use serde_json::{Value, json};

use crate::resources::ResourceType;
use crate::validate::FieldError;

/// A failed request, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self { code, reason: reason.into(), message: message.into(), details: Value::Null }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// The `Status` body.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.details.is_null() {
            s["details"] = self.details.clone();
        }
        s
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", rt.group_resource()))
            .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural}))
    }

    /// 404 for a path that names no resource.
    pub fn no_such_path() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(json!({}))
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", rt.group_resource()))
            .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural}))
    }

    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", rt.group_resource()),
        )
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural}))
    }

    /// 409 for a resourceVersion precondition that failed.
    pub fn modified(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid` listing field errors.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let lines: Vec<String> = errors.iter().map(FieldError::render).collect();
        let joined = if lines.len() == 1 { lines[0].clone() } else { format!("[{}]", lines.join(", ")) };
        let causes: Vec<Value> =
            errors.iter().map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field})).collect();
        Self::new(422, "Invalid", format!("{} \"{name}\" is invalid: {joined}", rt.group_kind()))
            .with_details(json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 410 for a watch from a compacted resourceVersion.
    pub fn gone(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }
}
