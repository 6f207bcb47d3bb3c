//! Starting and stopping the operator: listener, leader election, CRD check, ledger,
//! controllers, graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use sluice_crds::{AccountLimit, ErrorBudget, ModelRoute, Upstream};
use sluice_ledger::{Ledger, LedgerError};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::Error;
use crate::forbidden::{Forbidden, STARTUP_RETRY};
use crate::metrics::Metrics;

/// How long to wait between attempts to reach the ledger at start-up.
const LEDGER_RETRY: Duration = Duration::from_secs(5);

/// Runs the operator until SIGTERM or SIGINT.
pub async fn run(client: Client, config: Config) -> Result<(), Error> {
    run_until(client, config, shutdown_signal()).await
}

/// Runs the operator until `shutdown` resolves: serves `/metrics` and `/healthz` (when
/// `config.listen` is set; `/status` too with `config.status_page`), waits for the leader Lease (when elected), checks that the
/// CRDs are installed, connects the ledger, then runs the controllers.
pub async fn run_until(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::new());
    let token = CancellationToken::new();
    let stop = token.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        stop.cancel();
    });

    let web = match config.listen {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
            let local = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
            let app = match &config.status_page {
                Some(runbooks) => {
                    tracing::info!("serving /metrics, /healthz and /status on http://{local}");
                    let source = crate::status_page::spawn(
                        client.clone(),
                        config.namespace.clone(),
                        config.ledger_url.clone(),
                        token.clone(),
                        metrics.clone(),
                    );
                    crate::web::app_with_status(metrics.clone(), source, runbooks)
                }
                None => {
                    tracing::info!("serving /metrics and /healthz on http://{local}");
                    crate::web::app(metrics.clone())
                }
            };
            let stop = token.clone();
            Some(tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
                    tracing::error!(error = %e, "the metrics listener failed");
                }
            }))
        }
        None => None,
    };

    let result = lead_and_run(client, config, metrics, token.clone()).await;
    token.cancel();
    if let Some(web) = web {
        let _ = web.await;
    }
    result
}

async fn lead_and_run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) -> Result<(), Error> {
    let mut leadership = match &config.leader_election {
        Some(namespace) => {
            let identity = config.identity.clone().unwrap_or_else(|| format!("sluice-operator-{}", std::process::id()));
            let acquire = || crate::leader::acquire(client.clone(), namespace, &identity);
            match retry_forbidden(&metrics, &token, acquire).await? {
                Some(l) => Some(l),
                None => return Ok(()),
            }
        }
        None => None,
    };
    metrics.set_leader(true);
    let namespace = config.namespace.as_deref();
    if retry_forbidden(&metrics, &token, || check_crds(&client, namespace)).await?.is_none() {
        return Ok(());
    }
    let Some(ledger) = connect_ledger(&config.ledger_url, &token).await? else { return Ok(()) };

    let controllers = crate::controllers::run(client, config, ledger, metrics.clone(), token.clone());
    let result = match &mut leadership {
        Some(l) => {
            let lost = l.lost();
            tokio::pin!(controllers, lost);
            tokio::select! {
                () = &mut controllers => Ok(()),
                () = &mut lost => {
                    tracing::error!("lost the leader lease; stopping");
                    token.cancel();
                    controllers.await;
                    Err(Error::LeadershipLost)
                }
            }
        }
        None => {
            controllers.await;
            Ok(())
        }
    };
    metrics.set_leader(false);
    if let Some(l) = leadership {
        l.release().await;
    }
    result
}

/// Runs a start-up step until it succeeds (`Some`), fails otherwise than for want of RBAC
/// (`Err`), or the operator is shut down (`None`). A refusal is reported
/// ([`Forbidden::report`]) and retried every [`STARTUP_RETRY`]: the process neither exits
/// (a crash loop that says less) nor waits silently, and carries on once the rule is granted.
async fn retry_forbidden<T, F, Fut>(
    metrics: &Metrics,
    token: &CancellationToken,
    mut step: F,
) -> Result<Option<T>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    loop {
        let result = tokio::select! {
            () = token.cancelled() => return Ok(None),
            r = step() => r,
        };
        match result {
            Ok(value) => return Ok(Some(value)),
            Err(e) => match e.forbidden() {
                Some(f) => {
                    f.report(metrics);
                    tracing::warn!("start-up refused for want of RBAC; retrying in {}s", STARTUP_RETRY.as_secs());
                }
                None => return Err(e),
            },
        }
        tokio::select! {
            () = token.cancelled() => return Ok(None),
            () = tokio::time::sleep(STARTUP_RETRY) => {}
        }
    }
}

/// Fails with a hint when a sluice CRD is not installed (one `list` with `limit=1` per
/// kind: `GET /apis/sluice.dev/v1alpha1/{modelroutes,upstreams,errorbudgets,accountlimits}?&limit=1`,
/// namespaced when one namespace is watched). When the operator may not list a kind, the
/// error is [`Error::Forbidden`] instead (start-up reports it and retries).
pub async fn check_crds(client: &Client, namespace: Option<&str>) -> Result<(), Error> {
    check::<ModelRoute>(client, namespace, "ModelRoute").await?;
    check::<Upstream>(client, namespace, "Upstream").await?;
    check::<ErrorBudget>(client, namespace, "ErrorBudget").await?;
    check::<AccountLimit>(client, namespace, "AccountLimit").await
}

async fn check<K>(client: &Client, namespace: Option<&str>, kind: &'static str) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(e) => match Forbidden::from_kube(&e) {
            Some(f) => Err(Error::Forbidden(f)),
            None => Err(Error::CrdMissing { kind, source: e }),
        },
    }
}

/// Connects the ledger, retrying every 5 s (a bundled Postgres may start after the
/// operator); `None` when shut down meanwhile. A URL of no supported kind fails at once.
async fn connect_ledger(url: &str, token: &CancellationToken) -> Result<Option<Ledger>, Error> {
    loop {
        match Ledger::connect(url).await {
            Ok(ledger) => {
                tracing::info!(kind = ledger.kind(), "ledger connected");
                return Ok(Some(ledger));
            }
            Err(e @ LedgerError::UnsupportedUrl(_)) => return Err(e.into()),
            Err(e) => tracing::warn!(error = %e, "cannot reach the ledger; retrying in 5s"),
        }
        tokio::select! {
            () = token.cancelled() => return Ok(None),
            () = tokio::time::sleep(LEDGER_RETRY) => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM, as the gateway does, so both binaries stop alike. If
/// the SIGTERM handler cannot be installed, only SIGINT stops the operator.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
