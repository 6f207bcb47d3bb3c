//! `/v1/embeddings` cached per input item (docs/design.md §13): of a batch of 100
//! inputs with 90 known, only the 10 new ones go upstream, and the answer is assembled
//! in the order of the request. Each item's key is its own input with the rest of the
//! request (less [`INERT`] members), the route and its candidates' models, and the
//! scope: an embedding is only ever served for the same model, options and tenant.

use std::sync::Arc;
use tokio::time::Instant;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::key::{INERT, Scope, canonical};
use super::{Cache, Directive, Entry, Key, X_SLUICE_CACHE, X_SLUICE_CACHE_HITS, now_ms};
use crate::answer::{self, Ending};
use crate::attempt::Books;
use crate::billing::Held;
use crate::config::Route;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::headers::RequestId;
use crate::request::ClientRequest;
use crate::route;
use crate::telemetry::metrics::{CacheKind, CacheResult};
use crate::telemetry::traces::RequestTrace;

/// A request's inputs and their keys.
pub struct Plan {
    /// The cache the plan reads and fills.
    cache: Arc<Cache>,
    items: Vec<Value>,
    /// The request without `input`.
    rest: serde_json::Map<String, Value>,
    keys: Vec<Key>,
}

impl Plan {
    /// How many inputs the request holds.
    pub fn inputs(&self) -> u64 {
        self.items.len() as u64
    }

    /// The plan of an embeddings request, or `None` when its `input` is not a form the
    /// cache splits (then it goes upstream whole, uncached).
    pub fn of(cache: &Arc<Cache>, req: &ClientRequest, route: &Route, scope: &Scope) -> Option<Plan> {
        let Ok(Value::Object(mut rest)) = serde_json::from_slice::<Value>(req.body()) else { return None };
        let input = rest.remove("input")?;
        let items = match input {
            Value::String(_) => vec![input],
            Value::Array(list) if list.is_empty() => return None,
            // One input as token ids.
            Value::Array(list) if list.iter().all(Value::is_number) => vec![Value::Array(list)],
            Value::Array(list) if list.iter().all(|v| v.is_string() || v.is_array()) => list,
            _ => return None,
        };
        let mut skip: Vec<&str> = INERT.to_vec();
        skip.push("model");
        let options = canonical(&Value::Object(rest.clone()), &skip);
        let scope = scope.bytes();
        let keys = items
            .iter()
            .map(|item| {
                Key::of(&[
                    b"embedding",
                    route.cfg.key.as_bytes(),
                    route.cache.models.as_bytes(),
                    &scope,
                    &options,
                    &canonical(item, &[]),
                ])
            })
            .collect();
        Some(Plan { cache: cache.clone(), items, rest, keys })
    }
}

/// One embedding of an upstream answer.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default)]
    index: Option<usize>,
    #[serde(borrow)]
    embedding: &'a RawValue,
}

/// An upstream's embeddings answer, as far as the cache reads it.
#[derive(Deserialize)]
struct EmbeddingList<'a> {
    #[serde(borrow)]
    data: Vec<Item<'a>>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
}

