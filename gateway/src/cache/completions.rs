//! Whole completions cached (docs/design.md §13), on every inbound API: Chat
//! Completions, legacy completions, Messages and Responses. What is stored is the answer
//! the client was given, once it is complete: a whole answer's body, or a stream's
//! events as they were sent (so a replay is the same well-formed stream, in its API's
//! own events, ending as it ended). The two forms are kept under different keys: a
//! request is answered in the form it asked for.
//!
//! Errors, cut streams and answers that were not billed are never stored. When every
//! candidate fails, a route with `staleIfError` answers from an entry past its `ttl`
//! rather than with the error.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use sluice_crds::snapshot::CompletionCaching;

use super::key::{INERT, Scope, canonical_text};
use super::{Cache, Directive, Entry, Key, X_SLUICE_CACHE, now_ms};
use crate::answer::{self, Ending};
use crate::attempt::Books;
use crate::billing::Held;
use crate::config::Route;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::relay::sse::Format;
use crate::request::ClientRequest;
use crate::route::Failed;
use crate::telemetry::metrics::{CacheKind, CacheResult, Metrics};
use crate::telemetry::traces::RequestTrace;

/// The largest answer stored: a stream recorded past it is let go (and still relayed).
pub const MAX_ENTRY_BYTES: usize = 4 * 1024 * 1024;

/// One completion request's place in the cache; a lookup of a request the route does
/// not cache does nothing.
pub struct Lookup(Option<Looked>);

struct Looked {
    cache: Arc<Cache>,
    /// `None` when the request's headers said to bypass the cache: its body is not read.
    key: Option<Key>,
    directive: Directive,
}

/// How a cached answer is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A fresh entry.
    Hit,
    /// An entry past its `ttl`, because every candidate failed after `attempts` attempts.
    Stale {
        /// Attempts made before.
        attempts: u32,
    },
}

impl Lookup {
    /// The lookup of `req` on `route`: nothing unless the route caches its completions
    /// (and, under `deterministic`, the request's answer is determined: `temperature` 0
    /// or a `seed`) and the gateway has a cache. A request that says to bypass the cache
    /// on a route that caches is answered `bypass` without its body being read for a
    /// key, whether or not its answer would have been cacheable.
    pub fn of(
        cache: Option<&Arc<Cache>>,
        route: &Route,
        req: &ClientRequest,
        scope: &Scope,
        headers: &HeaderMap,
    ) -> Lookup {
        let policy = route.cache.completions;
        let Some(cache) = cache.filter(|_| policy != CompletionCaching::Never) else { return Lookup(None) };
        if req.endpoint == Endpoint::Embeddings {
            return Lookup(None);
        }
        let directive = Directive::of(headers);
        // Neither read nor stored: the key is not made (the answer says `bypass`).
        if directive == Directive::Bypass {
            return Lookup(Some(Looked { cache: cache.clone(), key: None, directive }));
        }
        // A stream's `stream_options` stay in its key: they change its events.
        let skip: &[&str] = if req.stream { &INERT_OF_STREAMS } else { INERT };
        let Some((canonical, facts)) = canonical_text(req.body(), skip) else { return Lookup(None) };
        if policy == CompletionCaching::Deterministic && !(facts.cold || facts.seeded) {
            return Lookup(None);
        }
        Lookup(Some(Looked {
            cache: cache.clone(),
            key: Some(key_of(&route.cfg.key, &route.cache.models, req.endpoint, req.stream, scope, &canonical)),
            directive,
        }))
    }

