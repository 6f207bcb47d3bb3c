//! WATCH: the initial state or a replay from a resourceVersion, then live changes as
//! JSON lines, with bookmarks, `timeoutSeconds`, and 410 Gone once compacted.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::{Stream, StreamExt, stream};
use http::{HeaderValue, header};
use serde_json::{Value, json};
use tokio_stream::wrappers::BroadcastStream;

use super::read::Filter;
use super::wire::{Want, fail, q};
use super::{Shared, lock};
use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::{Change, EventType};
use crate::table;

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

pub(super) fn watch(
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
