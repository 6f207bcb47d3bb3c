//! HTTP: the one handler every request goes through ([`handle`]), which logs it and
//! routes it to the fake's own endpoints (`/_fake/…`), discovery ([`discovery`]) or a
//! resource verb: [`read`] (get, list), [`write`] (create, update), [`patch`],
//! [`delete`] and [`watch`]. Responses and content negotiation are in [`wire`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderMap, Method, header};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::log::{RequestRecord, request_info};
use crate::merge::Scope;
use crate::store::Store;
use crate::util::parse_query;
use discovery::{group_body, groups, openapi_doc, openapi_index, resource_list, version_body};
use wire::{fail, header_str, q, respond, text, want};

mod delete;
mod discovery;
mod patch;
mod read;
mod watch;
mod wire;
mod write;

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
    pub shutdown: tokio::sync::watch::Sender<u64>,
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
            shutdown: tokio::sync::watch::channel(0).0,
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

/// A resource request: finds the type, checks the scope, runs the verb.
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
        "get" => read::get(shared, &rt, ns, &info.name, want, query),
        "list" => read::list(shared, &rt, ns, want, query),
        "watch" => return watch::watch(shared.clone(), rt, ns, &info.name, want, query),
        "create" if info.subresource.is_empty() => write::create(shared, &rt, ns, info, query, body, want),
        "update" => write::update(shared, &rt, ns, info, query, body, scope, want),
        "patch" => patch::patch(shared, &rt, ns, info, query, headers, body, scope, want),
        "delete" if info.subresource.is_empty() => delete::delete(shared, &rt, ns, &info.name, query, body),
        "deletecollection" => delete::delete_collection(shared, &rt, ns, query, body),
        _ => Err(ApiError::method_not_allowed()),
    };
    let _ = method;
    match result {
        Ok(r) => r,
        Err(e) => fail(&e),
    }
}
