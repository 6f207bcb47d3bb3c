//! HTTP: request parsing, discovery, the resource verbs, watch streams, content negotiation.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use futures::{Stream, StreamExt, stream};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_stream::wrappers::BroadcastStream;

use crate::error::ApiError;
use crate::log::{RequestRecord, request_info};
use crate::merge::{self, Ctx, Scope};
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, FieldValidation, Key, Propagation, Store, WriteOpts};
use crate::table;
use crate::util::{self, meta_mut, meta_str, parse_query};

/// Tunables.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// `gitVersion` reported by `/version`.
    pub git_version: String,
}

impl Default for Options {
    fn default() -> Self {
        Self { bookmark_interval: Duration::from_secs(30), git_version: "v1.32.4-sluice-kube-fake".into() }
    }
}

/// State shared by every request.
pub struct Shared {
    pub store: Mutex<Store>,
    pub log: Mutex<Vec<RequestRecord>>,
    /// Bumped to end every watch open at that moment (server shutdown).
    pub shutdown: watch::Sender<u64>,
    pub options: Mutex<Options>,
    /// `host:port` the server is reachable at, once served on a socket.
    pub address: Mutex<Option<String>>,
}

/// Locks a mutex, shrugging off poisoning (a panicked test thread must not take the
/// fake down with it).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub fn new() -> Self {
        Self {
            store: Mutex::new(Store::new()),
            log: Mutex::new(Vec::new()),
            shutdown: watch::channel(0).0,
            options: Mutex::new(Options::default()),
            address: Mutex::new(None),
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

// ---- responses ---------------------------------------------------------------------------

fn respond(code: u16, body: &Value, warnings: &[String]) -> Response {
    let mut resp = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

fn fail(e: &ApiError) -> Response {
    respond(e.code, &e.status(), &[])
}

fn text(code: u16, body: &str) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// What representation the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Json,
    Table,
    Metadata,
}

fn want(headers: &HeaderMap) -> Want {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    // The first acceptable media type wins, as in the API server's negotiation.
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=Table") {
            return Want::Table;
        }
        if p.contains("as=PartialObjectMetadata") {
            return Want::Metadata;
        }
        if p.starts_with("application/json") || p.starts_with("*/*") || p.starts_with("application/yaml") {
            return Want::Json;
        }
    }
    Want::Json
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

fn q<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn decode(body: &[u8]) -> Result<Value, ApiError> {
    if body.starts_with(b"k8s\0") {
        return crate::proto::decode(body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "kube-fake decodes application/vnd.kubernetes.protobuf only for v1 Namespace, ConfigMap, Secret and ServiceAccount ({e}); send JSON or YAML, e.g. `kubectl create -f` / `kubectl apply -f`"
            ))
        });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice::<Value>(body))
        .map_err(|e| ApiError::bad_request(format!("couldn't decode the request body: {e}")))
}

// ---- discovery ---------------------------------------------------------------------------

fn version_body(opts: &Options) -> Value {
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

fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
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

fn groups(types: &[ResourceType]) -> Vec<(String, Vec<String>)> {
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

fn group_body(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs, "preferredVersion": vs[0]})
}

// ---- OpenAPI v3 (just enough for kubectl) ---------------------------------------------------

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
fn openapi_index(types: &[ResourceType]) -> Value {
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
fn openapi_doc(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
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

// ---- the handler -------------------------------------------------------------------------

/// The one axum handler: every request lands here.
pub async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return fail(&ApiError::bad_request(format!("reading the body: {e}"))),
    };
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or_default().to_string();
    let mut info = request_info(parts.method.as_str(), &path, &raw_query);
    info.content_type = header_str(&parts.headers, header::CONTENT_TYPE).to_string();
    info.user_agent = header_str(&parts.headers, header::USER_AGENT).to_string();
    let seq = {
        let mut log = lock(&shared.log);
        info.seq = log.len() as u64 + 1;
        log.push(info.clone());
        info.seq
    };
    tracing::debug!(method = %parts.method, %path, query = %raw_query, "request");
    let resp = route(&shared, &parts.method, &parts.headers, &info, &raw_query, &bytes);
    if let Some(r) = lock(&shared.log).iter_mut().rev().find(|r| r.seq == seq) {
        r.status = resp.status().as_u16();
    }
    resp
}

