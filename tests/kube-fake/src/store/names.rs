//! Object name rules, with the API server's messages.

use serde_json::Value;

use crate::resources::ResourceType;
use crate::validate::FieldError;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

pub(super) fn name_errors(rt: &ResourceType, name: &str) -> Vec<FieldError> {
    let v = Value::String(name.to_string());
    let bad = |msg: &str| vec![FieldError::invalid("metadata.name", &v, msg)];
    if name.is_empty() {
        return vec![FieldError::required("metadata.name", "name or generateName is required")];
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") if !is_label(name) => bad(LABEL_MSG),
        ("", "services") if !(is_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase())) => bad(DNS1035_MSG),
        ("rbac.authorization.k8s.io", _) | ("", "events") | ("events.k8s.io", _) => {
            if name.contains('/') || name.contains('%') || name == "." || name == ".." {
                bad("may not contain '/' or '%'")
            } else {
                Vec::new()
            }
        }
        _ if !is_subdomain(name) => bad(SUBDOMAIN_MSG),
        _ => Vec::new(),
    }
}
