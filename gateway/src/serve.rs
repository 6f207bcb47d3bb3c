//! `sluice-gateway serve`: load config, connect the ledger, serve, and keep the
//! background loops running (config reload, SLI flush, heartbeat, reservation reaper).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use sluice_ledger::Ledger;
use tokio::net::TcpListener;

use crate::app::{AuthMode, Gateway};
use crate::config::source::{Secrets, Source};
use crate::health::HealthSettings;
use crate::sli;

/// Options of `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Manifest files or directories (YAML, multi-document).
    #[arg(long, num_args = 1.., required_unless_present = "snapshot", conflicts_with = "snapshot")]
    pub manifests: Vec<PathBuf>,
    /// A snapshot JSON file rendered by the operator (watched).
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port (logged).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Ledger URL: sqlite://PATH (created if missing) or postgres://…
    #[arg(long, default_value = "sqlite://sluice.db", env = "SLUICE_LEDGER_URL")]
    pub ledger: String,
    /// Directory of upstream secrets: DIR/<secret-name>/<key>.
    #[arg(long)]
    pub secrets_dir: Option<PathBuf>,
    /// Client authentication: API keys from the ledger (billed), or none.
    #[arg(long, value_enum, default_value = "keys")]
    pub auth: AuthMode,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// How long a request body may take to arrive; a slower one gets 408.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// How often config and secret files are checked for changes.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// How long attempts count toward an upstream's success ratio. Lowering it is meant
    /// for tests that need a faster clock; production keeps the default.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub health_window: Duration,
    /// How often SLI rollups are written to the ledger.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub flush_interval: Duration,
    /// How long a billing reservation may stay open before the reaper releases it
    /// (covers a gateway that crashed mid-request).
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub reservation_ttl: Duration,
    /// On SIGTERM, keep serving this long with /readyz answering 503 before closing the
    /// listener, so that load balancers stop sending new connections first (Kubernetes
    /// removes a terminating pod from its Service only eventually). Requests in flight
    /// then finish whatever this is.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Name of this process in heartbeats (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub gateway_id: Option<String>,
}

/// A URL with any password replaced by `***`, for logs and errors.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = rest.split_once('/').map_or((rest, ""), |(a, t)| (a, t));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let slash = if tail.is_empty() && !rest.contains('/') { "" } else { "/" };
            format!("{scheme}://{user}:***@{host}{slash}{tail}")
        }
        None => url.to_string(),
    }
}


/// Parses a humane duration for CLI flags.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    sluice_crds::duration::parse(text)
}

/// Builds the gateway for `args` (config loaded, ledger connected), without serving.
pub async fn build(args: &ServeArgs) -> anyhow::Result<Arc<Gateway>> {
    let ledger = Ledger::connect(&args.ledger).await.with_context(|| format!("opening the ledger {}", redact(&args.ledger)))?;
    let settings = HealthSettings { window: args.health_window, ..HealthSettings::default() };
    let mut gw = Gateway::new(settings, Secrets::new(args.secrets_dir.clone()), Some(ledger), args.auth);
    gw.max_body = args.max_body_bytes;
    gw.reservation_ttl = args.reservation_ttl;
    gw.body_timeout = args.body_timeout;
    gw.source = Some(match &args.snapshot {
        Some(path) => Source::Snapshot(path.clone()),
        None => Source::Manifests(args.manifests.clone()),
    });
    let routes = gw.reload().map_err(|e| anyhow::anyhow!("the configuration was refused: {e}"))?;
    tracing::info!(routes, "configuration loaded");
    Ok(Arc::new(gw))
}