/// Serves an embeddings request through the cache: what is known from it, the rest
/// from the route's candidates (the one dispatcher), stored for next time.
#[expect(clippy::too_many_arguments, reason = "the request's context, passed through as handle does")]
pub async fn serve(
    books: &Arc<Books>,
    route: &Arc<Route>,
    req: &ClientRequest,
    request_id: &RequestId,
    plan: Plan,
    directive: Directive,
    mut held: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> Result<Response, ApiError> {
    let cache = &plan.cache;
    let found: Vec<Option<Arc<Entry>>> = match directive {
        Directive::Use => {
            let span = trace.cache_lookup();
            let now = now_ms();
            let found = cache.get_many(&plan.keys).await;
            let found: Vec<_> = found.into_iter().map(|e| e.filter(|e| e.fresh(now, route.cache.ttl))).collect();
            span.result(if found.iter().all(Option::is_some) { "hit" } else { "miss" });
            found
        }
        Directive::Refresh | Directive::Bypass => plan.keys.iter().map(|_| None).collect(),
    };
    let hits = found.iter().filter(|f| f.is_some()).count();
    let total = plan.items.len();
    let metrics = route.metrics.cache(&books.metrics, CacheKind::Embeddings);
    if hits == total {
        metrics.count(CacheResult::Hit);
        Held::served_from_cache(&mut held, hits as u64);
        let entries: Vec<Arc<Entry>> = found.into_iter().flatten().collect();
        return Ok(answer_known(books, route, &entries, held, started, trace).await);
    }
    metrics.count(if directive == Directive::Bypass { CacheResult::Bypass } else { CacheResult::Miss });

    // What goes upstream: the inputs not known, in the request's own form.
    let missing: Vec<usize> = (0..total).filter(|i| found[*i].is_none()).collect();
    let sub = if hits == 0 {
        None
    } else {
        let mut body = plan.rest.clone();
        let inputs = missing.iter().map(|i| plan.items[*i].clone()).collect();
        body.insert("input".into(), Value::Array(inputs));
        let bytes = Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default());
        Some(ClientRequest::parse(Endpoint::Embeddings, &bytes)?)
    };
    let asked = sub.as_ref().unwrap_or(req);
    let ctx = route::DispatchCtx { books, request_id, trace: &trace };
    let dispatched = route::dispatch(&ctx, route, asked).await;
    let mut d = match dispatched {
        Ok(d) => d,
        Err(f) => return Ok(answer::failure(books, route, Endpoint::Embeddings, f, held, started, trace).await),
    };
    take_answer(cache, route, &plan, directive, &missing, &found, &mut d.started.first, d.started.status.is_success())?;
    if d.started.status.is_success() {
        // The known inputs are part of a good answer: charged at the cache price.
        Held::served_from_cache(&mut held, hits as u64);
    }
    let mut response = answer::answer(books, route, req, d, held, started, trace).await;
    let h = response.headers_mut();
    let result = if directive == Directive::Bypass { "bypass" } else { "miss" };
    h.insert(X_SLUICE_CACHE, HeaderValue::from_static(result));
    if let Ok(v) = HeaderValue::from_str(&format!("{hits}/{total}")) {
        h.insert(X_SLUICE_CACHE_HITS, v);
    }
    Ok(response)
}

