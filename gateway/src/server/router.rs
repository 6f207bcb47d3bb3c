//! The HTTP surface (docs/design.md §3, §12): the OpenAI and Anthropic Messages
//! endpoints, models, health, readiness,
//! metrics, and the status page (§10) when there is a ledger to read.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use tower::ServiceExt;

use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::headers::X_REQUEST_ID;
use crate::server::handle;
use crate::server::state::Gateway;

/// The gateway's HTTP surface: a request to an inference endpoint goes straight to its
/// handler; everything else (and a wrong method on those paths) through the router.
/// Routing the inference requests through axum cost about 5,300 instructions each
/// (a router clone, the path match, two boxed futures, the body-limit layer), a
/// sixteenth of the whole request (bench/PROFILE.md).
#[derive(Clone)]
pub struct App {
    gw: Arc<Gateway>,
    router: Router,
}

/// The inference endpoint at `path`, if it is one.
fn inference(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/chat/completions" => Some(Endpoint::Chat),
        "/v1/completions" => Some(Endpoint::Completions),
        "/v1/embeddings" => Some(Endpoint::Embeddings),
        "/v1/messages" => Some(Endpoint::Messages),
        "/v1/responses" => Some(Endpoint::Responses),
        _ => None,
    }
}

/// Served by hyper on a connection's requests ([`hyper::body::Incoming`]), or called
/// in process with any body.
impl<B> hyper::service::Service<http::Request<B>> for App
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, req: http::Request<B>) -> Self::Future {
        let req = req.map(axum::body::Body::new);
        match inference(req.uri().path()).filter(|_| req.method() == Method::POST) {
            Some(endpoint) => {
                let gw = self.gw.clone();
                Box::pin(async move { Ok(openai(gw, endpoint, req).await) })
            }
            None => Box::pin(self.router.clone().oneshot(req)),
        }
    }
}

/// The gateway's HTTP surface.
pub fn router(gw: Arc<Gateway>) -> App {
    App { router: routes(gw.clone()), gw }
}

/// Every route, the inference endpoints' included (a request [`App`] sends straight
/// to its handler is routed here to the same one).
fn routes(gw: Arc<Gateway>) -> Router {
    let limit = gw.max_body;
    let status = gw.billing.ledger.is_some().then(|| crate::server::status::router(gw.clone()));
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        // Without it a wrong method gets an empty 405 body, not the OpenAI shape.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        // The body is read whole (it is re-sent per candidate); the limit refuses a
        // larger one with the documented 413 instead of buffering it.
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gw);
    match status {
        Some(status) => api.merge(status),
        None => api,
    }
}

async fn read_body(gw: &Gateway, req: Request) -> Result<(HeaderMap, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    // A declared length over the limit is refused before anything is read.
    if !usize::try_from(axum::body::HttpBody::size_hint(&body).lower()).is_ok_and(|n| n <= gw.max_body) {
        return Err(ApiError::RequestTooLarge(gw.max_body));
    }
    let Ok(read) = tokio::time::timeout(gw.body_timeout, axum::body::to_bytes(body, gw.max_body)).await else {
        return Err(ApiError::RequestTimeout(gw.body_timeout));
    };
    match read {
        Ok(b) => Ok((parts.headers, b)),
        Err(e) => {
            let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            if too_large {
                Err(ApiError::RequestTooLarge(gw.max_body))
            } else {
                Err(ApiError::InvalidRequest(format!("could not read the request body: {e}")))
            }
        }
    }
}

/// An inference endpoint: the body read whole, then [`handle::handle`].
async fn openai(gw: Arc<Gateway>, endpoint: Endpoint, req: Request) -> Response {
    // Kept for the answer when the body cannot be read (x-request-id is echoed on every answer).
    let mut ids = HeaderMap::new();
    if let Some(id) = req.headers().get(X_REQUEST_ID) {
        ids.insert(X_REQUEST_ID, id.clone());
    }
    match read_body(&gw, req).await {
        Ok((headers, body)) => handle::handle(gw, endpoint, headers, body).await,
        Err(e) => handle::refuse(&ids, endpoint, e),
    }
}

async fn chat(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    openai(gw, Endpoint::Chat, req).await
}

async fn completions(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    openai(gw, Endpoint::Completions, req).await
}

async fn embeddings(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    openai(gw, Endpoint::Embeddings, req).await
}

async fn messages(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    openai(gw, Endpoint::Messages, req).await
}

async fn responses(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    openai(gw, Endpoint::Responses, req).await
}

async fn count_tokens(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    let mut ids = HeaderMap::new();
    if let Some(id) = req.headers().get(X_REQUEST_ID) {
        ids.insert(X_REQUEST_ID, id.clone());
    }
    match read_body(&gw, req).await {
        Ok((headers, body)) => crate::server::count_tokens::count_tokens(gw, headers, body).await,
        Err(e) => handle::refuse(&ids, Endpoint::Messages, e),
    }
}

