//! The real `sluice-gateway` binary as a child process: `serve` found through its
//! `listening on http://ADDR` line (docs/design.md §3), killed with SIGKILL to play a crash,
//! and the one-shot commands (`budgets`, `admin`) run to completion.
//!
//! The binary is `$SLUICE_GATEWAY_BIN`, else `$CARGO_TARGET_DIR/debug/sluice-gateway`,
//! else `target/debug/sluice-gateway` of this workspace. It must be built first
//! (`cargo build -p sluice-gateway --profile test`; `scripts/test` does): a binary older than the
//! sources it is built from is refused, so a test never judges stale code.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::client::Client;

/// Lines of a child's stderr kept for failure messages.
const LOG_LINES: usize = 400;

/// A `sluice-gateway serve` process; killed when dropped.
pub struct GatewayProcess {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    child: Child,
    log: Arc<Mutex<VecDeque<String>>>,
}

/// The gateway binary to run (see the module docs).
pub fn gateway_bin() -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = match (std::env::var_os("SLUICE_GATEWAY_BIN"), std::env::var_os("CARGO_TARGET_DIR")) {
        (Some(bin), _) => PathBuf::from(bin),
        (None, Some(target)) => PathBuf::from(target).join("debug/sluice-gateway"),
        (None, None) => workspace.join("target/debug/sluice-gateway"),
    };
    let built = std::fs::metadata(&path).and_then(|m| m.modified()).with_context(|| {
        format!("{} is missing: build it first with `cargo build -p sluice-gateway --profile test`", path.display())
    })?;
    if std::env::var_os("SLUICE_GATEWAY_BIN").is_none() {
        let newest = ["gateway/src", "ledger/src", "ledger/migrations", "crds/src"]
            .iter()
            .filter_map(|d| newest_mtime(&workspace.join(d)))
            .max();
        if let Some(newest) = newest
            && newest > built
        {
            anyhow::bail!(
                "{} is older than its sources: rebuild it with `cargo build -p sluice-gateway --profile test`",
                path.display()
            );
        }
    }
    Ok(path)
}

fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() { newest_mtime(&path) } else { entry.metadata().and_then(|m| m.modified()).ok() };
        newest = newest.max(t);
    }
    newest
}

impl GatewayProcess {
    /// Runs `sluice-gateway serve ARGS… --listen 127.0.0.1:0` and waits (up to 30 s)
    /// until it listens.
    pub async fn serve(args: &[String]) -> anyhow::Result<Self> {
        Self::serve_with_env(args, &[]).await
    }

    /// As [`serve`](Self::serve), with these environment variables set (a value of
    /// `None` removes one the test process has).
    pub async fn serve_with_env(args: &[String], env: &[(&str, Option<&str>)]) -> anyhow::Result<Self> {
        let mut cmd = Command::new(gateway_bin()?);
        cmd.arg("serve").args(args).args(["--listen", "127.0.0.1:0"]);
        for (name, value) in env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        cmd.env("RUST_LOG", std::env::var("SLUICE_CHILD_LOG").unwrap_or_else(|_| "info".into()));
        cmd.env("SLUICE_LOG_FORMAT", "text").env("NO_COLOR", "1");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().context("spawning sluice-gateway serve")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        let kept = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(at) = line.find("listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let addr = line[at + "listening on http://".len()..].split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(addr.to_string());
                }
                if let Ok(mut log) = kept.lock() {
                    log.push_back(line);
                    if log.len() > LOG_LINES {
                        log.pop_front();
                    }
                }
            }
        });
        let addr = match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.start_kill();
                let log = log.lock().map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
                anyhow::bail!("sluice-gateway serve did not start listening:\n{log}");
            }
        };
        Ok(Self { base: format!("http://{addr}"), child, log })
    }

    /// A client for this gateway.
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.base)
    }

    /// SIGKILL, as a crash or an OOM kill would: no shutdown code runs. Waits until
    /// the process is gone.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// SIGTERM, as Kubernetes sends to a terminating pod; does not wait.
    pub async fn terminate(&self) -> anyhow::Result<()> {
        let pid = self.child.id().context("the process has exited")?;
        let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await?;
        anyhow::ensure!(status.success(), "kill -TERM {pid} failed");
        Ok(())
    }

    /// Waits up to `limit` for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<Option<i32>> {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .with_context(|| format!("still running after {limit:?}:\n{}", self.log()))??;
        Ok(status.code())
    }

    /// The last lines the process logged.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default()
    }
}

/// Output of a one-shot command.
#[derive(Debug)]
pub struct CommandOutput {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `sluice-gateway ARGS…` to completion (at most 60 s).
pub async fn run(args: &[&str]) -> anyhow::Result<CommandOutput> {
    let mut cmd = Command::new(gateway_bin()?);
    cmd.args(args).env("NO_COLOR", "1").stdin(Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .with_context(|| format!("sluice-gateway {args:?} did not finish within 60 s"))??;
    Ok(CommandOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
