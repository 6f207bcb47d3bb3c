//! AWS credentials that sign Bedrock requests with SigV4 (docs/design.md §9).
//!
//! With `aws.credentials.secretRef` the Secret's keys `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN` are used (re-read every
//! few minutes, so a rotated Secret takes effect). Without it, the standard chain, in
//! order: those environment variables; web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` +
//! `AWS_ROLE_ARN`, at STS — `AWS_ENDPOINT_URL_STS` if set); the container endpoint
//! (`AWS_CONTAINER_CREDENTIALS_FULL_URI`/`_RELATIVE_URI`); instance metadata (IMDSv2).
//! Temporary credentials are cached until five minutes before they expire.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use sluice_providers::auth::aws::{self as chain, AwsCredentials, ContainerEndpoint, WebIdentity, imds};
use sluice_providers::auth::sigv4;

use super::cache::{Cached, Expiring};
use super::{AuthError, Env, fetch};

/// How often long-term keys from a Secret or the environment are read again.
const STATIC_REREAD: Duration = Duration::from_secs(600);

/// Where credentials come from.
#[derive(Clone)]
pub enum CredentialSource {
    /// A mounted Secret: the directory holding its key files, and its name.
    Secret {
        /// `--secrets-dir`/`<name>`.
        dir: PathBuf,
        /// The Secret's name (for messages).
        name: String,
    },
    /// The default chain, reading this environment.
    Chain(Env),
}

/// An upstream's signer: region, credentials, cache.
pub struct AwsSigner {
    region: String,
    source: CredentialSource,
    cache: Cached<Arc<AwsCredentials>>,
}

impl AwsSigner {
    /// Signs for `region` with credentials from `source`.
    pub fn new(region: impl Into<String>, source: CredentialSource) -> Self {
        Self { region: region.into(), source, cache: Cached::default() }
    }

    /// Adds `authorization`, `x-amz-date` and (with temporary credentials)
    /// `x-amz-security-token` to a request whose URL, headers and body are final.
    pub async fn sign(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        let creds = self.cache.get(now, || self.fetch(now)).await?;
        let url = uri.to_string();
        let request = sigv4::Request { method: method.as_str(), url: &url, headers, body };
        let added = sigv4::sign(&request, &creds, &self.region, sigv4::BEDROCK, now)
            .map_err(|e| AuthError::Sign(e.to_string()))?;
        for (name, mut value) in added {
            value.set_sensitive(name == http::header::AUTHORIZATION || name.as_str() == "x-amz-security-token");
            headers.insert(name, value);
        }
        Ok(())
    }

    /// Forgets the cached credentials.
    pub fn invalidate(&self) {
        self.cache.invalidate();
    }

    async fn fetch(&self, now: SystemTime) -> Result<Expiring<Arc<AwsCredentials>>, AuthError> {
        let creds = match &self.source {
            CredentialSource::Secret { dir, name } => {
                let mut files = Vec::new();
                for key in [chain::ACCESS_KEY_ID, chain::SECRET_ACCESS_KEY, chain::SESSION_TOKEN] {
                    if let Ok(bytes) = tokio::fs::read(dir.join(key)).await {
                        files.push((key, bytes));
                    }
                }
                let get = |key: &str| files.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_slice());
                let creds = AwsCredentials::from_secret(name, get).map_err(|e| AuthError::Source(e.to_string()))?;
                return Ok(Expiring { value: Arc::new(creds), expires_at: Some(now + STATIC_REREAD) });
            }
            CredentialSource::Chain(env) => from_chain(env).await?,
        };
        // Long-term keys from the environment never expire but are re-read like a Secret's.
        let expires_at = creds.expires_at.or(Some(now + STATIC_REREAD));
        Ok(Expiring { value: Arc::new(creds), expires_at })
    }
}

/// Walks the default chain; the first source that is configured answers.
async fn from_chain(env: &Env) -> Result<AwsCredentials, AuthError> {
    let var = |name: &str| env(name);
    if let Some(creds) = AwsCredentials::from_env(var).map_err(|e| AuthError::Source(e.to_string()))? {
        return Ok(creds);
    }
    if let Some(web) = WebIdentity::from_env(var) {
        let token = tokio::fs::read_to_string(&web.token_file)
            .await
            .map_err(|e| AuthError::Source(format!("reading AWS_WEB_IDENTITY_TOKEN_FILE {}: {e}", web.token_file)))?;
        let url = format!("{}/", web.sts_endpoint);
        let form = ("content-type", "application/x-www-form-urlencoded".to_string());
        let body = fetch("STS", Method::POST, &url, &[form], Bytes::from(web.request_body(&token))).await?;
        return chain::parse_sts_response(&body).map_err(|e| AuthError::Fetch {
            what: "STS",
            url,
            detail: e.to_string(),
        });
    }
    if let Some(container) = ContainerEndpoint::from_env(var) {
        let mut headers = Vec::new();
        if let Some(file) = &container.authorization_file {
            let token = tokio::fs::read_to_string(file).await.map_err(|e| {
                AuthError::Source(format!("reading AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {file}: {e}"))
            })?;
            headers.push(("authorization", token.trim().to_string()));
        } else if let Some(token) = &container.authorization {
            headers.push(("authorization", token.clone()));
        }
        let body = fetch("container credentials", Method::GET, &container.url, &headers, Bytes::new()).await?;
        return chain::parse_credentials_json(&body).map_err(|e| AuthError::Fetch {
            what: "container credentials",
            url: container.url.clone(),
            detail: e.to_string(),
        });
    }
    from_imds(&imds::endpoint(var)).await
}

/// IMDSv2: a session token, the instance role's name, then its credentials.
async fn from_imds(endpoint: &str) -> Result<AwsCredentials, AuthError> {
    const WHAT: &str = "instance metadata";
    let token_url = format!("{endpoint}{}", imds::TOKEN_PATH);
    let session =
        fetch(WHAT, Method::PUT, &token_url, &[(imds::TOKEN_TTL_HEADER, "21600".into())], Bytes::new()).await?;
    let session = String::from_utf8_lossy(&session).trim().to_string();
    let listing_url = format!("{endpoint}{}", imds::ROLE_PATH);
    let listing =
        fetch(WHAT, Method::GET, &listing_url, &[(imds::TOKEN_HEADER, session.clone())], Bytes::new()).await?;
    let listing = String::from_utf8_lossy(&listing).into_owned();
    let role = imds::role_name(&listing).ok_or_else(|| AuthError::Fetch {
        what: WHAT,
        url: listing_url.clone(),
        detail: "no instance role is attached".into(),
    })?;
    let url = format!("{listing_url}{role}");
    let body = fetch(WHAT, Method::GET, &url, &[(imds::TOKEN_HEADER, session)], Bytes::new()).await?;
    chain::parse_credentials_json(&body).map_err(|e| AuthError::Fetch { what: WHAT, url, detail: e.to_string() })
}