/// `?userAgent=PREFIX` keeps, `?excludeUserAgent=PREFIX` drops requests by User-Agent
/// (kubectl sends `kubectl/v1.32…`; kube-rs sends none).
fn ua_filter(query: &[(String, String)], r: &RequestRecord) -> bool {
    q(query, "userAgent").is_none_or(|p| r.user_agent.starts_with(p))
        && q(query, "excludeUserAgent").is_none_or(|p| p.is_empty() || !r.user_agent.starts_with(p))
}

fn route(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    info: &RequestRecord,
    raw_query: &str,
    body: &Bytes,
) -> Response {
    let path = info.path.trim_end_matches('/');
    let query = parse_query(raw_query);
    match path {
        "/_fake/requests" => {
            if method == Method::DELETE {
                lock(&shared.log).clear();
                return respond(200, &json!({}), &[]);
            }
            let log: Vec<RequestRecord> = lock(&shared.log).iter().filter(|r| ua_filter(&query, r)).cloned().collect();
            return respond(200, &serde_json::to_value(log).unwrap_or_default(), &[]);
        }
        "/_fake/permissions" => {
            let perms = crate::log::permissions(lock(&shared.log).iter().filter(|r| ua_filter(&query, r)));
            return respond(200, &json!(perms.iter().map(ToString::to_string).collect::<Vec<_>>()), &[]);
        }
        "/_fake/objects" => {
            let store = lock(&shared.store);
            let all: Vec<Value> = store.all().map(|(_, v)| v.clone()).collect();
            return respond(200, &json!(all), &[]);
        }
        "/_fake/compact" => {
            lock(&shared.store).compact();
            return respond(200, &json!({}), &[]);
        }
        "/version" | "/version/" => return respond(200, &version_body(&lock(&shared.options)), &[]),
        "/healthz" | "/livez" | "/readyz" => return text(200, "ok"),
        "/api" => {
            let addr = lock(&shared.address).clone().unwrap_or_else(|| "127.0.0.1:6443".into());
            return respond(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]}),
                &[],
            );
        }
        "/apis" => {
            let store = lock(&shared.store);
            let gs: Vec<Value> = groups(store.types()).iter().map(|(g, vs)| group_body(g, vs)).collect();
            let mut body = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs});
            for g in body["groups"].as_array_mut().into_iter().flatten() {
                if let Some(m) = g.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
            }
            return respond(200, &body, &[]);
        }
        _ => {}
    }
    if info.resource_request {
        return resource(shared, method, headers, info, &query, body);
    }
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = lock(&shared.store);
    match segs.as_slice() {
        ["openapi", "v3"] => respond(200, &openapi_index(store.types()), &[]),
        ["openapi", "v3", "api", v] => {
            openapi_doc(store.types(), "", v).map_or_else(|| fail(&ApiError::no_such_path()), |b| respond(200, &b, &[]))
        }
        ["openapi", "v3", "apis", g, v] => {
            openapi_doc(store.types(), g, v).map_or_else(|| fail(&ApiError::no_such_path()), |b| respond(200, &b, &[]))
        }
        ["api", v] => resource_list(store.types(), "", v)
            .map_or_else(|| fail(&ApiError::no_such_path()), |b| respond(200, &b, &[])),
        ["apis", g, v] => resource_list(store.types(), g, v)
            .map_or_else(|| fail(&ApiError::no_such_path()), |b| respond(200, &b, &[])),
        ["apis", g] => match groups(store.types()).into_iter().find(|(x, _)| x == g) {
            Some((g, vs)) => respond(200, &group_body(&g, &vs), &[]),
            None => fail(&ApiError::no_such_path()),
        },
        _ => fail(&ApiError::no_such_path()),
    }
}

// ---- resources ---------------------------------------------------------------------------

