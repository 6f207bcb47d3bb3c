//! The operator's HTTP endpoints: `GET /metrics` (OpenMetrics), `GET /healthz` and, when
//! enabled, the status page (docs/design.md §10, [`crate::status_page`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The router (no listener; tests call it with `oneshot`).
pub fn app(metrics: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", get(metrics_text)).route("/healthz", get(healthz)).with_state(metrics)
}

/// [`app`] with the status page of `source`, its runbook links into `runbooks`.
pub fn app_with_status(metrics: Arc<Metrics>, source: Arc<dyn sluice_status::Source>, runbooks: &str) -> Router {
    let options = sluice_status::Options { runbooks: runbooks.to_owned(), ..sluice_status::Options::default() };
    app(metrics).merge(sluice_status::router(source, options))
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.encode())
}

/// The process is alive (the controllers run as long as it does).
async fn healthz() -> &'static str {
    "ok\n"
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::metrics::Kind;

    async fn get(app: Router, path: &str) -> (StatusCode, String, String) {
        let resp = app.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let ct = resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, ct, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_with_the_operator_prefix() {
        let metrics = Arc::new(Metrics::new());
        drop(metrics.reconcile(Kind::ModelRoute));
        metrics.failure(Kind::Upstream, crate::metrics::ErrorKind::Kube);
        metrics.status_write(Kind::ErrorBudget);
        let (status, ct, body) = get(app(metrics), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ct, OPENMETRICS);
        assert!(body.contains("sluice_operator_reconciles_total{controller=\"ModelRoute\"} 1"), "{body}");
        assert!(
            body.contains("sluice_operator_reconcile_failures_total{controller=\"Upstream\",error=\"kube\"} 1"),
            "{body}"
        );
        assert!(body.contains("sluice_operator_status_writes_total{kind=\"ErrorBudget\"} 1"), "{body}");
        assert!(body.contains("sluice_operator_reconcile_duration_seconds_bucket"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    struct Nothing;

    impl sluice_status::Source for Nothing {
        fn catalog(&self) -> Option<sluice_status::Catalog> {
            None
        }
        fn ledger(&self) -> Option<sluice_ledger::Ledger> {
            None
        }
    }

    #[tokio::test]
    async fn the_status_page_is_served_beside_the_metrics_and_says_why_it_is_not_ready() {
        let app = app_with_status(Arc::new(Metrics::new()), Arc::new(Nothing), sluice_status::DEFAULT_RUNBOOKS);
        let (status, _, body) = get(app.clone(), "/status").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "status page unavailable: no configuration is loaded yet\n");
        let (status, _, _) = get(app.clone(), "/status/api/v2/summary.json").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(get(app, "/metrics").await.0, StatusCode::OK);
        assert_eq!(get(self::app(Arc::new(Metrics::new())), "/status").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn healthz_answers_ok() {
        let (status, _, body) = get(app(Arc::new(Metrics::new())), "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    }
}
