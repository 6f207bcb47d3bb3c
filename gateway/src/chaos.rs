//! The chaos upstream: a scriptable fake OpenAI-compatible provider
//! (docs/design.md §6) for tests, the demo and game days.
//!
//! Start here: [`serve`] a [`ChaosState`] on a listener (or [`run`] it from
//! the CLI), point an Upstream's `baseUrl` at it (with or without `/v1`), and
//! choose faults per request with `x-chaos-*` headers or for every request
//! with `POST /_chaos` (see [`Script`] for the fields). [`ChaosState`]'s
//! counters tell exactly how often the upstream was called.
//!
//! | header | effect |
//! |---|---|
//! | `x-chaos-status` | answer with this status; ≥ 400 gives an OpenAI error body |
//! | `x-chaos-error-code` | `error.code` of that body, e.g. `context_length_exceeded` |
//! | `x-chaos-first-byte-ms` | delay before headers; for streams, `200` at once, then the delay before the first event |
//! | `x-chaos-headers-first-byte-ms` | delay before headers, streams included |
//! | `x-chaos-chunks` / `x-chaos-chunk-ms` | content chunks (default 5) and the gap between them |
//! | `x-chaos-hang` | never answer; `x-chaos-hang-after-chunks: N` stalls after N chunks |
//! | `x-chaos-reset-after-chunks` | 0: TCP reset before headers; N: reset after N chunks |
//! | `x-chaos-retry-after` / `x-chaos-retry-after-ms` | `Retry-After` / `retry-after-ms` on errors |
//! | `x-chaos-malformed-chunk` | the Nth SSE event is `data: {not json` |
//! | `x-chaos-no-done` | end streams without `data: [DONE]` |
//! | `x-chaos-fail-rate` | this fraction of requests fails with the status (or 503) |
//!
//! `GET /models` ignores the script (a probe cannot see a model outage) and is
//! counted apart from inference requests.

mod conn;
mod counters;
mod handler;
mod plan;
mod request;
mod script;
mod stream;
mod wire;

use std::sync::{Arc, PoisonError, RwLock};

use anyhow::Context as _;
use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use counters::CounterSnapshot;
pub use script::{HEADER_PREFIX, Script, ScriptError};

use conn::{ChaosListener, ConnHandle};
use counters::Counters;
use plan::Plan;

/// Shared state of one chaos upstream: counters and the default script.
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ChaosState {
    inner: Arc<Inner>,
}

/// `sluice-gateway chaos` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ChaosArgs {
    /// Address to listen on; port 0 picks a free port (logged once bound).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    pub listen: String,
}

struct Inner {
    counters: Arc<Counters>,
    defaults: RwLock<Arc<Defaults>>,
}

/// The default script and its plan, swapped together.
struct Defaults {
    script: Script,
    plan: Arc<Plan>,
}

impl ChaosState {
    /// A healthy upstream with zeroed counters.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                counters: Arc::new(Counters::new()),
                defaults: RwLock::new(Arc::new(Defaults::new(Script::default()))),
            }),
        }
    }

    /// A state whose default script is `script` (validated).
    pub fn with_script(script: Script) -> Result<Self, ScriptError> {
        let state = Self::new();
        state.set_script(script)?;
        Ok(state)
    }

    /// The default script, applied to requests without `x-chaos-*` headers.
    pub fn script(&self) -> Script {
        self.defaults().script.clone()
    }

    /// Replaces the default script, as `POST /_chaos` does.
    pub fn set_script(&self, script: Script) -> Result<(), ScriptError> {
        script.validate()?;
        let defaults = Arc::new(Defaults::new(script));
        *self
            .inner
            .defaults
            .write()
            .unwrap_or_else(PoisonError::into_inner) = defaults;
        Ok(())
    }

    /// Back to a healthy upstream (`POST /_chaos` with `{}`).
    pub fn reset_script(&self) {
        let defaults = Arc::new(Defaults::new(Script::default()));
        *self
            .inner
            .defaults
            .write()
            .unwrap_or_else(PoisonError::into_inner) = defaults;
    }

    /// All counters at once, as in `GET /_chaos`.
    pub fn counters(&self) -> CounterSnapshot {
        self.inner.counters.snapshot()
    }

    /// Zeroes the counters (but `in_flight`).
    pub fn clear_counters(&self) {
        self.inner.counters.clear();
    }

    /// Inference requests received, faulty ones included.
    pub fn requests(&self) -> u64 {
        self.inner.counters.requests()
    }

    /// Responses sent with `status`.
    pub fn requests_with_status(&self, status: u16) -> u64 {
        self.inner.counters.requests_with_status(status)
    }

    /// SSE streams started.
    pub fn streams_started(&self) -> u64 {
        self.counters().streams_started
    }

    /// Connections reset on purpose.
    pub fn resets(&self) -> u64 {
        self.counters().resets
    }

    /// Requests or streams hung on purpose.
    pub fn hangs(&self) -> u64 {
        self.counters().hangs
    }

    /// Inference requests not finished yet.
    pub fn in_flight(&self) -> u64 {
        self.inner.counters.in_flight()
    }

    fn defaults(&self) -> Arc<Defaults> {
        let guard = self
            .inner
            .defaults
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&guard)
    }
}

