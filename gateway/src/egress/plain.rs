//! The connection pool of a plain-HTTP upstream reached directly: HTTP/1.1 connections to
//! one address, kept open between requests, with nothing to look up per request.
//!
//! hyper-util's pooled client serves every other upstream. It keys its pool by scheme
//! and authority (SipHashed three times per request), races each checkout against a
//! lazy connect and moves its futures around: about 10,000 instructions per request
//! that a pool of one address does not need (bench/PROFILE.md). A `http://` upstream
//! without an egress proxy is always HTTP/1 (no TLS, so no ALPN) and always the same
//! address, so its pool is a stack of idle connections.
//!
//! What the pooled client guarantees, this keeps: a request whose pooled connection was
//! closed before the request was written goes out again on a new connection (it was
//! never sent); idle connections are dropped after [`IDLE_TIMEOUT`] or once their
//! server closed them; at most [`MAX_IDLE`] are kept; a connection goes back to the
//! pool only after its answer was read to the end, and one whose answer was dropped
//! before that is closed.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Uri, header};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower::Service;

use super::ClientError;

/// How long an unused connection is kept (as the pooled client's `pool_idle_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept at most (as the pooled client's `pool_max_idle_per_host`).
pub const MAX_IDLE: usize = 256;

type Sender = SendRequest<Full<Bytes>>;

/// The pool of one plain-HTTP address.
pub struct Plain {
    /// `http://host:port`, where connections go.
    dst: Uri,
    authority: Authority,
    /// `Host`, made once: its host, and its port unless the default, as hyper-util's
    /// client writes it (without the credentials a base URL may carry).
    host: HeaderValue,
    connector: HttpConnector,
    /// Idle connections, the most recently used last.
    idle: Mutex<VecDeque<Idle>>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

impl Plain {
    /// The pool of `base`'s address, connecting with `connector`; `None` unless `base`
    /// is `http://` with a host.
    pub fn new(base: &Uri, connector: HttpConnector) -> Option<Arc<Plain>> {
        if base.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        let authority = base.authority()?.clone();
        let dst = Uri::builder().scheme("http").authority(authority.clone()).path_and_query("/").build().ok()?;
        let host = match base.port_u16() {
            Some(port) if port != 80 => HeaderValue::from_str(&format!("{}:{port}", authority.host())),
            _ => HeaderValue::from_str(authority.host()),
        }
        .ok()?;
        Some(Arc::new(Plain { dst, authority, host, connector, idle: Mutex::new(VecDeque::new()) }))
    }

    /// Whether `uri` is served by this pool: its address, over plain HTTP.
    pub fn serves(&self, uri: &Uri) -> bool {
        uri.scheme() == Some(&http::uri::Scheme::HTTP) && uri.authority() == Some(&self.authority)
    }