    /// Whether the request's answer is looked up and kept.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A fresh entry for the request, unless its headers said not to read.
    pub async fn find(&self, metrics: &Metrics, route: &Route, trace: &RequestTrace) -> Option<Arc<Entry>> {
        let l = self.0.as_ref()?;
        let metrics = route.metrics.cache(metrics, CacheKind::Completions);
        let Some(key) = l.key.filter(|_| l.directive == Directive::Use) else {
            metrics.count(if l.directive == Directive::Bypass { CacheResult::Bypass } else { CacheResult::Miss });
            return None;
        };
        let span = trace.cache_lookup();
        let found = l.cache.get_many(&[key]).await.pop().flatten().filter(|e| e.fresh(now_ms(), route.cache.ttl));
        let result = if found.is_some() { CacheResult::Hit } else { CacheResult::Miss };
        span.result(result.as_str());
        metrics.count(result);
        found
    }

    /// An entry still kept past its `ttl`, when the route serves one after every
    /// candidate failed (`staleIfError`) and the failure is the upstreams' (a client
    /// error is answered as it is).
    pub async fn stale(&self, metrics: &Metrics, route: &Route, failed: &Failed) -> Option<Arc<Entry>> {
        let l = self.0.as_ref()?;
        let key = l.key?;
        if route.cache.stale_if_error.is_zero() || !failed.error.is_bad() {
            return None;
        }
        let found = l.cache.get_many(&[key]).await.pop().flatten()?;
        route.metrics.cache(metrics, CacheKind::Completions).count(CacheResult::Stale);
        Some(found)
    }

    /// Stores a whole answer the client was given (`body`, as the upstream answered), if
    /// it was a success.
    pub fn keep_whole(&self, route: &Route, response: Response, body: Bytes) -> Response {
        let Some(l) = self.0.as_ref() else { return response };
        if let Some(key) = l.key
            && response.status() == StatusCode::OK
            && body.len() <= MAX_ENTRY_BYTES
        {
            l.cache.put_many(vec![(key, Entry::new("", body, route.cache.lifetime()))]);
        }
        marked(response, l.directive)
    }

    /// Relays a streamed answer while recording it; the recording is stored when the
    /// stream ended complete (its API's last event, not an error) and was sent whole.
    pub fn keep_stream(&self, route: &Route, format: Format, response: Response) -> Response {
        let Some(l) = self.0.as_ref() else { return response };
        let Some(key) = l.key.filter(|_| response.status() == StatusCode::OK) else {
            return marked(response, l.directive);
        };
        let (cache, lifetime) = (l.cache.clone(), route.cache.lifetime());
        let (parts, body) = response.into_parts();
        let tap = Tap {
            inner: body.into_data_stream(),
            recorded: Some(BytesMut::new()),
            on_end: Some(Box::new(move |events: Bytes| {
                if format.completes(&events) {
                    cache.put_many(vec![(key, Entry::new("", events, lifetime))]);
                }
            })),
        };
        marked(Response::from_parts(parts, Body::from_stream(tap)), l.directive)
    }
}

/// Answers from the cache: concludes the request as a good answer of its route with no
/// attempt (or with those that failed, for a stale answer), charged at the route's
/// cache price, then replays the entry in the form the request asked for.
#[expect(clippy::too_many_arguments, reason = "the request's context, passed through as handle does")]
pub async fn answer(
    books: &Books,
    route: &Arc<Route>,
    req: &ClientRequest,
    entry: Arc<Entry>,
    served: Served,
    mut held: Option<Held>,
    started: Instant,
    trace: RequestTrace,
) -> Response {
    Held::served_from_cache(&mut held, 1);
    let attempts = match served {
        Served::Hit => 0,
        Served::Stale { attempts } => attempts,
    };
    let end = Ending {
        api: req.endpoint,
        status: StatusCode::OK,
        slo_bad: Some(false),
        latency_ms: started.elapsed().as_millis() as u64,
        attempts,
        candidate: None,
        usage: None,
        resumed: Vec::new(),
    };
    if !answer::conclude(books, route, started, end, held, trace).await {
        let e = ApiError::LedgerUnavailable(
            "the ledger did not confirm this cached answer's charge in time; it stays queued".into(),
        );
        return e.respond(req.endpoint);
    }
    let content_type = if req.stream { "text/event-stream" } else { "application/json" };
    let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], entry.body.clone()).into_response();
    let h = response.headers_mut();
    if req.stream {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    let result = match served {
        Served::Hit => "hit",
        Served::Stale { .. } => "stale",
    };
    h.insert(X_SLUICE_CACHE, HeaderValue::from_static(result));
    h.insert(header::AGE, HeaderValue::from(entry.age(now_ms()).as_secs()));
    response
}

