//! A real `redis-server` for one test (docs/design.md §13, the shared cache tier): on
//! 127.0.0.1 at a port the kernel chose free, without persistence, killed when dropped.
//! Killed with SIGKILL and started again on the same port, it plays an outage.
//!
//! Without `redis-server` on PATH, [`RedisServer::start`] skips (`Ok(None)`, the reason
//! on stderr) unless `CI` is set: then it is an error, so nothing skips silently in CI.
//! `scripts/test` installs Debian's `redis-server` when it is missing.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// A running `redis-server`.
pub struct RedisServer {
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one, or `None` when `redis-server` is missing outside CI.
    pub async fn start() -> anyhow::Result<Option<Self>> {
        if which("redis-server").is_none() {
            if std::env::var_os("CI").is_some() {
                anyhow::bail!("redis-server is not installed and CI is set (scripts/test installs it)");
            }
            eprintln!("skipped: redis-server is not installed (scripts/test installs it)");
            return Ok(None);
        }
        // A port free now; redis-server cannot be asked for port 0.
        let port = TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
        let mut server = Self { url: format!("redis://127.0.0.1:{port}"), port, child: None };
        server.restart().await?;
        Ok(Some(server))
    }

    /// Starts it (again) on its port, empty, and waits until it answers `PING`.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server")?;
        self.child = Some(child);
        for _ in 0..200 {
            if self.ping().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("redis-server on port {} did not answer PING within 5 s", self.port)
    }

    /// Kills it with SIGKILL (an outage; [`restart`](Self::restart) ends it).
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.context("killing redis-server")?;
        }
        Ok(())
    }

    /// How many keys it holds (`DBSIZE`), or `None` when it does not answer.
    pub async fn keys(&self) -> Option<u64> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
        s.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").await.ok()?;
        let mut buf = [0u8; 32];
        let n = s.read(&mut buf).await.ok()?;
        std::str::from_utf8(buf.get(..n)?).ok()?.strip_prefix(':')?.trim_end().parse().ok()
    }

    async fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)).await else { return false };
        if s.write_all(b"PING\r\n").await.is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).await.is_ok() && &buf == b"+PONG\r\n"
    }
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| std::path::Path::new(d).join(program)).find(|p| p.is_file())
}
