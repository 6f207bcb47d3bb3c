//! sluice-status: the status page (docs/design.md §10), written once and served twice —
//! by `sluice-gateway serve` in file mode and by the operator's web port — so that it
//! depends on the ledger and the resource types only, never on the gateway.
//!
//! # Where to start
//!
//! - [`router`] is the whole surface: `GET /status` (HTML) and
//!   `GET /status/api/v2/summary.json` (the Atlassian Statuspage v2 summary). It is
//!   given a [`Source`]: what routes exist (a [`Catalog`], made from a resolved
//!   snapshot with [`Catalog::from_snapshot`]) and the ledger to read.
//! - [`rules`] holds the state rules as pure functions of counts; [`replay`] runs them
//!   minute by minute over the history with the candidates' hysteresis and derives the
//!   incidents; [`page::build`] turns the catalog and the history into a [`Page`], the
//!   one value both [`html::render`] and [`summary::summary`] render.
//! - [`load::Cache`] reads the history from the ledger, incrementally between requests.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sluice_ledger::Ledger;
use tokio::sync::Mutex;

pub mod catalog;
pub mod html;
pub mod load;
pub mod page;
pub mod replay;
pub mod rules;
pub mod summary;
pub mod time;

pub use catalog::{CandidateSpec, Catalog, RouteSpec};
pub use page::Page;
pub use rules::{Indicator, Status};

/// Where the runbooks are when nothing else is configured: docs/operate.md in the
/// repository.
pub const DEFAULT_RUNBOOKS: &str = "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md";

/// What the page shows and where it reads it; both may be missing for a while (no
/// configuration loaded yet, ledger not connected yet).
pub trait Source: Send + Sync + 'static {
    /// The routes that exist now.
    fn catalog(&self) -> Option<Catalog>;
    /// The ledger to read.
    fn ledger(&self) -> Option<Ledger>;
}

/// How the page presents itself.
#[derive(Clone, Debug)]
pub struct Options {
    /// Title, and `page.name` in the JSON.
    pub name: String,
    /// URL of docs/operate.md; runbook links are its anchors.
    pub runbooks: String,
}

impl Default for Options {
    fn default() -> Options {
        Options { name: "sluice status".to_owned(), runbooks: DEFAULT_RUNBOOKS.to_owned() }
    }
}

struct Served {
    source: Arc<dyn Source>,
    options: Options,
    cache: Mutex<load::Cache>,
}

/// `GET /status` and `GET /status/api/v2/summary.json`.
pub fn router(source: Arc<dyn Source>, options: Options) -> Router {
    let served = Arc::new(Served { source, options, cache: Mutex::new(load::Cache::default()) });
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(warm(Arc::downgrade(&served)));
    }
    Router::new()
        .route("/status", get(html_page))
        .route("/status/", get(html_page))
        .route("/status/api/v2/summary.json", get(summary_json))
        .with_state(served)
}

/// Builds the page at `now` from `source`, reading through `cache`.
pub async fn current(source: &dyn Source, cache: &mut load::Cache, now: SystemTime) -> Result<Page, Response> {
    let Some(catalog) = source.catalog() else {
        return Err(unavailable("no configuration is loaded yet"));
    };
    let Some(ledger) = source.ledger() else {
        return Err(unavailable("the ledger is not connected (the status page reads it)"));
    };
    match cache.refresh(&ledger, &catalog, now).await {
        Ok(history) => Ok(page::build(&catalog, history, page::ms_of(now))),
        Err(e) => {
            tracing::warn!(error = %e, "status page: reading the ledger failed");
            Err(unavailable(&format!("reading the ledger failed: {e}")))
        }
    }
}

/// Reads the history once as soon as there is a catalog and a ledger, so that the
/// first visitor does not wait for the lookback to be read (with 30 days of rollups
/// for 50 routes that takes seconds, docs/design.md §10). Ends with the router.
async fn warm(served: std::sync::Weak<Served>) {
    loop {
        let Some(s) = served.upgrade() else { return };
        if s.source.catalog().is_some() && s.source.ledger().is_some() {
            let mut cache = s.cache.lock().await;
            if current(s.source.as_ref(), &mut cache, SystemTime::now()).await.is_ok() {
                return;
            }
        }
        drop(s);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn html_page(State(s): State<Arc<Served>>) -> Response {
    let page = {
        let mut cache = s.cache.lock().await;
        match current(s.source.as_ref(), &mut cache, SystemTime::now()).await {
            Ok(p) => p,
            Err(r) => return r,
        }
    };
    let body = html::render(&page, &s.options.name, &s.options.runbooks);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

async fn summary_json(State(s): State<Arc<Served>>, headers: HeaderMap, uri: Uri) -> Response {
    let page = {
        let mut cache = s.cache.lock().await;
        match current(s.source.as_ref(), &mut cache, SystemTime::now()).await {
            Ok(p) => p,
            Err(r) => return r,
        }
    };
    let url = page_url(&headers, &uri);
    let body = summary::summary(&page, &s.options.name, &url);
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

/// The page's URL as the client asked for it (`Host`, `X-Forwarded-Proto`).
fn page_url(headers: &HeaderMap, uri: &Uri) -> String {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    let scheme = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).unwrap_or("http");
    let path = uri.path().strip_suffix("/api/v2/summary.json").unwrap_or("/status");
    format!("{scheme}://{host}{path}")
}

fn unavailable(why: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("status page unavailable: {why}\n"),
    )
        .into_response()
}
