//! The HTTP client that calls upstreams: hyper-util's pooled client over rustls, fed
//! URIs parsed once per config version, with nothing between the dispatcher and the
//! connection pool (no redirect or retry layer: the dispatcher owns retries, and an
//! upstream's redirect is an answer to pass on, not to follow).
//!
//! Egress proxies are honoured the way curl and most HTTP clients do: `HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (or their lower-case forms) decide per
//! upstream, when the config is loaded, whether its connections go through an HTTP
//! `CONNECT` tunnel. TLS trusts the Mozilla roots and the system's (so a self-hosted
//! upstream signed by a private CA works once its CA is installed, or `SSL_CERT_FILE`
//! points at it).

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper::rt::ReadBufCursor;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tower::Service;

mod plain;

pub use plain::{Plain, UpstreamBody};

/// hyper-util's pooled client for one (connect timeout, proxy) pair, shared by the
/// upstreams that use it.
pub type PooledClient = Client<HttpsConnector<Egress>, Full<Bytes>>;

/// An upstream's answer, body still to read.
pub type UpstreamResponse = http::Response<UpstreamBody>;

type BoxError = Box<dyn StdError + Send + Sync>;

/// How an upstream is called: its own pool when it is a plain-HTTP address reached
/// directly ([`Plain`]), the pooled client otherwise.
#[derive(Clone)]
pub struct UpstreamClient {
    pooled: PooledClient,
    plain: Option<Arc<Plain>>,
}

impl UpstreamClient {
    /// A client calling through `pooled`, and `plain` for the requests it serves.
    pub fn new(pooled: PooledClient, plain: Option<Arc<Plain>>) -> Self {
        Self { pooled, plain }
    }

    /// Sends `req` (an absolute URI).
    pub async fn request(&self, req: http::Request<Full<Bytes>>) -> Result<UpstreamResponse, ClientError> {
        match &self.plain {
            Some(plain) if plain.serves(req.uri()) => plain.request(req).await,
            _ => match self.pooled.request(req).await {
                Ok(response) => Ok(response.map(UpstreamBody::pooled)),
                Err(e) => Err(ClientError::Pooled(e)),
            },
        }
    }
}

