//! Faults on the wire: a delayed first byte, a hang until the client gives up, and a
//! connection reset before the headers or in the middle of a body.

use std::io::ErrorKind;
use std::time::Instant;

use sluice_ledger::testing::eventually;

use super::{CHAT, MS, chat_body, io_kind, read_events, start};

#[tokio::test]
async fn first_byte_delay_comes_after_200_headers_for_streams() {
    let c = start().await;
    let t0 = Instant::now();
    let resp = c.send(CHAT, &chat_body(true), &[("x-chaos-first-byte-ms", "400")]).await;
    assert!(t0.elapsed() < MS(300), "stream headers came after {:?}", t0.elapsed());
    let s = read_events(resp.unwrap(), t0).await;
    assert!(s.events[0].0 >= MS(380), "first event at {:?}", s.events[0].0);

    let t0 = Instant::now();
    assert_eq!(c.chat(&[("x-chaos-first-byte-ms", "300")]).await.status(), 200);
    assert!(t0.elapsed() >= MS(280), "non-stream headers wait");

    let t0 = Instant::now();
    let h = [("x-chaos-headers-first-byte-ms", "300")];
    c.send(CHAT, &chat_body(true), &h).await.unwrap();
    assert!(t0.elapsed() >= MS(280), "stream headers wait too");
}

#[tokio::test]
async fn hang_holds_until_the_client_gives_up() {
    let c = start().await;
    let h = [("x-chaos-hang", "true")];
    let err = c.send_within(MS(300), CHAT, &chat_body(false), &h).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!((c.state.hangs(), c.state.requests()), (1, 1));
    assert!(eventually(MS(2000), async || c.state.in_flight() == 0).await, "hung handler dropped when the client left");

    let h = [("x-chaos-hang-after-chunks", "2")];
    let mut resp = c.send(CHAT, &chat_body(true), &h).await.unwrap();
    let mut events = String::new();
    while events.matches("\n\n").count() < 2 {
        let chunk = resp.chunk().await.unwrap().unwrap();
        events.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(events.matches("\n\n").count(), 2);
    let stalled = tokio::time::timeout(MS(300), resp.chunk()).await;
    assert!(stalled.is_err(), "stream must stall after 2 chunks");
    assert_eq!(c.state.hangs(), 2);
    drop(resp);
    assert!(eventually(MS(2000), async || c.state.in_flight() == 0).await, "stalled stream dropped with its client");
}

#[tokio::test]
async fn reset_before_headers_is_a_connection_error() {
    let c = start().await;
    let h = [("x-chaos-reset-after-chunks", "0")];
    let err = c.send(CHAT, &chat_body(false), &h).await.unwrap_err();
    assert!(!err.is_timeout() && err.status().is_none(), "{err:?}");
    assert_eq!(io_kind(&err), Some(ErrorKind::ConnectionReset), "{err:?}");
    assert_eq!((c.state.resets(), c.state.requests()), (1, 1));
    assert!(c.state.counters().by_status.is_empty());
    // The server itself is fine afterwards.
    assert_eq!(c.chat(&[]).await.status(), 200);
}

#[tokio::test]
async fn reset_after_chunks_breaks_the_body() {
    let c = start().await;
    let s = c.stream(&chat_body(true), &[("x-chaos-reset-after-chunks", "3")]).await;
    assert_eq!(s.events.len(), 3, "{:?}", s.texts());
    assert!(s.json().iter().all(|e| e["choices"][0]["finish_reason"].is_null()));
    let err = s.end.unwrap_err();
    assert_eq!(io_kind(&err), Some(ErrorKind::ConnectionReset), "{err:?}");

    let resp = c.chat(&[("x-chaos-reset-after-chunks", "2")]).await;
    assert_eq!(resp.status(), 200);
    let err = resp.bytes().await.unwrap_err();
    assert_eq!(io_kind(&err), Some(ErrorKind::ConnectionReset), "plain body: {err:?}");
    assert_eq!(c.state.resets(), 2);
}