impl Default for ChaosState {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ChaosState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosState")
            .field("script", &self.script())
            .field("counters", &self.counters())
            .finish()
    }
}

impl Defaults {
    fn new(script: Script) -> Self {
        let plan = Arc::new(Plan::new(&script));
        Self { script, plan }
    }
}

/// The chaos upstream's routes. Resets before headers need the connection
/// handles that [`serve`] installs; under a plain `axum::serve` they degrade
/// to a body broken right after the headers.
pub fn router(state: ChaosState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handler::chat))
        .route("/chat/completions", post(handler::chat))
        .route("/v1/completions", post(handler::completions))
        .route("/completions", post(handler::completions))
        .route("/v1/embeddings", post(handler::embeddings))
        .route("/embeddings", post(handler::embeddings))
        .route("/v1/models", get(handler::models))
        .route("/models", get(handler::models))
        .route("/_chaos", get(handler::show).post(handler::set))
        .fallback(handler::not_found)
        .with_state(state)
}

/// Serves the chaos upstream on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: ChaosState) -> std::io::Result<()> {
    let app = router(state).into_make_service_with_connect_info::<ConnHandle>();
    axum::serve(ChaosListener::new(listener), app).await
}

/// `sluice-gateway chaos`: binds, logs `listening on http://ADDR` (also on
/// stderr, for tests that pass port 0) and serves until SIGINT or SIGTERM.
pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("chaos: cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("chaos: no local address")?;
    tracing::info!("listening on http://{addr}");
    eprintln!("listening on http://{addr}");
    // Hung requests never finish, so no graceful drain: stop on the signal.
    tokio::select! {
        served = serve(listener, ChaosState::new()) => served.context("chaos: server failed")?,
        () = shutdown_signal() => tracing::info!("chaos: shutting down"),
    }
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "chaos: cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "chaos: cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        chaos: ChaosArgs,
    }

    #[test]
    fn listen_defaults_to_port_9090() {
        let cli = Cli::parse_from(["chaos"]);
        assert_eq!(cli.chaos.listen, "127.0.0.1:9090");
        let cli = Cli::parse_from(["chaos", "--listen", "127.0.0.1:0"]);
        assert_eq!(cli.chaos.listen, "127.0.0.1:0");
    }

    #[test]
    fn set_script_validates_and_reset_clears() {
        let state = ChaosState::new();
        let bad = Script {
            fail_rate: Some(-1.0),
            ..Script::default()
        };
        let err = state.set_script(bad).unwrap_err();
        assert_eq!(err.to_string(), "fail_rate: must be from 0 to 1, got -1");
        let good = Script {
            status: Some(503),
            ..Script::default()
        };
        state.set_script(good.clone()).unwrap();
        assert_eq!(state.script(), good);
        state.reset_script();
        assert_eq!(state.script(), Script::default());
    }
}
