//! `sluice-gateway serve`: load config, connect the ledger, serve until signalled,
//! and keep the background loops ([`spawn_loops`]) running meanwhile.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_ledger::limits::{Limiter, LimiterConfig, LimiterObserver};
use sluice_ledger::{Biller, BillerConfig, BillerObserver, Ledger};
use tokio::net::TcpListener;

use crate::attempt::Books;
use crate::billing::Billing;
use crate::config::source::{Secrets, Source};
use crate::health::HealthSettings;
use crate::server::{AuthMode, Gateway, serve_http, shutdown_signal};
use crate::telemetry::traces::{self, TraceArgs};

mod loops;

pub use loops::{Loops, spawn_loops};

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
    /// How long a balance grant serves requests without a renewal (docs/design.md §5a).
    #[arg(long, default_value = "30s", env = "SLUICE_GRANT_VALIDITY", value_parser = parse_duration)]
    pub grant_validity: Duration,
    /// The most one balance grant holds, in USD; 0 reserves per request in the ledger
    /// instead (one database round trip per request).
    #[arg(long, default_value = "10", env = "SLUICE_GRANT_MAX", value_parser = parse_grant_max)]
    pub grant_max: i64,
    /// The most a limit lease takes beyond the request at hand, in percent of the
    /// limit: what a gateway that dies can have used of a limit without reporting it,
    /// so the bound by which limits can be passed (docs/design.md §5b).
    #[arg(long, default_value = "2", env = "SLUICE_LIMIT_LEASE_MAX", value_parser = parse_lease_max)]
    pub limit_lease_max: u32,
    /// Bytes the in-process cache tier holds at most (docs/design.md §13); 0 turns the
    /// cache off.
    #[arg(long, default_value_t = crate::cache::DEFAULT_MAX_BYTES, env = "SLUICE_CACHE_MAX_BYTES")]
    pub cache_max_bytes: u64,
    /// The shared cache tier every gateway reads: `redis://HOST:PORT[/DB]`, `rediss://…`
    /// (TLS) or `unix://PATH`. Without it each gateway caches for itself.
    #[arg(long, env = "SLUICE_CACHE_REDIS_URL")]
    pub cache_redis: Option<String>,
    /// How long a settlement batch collects before it commits (group commit).
    #[arg(long, default_value = "2ms", env = "SLUICE_SETTLE_WINDOW", value_parser = parse_duration)]
    pub settle_window: Duration,
    /// On SIGTERM, keep serving this long with /readyz answering 503 before closing the
    /// listener, so that load balancers stop sending new connections first (Kubernetes
    /// removes a terminating pod from its Service only eventually). Requests in flight
    /// then finish whatever this is.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Name of this process in heartbeats (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub gateway_id: Option<String>,
    /// Trace export (docs/design.md §11): off unless an OTLP endpoint is set.
    #[command(flatten)]
    pub traces: TraceArgs,
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

/// Parses `--grant-max` (USD).
fn parse_grant_max(text: &str) -> Result<i64, String> {
    sluice_ledger::parse_usd(text).map_err(|e| e.to_string())
}

/// Parses `--limit-lease-max` (percent, 0.1 to 100) into thousandths.
fn parse_lease_max(text: &str) -> Result<u32, String> {
    let pct: f64 = text.trim().trim_end_matches('%').parse().map_err(|_| format!("{text:?} is not a percentage"))?;
    if !(0.1..=100.0).contains(&pct) {
        return Err(format!("{text:?} is not between 0.1 and 100 (percent of a limit)"));
    }
    Ok((pct * 10.0).round() as u32)
}

/// This process in the `grants` table: `--gateway-id` (the pod name), else the host
/// name, the pid and the start time, so that a restarted process is another holder.
pub fn holder_id(args: &ServeArgs) -> String {
    if let Some(id) = &args.gateway_id {
        return id.clone();
    }
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "gateway".into());
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{host}-{}-{started}", std::process::id())
}

/// Builds the gateway for `args` (config loaded, ledger connected), without serving.
pub async fn build(args: &ServeArgs) -> anyhow::Result<Arc<Gateway>> {
    let ledger =
        Ledger::connect(&args.ledger).await.with_context(|| format!("opening the ledger {}", redact(&args.ledger)))?;
    let settings = HealthSettings { window: args.health_window, ..HealthSettings::default() };
    let mut books = Books::new(settings, Secrets::new(args.secrets_dir.clone()));
    books.traces = traces::export::start(&args.traces)?;
    let mut billing = Billing::new(args.auth, Some(ledger.clone()), &books.metrics);
    if args.auth == AuthMode::Keys {
        let cfg = BillerConfig {
            validity: args.grant_validity,
            grant_max_nanos: args.grant_max,
            settle_window: args.settle_window,
            reservation_ttl: args.reservation_ttl,
            ..BillerConfig::new(holder_id(args))
        };
        let observer: Arc<dyn BillerObserver> = Arc::new(books.metrics.grants.clone());
        billing.biller = Some(Biller::start(ledger.clone(), cfg, Some(observer)));
        let cfg = LimiterConfig { lease_permille: args.limit_lease_max, ..LimiterConfig::new(holder_id(args)) };
        let observer: Arc<dyn LimiterObserver> = Arc::new(books.metrics.limits.clone());
        billing.limiter = Some(Limiter::new(ledger, cfg, Some(observer)));
    }
    let cache = match args.cache_max_bytes {
        0 => None,
        bytes => {
            let shared = match &args.cache_redis {
                Some(url) => Some(
                    crate::cache::shared::Shared::new(url, books.metrics.cache.shared_errors.clone())
                        .map_err(|e| anyhow::anyhow!("--cache-redis {}: {e}", redact(url)))?,
                ),
                None => None,
            };
            Some(Arc::new(crate::cache::Cache::new(bytes, shared)))
        }
    };
    let mut gw = Gateway::new(books, billing);
    gw.cache = cache;
    gw.max_body = args.max_body_bytes;
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
    let app = crate::server::router(gw.clone());
    let delay = args.shutdown_delay;
    let drain = gw.clone();
    let shutdown = async move {
        shutdown_signal().await;
        drain.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        if !delay.is_zero() {
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                "shutting down: /readyz now answers 503, still accepting for the delay"
            );
            tokio::time::sleep(delay).await;
        }
        tracing::info!("shutting down: no new connections, letting requests in flight finish");
    };
    serve_http(listener, app, shutdown).await;
    // Requests are done: commit what is queued and give the grants back (§5a).
    if let Some(b) = &gw.billing.biller {
        b.shutdown(Duration::from_secs(10)).await;
    }
    // And the limit leases (§5b): what was used stays counted.
    if let Some(l) = &gw.billing.limiter {
        l.shutdown().await;
    }
    loops.abort();
    // Flush what the last seconds counted.
    if let Some(ledger) = &gw.billing.ledger
        && let Err(e) = gw.books.sli.flush(ledger).await
    {
        tracing::error!(error = %e, "final SLI flush failed");
    }
    if let Some(t) = &gw.books.traces {
        t.shutdown().await;
    }
    tracing::info!("stopped");
    Ok(())
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
