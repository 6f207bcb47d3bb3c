//! The fake Google token endpoints: `POST /token` (OAuth2 JWT-bearer grant)
//! and the GCE metadata server's token, and the tokens they issued.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::Response;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::json;
use sluice_providers::auth::gcp::{DEFAULT_TOKEN_URI, JWT_BEARER_GRANT, verify_assertion};

use super::super::ChaosState;
use super::super::endpoints::BODY_LIMIT;
use super::super::plan::json_response;
use super::super::protocol::query_param;
use super::DEFAULT_TOKEN_TTL;

const METADATA_FLAVOR: HeaderName = HeaderName::from_static("metadata-flavor");

/// Access tokens issued, with when each expires.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    issued: Mutex<HashMap<String, Instant>>,
}

/// What a bearer token is to this upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenCheck {
    Valid,
    Expired,
    Unknown,
}

impl Tokens {
    fn issue(&self, ttl: std::time::Duration) -> String {
        let token = format!("ya29.chaos-{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        issued.insert(token.clone(), Instant::now() + ttl);
        token
    }

    pub(crate) fn check(&self, token: &str) -> TokenCheck {
        let issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        match issued.get(token) {
            Some(expires) if Instant::now() < *expires => TokenCheck::Valid,
            Some(_) => TokenCheck::Expired,
            None => TokenCheck::Unknown,
        }
    }

    /// Every token issued so far expires now.
    pub(crate) fn expire_all(&self) {
        let now = Instant::now();
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        for expires in issued.values_mut() {
            *expires = now;
        }
    }
}

fn oauth_error(error: &str, description: &str) -> Response {
    let body = json!({"error": error, "error_description": description});
    json_response(StatusCode::BAD_REQUEST, Bytes::from(body.to_string()))
}

/// Issues a token and answers `{access_token, expires_in, token_type}`.
fn grant(state: &ChaosState) -> (String, Response) {
    let ttl = state.auth().google.as_ref().map_or(DEFAULT_TOKEN_TTL, |g| g.token_ttl);
    let token = state.tokens().issue(ttl);
    state.inner.counters.token_issued();
    let body = json!({"access_token": token, "expires_in": ttl.as_secs(), "token_type": "Bearer"});
    (token, json_response(StatusCode::OK, Bytes::from(body.to_string())))
}

/// `POST /token`: the OAuth2 JWT-bearer grant (RFC 7523) as Google's
/// token endpoint answers it, assertion checked against the configured
/// service account.
pub(crate) async fn token(State(state): State<ChaosState>, request: Request) -> Response {
    let host = request.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let path = request.uri().path().to_owned();
    let Ok(body) = axum::body::to_bytes(request.into_body(), BODY_LIMIT).await else {
        return oauth_error("invalid_request", "cannot read the request body");
    };
    let form = String::from_utf8_lossy(&body).replace('+', " ");
    let grant_type = query_param(Some(&form), "grant_type").unwrap_or_default();
    if grant_type != JWT_BEARER_GRANT {
        return oauth_error("unsupported_grant_type", &format!("Invalid grant_type: {grant_type}"));
    }
    let Some(assertion) = query_param(Some(&form), "assertion").filter(|a| !a.is_empty()) else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    if let Some(account) = state.auth().google.as_ref().and_then(|g| g.service_account.clone()) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // The key's token_uri, the URL this request reached, or Google's own
        // endpoint (google-auth always signs for that one).
        let here = format!("http://{host}{path}");
        let audiences = [account.token_uri.as_str(), here.as_str(), DEFAULT_TOKEN_URI];
        let verify = |aud: &str| verify_assertion(&assertion, &account.public_key_der, aud, now);
        let verified =
            audiences.iter().map(|aud| verify(aud)).find(Result::is_ok).unwrap_or_else(|| verify(&account.token_uri));
        match verified {
            Ok(claims) if claims.iss == account.client_email => {}
            Ok(_) => return oauth_error("invalid_grant", "Invalid grant: account not found"),
            Err(description) => return oauth_error("invalid_grant", &description),
        }
    }
    grant(&state).1
}

/// `GET /computeMetadata/v1/instance/service-accounts/default/token`: the
/// metadata server's token, only with `Metadata-Flavor: Google`.
pub(crate) async fn metadata_token(State(state): State<ChaosState>, request: Request) -> Response {
    if !has_flavor(&request) {
        return missing_flavor();
    }
    let (_, mut response) = grant(&state);
    response.headers_mut().insert(METADATA_FLAVOR, HeaderValue::from_static("Google"));
    response
}

/// `GET /computeMetadata/v1/project/project-id`.
pub(crate) async fn metadata_project(request: Request) -> Response {
    if !has_flavor(&request) {
        return missing_flavor();
    }
    let mut response = Response::new(axum::body::Body::from("chaos-project"));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/text"));
    headers.insert(METADATA_FLAVOR, HeaderValue::from_static("Google"));
    response
}

fn has_flavor(request: &Request) -> bool {
    request.headers().get(METADATA_FLAVOR).is_some_and(|v| v.as_bytes() == b"Google")
}

fn missing_flavor() -> Response {
    let mut response = Response::new(axum::body::Body::from("Missing Metadata-Flavor:Google header.\n"));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=UTF-8"));
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::protocol::percent_decode;

    #[test]
    fn tokens_are_valid_until_they_expire() {
        let tokens = Tokens::default();
        let live = tokens.issue(Duration::from_secs(60));
        let dead = tokens.issue(Duration::ZERO);
        assert_eq!(tokens.check(&live), TokenCheck::Valid);
        assert_eq!(tokens.check(&dead), TokenCheck::Expired);
        assert_eq!(tokens.check("ya29.other"), TokenCheck::Unknown);
        tokens.expire_all();
        assert_eq!(tokens.check(&live), TokenCheck::Expired);
        assert_eq!(percent_decode("a%2Bb"), Some("a+b".to_owned()));
    }
}