/// `x-sluice-cache` on an answer that went upstream.
fn marked(mut response: Response, directive: Directive) -> Response {
    let result = if directive == Directive::Bypass { "bypass" } else { "miss" };
    response.headers_mut().insert(X_SLUICE_CACHE, HeaderValue::from_static(result));
    response
}

/// The members left out of a stream's key: [`INERT`] but `stream_options`.
const INERT_OF_STREAMS: [&str; 5] = ["user", "metadata", "stream", "store", "service_tier"];

/// The key of a completion: the API, the form (whole or stream), the route and its
/// candidates' models, the scope, and the request in canonical form less its inert
/// members.
fn key_of(route: &str, models: &str, endpoint: Endpoint, stream: bool, scope: &Scope, canonical: &[u8]) -> Key {
    Key::of(&[
        b"completion",
        endpoint.api().as_bytes(),
        if stream { b"stream" } else { b"whole" },
        route.as_bytes(),
        models.as_bytes(),
        &scope.bytes(),
        canonical,
    ])
}

type OnEnd = Box<dyn FnOnce(Bytes) + Send>;

/// A response body that records what it passes, up to [`MAX_ENTRY_BYTES`], and hands
/// the recording to `on_end` when the body ends (not when the client goes away first).
struct Tap<S> {
    inner: S,
    recorded: Option<BytesMut>,
    on_end: Option<OnEnd>,
}

