//! A gateway served in process from manifests written to a tempdir, exactly as
//! `sluice-gateway serve --manifests DIR/manifests.yaml --listen 127.0.0.1:0` would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sluice_gateway::cmd::serve::{Loops, ServeArgs, build, spawn_loops};
use sluice_gateway::server::{AuthMode, Gateway};
use sluice_gateway::telemetry::traces::TraceArgs;
use sluice_ledger::Ledger;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::metrics;
use crate::rollups::Rollups;

/// Serve flags a test may change; the defaults are the CLI's except `--auth none`
/// and a 100 ms reload interval.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// `--auth`.
    pub auth: AuthMode,
    /// `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// `--health-window` (test-only clock).
    pub health_window: Duration,
    /// `--reload-interval`.
    pub reload_interval: Duration,
    /// `--flush-interval`.
    pub flush_interval: Duration,
    /// `--ledger`; `None` is a SQLite file in the gateway's tempdir.
    pub ledger: Option<String>,
    /// `--reservation-ttl`; `None` keeps the CLI default.
    pub reservation_ttl: Option<Duration>,
    /// How long a request body may take to arrive (`Gateway::body_timeout`, no flag);
    /// `None` keeps the default.
    pub body_timeout: Option<Duration>,
    /// Secret files `(secret, key, value)` written under a `--secrets-dir` in the
    /// gateway's tempdir, laid out as a mounted Kubernetes Secret.
    pub secrets: Vec<(String, String, String)>,
    /// Trace export (`--otlp-endpoint`, `--otlp-protocol`, …); `None` leaves what the
    /// environment says (normally off).
    pub traces: Option<TraceArgs>,
    /// `--cache-redis`: the shared cache tier.
    pub cache_redis: Option<String>,
    /// Start `serve`'s background loops (reload, SLI flush, probes, checks). A test on
    /// tokio's paused clock turns them off: they read files and the ledger off the
    /// runtime, and while the runtime waits on them virtual time would jump on.
    pub background: bool,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            auth: AuthMode::None,
            max_body_bytes: 8 * 1024 * 1024,
            health_window: Duration::from_secs(60),
            reload_interval: Duration::from_millis(100),
            flush_interval: Duration::from_secs(10),
            ledger: None,
            reservation_ttl: None,
            body_timeout: None,
            secrets: Vec::new(),
            traces: None,
            cache_redis: None,
            background: true,
        }
    }
}

impl GatewayOptions {
    /// The defaults for a test that pauses tokio's clock once the gateway is up
    /// (`tokio::time::pause()`): no background loops. Requests are then served on virtual
    /// time, which jumps to the next timer whenever every task waits: a 30 s idle
    /// timeout or a 6 s breaker takes no real time, and a busy machine changes nothing.
    pub fn paused() -> Self {
        Self { background: false, ..Self::default() }
    }
}

/// A serving gateway; stops when dropped.
pub struct TestGateway {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Listening address.
    pub addr: SocketAddr,
    /// The gateway's shared state (config, health, metrics, ledger).
    pub state: Arc<Gateway>,
    /// The manifest file it watches.
    pub manifests: PathBuf,
    /// Holds manifests and ledger; removed on drop.
    pub dir: TempDir,
    loops: Option<Loops>,
    server: JoinHandle<()>,
}

impl TestGateway {
    /// Serves `manifests` (YAML text) with default options.
    pub async fn start(manifests: &str) -> anyhow::Result<Self> {
        Self::start_with(manifests, GatewayOptions::default()).await
    }

