//! Upstreams over TLS and through an egress proxy, with the real binary (so that the
//! environment it reads is the test's to set): the path to every hosted provider.
//!
//! - An `https://` upstream whose certificate is signed by a private CA is served once
//!   the CA is trusted through `SSL_CERT_FILE`, and refused (a `connect` failure that
//!   fails over) when it is not.
//! - With `HTTPS_PROXY` / `HTTP_PROXY` set, upstream connections go through an HTTP
//!   `CONNECT` tunnel; `NO_PROXY` exempts a host.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use serde_json::json;
use sluice_tests::process::GatewayProcess;
use sluice_tests::{ChaosUpstream, manifests_file, route, serial, upstream_doc, yaml};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A TLS front for a chaos upstream: terminates TLS with a certificate for `localhost`
/// signed by its own CA, and pipes the plain bytes to the upstream.
struct TlsFront {
    base: String,
    ca_pem: String,
    handshakes: Arc<AtomicUsize>,
    /// The ALPN protocol each handshake settled on.
    protocols: Arc<Mutex<Vec<Option<Vec<u8>>>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    async fn start(behind: &ChaosUpstream) -> anyhow::Result<Self> {
        Self::start_with_alpn(behind, Vec::new()).await
    }

    /// As `start`, offering these ALPN protocols (a hosted provider offers h2).
    async fn start_with_alpn(behind: &ChaosUpstream, alpn: Vec<Vec<u8>>) -> anyhow::Result<Self> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "sluice test CA");
        let ca_cert = ca.self_signed(&ca_key)?;
        let leaf_key = rcgen::KeyPair::generate()?;
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
        let leaf_cert = leaf.signed_by(&leaf_key, &rcgen::Issuer::new(ca, &ca_key))?;
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf_cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).map_err(anyhow::Error::msg)?,
                )?;
        config.alpn_protocols = alpn;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let target = behind.base.trim_start_matches("http://").to_string();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let protocols: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::default();
        let (counted, negotiated) = (handshakes.clone(), protocols.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, target, counted, negotiated) =
                    (acceptor.clone(), target.clone(), counted.clone(), negotiated.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    counted.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut p) = negotiated.lock() {
                        p.push(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec));
                    }
                    if let Ok(mut plain) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        Ok(Self {
            base: format!("https://localhost:{port}/v1"),
            ca_pem: ca_cert.pem(),
            handshakes,
            protocols,
            _task: task,
        })
    }
}

/// A minimal HTTP `CONNECT` proxy that records the targets it tunnelled to.
struct ConnectProxy {
    url: String,
    targets: Arc<Mutex<Vec<String>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let targets: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = targets.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut client = BufReader::new(client);
                    let mut line = String::new();
                    if client.read_line(&mut line).await.is_err() {
                        return;
                    }
                    // Skip the rest of the CONNECT request's head.
                    loop {
                        let mut header = String::new();
                        match client.read_line(&mut header).await {
                            Ok(n) if n > 2 => continue,
                            _ => break,
                        }
                    }
                    let mut parts = line.split_whitespace();
                    let (Some("CONNECT"), Some(target)) = (parts.next(), parts.next()) else {
                        let _ = client.get_mut().write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
                        return;
                    };
                    if let Ok(mut v) = seen.lock() {
                        v.push(target.to_string());
                    }
                    let Ok(mut upstream) = TcpStream::connect(target.replace("localhost", "127.0.0.1")).await else {
                        let _ = client.get_mut().write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    if client.get_mut().write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(client.get_mut(), &mut upstream).await;
                    }
                });
            }
        });
        Ok(Self { url, targets, _task: task })
    }

    fn targets(&self) -> Vec<String> {
        self.targets.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// The proxy variables of the test's own environment, removed so that only what a test
/// sets applies.
const PROXY_VARS: [&str; 8] =
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"];

fn env_with<'a>(set: &[(&'a str, &'a str)]) -> Vec<(&'a str, Option<&'a str>)> {
    let mut env: Vec<(&str, Option<&str>)> = PROXY_VARS.iter().map(|v| (*v, None)).collect();
    env.extend(set.iter().map(|(k, v)| (*k, Some(*v))));
    env
}

struct Setup {
    dir: tempfile::TempDir,
    args: Vec<String>,
}

fn setup(docs: &str) -> anyhow::Result<Setup> {
    let (dir, manifests) = manifests_file(docs)?;
    let ledger = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let args = vec![
        "--manifests".into(),
        manifests.display().to_string(),
        "--ledger".into(),
        ledger,
        "--auth".into(),
        "none".into(),
    ];
    Ok(Setup { dir, args })
}