/// Answers an embeddings request whose every input was known: the entries put together
/// as one answer, concluded as a good answer of the route with no attempt.
async fn answer_known(
    books: &Arc<Books>,
    route: &Arc<Route>,
    entries: &[Arc<Entry>],
    held: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> Response {
    let now = now_ms();
    let age = entries.iter().map(|e| e.age(now)).max().unwrap_or_default();
    let model = entries.first().map(|e| e.model.clone()).unwrap_or_default();
    let bodies: Vec<&[u8]> = entries.iter().map(|e| e.body.as_ref()).collect();
    let body = assemble(&bodies, &model, None);
    let end = Ending {
        api: Endpoint::Embeddings,
        status: StatusCode::OK,
        slo_bad: Some(false),
        latency_ms: started.elapsed().as_millis() as u64,
        attempts: 0,
        candidate: None,
        usage: None,
        resumed: Vec::new(),
    };
    answer::conclude(books, route, started, end, held, trace).await;
    let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    let h = response.headers_mut();
    h.insert(X_SLUICE_CACHE, HeaderValue::from_static("hit"));
    h.insert(header::AGE, HeaderValue::from(age.as_secs()));
    if let Ok(v) = HeaderValue::from_str(&format!("{n}/{n}", n = entries.len())) {
        h.insert(X_SLUICE_CACHE_HITS, v);
    }
    response
}

/// Reads the upstream's answer (`first`, `ok` when a success) to the `missing` inputs:
/// stores each embedding (unless bypassed) and, when some inputs were `found` known,
/// puts the answer together with them in the request's order.
#[expect(clippy::too_many_arguments, reason = "the parts of serve's state it reads and the answer it rewrites")]
fn take_answer(
    cache: &Cache,
    route: &Route,
    plan: &Plan,
    directive: Directive,
    missing: &[usize],
    found: &[Option<Arc<Entry>>],
    first: &mut Bytes,
    ok: bool,
) -> Result<(), ApiError> {
    let hits = found.len() - missing.len();
    let answer = if ok { serde_json::from_slice::<EmbeddingList<'_>>(first).ok() } else { None };
    let Some(a) = answer.filter(|a| a.data.len() == missing.len()) else {
        if hits > 0 && ok {
            // The known inputs cannot be put together with an answer not read.
            return Err(ApiError::UpstreamsUnavailable(
                "the upstream's embeddings answer did not hold one embedding per input sent; nothing was cached".into(),
            ));
        }
        return Ok(());
    };
    let mut fresh: Vec<Option<&RawValue>> = vec![None; missing.len()];
    for (n, item) in a.data.iter().enumerate() {
        let at = item.index.unwrap_or(n);
        if let Some(slot) = fresh.get_mut(at) {
            *slot = Some(item.embedding);
        }
    }
    if !fresh.iter().all(Option::is_some) {
        return Ok(());
    }
    let model = a.model.clone().unwrap_or_default();
    if directive != Directive::Bypass {
        let ttl = route.cache.lifetime();
        let stored = missing
            .iter()
            .zip(&fresh)
            .filter_map(|(i, e)| {
                e.map(|e| (plan.keys[*i], Entry::new(&model, Bytes::copy_from_slice(e.get().as_bytes()), ttl)))
            })
            .collect();
        cache.put_many(stored);
    }
    if hits > 0 {
        let mut next = fresh.iter().flatten();
        let mut bodies: Vec<&[u8]> = Vec::with_capacity(found.len());
        for f in found {
            match f {
                Some(e) => bodies.push(e.body.as_ref()),
                None => bodies.push(next.next().map_or(b"null".as_slice(), |e| e.get().as_bytes())),
            }
        }
        *first = Bytes::from(assemble(&bodies, &model, a.usage.map(RawValue::get)));
    }
    Ok(())
}

/// An OpenAI embeddings answer of `embeddings` (raw JSON each) in order.
fn assemble(embeddings: &[&[u8]], model: &str, usage: Option<&str>) -> Vec<u8> {
    let size: usize = embeddings.iter().map(|e| e.len() + 48).sum();
    let mut out = Vec::with_capacity(size + 128);
    out.extend_from_slice(br#"{"object":"list","data":["#);
    for (i, e) in embeddings.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(format!(r#"{{"object":"embedding","index":{i},"embedding":"#).as_bytes());
        out.extend_from_slice(e);
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"model":"#);
    out.extend_from_slice(&serde_json::to_vec(model).unwrap_or_else(|_| b"\"\"".to_vec()));
    out.extend_from_slice(br#","usage":"#);
    out.extend_from_slice(usage.unwrap_or(r#"{"prompt_tokens":0,"total_tokens":0}"#).as_bytes());
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_assembled_in_order_with_the_usage_given() {
        let body =
            assemble(&[b"[0.1,0.2]", b"\"AAAA\""], "text-embed-3", Some(r#"{"prompt_tokens":3,"total_tokens":3}"#));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["data"][0]["index"], 0);
        assert_eq!(v["data"][1]["embedding"], "AAAA");
        assert_eq!(v["data"][0]["embedding"][1], 0.2);
        assert_eq!(v["model"], "text-embed-3");
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        let hit: Value = serde_json::from_slice(&assemble(&[b"[1]"], "m", None)).unwrap();
        assert_eq!(hit["usage"]["total_tokens"], 0);
    }
}
