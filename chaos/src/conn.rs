//! Connections that a handler can reset on purpose.
//!
//! A handler cannot make hyper drop a connection before response headers: it
//! must return a response. So [`ChaosListener`] wraps every accepted socket
//! in an [`AbortableIo`] whose [`ConnHandle`] reaches the handler as
//! `ConnectInfo`. After [`ConnHandle::abort`], every read and write fails and
//! the socket closes with `SO_LINGER` 0, i.e. a TCP RST: the client sees a
//! connection error, never a response.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::counters::Counters;

/// A TCP listener whose connections can be reset by handlers.
pub(crate) struct ChaosListener {
    inner: TcpListener,
    counters: Arc<Counters>,
}

/// A TCP stream that fails (and resets) once its handle was aborted.
pub(crate) struct AbortableIo {
    stream: TcpStream,
    handle: ConnHandle,
    lingering: bool,
}

/// Reset switch of one connection, handed to handlers as `ConnectInfo`.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnHandle(Arc<AtomicBool>);

impl ChaosListener {
    pub(crate) fn new(inner: TcpListener, counters: Arc<Counters>) -> Self {
        Self { inner, counters }
    }
}

impl Listener for ChaosListener {
    type Io = AbortableIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    // SSE cadence must not wait for Nagle and delayed ACKs.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "chaos: cannot set TCP_NODELAY");
                    }
                    self.counters.connection();
                    let io = AbortableIo { stream, handle: ConnHandle::default(), lingering: false };
                    return (io, addr);
                }
                // The peer went away between SYN and accept: nothing to do.
                Err(e) if is_connection_error(&e) => {}
                // Out of file descriptors and the like: back off as axum does.
                Err(e) => {
                    tracing::error!(error = %e, "chaos: accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl ConnHandle {
    /// Makes the connection fail at its next read or write and close with RST.
    pub(crate) fn abort(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_aborted(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Connected<IncomingStream<'_, ChaosListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, ChaosListener>) -> Self {
        stream.io().handle.clone()
    }
}

impl AbortableIo {
    /// `SO_LINGER` 0: closing the socket sends RST instead of FIN.
    fn arm_reset(&mut self) {
        if !self.lingering {
            self.lingering = true;
            if let Err(e) = self.stream.set_zero_linger() {
                tracing::debug!(error = %e, "chaos: cannot set SO_LINGER 0");
            }
        }
    }

    /// `Err` once aborted; the first time also arms the RST on close.
    fn check(&mut self) -> io::Result<()> {
        if !self.handle.is_aborted() {
            return Ok(());
        }
        self.arm_reset();
        Err(io::Error::new(io::ErrorKind::ConnectionReset, "chaos: connection reset on purpose"))
    }
}

impl Drop for AbortableIo {
    /// hyper may drop an aborted connection without touching it again (a
    /// body error): arm the RST here so the close is still a reset.
    fn drop(&mut self) {
        if self.handle.is_aborted() {
            self.arm_reset();
        }
    }
}

impl AsyncRead for AbortableIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for AbortableIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}
