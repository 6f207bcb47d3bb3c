//! Discovery: `/version`, the API group and resource lists, and the minimal OpenAPI v3
//! documents kubectl asks for.

use serde_json::{Value, json};

use super::Options;
use crate::resources::ResourceType;

pub(super) fn version_body(opts: &Options) -> Value {
    let v = opts.git_version.trim_start_matches('v');
    let mut parts = v.split(['.', '-']);
    let major = parts.next().unwrap_or("1").to_string();
    let minor = parts.next().unwrap_or("32").to_string();
    json!({
        "major": major, "minor": minor, "gitVersion": opts.git_version,
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.6", "compiler": "gc", "platform": "linux/amd64",
    })
}

fn verbs() -> Value {
    json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"])
}

pub(super) fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mine: Vec<&ResourceType> = types.iter().filter(|t| t.group == group && t.version == version).collect();
    if mine.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in mine {
        let mut r = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind, "verbs": verbs(),
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

pub(super) fn groups(types: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) => {
                if !vs.contains(&t.version) {
                    vs.push(t.version.clone());
                }
            }
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

pub(super) fn group_body(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs, "preferredVersion": vs[0]})
}

/// FNV-1a, for the `?hash=` of OpenAPI documents (changes when the group's types do).
fn fnv(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// `/openapi/v3`: the group-versions and where their documents are.
pub(super) fn openapi_index(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = Vec::new();
    for t in types {
        let gv = (t.group.clone(), t.version.clone());
        if !gvs.contains(&gv) {
            gvs.push(gv);
        }
    }
    for (g, v) in gvs {
        let doc = openapi_doc(types, &g, &v).unwrap_or_default();
        let hash = fnv(doc.to_string().as_bytes());
        let p = gv_path(&g, &v);
        paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}));
    }
    json!({"paths": paths})
}

/// The OpenAPI v3 document of one group-version: one path per resource, with the PATCH
/// operation tagged by kind and offering the `fieldValidation` parameter, which is what
/// kubectl's `--validate=strict` looks for before it leaves validation to the server.
/// (It carries no schemas: `kubectl explain` is not supported.)
pub(super) fn openapi_doc(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mine: Vec<&ResourceType> = types.iter().filter(|t| t.group == group && t.version == version).collect();
    if mine.is_empty() {
        return None;
    }
    let param = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    let params = json!([param("dryRun"), param("fieldManager"), param("fieldValidation"), param("force")]);
    let mut paths = serde_json::Map::new();
    for t in mine {
        let base = if t.namespaced {
            format!("/{}/namespaces/{{namespace}}/{}", gv_path(group, version), t.plural)
        } else {
            format!("/{}/{}", gv_path(group, version), t.plural)
        };
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let mut content =
            vec!["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];
        if !t.is_custom() {
            content.push("application/strategic-merge-patch+json");
        }
        let body: serde_json::Map<String, Value> =
            content.iter().map(|c| (c.to_string(), json!({"schema": {"type": "object"}}))).collect();
        let op = |action: &str| {
            json!({
                "x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": action,
                "parameters": params, "responses": {"200": {"description": "OK"}},
            })
        };
        let mut patch = op("patch");
        patch["requestBody"] = json!({"content": body});
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": op("get"), "put": op("put"), "patch": patch, "delete": op("delete")}),
        );
        paths.insert(base, json!({"get": op("list"), "post": op("post")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.4"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