fn key_of(rt: &ResourceType, ns: &str, name: &str) -> Key {
    (rt.gvr(), if rt.namespaced { ns.to_string() } else { String::new() }, name.to_string())
}

fn render(rt: &ResourceType, obj: &Value, want: Want, query: &[(String, String)], rv: u64) -> Value {
    match want {
        Want::Json => obj.clone(),
        Want::Metadata => table::partial_metadata(obj),
        Want::Table => table::table(rt, &[obj], q(query, "includeObject").unwrap_or_default(), &rv.to_string()),
    }
}

fn field_validation(query: &[(String, String)]) -> FieldValidation {
    match q(query, "fieldValidation") {
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        _ => FieldValidation::Warn,
    }
}

fn manager(query: &[(String, String)], info: &RequestRecord) -> String {
    match q(query, "fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => {
            let ua = info.user_agent.split('/').next().unwrap_or_default();
            if ua.is_empty() { "unknown".into() } else { ua.to_string() }
        }
    }
}

fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    info: &RequestRecord,
    query: &[(String, String)],
    body: &Bytes,
) -> Response {
    let rt = {
        let store = lock(&shared.store);
        store.find_type(&info.api_group, &info.api_version, &info.resource)
    };
    let Some(rt) = rt else { return fail(&ApiError::no_such_path()) };
    // Scope checks: a namespaced path for a cluster-scoped type (or the reverse) is no resource.
    let ns = if rt.plural == "namespaces" && rt.group.is_empty() { "" } else { info.namespace.as_str() };
    if !rt.namespaced && !ns.is_empty() {
        return fail(&ApiError::no_such_path());
    }
    if rt.namespaced && ns.is_empty() && !info.name.is_empty() {
        return fail(&ApiError::no_such_path());
    }
    let scope = match info.subresource.as_str() {
        "" => Scope::Main { with_status: !rt.status_subresource },
        "status" if rt.status_subresource => Scope::Status,
        _ => return fail(&ApiError::no_such_path()),
    };
    let want = want(headers);
    let result = match info.verb.as_str() {
        "get" => get(shared, &rt, ns, &info.name, want, query),
        "list" => list(shared, &rt, ns, want, query),
        "watch" => return watch(shared.clone(), rt, ns, &info.name, want, query),
        "create" if info.subresource.is_empty() => create(shared, &rt, ns, info, query, body, want),
        "update" => update(shared, &rt, ns, info, query, body, scope, want),
        "patch" => patch(shared, &rt, ns, info, query, headers, body, scope, want),
        "delete" if info.subresource.is_empty() => delete(shared, &rt, ns, &info.name, query, body),
        "deletecollection" => delete_collection(shared, &rt, ns, query, body),
        _ => Err(ApiError::method_not_allowed()),
    };
    let _ = method;
    match result {
        Ok(r) => r,
        Err(e) => fail(&e),
    }
}

fn get(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    want: Want,
    query: &[(String, String)],
) -> Result<Response, ApiError> {
    let store = lock(&shared.store);
    let obj = store.get(&key_of(rt, ns, name)).ok_or_else(|| ApiError::not_found(rt, name))?;
    Ok(respond(200, &render(rt, obj, want, query, store.resource_version()), &[]))
}