    /// Serves `manifests` (YAML text) with `opts`.
    pub async fn start_with(manifests: &str, opts: GatewayOptions) -> anyhow::Result<Self> {
        crate::init_logging();
        let (dir, path) = crate::manifests_file(manifests)?;
        let ledger =
            opts.ledger.clone().unwrap_or_else(|| format!("sqlite://{}", dir.path().join("ledger.db").display()));
        let mut args = serve_args(&path, &ledger, &opts)?;
        if !opts.secrets.is_empty() {
            let secrets = dir.path().join("secrets");
            for (secret, key, value) in &opts.secrets {
                std::fs::create_dir_all(secrets.join(secret)).context("making a secret's directory")?;
                std::fs::write(secrets.join(secret).join(key), value).context("writing a secret")?;
            }
            args.secrets_dir = Some(secrets);
        }
        let mut state = build(&args).await?;
        if let (Some(t), Some(gw)) = (opts.body_timeout, Arc::get_mut(&mut state)) {
            gw.body_timeout = t;
        }
        let listener = TcpListener::bind(args.listen).await.context("binding the gateway")?;
        let addr = listener.local_addr()?;
        let loops = opts.background.then(|| spawn_loops(state.clone(), &args, "sluice-tests".into()));
        let app = sluice_gateway::server::router(state.clone());
        let server = tokio::spawn(async move {
            sluice_gateway::server::serve_http(listener, app, futures::future::pending()).await;
        });
        Ok(Self { base: format!("http://{addr}"), addr, state, manifests: path, dir, loops, server })
    }

    /// A client for this gateway.
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.base)
    }

    /// Replaces the manifest file atomically (write + rename), as a config
    /// management tool or a ConfigMap update would.
    pub fn write_manifests(&self, yaml: &str) -> anyhow::Result<()> {
        let tmp = self.dir.path().join(".manifests.yaml.tmp");
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, &self.manifests)?;
        Ok(())
    }

    /// `/metrics` text, read from the registry directly.
    pub fn metrics(&self) -> String {
        self.state.books.metrics.encode()
    }

    /// One metric value out of `/metrics`, see [`metrics::value`].
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        metrics::value(&self.metrics(), name, labels)
    }

    /// A counter that may not exist yet (absent counts as 0).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.metric(name, labels).unwrap_or(0.0)
    }

    /// Returns the gateway's idle balance grants now, as its idle timer would a few
    /// seconds later (docs/design.md §5a): what they hold leaves `reserved`, so the
    /// account reads as it does between bursts of traffic.
    pub async fn return_grants(&self) {
        if let Some(b) = &self.state.billing.biller {
            b.maintain(std::time::SystemTime::now() + b.config().idle + Duration::from_secs(1)).await;
        }
    }

    /// The gateway's own ledger handle.
    pub fn ledger(&self) -> anyhow::Result<Ledger> {
        self.state.billing.ledger.clone().ok_or_else(|| anyhow::anyhow!("the gateway has no ledger"))
    }

    /// Writes the pending SLI rollups now, as the flush loop would, then reads back
    /// what the ledger holds for the routes and upstreams named here (namespace
    /// `default`) over the last ten minutes.
    pub async fn rollups(&self, routes: &[&str], upstreams: &[&str]) -> anyhow::Result<Rollups> {
        let ledger = self.ledger()?;
        self.state.books.sli.flush(&ledger).await?;
        Rollups::read(&ledger, routes, upstreams).await
    }

    /// Creates an account with `balance_nanos` and one key for it.
    pub async fn account(&self, name: &str, balance_nanos: i64) -> anyhow::Result<String> {
        let ledger = self.ledger()?;
        ledger.create_account(name, balance_nanos).await?;
        Ok(ledger.create_key(name).await?)
    }
}

/// `serve` flags parsed as the CLI parses them, so that every flag a test does not
/// set keeps the CLI's default.
#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn serve_args(manifests: &Path, ledger: &str, opts: &GatewayOptions) -> anyhow::Result<ServeArgs> {
    let mut cli = <Cli as clap::Parser>::try_parse_from([
        "serve".to_string(),
        "--manifests".into(),
        manifests.display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--ledger".into(),
        ledger.to_string(),
        "--gateway-id".into(),
        "sluice-tests".into(),
    ])?;
    let args = &mut cli.serve;
    args.auth = opts.auth;
    args.max_body_bytes = opts.max_body_bytes;
    args.reload_interval = opts.reload_interval;
    args.health_window = opts.health_window;
    args.flush_interval = opts.flush_interval;
    if let Some(ttl) = opts.reservation_ttl {
        args.reservation_ttl = ttl;
    }
    if let Some(traces) = &opts.traces {
        args.traces = traces.clone();
    }
    args.cache_redis.clone_from(&opts.cache_redis);
    Ok(cli.serve)
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(loops) = &self.loops {
            loops.abort();
        }
        self.server.abort();
    }
}