impl<S, E> Stream for Tap<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<Bytes, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                let full = self.recorded.as_ref().is_some_and(|r| r.len() + chunk.len() > MAX_ENTRY_BYTES);
                if full {
                    self.recorded = None;
                } else if let Some(r) = self.recorded.as_mut() {
                    r.extend_from_slice(chunk);
                }
            }
            Poll::Ready(Some(Err(_))) => self.recorded = None,
            Poll::Ready(None) => {
                if let (Some(recorded), Some(on_end)) = (self.recorded.take(), self.on_end.take()) {
                    on_end(recorded.freeze());
                }
            }
            Poll::Pending => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn determined(body: &str) -> bool {
        let (_, facts) = canonical_text(body.as_bytes(), INERT).unwrap();
        facts.cold || facts.seeded
    }

    #[test]
    fn only_cold_or_seeded_requests_are_determined() {
        assert!(determined(r#"{"temperature": 0}"#));
        assert!(determined(r#"{"temperature": 0.0}"#));
        assert!(determined(r#"{"temperature": -0.0, "seed": null}"#));
        assert!(determined(r#"{"temperature": 0.7, "seed": 7}"#));
        assert!(!determined(r#"{"temperature": 0.7}"#));
        assert!(!determined(r#"{"temperature": "0"}"#), "a string is not the number 0");
        assert!(!determined("{}"), "an unset temperature samples");
        assert!(!determined(r#"{"seed": null}"#));
        assert!(!determined(r#"{"messages": [{"temperature": 0, "seed": 1}]}"#), "only the top level counts");
    }

    fn chat_key(body: Value, stream: bool, scope: Scope) -> Key {
        chat_key_of_text(&body.to_string(), stream, scope)
    }

    fn chat_key_of_text(body: &str, stream: bool, scope: Scope) -> Key {
        let skip: &[&str] = if stream { &INERT_OF_STREAMS } else { INERT };
        let (canonical, _) = canonical_text(body.as_bytes(), skip).unwrap();
        key_of("default/chat", "openai/gpt-4o", Endpoint::Chat, stream, &scope, &canonical)
    }

    #[test]
    fn what_changes_the_answer_changes_the_key_and_nothing_else_does() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0});
        let with = |member: &str, v: Value| {
            let mut b = base.clone();
            b[member] = v;
            b
        };
        let k = chat_key(base.clone(), false, Scope::Account(1));
        // Members that can change the answer.
        for (member, v) in [
            ("messages", json!([{"role": "user", "content": "hello"}])),
            ("temperature", json!(0.5)),
            ("model", json!("other")),
            ("max_tokens", json!(5)),
            ("tools", json!([{"type": "function", "function": {"name": "f"}}])),
            ("response_format", json!({"type": "json_object"})),
            ("n", json!(2)),
            ("seed", json!(1)),
        ] {
            assert_ne!(chat_key(with(member, v), false, Scope::Account(1)), k, "{member} must change the key");
        }
        // Members that cannot, and the order of members.
        for (member, v) in [
            ("user", json!("u-7")),
            ("metadata", json!({"trace": "x"})),
            ("stream_options", json!({"include_usage": true})),
            ("store", json!(true)),
            ("service_tier", json!("flex")),
        ] {
            assert_eq!(chat_key(with(member, v), false, Scope::Account(1)), k, "{member} must not change the key");
        }
        let reordered = r#"{"temperature": 0, "messages": [ {"content": "hi", "role": "user"} ], "model": "m"}"#;
        assert_eq!(chat_key_of_text(reordered, false, Scope::Account(1)), k);
        // The scope, the form, the API, the route and its models.
        assert_ne!(chat_key(base.clone(), false, Scope::Account(2)), k);
        assert_ne!(chat_key(base.clone(), false, Scope::Shared), k);
        assert_ne!(chat_key(base.clone(), true, Scope::Account(1)), k);
        let scope = Scope::Account(1);
        let base_text = canonical_text(base.to_string().as_bytes(), INERT).unwrap().0;
        assert_ne!(key_of("default/chat", "openai/gpt-4o", Endpoint::Messages, false, &scope, &base_text), k);
        assert_ne!(key_of("other/chat", "openai/gpt-4o", Endpoint::Chat, false, &scope, &base_text), k);
        assert_ne!(key_of("default/chat", "openai/gpt-4.1", Endpoint::Chat, false, &scope, &base_text), k);
        // A stream's `stream_options` change its events: in its key.
        let s = chat_key(base.clone(), true, Scope::Account(1));
        assert_ne!(chat_key(with("stream_options", json!({"include_usage": true})), true, Scope::Account(1)), s);
    }

    #[tokio::test]
    async fn a_tap_records_what_passes_and_hands_it_over_at_the_end() {
        let (tx, rx) = std::sync::mpsc::channel();
        let chunks = futures::stream::iter(vec![
            Ok::<_, std::io::Error>(Bytes::from_static(b"data: 1\n\n")),
            Ok(Bytes::from_static(b"data: [DONE]\n\n")),
        ]);
        let tap = Tap {
            inner: chunks,
            recorded: Some(BytesMut::new()),
            on_end: Some(Box::new(move |b| tx.send(b).unwrap())),
        };
        let passed: Vec<_> = tap.map(Result::unwrap).collect().await;
        assert_eq!(passed.len(), 2);
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"data: 1\n\ndata: [DONE]\n\n"));
    }

    #[tokio::test]
    async fn a_tap_dropped_before_the_end_hands_nothing_over() {
        let (tx, rx) = std::sync::mpsc::channel::<Bytes>();
        let chunks = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from_static(b"data: 1\n\n"))])
            .chain(futures::stream::pending());
        let mut tap = Tap {
            inner: Box::pin(chunks),
            recorded: Some(BytesMut::new()),
            on_end: Some(Box::new(move |b| tx.send(b).unwrap())),
        };
        assert!(tap.next().await.is_some());
        drop(tap);
        assert!(rx.try_recv().is_err());
    }
}