/// Runs `serve` until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let gw = build(&args).await?;
    let listener = TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!("listening on http://{addr}");
    let id = args.gateway_id.clone().unwrap_or_else(|| format!("gateway-{}", std::process::id()));
    let loops = spawn_loops(gw.clone(), &args, id);
    let app = crate::server::app(gw.clone());
    let delay = args.shutdown_delay;
    let drain = gw.clone();
    let shutdown = async move {
        shutdown_signal().await;
        drain.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        if !delay.is_zero() {
            tracing::info!(delay_ms = delay.as_millis() as u64, "shutting down: /readyz now answers 503, still accepting for the delay");
            tokio::time::sleep(delay).await;
        }
        tracing::info!("shutting down: no new connections, letting requests in flight finish");
    };
    serve_http(listener, app, shutdown).await;
    loops.abort();
    // Flush what the last seconds counted.
    if let Some(ledger) = &gw.ledger
        && let Err(e) = gw.sli.flush(ledger).await
    {
        tracing::error!(error = %e, "final SLI flush failed");
    }
    tracing::info!("stopped");
    Ok(())
}

/// How long a client may take to send its request headers. A body has its own limit
/// (`--body-timeout`); without this one, a client trickling its headers would hold a
/// connection forever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish (streams included). Unlike `axum::serve`, connections get a header-read
/// timeout and `TCP_NODELAY`.
pub async fn serve_http(listener: TcpListener, app: axum::Router, shutdown: impl std::future::Future<Output = ()>) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned();
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = watched.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The background loops; dropping the handle does not stop them, `abort()` does.
pub struct Loops(Vec<tokio::task::JoinHandle<()>>);

impl Loops {
    /// Stops every loop.
    pub fn abort(&self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// Starts config reload, SLI flush, heartbeat and reaper loops.
pub fn spawn_loops(gw: Arc<Gateway>, args: &ServeArgs, gateway_id: String) -> Loops {
    let mut handles = Vec::new();
    let reload_every = args.reload_interval;
    let g = gw.clone();
    handles.push(tokio::spawn(async move {
        let Some(source) = g.source.clone() else { return };
        let mut last = source.fingerprint(g.secrets.dir());
        let mut tick = tokio::time::interval(reload_every);
        loop {
            tick.tick().await;
            // File reads and a reload's parsing block: keep them off the threads that
            // serve requests (a slow volume would otherwise stall every request).
            let (g, source) = (g.clone(), source.clone());
            match tokio::task::spawn_blocking(move || reload_if_changed(&g, &source, last)).await {
                Ok(now) => last = now,
                Err(e) => tracing::error!(error = %e, "the configuration check failed"),
            }
        }
    }));
    handles.push(tokio::spawn(crate::probe::run(gw.clone())));
    if let Some(ledger) = gw.ledger.clone() {
        let g = gw.clone();
        let every = args.flush_interval;
        handles.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if let Err(e) = g.sli.flush(&ledger).await {
                    tracing::warn!(error = %e, "SLI flush failed; will retry");
                }
                if let Some(rt) = g.current.get() {
                    let hb = sli::heartbeat(&gateway_id, &rt, &g.settings);
                    if let Err(e) = ledger.heartbeat(hb).await {
                        tracing::warn!(error = %e, "heartbeat failed");
                    }
                }
                match ledger.reap_expired(SystemTime::now()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(released = n, "released expired reservations"),
                    Err(e) => tracing::warn!(error = %e, "reservation reaper failed"),
                }
            }
        }));
    }
    Loops(handles)
}

/// Picks up rotated keys, and reloads the config if its files changed since `last`;
/// returns the files' fingerprint now.
fn reload_if_changed(g: &Gateway, source: &Source, last: u64) -> u64 {
    if let Some(rt) = g.current.get() {
        // Rotated keys are picked up even when the config did not change.
        g.secrets.refresh(&rt.snapshot);
    }
    let now = source.fingerprint(g.secrets.dir());
    if now != last {
        match g.reload() {
            Ok(routes) => tracing::info!(routes, "configuration reloaded"),
            Err(e) => tracing::error!("new configuration refused, the previous one keeps serving: {e}"),
        }
    }
    now
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => futures::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = futures::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords_only() {
        assert_eq!(super::redact("postgres://app:s3cret@db:5432/sluice"), "postgres://app:***@db:5432/sluice");
        assert_eq!(super::redact("postgres://db/sluice"), "postgres://db/sluice");
        assert_eq!(super::redact("sqlite://sluice.db"), "sqlite://sluice.db");
    }
}
