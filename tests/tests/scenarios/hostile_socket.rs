//! Hostile clients on the served port, written byte by byte on raw TCP: a body
//! trickled one byte at a time (slowloris), thousands of headers and one huge header,
//! a body shorter than its `Content-Length`, pipelined garbage. None of them may hang a
//! connection forever or hurt anyone else: afterwards the gateway still answers
//! `/healthz` and a normal request.
//!
//! The request body has a read deadline (`Gateway::body_timeout`, 30 s by default, 1 s
//! here): a body that has not arrived by then is answered 408 `request_timeout`.
//! Header size and count are bounded by hyper (431 or a closed connection).

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_tests::{ChaosUpstream, GatewayOptions, TestGateway, ms, route, yaml};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const BODY_TIMEOUT: Duration = Duration::from_secs(1);

async fn start() -> anyhow::Result<(ChaosUpstream, TestGateway)> {
    let only = ChaosUpstream::start("only").await?;
    let docs = [only.doc(), route("chat", "chat-model", &[("only", 100)])];
    let opts =
        GatewayOptions { body_timeout: Some(BODY_TIMEOUT), max_body_bytes: 64 * 1024, ..GatewayOptions::default() };
    Ok((only, TestGateway::start_with(&yaml(&docs), opts).await?))
}

/// Everything the server sends until it closes the connection or `within` passes
/// (`None` then: the connection was still open).
async fn read_all(stream: &mut tokio::net::tcp::OwnedReadHalf, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// The gateway still serves health checks and real requests.
async fn still_serving(gw: &TestGateway) -> anyhow::Result<()> {
    let client = gw.client()?;
    let h = client.get("/healthz").await?;
    assert_eq!((h.status, h.text().as_str()), (200, "ok"));
    let r = client.chat("chat-model", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    Ok(())
}

fn status_of(response: &str) -> Option<u16> {
    response.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

const HEAD: &str = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n";

#[tokio::test]
async fn a_trickled_body_is_cut_off_by_the_body_timeout() -> anyhow::Result<()> {
    let (only, gw) = start().await?;
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
    wr.write_all(format!("{HEAD}Content-Length: 1000\r\n\r\n").as_bytes()).await?;
    let t0 = Instant::now();
    // One byte every 100 ms: 1000 bytes would take 100 s.
    let trickle = tokio::spawn(async move {
        for _ in 0..1000 {
            if wr.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let response = read_all(&mut rd, Duration::from_secs(10)).await;
    let took = t0.elapsed();
    trickle.abort();
    let response = response.ok_or_else(|| anyhow::anyhow!("the trickling connection was still open after 10 s"))?;
    eprintln!(
        "slow body: answered {:?} after {:.0} ms (body timeout {} ms)",
        status_of(&response),
        ms(took),
        BODY_TIMEOUT.as_millis()
    );
    assert_eq!(status_of(&response), Some(408), "{response}");
    assert!(response.contains(r#""code":"request_timeout""#) && response.contains("x-request-id"), "{response}");
    assert!(took >= BODY_TIMEOUT && took < BODY_TIMEOUT + Duration::from_secs(1), "answered after {took:?}");
    assert_eq!(only.requests(), 0);
    still_serving(&gw).await
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length() -> anyhow::Result<()> {
    let (only, gw) = start().await?;
    // The client gives up half-way and closes its side: answered at once.
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
    wr.write_all(format!("{HEAD}Content-Length: 60000\r\n\r\n{{\"model\":").as_bytes()).await?;
    wr.shutdown().await?;
    let t0 = Instant::now();
    let response = read_all(&mut rd, Duration::from_secs(5))
        .await
        .ok_or_else(|| anyhow::anyhow!("no answer to a truncated body"))?;
    assert!(t0.elapsed() < Duration::from_secs(1), "took {:?}", t0.elapsed());
    // Either an OpenAI 400 on the half-closed connection, or just a close.
    assert!(
        response.is_empty() || (status_of(&response) == Some(400) && response.contains("invalid_request")),
        "{response}"
    );

    // It stops sending but keeps the connection: the body timeout answers.
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
    wr.write_all(format!("{HEAD}Content-Length: 60000\r\n\r\n{{\"model\":").as_bytes()).await?;
    let t0 = Instant::now();
    let response = read_all(&mut rd, Duration::from_secs(10))
        .await
        .ok_or_else(|| anyhow::anyhow!("a stalled body held the connection for 10 s"))?;
    assert_eq!(status_of(&response), Some(408), "{response}");
    assert!(t0.elapsed() < BODY_TIMEOUT + Duration::from_secs(1));
    drop(wr);

    // A Content-Length over the limit is refused before reading the body.
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
    wr.write_all(format!("{HEAD}Content-Length: 100000000\r\n\r\n{{").as_bytes()).await?;
    let t0 = Instant::now();
    let response = read_all(&mut rd, Duration::from_secs(5)).await;
    let response = response.unwrap_or_default();
    assert_eq!(status_of(&response), Some(413), "{response}");
    assert!(t0.elapsed() < Duration::from_millis(500));
    drop(wr);
    assert_eq!(only.requests(), 0);
    still_serving(&gw).await
}

#[tokio::test]
async fn header_floods_are_refused() -> anyhow::Result<()> {
    let (only, gw) = start().await?;
    let many: String = (0..5000).map(|i| format!("X-Flood-{i}: {i}\r\n")).collect();
    let huge = format!("X-Huge: {}\r\n", "a".repeat(1024 * 1024));
    for (name, headers) in [("5000 headers", many), ("a 1 MiB header", huge)] {
        let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
        let t0 = Instant::now();
        // The server may close before it has read everything: a write error is fine.
        let _ = wr.write_all(format!("{HEAD}{headers}Content-Length: 2\r\n\r\n{{}}").as_bytes()).await;
        let response = read_all(&mut rd, Duration::from_secs(5))
            .await
            .ok_or_else(|| anyhow::anyhow!("{name}: connection held open"))?;
        eprintln!("{name}: {:?} after {:.0} ms", status_of(&response), ms(t0.elapsed()));
        assert!(response.is_empty() || status_of(&response) == Some(431), "{name}: {response}");
    }
    assert_eq!(only.requests(), 0);
    still_serving(&gw).await
}

#[tokio::test]
async fn pipelined_requests_and_garbage() -> anyhow::Result<()> {
    let (only, gw) = start().await?;
    let body = sluice_tests::client::chat_body("chat-model", false, json!({})).to_string();
    let chat = format!("{HEAD}Content-Length: {}\r\n\r\n{body}", body.len());
    // Two real requests pipelined, then garbage: both answered in order, then 400/close.
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
    wr.write_all(format!("{chat}{chat}\x00\x01\x02GARBAGE \u{fffd}\r\n\r\n").as_bytes()).await?;
    let response = read_all(&mut rd, Duration::from_secs(5))
        .await
        .ok_or_else(|| anyhow::anyhow!("garbage held the connection open"))?;
    let statuses: Vec<&str> =
        response.match_indices("HTTP/1.1 ").filter_map(|(i, _)| response.get(i + 9..i + 12)).collect();
    assert_eq!(statuses.first().copied(), Some("200"), "{response}");
    assert_eq!(statuses.get(1).copied(), Some("200"), "{response}");
    assert!(statuses.get(2).is_none_or(|s| *s == "400"), "{response}");
    assert_eq!(only.requests(), 2);

    // Garbage alone, and a request line with a body but no length.
    for garbage in [
        "\u{16}\u{3}\u{1}\u{2}\u{0}\u{1}\u{0}\u{1}\u{fc}\u{3}\u{3}",
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
    ] {
        let (mut rd, mut wr) = TcpStream::connect(gw.addr).await?.into_split();
        let _ = wr.write_all(garbage.as_bytes()).await;
        let response = read_all(&mut rd, Duration::from_secs(5))
            .await
            .ok_or_else(|| anyhow::anyhow!("{garbage:?} held the connection open"))?;
        let status = status_of(&response);
        assert!(response.is_empty() || status.is_some_and(|s| (400..500).contains(&s)), "{garbage:?}: {response}");
    }
    assert_eq!(only.requests(), 2);
    still_serving(&gw).await
}

#[tokio::test]
async fn trickled_headers_are_cut_off_by_the_header_read_timeout() -> anyhow::Result<()> {
    let (_only, gw) = start().await?;
    let addr = gw.base.trim_start_matches("http://").trim_end_matches('/').to_string();
    let stream = TcpStream::connect(&addr).await?;
    let (mut read, mut write) = stream.into_split();
    write.write_all(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n").await?;
    // One header byte every 500 ms, never finishing the header block.
    let began = Instant::now();
    let trickle = tokio::spawn(async move {
        for _ in 0..200 {
            if write.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let limit = sluice_gateway::server::HEADER_READ_TIMEOUT;
    let closed = read_all(&mut read, limit + Duration::from_secs(10)).await;
    trickle.abort();
    assert!(
        closed.is_some(),
        "the connection was still open {:.0} ms after it started trickling headers",
        ms(began.elapsed())
    );
    let took = began.elapsed();
    assert!(took >= limit - Duration::from_millis(500), "closed after {took:?}, before the {limit:?} limit");
    still_serving(&gw).await
}