/// Why a request to an upstream got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection could be made (a plain-HTTP upstream).
    #[error("client error (Connect)")]
    Connect(#[source] BoxError),
    /// The connection failed while the request was sent or its answer read (a
    /// plain-HTTP upstream).
    #[error("client error (SendRequest)")]
    Request(#[source] hyper::Error),
    /// The pooled client's error.
    #[error(transparent)]
    Pooled(hyper_util::client::legacy::Error),
}

impl ClientError {
    /// Whether no connection was made: refused, unreachable, timed out, or the TLS
    /// handshake failed.
    pub fn is_connect(&self) -> bool {
        match self {
            ClientError::Connect(_) => true,
            ClientError::Request(_) => false,
            ClientError::Pooled(e) => e.is_connect(),
        }
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The TLS configuration could not be built.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Where an upstream's connections go: straight to it, or through a `CONNECT` proxy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// A direct TCP connection.
    Direct,
    /// A tunnel through this proxy, with these credentials.
    Proxy {
        /// The proxy.
        uri: Uri,
        /// Its `Proxy-Authorization`, from `user:password@` in the variable.
        auth: Option<http::HeaderValue>,
    },
}

impl std::fmt::Display for Route {
    /// `direct`, or the proxy without its credentials (for logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Direct => f.write_str("direct"),
            Route::Proxy { uri, .. } => {
                write!(f, "{}://{}", uri.scheme_str().unwrap_or("http"), uri.host().unwrap_or("?"))?;
                match uri.port_u16() {
                    Some(port) => write!(f, ":{port}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The connector under TLS: a TCP connection, tunnelled through a proxy or not.
#[derive(Clone)]
pub enum Egress {
    /// Straight to the upstream.
    Direct(HttpConnector),
    /// Through an HTTP `CONNECT` proxy.
    Tunnel(Tunnel<HttpConnector>),
}

pin_project_lite::pin_project! {
    /// A TCP connection to an upstream, direct or tunnelled. hyper-util's own attaches the
    /// connection's addresses (`HttpInfo`) to every response it carries, which costs each
    /// request an extensions map (about 1,000 instructions); nothing here reads them.
    pub struct Stream {
        #[pin]
        io: TokioIo<TcpStream>,
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}

impl Service<Uri> for Egress {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Egress::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Egress::Tunnel(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // Connections are pooled, so this runs once per new connection, not per request.
        match self {
            Egress::Direct(c) => {
                let connecting = c.call(dst);
                Box::pin(async move { connecting.await.map(|io| Stream { io }).map_err(Into::into) })
            }
            Egress::Tunnel(t) => {
                let connecting = t.call(dst);
                Box::pin(async move { connecting.await.map(|io| Stream { io }).map_err(Into::into) })
            }
        }
    }
}

/// The proxy decision for every upstream, read from the environment once.
pub fn proxies() -> &'static Matcher {
    static MATCHER: OnceLock<Matcher> = OnceLock::new();
    MATCHER.get_or_init(Matcher::from_env)
}

/// How connections to `base` leave the process.
pub fn route_for(base: &Uri) -> Route {
    match proxies().intercept(base) {
        Some(proxy) => {
            // Sensitive: `Debug` of the route prints it masked.
            let auth = proxy.basic_auth().cloned().map(|mut a| {
                a.set_sensitive(true);
                a
            });
            Route::Proxy { uri: proxy.uri().clone(), auth }
        }
        None => Route::Direct,
    }
}

/// The TCP connector of upstream connections: this connect timeout, `TCP_NODELAY`.
pub fn tcp(connect_timeout: Duration) -> HttpConnector {
    let mut tcp = HttpConnector::new();
    tcp.set_connect_timeout(Some(connect_timeout));
    tcp.set_nodelay(true);
    tcp
}

/// Builds the pooled client for upstreams with this connect timeout and egress route.
pub fn client(connect_timeout: Duration, route: &Route) -> Result<PooledClient, EgressError> {
    let mut tcp = tcp(connect_timeout);
    // TLS runs above this connector, so it must accept `https://` destinations.
    tcp.enforce_http(false);
    let egress = match route {
        Route::Direct => Egress::Direct(tcp),
        Route::Proxy { uri, auth } => {
            let tunnel = Tunnel::new(uri.clone(), tcp);
            Egress::Tunnel(match auth {
                Some(auth) => tunnel.with_auth(auth.clone()),
                None => tunnel,
            })
        }
    };
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(tls_config()?)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(egress);
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(plain::IDLE_TIMEOUT)
        .pool_max_idle_per_host(plain::MAX_IDLE)
        .build(https))
}

/// A connector for the gateway's own calls (the trace exporter): direct, `http://` or
/// `https://` with the same trusted roots as upstreams.
pub fn plain_or_tls() -> Result<HttpsConnector<HttpConnector>, EgressError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    Ok(HttpsConnectorBuilder::new().with_tls_config(tls_config()?).https_or_http().enable_http1().wrap_connector(tcp))
}

fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::warn!(error = %e, "reading the system's CA certificates");
        }
        let (added, ignored) = roots.add_parsable_certificates(native.certs);
        tracing::debug!(added, ignored, "system CA certificates trusted for upstream TLS");
        Arc::new(roots)
    });
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    // ALPN (h2, http/1.1) is set by the connector builder from the enabled protocols.
    Ok(config)
}

/// Text of a client error and its causes, for logs and the 503 detail.
pub fn describe(e: &(dyn StdError + 'static)) -> String {
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !detail.ends_with(&text) {
            detail = format!("{detail}: {text}");
        }
        source = s.source();
    }
    detail
}
