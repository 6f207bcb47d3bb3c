//! Google OAuth2 access tokens for Vertex AI (docs/design.md §9).
//!
//! With `gcp.credentials.secretRef` the Secret holds a service-account JSON key: the
//! gateway signs a JWT assertion (RS256, `aud` = the key's `token_uri`, scope
//! `cloud-platform`, one hour at most) and exchanges it at that `token_uri`. Without
//! it, the metadata server of the node (GKE workload identity) hands out the token, at
//! `GCE_METADATA_HOST` if set. Either way the token is cached until five minutes
//! before it expires.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Method};
use sluice_providers::auth::gcp::{self, ServiceAccountKey};

use super::cache::{Cached, Expiring};
use super::{AuthError, Env, SecretFile, fetch, unix_secs};

/// Where tokens come from.
#[derive(Clone, Debug)]
pub enum TokenSource {
    /// A service-account key, exchanged at its `token_uri`.
    ServiceAccount(SecretFile),
    /// The metadata server at this base URL (`http://metadata.google.internal`).
    Metadata(String),
}

impl TokenSource {
    /// The key file if one is configured, else the metadata server named by `env`.
    pub fn new(key: Option<SecretFile>, env: &Env) -> Self {
        match key {
            Some(file) => TokenSource::ServiceAccount(file),
            None => TokenSource::Metadata(gcp::metadata::base_url(|name| env(name))),
        }
    }
}

/// An upstream's cached Google token.
pub struct GoogleTokens {
    source: TokenSource,
    cache: Cached<HeaderValue>,
}

impl GoogleTokens {
    /// Tokens from `source`, none fetched yet.
    pub fn new(source: TokenSource) -> Self {
        Self { source, cache: Cached::default() }
    }

    /// `Bearer <token>`, fetched if the cached one is missing or expires within five minutes.
    pub async fn token(&self, now: SystemTime) -> Result<HeaderValue, AuthError> {
        self.cache.get(now, || self.fetch(now)).await
    }

    /// Forgets the cached token.
    pub fn invalidate(&self) {
        self.cache.invalidate();
    }

    async fn fetch(&self, now: SystemTime) -> Result<Expiring<HeaderValue>, AuthError> {
        let token = match &self.source {
            TokenSource::ServiceAccount(file) => {
                let json = file.read().await?;
                let key = ServiceAccountKey::from_json(&json)
                    .map_err(|e| AuthError::Source(format!("Secret {:?}: {e}", file.secret)))?;
                let form = key.exchange_body(unix_secs(now)).map_err(|e| AuthError::Sign(e.to_string()))?;
                let content_type = ("content-type", "application/x-www-form-urlencoded".to_string());
                let body =
                    fetch("token endpoint", Method::POST, &key.token_uri, &[content_type], Bytes::from(form)).await?;
                gcp::parse_token_response(&body, unix_secs(now)).map_err(|e| AuthError::Fetch {
                    what: "token endpoint",
                    url: key.token_uri.clone(),
                    detail: e.to_string(),
                })?
            }
            TokenSource::Metadata(base) => {
                let url = format!("{base}{}", gcp::metadata::TOKEN_PATH);
                let (name, value) = gcp::metadata::FLAVOR_HEADER;
                let body =
                    fetch("metadata server", Method::GET, &url, &[(name, value.to_string())], Bytes::new()).await?;
                gcp::metadata::parse_token(&body, unix_secs(now)).map_err(|e| AuthError::Fetch {
                    what: "metadata server",
                    url,
                    detail: e.to_string(),
                })?
            }
        };
        let mut value = HeaderValue::try_from(format!("Bearer {}", token.token))
            .map_err(|_| AuthError::Source("the access token is not a valid header value".into()))?;
        value.set_sensitive(true);
        let expires_at = SystemTime::UNIX_EPOCH + Duration::from_secs(token.expires_at_unix);
        Ok(Expiring { value, expires_at: Some(expires_at) })
    }
}