struct Filter {
    ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn parse(ns: &str, name: &str, query: &[(String, String)]) -> Result<Self, ApiError> {
        let labels =
            LabelSelector::parse(q(query, "labelSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
        let fields =
            FieldSelector::parse(q(query, "fieldSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
        Ok(Self {
            ns: if ns.is_empty() { None } else { Some(ns.to_string()) },
            name: if name.is_empty() { None } else { Some(name.to_string()) },
            labels,
            fields,
        })
    }

    fn matches(&self, obj: &Value) -> bool {
        self.ns.as_deref().is_none_or(|ns| meta_str(obj, "namespace") == ns)
            && self.name.as_deref().is_none_or(|n| meta_str(obj, "name") == n)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

fn list(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    want: Want,
    query: &[(String, String)],
) -> Result<Response, ApiError> {
    let filter = Filter::parse(ns, "", query)?;
    let store = lock(&shared.store);
    let rv = store.resource_version().to_string();
    let all: Vec<&Value> =
        store.list(&rt.gvr(), filter.ns.as_deref()).into_iter().filter(|o| filter.matches(o)).collect();
    let offset: usize = q(query, "continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q(query, "limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let page: Vec<&Value> = all.iter().skip(offset).take(limit).copied().collect();
    let next = offset.saturating_add(page.len());
    let mut meta = json!({"resourceVersion": rv});
    if next < all.len() {
        meta["continue"] = json!(next.to_string());
        meta["remainingItemCount"] = json!(all.len() - next);
    }
    let body = match want {
        Want::Table => {
            let mut t = table::table(rt, &page, q(query, "includeObject").unwrap_or_default(), &rv);
            t["metadata"] = meta;
            t
        }
        Want::Metadata => json!({
            "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "items": page.iter().map(|o| table::partial_metadata(o)).collect::<Vec<_>>(),
        }),
        Want::Json => json!({"apiVersion": rt.api_version(), "kind": rt.list_kind(), "metadata": meta, "items": page}),
    };
    Ok(respond(200, &body, &[]))
}

fn write_opts(
    rt: &ResourceType,
    info: &RequestRecord,
    query: &[(String, String)],
    scope: Scope,
    apply: bool,
) -> WriteOpts {
    let _ = rt;
    WriteOpts {
        scope,
        manager: manager(query, info),
        apply,
        field_validation: field_validation(query),
        dry_run: q(query, "dryRun").is_some_and(|d| d == "All"),
    }
}

/// Checks `apiVersion`/`kind` of a body against the URL (defaulting them when missing).
fn check_type(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request was in an unknown format"));
    }
    let av = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    if !av.is_empty() && av != rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if !kind.is_empty() && kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    obj["apiVersion"] = json!(rt.api_version());
    obj["kind"] = json!(rt.kind);
    Ok(())
}

fn check_namespace(rt: &ResourceType, ns: &str, obj: &Value) -> Result<(), ApiError> {
    let body_ns = meta_str(obj, "namespace");
    if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn created_or_ok(created: bool) -> u16 {
    if created { 201 } else { 200 }
}

fn create(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    body: &Bytes,
    want: Want,
) -> Result<Response, ApiError> {
    if rt.namespaced && ns.is_empty() {
        return Err(ApiError::no_such_path());
    }
    let mut obj = decode(body)?;
    check_type(rt, &mut obj)?;
    check_namespace(rt, ns, &obj)?;
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let generate = meta_str(&obj, "generateName").to_string();
        if !generate.is_empty() {
            name = format!("{generate}{}", util::random_suffix(5));
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
    }
    let mut store = lock(&shared.store);
    if !name.is_empty() && store.get(&key_of(rt, ns, &name)).is_some() {
        return Err(ApiError::already_exists(rt, &name));
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    let opts = write_opts(rt, info, query, Scope::Main { with_status: !rt.status_subresource }, false);
    let w = store.commit(rt, ns, None, obj, &opts)?;
    let rv = store.resource_version();
    Ok(respond(created_or_ok(true), &render(rt, &w.object, want, query, rv), &w.warnings))
}

#[allow(clippy::too_many_arguments)]
fn update(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    body: &Bytes,
    scope: Scope,
    want: Want,
) -> Result<Response, ApiError> {
    let mut obj = decode(body)?;
    check_type(rt, &mut obj)?;
    check_namespace(rt, ns, &obj)?;
    let name = info.name.as_str();
    let body_name = meta_str(&obj, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    let mut store = lock(&shared.store);
    let old = store.get(&key_of(rt, ns, name)).cloned().ok_or_else(|| ApiError::not_found(rt, name))?;
    let opts = write_opts(rt, info, query, scope, false);
    let w = store.commit(rt, ns, Some(&old), obj, &opts)?;
    let rv = store.resource_version();
    Ok(respond(200, &render(rt, &w.object, want, query, rv), &w.warnings))
}

#[allow(clippy::too_many_arguments)]
fn patch(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    info: &RequestRecord,
    query: &[(String, String)],
    headers: &HeaderMap,
    body: &Bytes,
    scope: Scope,
    want: Want,
) -> Result<Response, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE).split(';').next().unwrap_or_default().trim().to_string();
    let name = info.name.as_str();
    let patch_body = decode(body)?;
    let schema = rt.crd.as_ref().and_then(|c| c.schema.as_ref());
    let mut store = lock(&shared.store);
    let key = key_of(rt, ns, name);
    let old = store.get(&key).cloned();
    if ct == "application/apply-patch+yaml" {
        let mut cfg = patch_body;
        let manager = q(query, "fieldManager").unwrap_or_default().to_string();
        if manager.is_empty() {
            return Err(ApiError::bad_request("PATCH, fieldManager is required for apply requests"));
        }
        if !cfg.is_object() {
            return Err(ApiError::bad_request("the body of an apply request must be an object"));
        }
        if cfg["apiVersion"].as_str().unwrap_or_default().is_empty()
            || cfg["kind"].as_str().unwrap_or_default().is_empty()
        {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: apiVersion and kind must be set in an apply configuration",
                rt.kind, rt.version, rt.kind
            )));
        }
        check_type(rt, &mut cfg)?;
        check_namespace(rt, ns, &cfg)?;
        let body_name = meta_str(&cfg, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let want_rv = meta_str(&cfg, "resourceVersion").to_string();
        let force = q(query, "force").is_some_and(|f| f == "true");
        let mut opts = write_opts(rt, info, query, scope, true);
        opts.manager = manager.clone();
        let track_scope = match scope {
            Scope::Status => Scope::Status,
            Scope::Main { .. } => Scope::Main { with_status: !rt.status_subresource },
        };
        let live = match &old {
            Some(o) => {
                if !want_rv.is_empty() && want_rv != meta_str(o, "resourceVersion") {
                    return Err(ApiError::modified(rt, name));
                }
                o.clone()
            }
            None if scope == Scope::Status => return Err(ApiError::not_found(rt, name)),
            None => {
                let mut skel = json!({"apiVersion": rt.api_version(), "kind": rt.kind, "metadata": {"name": name}});
                if rt.namespaced {
                    skel["metadata"]["namespace"] = json!(ns);
                }
                skel
            }
        };
        let new = merge::server_side_apply(&live, &cfg, &manager, force, track_scope, schema, &rt.api_version()).map_err(|cs| {
            let lines: Vec<String> = cs.iter().map(|c| format!("conflict with \"{}\" using {}: {}", c.manager, c.api_version, c.path)).collect();
            let head = if cs.len() == 1 { "Apply failed with 1 conflict".to_string() } else { format!("Apply failed with {} conflicts", cs.len()) };
            let mut e = ApiError::conflict(rt, name, "");
            e.message = format!("{head}: {}", lines.join("\n"));
            e.details = json!({
                "name": name, "group": rt.group, "kind": rt.plural,
                "causes": cs.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version), "field": c.path})).collect::<Vec<_>>(),
            });
            e
        })?;
        if old.is_none() && rt.namespaced && ns.is_empty() {
            return Err(ApiError::no_such_path());
        }
        let w = store.commit(rt, ns, old.as_ref(), new, &opts)?;
        let rv = store.resource_version();
        return Ok(respond(created_or_ok(w.created), &render(rt, &w.object, want, query, rv), &w.warnings));
    }
    let old = old.ok_or_else(|| ApiError::not_found(rt, name))?;
    let mut candidate = old.clone();
    match ct.as_str() {
        "application/merge-patch+json" => merge::merge_patch(&mut candidate, &patch_body),
        "application/strategic-merge-patch+json" => {
            if rt.is_custom() {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            merge::strategic_merge(&mut candidate, &patch_body, Ctx::root(None));
        }
        "application/json-patch+json" => {
            merge::json_patch(&mut candidate, &patch_body).map_err(|e| ApiError::new(422, "Invalid", e))?;
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
            )));
        }
    }
    // A patch cannot rename, move or retype an object.
    meta_mut(&mut candidate).insert("name".into(), json!(name));
    let opts = write_opts(rt, info, query, scope, false);
    let w = store.commit(rt, ns, Some(&old), candidate, &opts)?;
    let rv = store.resource_version();
    Ok(respond(200, &render(rt, &w.object, want, query, rv), &w.warnings))
}

