//! The request log: every request the fake served, with the RBAC-relevant attributes
//! (verb, API group, resource, subresource, namespace) parsed as the real API server's
//! `RequestInfo` does.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::util::parse_query;

/// One served request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// 1, 2, 3, … in arrival order.
    pub seq: u64,
    pub method: String,
    pub path: String,
    /// The raw query string (without `?`).
    pub query: String,
    /// Whether the path names a resource (else discovery, `/version`, …).
    pub resource_request: bool,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`;
    /// for non-resource requests the lowercase method.
    pub verb: String,
    /// API group (`""` for core).
    pub api_group: String,
    pub api_version: String,
    /// Plural resource (`configmaps`).
    pub resource: String,
    /// `status`, or `""`.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// `Content-Type` (patch flavour).
    pub content_type: String,
    /// `fieldManager` query parameter.
    pub field_manager: String,
    pub user_agent: String,
    /// HTTP status of the response (0 until answered).
    pub status: u16,
}

/// One RBAC permission: `(apiGroup, resource or resource/subresource, verb)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Permission {
    pub api_group: String,
    /// `configmaps`, or `modelroutes/status`.
    pub resource: String,
    pub verb: String,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = if self.api_group.is_empty() { "\"\"" } else { &self.api_group };
        write!(f, "{g} {} {}", self.resource, self.verb)
    }
}

impl RequestRecord {
    /// The permission this request needs (`None` for non-resource requests).
    pub fn permission(&self) -> Option<Permission> {
        if !self.resource_request {
            return None;
        }
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        Some(Permission { api_group: self.api_group.clone(), resource, verb: self.verb.clone() })
    }
}

/// The distinct permissions a set of requests needed.
pub fn permissions<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> BTreeSet<Permission> {
    records.into_iter().filter_map(RequestRecord::permission).collect()
}

/// Parses a request's path and query as the API server's `RequestInfoFactory` does.
pub fn request_info(method: &str, path: &str, raw_query: &str) -> RequestRecord {
    let mut r = RequestRecord {
        method: method.to_string(),
        path: path.to_string(),
        query: raw_query.to_string(),
        verb: method.to_lowercase(),
        ..Default::default()
    };
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, mut rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return r,
    };
    if rest.is_empty() {
        return r;
    }
    let mut watch = false;
    if rest[0] == "watch" {
        watch = true;
        rest = &rest[1..];
    }
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let (ns, resource, tail): (&str, &str, Vec<String>) = match rest {
        ["namespaces", ns] => (ns, "namespaces", own(&[ns])),
        ["namespaces", ns, sub @ ("status" | "finalize")] => (ns, "namespaces", own(&[ns, sub])),
        ["namespaces", ns, res, tail @ ..] => (ns, res, own(tail)),
        [res, tail @ ..] => ("", res, own(tail)),
        [] => return r,
    };
    r.resource_request = true;
    r.api_group = group.to_string();
    r.api_version = version.to_string();
    r.resource = resource.to_string();
    r.namespace = ns.to_string();
    r.name = tail.first().cloned().unwrap_or_default();
    r.subresource = tail.get(1).cloned().unwrap_or_default();
    let query = parse_query(raw_query);
    let watch_param = query.iter().any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    r.field_manager = query.iter().find(|(k, _)| k == "fieldManager").map(|(_, v)| v.clone()).unwrap_or_default();
    r.verb = match method {
        "GET" | "HEAD" if watch || watch_param => "watch",
        "GET" | "HEAD" if r.name.is_empty() => "list",
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if r.name.is_empty() => "deletecollection",
        "DELETE" => "delete",
        other => return RequestRecord { verb: other.to_lowercase(), ..r },
    }
    .to_string();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_infos() {
        let r = request_info(
            "PATCH",
            "/apis/sluice.dev/v1alpha1/namespaces/ns/modelroutes/a/status",
            "&force=true&fieldManager=op",
        );
        assert_eq!(
            (r.verb.as_str(), r.api_group.as_str(), r.resource.as_str(), r.subresource.as_str()),
            ("patch", "sluice.dev", "modelroutes", "status")
        );
        assert_eq!((r.namespace.as_str(), r.name.as_str(), r.field_manager.as_str()), ("ns", "a", "op"));
        let r = request_info("GET", "/api/v1/namespaces/ns/configmaps", "watch=true&resourceVersion=3");
        assert_eq!(r.verb, "watch");
        let r = request_info("GET", "/api/v1/namespaces/ns", "");
        assert_eq!((r.resource.as_str(), r.name.as_str(), r.verb.as_str()), ("namespaces", "ns", "get"));
        let r = request_info("GET", "/apis/apps/v1/deployments", "");
        assert_eq!((r.resource.as_str(), r.namespace.as_str(), r.verb.as_str()), ("deployments", "", "list"));
        let r = request_info("GET", "/apis", "");
        assert!(!r.resource_request);
        assert_eq!(r.permission(), None);
    }
}