    /// Sends `req` (an absolute `http://` URI of this pool's address) on an idle
    /// connection or a new one.
    pub async fn request(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<super::UpstreamResponse, ClientError> {
        // The request line carries the path; the address is the connection's.
        let path = req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        *req.uri_mut() = Uri::from(path);
        req.headers_mut().insert(header::HOST, self.host.clone());
        loop {
            let (mut sender, pooled) = match self.checkout() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(req).await {
                Ok(response) => {
                    let back = Some(Back { pool: self.clone(), sender });
                    return Ok(response.map(|inner| UpstreamBody { inner, back }));
                }
                Err(mut e) => match e.take_message() {
                    // Not written: the pooled connection was closed meanwhile. Once more,
                    // on another connection (a new one does not come back here).
                    Some(unsent) if pooled => req = unsent,
                    _ => return Err(ClientError::Request(e.into_error())),
                },
            }
        }
    }

    /// The most recently used idle connection that is still open and ready.
    fn checkout(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(Idle { sender, since }) = idle.pop_back() {
            if sender.is_ready() && since.elapsed() < IDLE_TIMEOUT {
                return Some(sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Sender, ClientError> {
        let mut connector = self.connector.clone();
        let io = connector.call(self.dst.clone()).await.map_err(|e| ClientError::Connect(e.into()))?;
        let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(ClientError::Request)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "an upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Keeps `sender` for the next request, once its connection is ready for one.
    fn give_back(self: Arc<Self>, mut sender: Sender) {
        if sender.is_ready() {
            self.put(sender);
        } else if !sender.is_closed() {
            // The connection task has not yet taken up the end of the answer.
            tokio::spawn(async move {
                if std::future::poll_fn(|cx| sender.poll_ready(cx)).await.is_ok() {
                    self.put(sender);
                }
            });
        }
    }

    fn put(&self, sender: Sender) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while idle.front().is_some_and(|oldest| now.duration_since(oldest.since) >= IDLE_TIMEOUT) {
            idle.pop_front();
        }
        if idle.len() >= MAX_IDLE {
            idle.pop_front();
        }
        idle.push_back(Idle { sender, since: now });
    }

    /// Idle connections held whose server has not closed them.
    #[cfg(test)]
    fn open_idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|i| !i.sender.is_closed()).count()
    }
}

struct Back {
    pool: Arc<Plain>,
    sender: Sender,
}

pin_project_lite::pin_project! {
    /// An upstream's answer body. From a plain-HTTP pool it gives its connection back
    /// when read to the end; dropped before, it takes the connection with it (hyper
    /// closes it).
    pub struct UpstreamBody {
        #[pin]
        inner: Incoming,
        back: Option<Back>,
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").field("pooled", &self.back.is_some()).finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// The body of an answer from the pooled client, which returns connections itself.
    pub fn pooled(inner: Incoming) -> Self {
        Self { inner, back: None }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Ready(Some(Err(_))) => {
                this.back.take();
                false
            }
            Poll::Pending => false,
        };
        if ended && let Some(Back { pool, sender }) = this.back.take() {
            pool.give_back(sender);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A server on 127.0.0.1 that answers each request with `body` and keeps the
    /// connection open for `per_connection` requests, then closes it; it counts the
    /// connections it accepted.
    async fn server(body: &'static str, per_connection: usize) -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base: Uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(socket, body, per_connection));
            }
        });
        (base, accepted)
    }

    async fn answer(mut socket: TcpStream, body: &'static str, per_connection: usize) {
        let mut buf = Vec::new();
        for _ in 0..per_connection {
            // Requests here have no body: a request ends at its blank line.
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0u8; 1024];
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            buf.drain(..end);
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            if socket.write_all(head.as_bytes()).await.is_err() || socket.write_all(body.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    fn get(base: &Uri, path: &str) -> Request<Full<Bytes>> {
        Request::get(format!("{base}{}", path.trim_start_matches('/'))).body(Full::new(Bytes::new())).unwrap()
    }

    async fn read(pool: &Arc<Plain>, req: Request<Full<Bytes>>) -> Bytes {
        let response = pool.request(req).await.unwrap();
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn answers_read_to_the_end_give_their_connection_back() {
        let (base, accepted) = server("hello", usize::MAX).await;
        let pool = Plain::new(&base, HttpConnector::new()).unwrap();
        for _ in 0..5 {
            assert_eq!(read(&pool, get(&base, "/v1/models")).await, "hello");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for five requests");
        // Two at once need two connections; both come back.
        let (a, b) = tokio::join!(read(&pool, get(&base, "/a")), read(&pool, get(&base, "/b")));
        assert_eq!((a, b), (Bytes::from("hello"), Bytes::from("hello")));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.open_idle(), 2);
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_end_takes_its_connection_along() {
        let (base, accepted) = server("a longer answer", usize::MAX).await;
        let pool = Plain::new(&base, HttpConnector::new()).unwrap();
        let response = pool.request(get(&base, "/")).await.unwrap();
        drop(response);
        assert_eq!(pool.open_idle(), 0);
        assert_eq!(read(&pool, get(&base, "/")).await, "a longer answer");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_its_server_closed_is_not_used_again() {
        // One request per connection: the server closes each after its answer.
        let (base, accepted) = server("once", 1).await;
        let pool = Plain::new(&base, HttpConnector::new()).unwrap();
        assert_eq!(read(&pool, get(&base, "/")).await, "once");
        // The connection task sees the server's close (an event the reactor delivers).
        while pool.open_idle() > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(read(&pool, get(&base, "/")).await, "once");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base: Uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        drop(listener);
        let pool = Plain::new(&base, HttpConnector::new()).unwrap();
        let e = pool.request(get(&base, "/")).await.unwrap_err();
        assert!(e.is_connect(), "{e:?}");
        assert!(super::super::describe(&e).contains("client error (Connect)"), "{}", super::super::describe(&e));
    }

    #[test]
    fn only_plain_http_upstreams_get_a_host_made_once() {
        let host = |base: &str| Plain::new(&base.parse().unwrap(), HttpConnector::new()).map(|p| p.host.clone());
        // As the client writes it: the port unless the scheme's default.
        assert_eq!(host("http://vllm.models:8000/v1").unwrap(), "vllm.models:8000");
        assert_eq!(host("http://vllm.models:80/v1").unwrap(), "vllm.models");
        assert_eq!(host("http://[::1]:9000").unwrap(), "[::1]:9000");
        assert_eq!(host("http://user:secret@10.0.0.7:8080/v1").unwrap(), "10.0.0.7:8080", "no credentials");
        // https may be HTTP/2: the client adds Host on HTTP/1 connections only.
        assert_eq!(host("https://api.openai.example/v1"), None);
        assert_eq!(host("https://10.0.0.7:8443/v1"), None);
    }

    #[test]
    fn only_plain_http_addresses_have_a_pool_and_it_serves_only_its_own() {
        let pool = Plain::new(&"http://10.0.0.1:8000/v1".parse().unwrap(), HttpConnector::new()).unwrap();
        assert!(pool.serves(&"http://10.0.0.1:8000/v1/chat/completions".parse().unwrap()));
        assert!(!pool.serves(&"http://10.0.0.2:8000/v1/chat/completions".parse().unwrap()));
        assert!(!pool.serves(&"https://10.0.0.1:8000/v1/chat/completions".parse().unwrap()));
        assert!(Plain::new(&"https://api.example.com/v1".parse().unwrap(), HttpConnector::new()).is_none());
    }
}