async fn models(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    // Like the OpenAI API, the model list needs a key when keys are in use.
    if let Err(e) = crate::billing::authenticate(&gw.billing, &headers).await {
        return handle::refuse(&headers, Endpoint::Chat, e);
    }
    let Some(runtime) = gw.current.get() else {
        return ApiError::NotReady("no configuration is loaded yet".into()).into_response();
    };
    let mut data: Vec<serde_json::Value> = runtime
        .snapshot
        .routes
        .iter()
        .map(|r| serde_json::json!({"id": r.model, "object": "model", "created": 0, "owned_by": "sluice"}))
        .collect();
    data.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    if gw.draining.load(std::sync::atomic::Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    if gw.current.get().is_none() {
        return (StatusCode::SERVICE_UNAVAILABLE, "no configuration loaded\n").into_response();
    }
    if let Some(ledger) = &gw.billing.ledger
        && let Err(e) = ledger.ping().await
    {
        // A process that still holds a balance grant bills from it without the database
        // (docs/design.md §5a): taking every such pod out of its Service at once would
        // turn a database blip into an outage that the grants exist to prevent.
        if gw.billing.biller.as_ref().is_some_and(|b| b.serving(std::time::SystemTime::now())) {
            return (
                StatusCode::OK,
                format!("ready (ledger unreachable, billing from the balance grants held: {e})\n"),
            )
                .into_response();
        }
        return (StatusCode::SERVICE_UNAVAILABLE, format!("ledger unreachable: {e}\n")).into_response();
    }
    (StatusCode::OK, "ready\n").into_response()
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    let mut response = gw.books.metrics.encode().into_response();
    if let Ok(v) = "application/openmetrics-text; version=1.0.0; charset=utf-8".parse() {
        response.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    response
}

async fn method_not_allowed(req: Request) -> Response {
    let message = format!("{} is not allowed on {}", req.method(), req.uri().path());
    let endpoint = if req.uri().path().starts_with("/v1/messages") { Endpoint::Messages } else { Endpoint::Chat };
    handle::refuse(req.headers(), endpoint, ApiError::MethodNotAllowed(message))
}

async fn not_found(req: Request) -> Response {
    let message = format!("unknown endpoint {} {}", req.method(), req.uri().path());
    let body =
        serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "code": "unknown_url"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt;
    use sluice_ledger::{Biller, BillerConfig, Ledger, NANOS_PER_USD};
    use tower::ServiceExt;

    use super::*;
    use crate::attempt::Books;
    use crate::billing::{AuthMode, Billing};
    use crate::config::source::Secrets;
    use crate::health::HealthSettings;

    async fn ready(gw: &Arc<Gateway>) -> (StatusCode, String) {
        let req = Request::get("/readyz").body(axum::body::Body::empty()).unwrap_or_default();
        let resp = routes(gw.clone()).oneshot(req).await.unwrap_or_else(|e| match e {});
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn gateway(ledger: &Ledger, biller: Biller) -> Arc<Gateway> {
        let books = Books::new(HealthSettings::default(), Secrets::new(None));
        let mut billing = Billing::new(AuthMode::Keys, Some(ledger.clone()), &books.metrics);
        billing.biller = Some(biller);
        let gw = Gateway::new(books, billing);
        assert!(gw.install(sluice_crds::Snapshot::default()).is_ok());
        Arc::new(gw)
    }

    /// A database blip must not take a gateway that can still bill out of its Service;
    /// one that cannot bill any more is not ready.
    #[tokio::test]
    async fn readiness_holds_through_a_ledger_outage_while_a_grant_can_bill() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ledger = Ledger::connect(&format!("sqlite://{}", dir.path().join("l.db").display()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let account = ledger.create_account("acme", 10 * NANOS_PER_USD).await.unwrap_or_else(|e| panic!("{e}"));
        let (holding, empty) = (
            Biller::start(ledger.clone(), BillerConfig::new("a"), None),
            Biller::start(ledger.clone(), BillerConfig::new("b"), None),
        );
        let hold = holding.reserve(account.id, NANOS_PER_USD / 100, "r1").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(hold.release().await.is_ok());
        let (a, b) = (gateway(&ledger, holding.clone()), gateway(&ledger, empty.clone()));
        assert_eq!(ready(&a).await, (StatusCode::OK, "ready\n".to_owned()));

        ledger.close().await;
        let (status, body) = ready(&a).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.starts_with("ready (ledger unreachable, billing from the balance grants held"), "{body}");
        let (status, body) = ready(&b).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.starts_with("ledger unreachable: "), "{body}");
        holding.shutdown(Duration::from_millis(10)).await;
        assert_eq!(ready(&a).await.0, StatusCode::SERVICE_UNAVAILABLE, "a returned grant bills nothing");
    }
}