#[tokio::test]
async fn an_https_upstream_is_served_when_its_ca_is_trusted_and_refused_when_not() -> anyhow::Result<()> {
    let _serial = serial().await;
    let inner = ChaosUpstream::start("inner").await?;
    let front = TlsFront::start(&inner).await?;
    let backup = ChaosUpstream::start("backup").await?;
    let docs =
        [upstream_doc("secure", &front.base), backup.doc(), route("r", "tls-model", &[("secure", 100), ("backup", 1)])];
    let s = setup(&yaml(&docs))?;
    let ca = s.dir.path().join("ca.pem");
    std::fs::write(&ca, &front.ca_pem)?;
    let empty = s.dir.path().join("certs");
    std::fs::create_dir(&empty)?;
    let (ca, empty) = (ca.display().to_string(), empty.display().to_string());

    let trusted =
        GatewayProcess::serve_with_env(&s.args, &env_with(&[("SSL_CERT_FILE", &ca), ("SSL_CERT_DIR", &empty)])).await?;
    for _ in 0..3 {
        let r = trusted.client()?.chat("tls-model", json!({})).await?;
        assert_eq!(r.status, 200, "{}\n{}", r.text(), trusted.log());
        assert_eq!(r.header("x-sluice-upstream"), Some("secure"), "served over TLS, no failover");
        assert_eq!(r.header("x-sluice-attempts"), Some("1"));
    }
    assert_eq!(inner.requests(), 3, "the chat requests reached the upstream behind TLS");
    // Pooled: one handshake serves every request.
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 1);
    drop(trusted);

    // Without the CA the certificate is not trusted: a connect failure, failed over.
    let untrusted =
        GatewayProcess::serve_with_env(&s.args, &env_with(&[("SSL_CERT_FILE", "/dev/null"), ("SSL_CERT_DIR", &empty)]))
            .await?;
    let r = untrusted.client()?.chat("tls-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-sluice-upstream"), Some("backup"));
    assert_eq!(r.header("x-sluice-failover"), Some("connect"));
    let log = untrusted.log();
    assert!(
        log.contains("UnknownIssuer") || log.contains("certificate"),
        "the log names the certificate problem:\n{log}"
    );
    assert_eq!(inner.requests(), 3, "nothing was sent over an untrusted connection");
    Ok(())
}

#[tokio::test]
async fn an_https_upstream_offering_h2_is_called_over_http2() -> anyhow::Result<()> {
    let _serial = serial().await;
    // The chaos upstream behind the TLS front speaks HTTP/2 too (prior knowledge).
    let inner = ChaosUpstream::start("inner").await?;
    let front = TlsFront::start_with_alpn(&inner, vec![b"h2".to_vec(), b"http/1.1".to_vec()]).await?;
    let docs = [upstream_doc("secure", &front.base), route("r", "h2-model", &[("secure", 100)])];
    let s = setup(&yaml(&docs))?;
    let ca = s.dir.path().join("ca.pem");
    std::fs::write(&ca, &front.ca_pem)?;
    let ca = ca.display().to_string();
    let gw = GatewayProcess::serve_with_env(&s.args, &env_with(&[("SSL_CERT_FILE", &ca)])).await?;
    let client = gw.client()?;
    for _ in 0..3 {
        let r = client.chat("h2-model", json!({})).await?;
        assert_eq!(r.status, 200, "{}\n{}", r.text(), gw.log());
        assert_eq!(r.header("x-sluice-attempts"), Some("1"));
    }
    let stream = client.chat_stream("h2-model", json!({})).await?;
    assert!(stream.complete(), "a stream over HTTP/2: {:?}\n{}", stream.datas(), gw.log());
    let protocols = front.protocols.lock().map(|p| p.clone()).unwrap_or_default();
    assert_eq!(protocols, vec![Some(b"h2".to_vec())], "one HTTP/2 connection carried every request");
    assert_eq!(inner.requests(), 4);
    Ok(())
}

#[tokio::test]
async fn upstream_connections_go_through_the_egress_proxy_unless_exempt() -> anyhow::Result<()> {
    let _serial = serial().await;
    let inner = ChaosUpstream::start("inner").await?;
    let front = TlsFront::start(&inner).await?;
    let plain = ChaosUpstream::start("plain").await?;
    let proxy = ConnectProxy::start().await?;
    let docs = [
        upstream_doc("secure", &front.base),
        plain.doc(),
        route("tls", "tls-model", &[("secure", 100)]),
        route("plain", "plain-model", &[("plain", 100)]),
    ];
    let s = setup(&yaml(&docs))?;
    let ca = s.dir.path().join("ca.pem");
    std::fs::write(&ca, &front.ca_pem)?;
    let ca = ca.display().to_string();
    let plain_port = plain.base.rsplit(':').next().context("plain port")?.to_string();

    let env = env_with(&[("SSL_CERT_FILE", &ca), ("HTTPS_PROXY", &proxy.url), ("HTTP_PROXY", &proxy.url)]);
    let gw = GatewayProcess::serve_with_env(&s.args, &env).await?;
    for model in ["tls-model", "plain-model"] {
        let r = gw.client()?.chat(model, json!({})).await?;
        assert_eq!(r.status, 200, "{model}: {}\n{}", r.text(), gw.log());
    }
    let targets = proxy.targets();
    let tls_port = front.base.trim_end_matches("/v1").rsplit(':').next().context("tls port")?.to_string();
    assert!(targets.contains(&format!("localhost:{tls_port}")), "the https upstream was tunnelled: {targets:?}");
    assert!(targets.contains(&format!("127.0.0.1:{plain_port}")), "the http upstream was tunnelled: {targets:?}");
    assert!(gw.log().contains("go through the egress proxy"), "the proxy is logged at load:\n{}", gw.log());
    drop(gw);

    // NO_PROXY exempts the plain upstream's host; the other still goes through.
    let before = proxy.targets().len();
    let env = env_with(&[
        ("SSL_CERT_FILE", &ca),
        ("HTTPS_PROXY", &proxy.url),
        ("HTTP_PROXY", &proxy.url),
        ("NO_PROXY", "127.0.0.1"),
    ]);
    let gw = GatewayProcess::serve_with_env(&s.args, &env).await?;
    for model in ["tls-model", "plain-model"] {
        assert_eq!(gw.client()?.chat(model, json!({})).await?.status, 200, "{model}");
    }
    let after: Vec<String> = proxy.targets().split_off(before);
    assert_eq!(after, vec![format!("localhost:{tls_port}")], "only the https upstream went through the proxy");
    Ok(())
}