fn delete_options(query: &[(String, String)], body: &Bytes) -> Result<(Propagation, bool, Value), ApiError> {
    let opts = decode(body)?;
    let policy = opts["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| q(query, "propagationPolicy").map(str::to_string));
    let propagation = match policy.as_deref() {
        Some("Orphan") => Propagation::Orphan,
        Some("Foreground") => Propagation::Foreground,
        _ if opts["orphanDependents"] == json!(true) || q(query, "orphanDependents") == Some("true") => {
            Propagation::Orphan
        }
        _ => Propagation::Background,
    };
    let dry =
        opts["dryRun"].as_array().is_some_and(|d| d.iter().any(|x| x == "All")) || q(query, "dryRun") == Some("All");
    Ok((propagation, dry, opts["preconditions"].clone()))
}

fn delete(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    query: &[(String, String)],
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (propagation, dry, pre) = delete_options(query, body)?;
    let mut store = lock(&shared.store);
    let key = key_of(rt, ns, name);
    let current = store.get(&key).cloned().ok_or_else(|| ApiError::not_found(rt, name))?;
    if let Some(uid) = pre["uid"].as_str()
        && uid != meta_str(&current, "uid")
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&current, "uid")
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && rv != meta_str(&current, "resourceVersion")
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&current, "resourceVersion")
            ),
        ));
    }
    let (obj, gone) = store.delete(&key, propagation, dry).ok_or_else(|| ApiError::not_found(rt, name))?;
    if gone && !rt.is_custom() {
        return Ok(respond(
            200,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta_str(&obj, "uid")},
            }),
            &[],
        ));
    }
    Ok(respond(200, &obj, &[]))
}

