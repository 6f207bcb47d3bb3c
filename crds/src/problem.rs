//! Problems found while loading and resolving manifests, each naming its resource and field.

use std::fmt;

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Serving goes on, degraded (e.g. a route lost one of its candidates).
    Warning,
    /// The resource (or document) is left out.
    Error,
}

/// One problem with one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// How bad it is.
    pub severity: Severity,
    /// Where: `ModelRoute default/claude-opus`, or `file.yaml (document 2)`.
    pub resource: String,
    /// Field path, e.g. `spec.candidates[1].upstream`; empty for the whole resource.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// An error on a resource field.
    pub fn error(resource: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { severity: Severity::Error, resource: resource.into(), field: field.into(), message: message.into() }
    }

    /// A warning on a resource field.
    pub fn warning(resource: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { severity: Severity::Warning, resource: resource.into(), field: field.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        if self.field.is_empty() {
            write!(f, "{level}: {}: {}", self.resource, self.message)
        } else {
            write!(f, "{level}: {}: {}: {}", self.resource, self.field, self.message)
        }
    }
}