fn delete_collection(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    query: &[(String, String)],
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (propagation, dry, _) = delete_options(query, body)?;
    let filter = Filter::parse(ns, "", query)?;
    let mut store = lock(&shared.store);
    let keys: Vec<Key> = store
        .list(&rt.gvr(), filter.ns.as_deref())
        .into_iter()
        .filter(|o| filter.matches(o))
        .map(|o| key_of(rt, meta_str(o, "namespace"), meta_str(o, "name")))
        .collect();
    let mut items = Vec::new();
    for k in keys {
        if let Some((o, _)) = store.delete(&k, propagation, dry) {
            items.push(o);
        }
    }
    let rv = store.resource_version().to_string();
    Ok(respond(
        200,
        &json!({"apiVersion": rt.api_version(), "kind": rt.list_kind(), "metadata": {"resourceVersion": rv}, "items": items}),
        &[],
    ))
}

// ---- watch -------------------------------------------------------------------------------

fn line(type_: &str, object: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(rt: &ResourceType, want: Want, rv: u64, initial_end: bool) -> Bytes {
    let (kind, api_version) = match want {
        Want::Metadata => ("PartialObjectMetadata".to_string(), "meta.k8s.io/v1".to_string()),
        _ => (rt.kind.clone(), rt.api_version()),
    };
    let mut obj = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": rv.to_string()}});
    if initial_end {
        obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line("BOOKMARK", obj)
}

/// What a watcher with `filter` sees of one change (selector transitions included).
fn visible(change: &Change, filter: &Filter) -> Option<(EventType, Value)> {
    let now = filter.matches(&change.object);
    match change.type_ {
        EventType::Added => now.then(|| (EventType::Added, change.object.clone())),
        EventType::Deleted => now.then(|| (EventType::Deleted, change.object.clone())),
        EventType::Modified => {
            let before = change.old.as_ref().is_some_and(|o| filter.matches(o));
            match (before, now) {
                (true, true) => Some((EventType::Modified, change.object.clone())),
                (false, true) => Some((EventType::Added, change.object.clone())),
                (true, false) => Some((EventType::Deleted, change.object.clone())),
                (false, false) => None,
            }
        }
    }
}

fn watch(
    shared: Arc<Shared>,
    rt: ResourceType,
    ns: &str,
    name: &str,
    want: Want,
    query: &[(String, String)],
) -> Response {
    let filter = match Filter::parse(ns, name, query) {
        Ok(f) => f,
        Err(e) => return fail(&e),
    };
    let rv_param = q(query, "resourceVersion").unwrap_or_default().to_string();
    let send_initial = q(query, "sendInitialEvents") == Some("true");
    let bookmarks = q(query, "allowWatchBookmarks") == Some("true");
    let timeout = q(query, "timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).map(Duration::from_secs);
    let include_object = q(query, "includeObject").unwrap_or_default().to_string();
    let since = if send_initial || rv_param.is_empty() || rv_param == "0" {
        None
    } else {
        match rv_param.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => return fail(&ApiError::bad_request(format!("invalid resource version: {rv_param}"))),
        }
    };
    let gvr = rt.gvr();
    let render_obj = {
        let rt = rt.clone();
        move |obj: Value, rv: u64| -> Value {
            match want {
                Want::Json => obj,
                Want::Metadata => table::partial_metadata(&obj),
                Want::Table => table::table(&rt, &[&obj], &include_object, &rv.to_string()),
            }
        }
    };
    let (initial, rx, current) = {
        let mut store = lock(&shared.store);
        let current = store.resource_version();
        let mut initial: Vec<Bytes> = Vec::new();
        if since.is_none() {
            for o in store.list(&gvr, filter.ns.as_deref()) {
                if filter.matches(o) {
                    initial.push(line("ADDED", render_obj(o.clone(), current)));
                }
            }
            if send_initial && bookmarks {
                initial.push(bookmark(&rt, want, current, true));
            }
        }
        match store.subscribe(&gvr, since) {
            Ok((replay, rx)) => {
                for c in replay {
                    if let Some((t, o)) = visible(&c, &filter) {
                        initial.push(line(t.as_str(), render_obj(o, c.rv)));
                    }
                }
                (initial, rx, current)
            }
            Err((asked, oldest)) => {
                let gone = ApiError::gone(asked, oldest);
                let body = line("ERROR", gone.status());
                return streaming(stream::iter(vec![body]));
            }
        }
    };
    let _ = current;
    let live = BroadcastStream::new(rx).take_while(|r| futures::future::ready(r.is_ok())).filter_map(move |r| {
        let out = r.ok().and_then(|c| visible(&c, &filter).map(|(t, o)| line(t.as_str(), render_obj(o, c.rv))));
        futures::future::ready(out)
    });
    let ticks: std::pin::Pin<Box<dyn Stream<Item = Bytes> + Send>> = if bookmarks {
        let interval = lock(&shared.options).bookmark_interval;
        let shared2 = shared.clone();
        let rt2 = rt.clone();
        Box::pin(stream::unfold((), move |()| {
            let shared = shared2.clone();
            let rt = rt2.clone();
            async move {
                tokio::time::sleep(interval).await;
                let rv = lock(&shared.store).resource_version();
                Some((bookmark(&rt, want, rv, false), ()))
            }
        }))
    } else {
        Box::pin(stream::pending())
    };
    // The watch ends when the live feed does (a lagging receiver), not only on timeout.
    let live = live.map(Some).chain(stream::once(async { None }));
    let merged = stream::select(live, ticks.map(Some))
        .take_while(|x| futures::future::ready(x.is_some()))
        .filter_map(futures::future::ready);
    let events = stream::iter(initial).chain(merged);
    let mut stop = shared.shutdown.subscribe();
    let epoch = *stop.borrow();
    let shutdown = async move {
        let _ = stop.wait_for(|e| *e != epoch).await;
    };
    let deadline = async move {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => futures::future::pending::<()>().await,
        }
    };
    let ended = Box::pin(async move {
        tokio::select! {
            () = shutdown => {},
            () = deadline => {},
        }
    });
    streaming(events.take_until(ended))
}

fn streaming(s: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(s.map(Ok::<Bytes, Infallible>));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    resp
}
