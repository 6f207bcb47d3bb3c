//! Upstream credentials that need I/O (docs/design.md §9): Google OAuth2 access tokens
//! for the `vertex-*` protocols and AWS credentials that sign Bedrock requests with
//! SigV4. API keys need none of this: they are headers read from the mounted Secret
//! ([`crate::config::source::Secrets`]).
//!
//! The pure parts (JWT assertions, token answers, SigV4, the credential chain's
//! answers) live in `sluice_providers::auth`; this module fetches, caches
//! ([`cache::Cached`]: refreshed five minutes before expiry, one fetch at a time) and
//! signs. A 401 that says the token expired calls [`Credentials::invalidate`] and the
//! attempt retries once on the same candidate.

pub mod aws;
pub mod cache;
pub mod google;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};

use crate::egress::{self, PooledClient};

/// How long one call to a credential service (token endpoint, STS, metadata) may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an upstream call could not be authorised.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A credential source could not be read or parsed.
    #[error("{0}")]
    Source(String),
    /// A credential service could not be reached or refused.
    #[error("{what} at {url}: {detail}")]
    Fetch {
        /// Which service (`token endpoint`, `STS`, `instance metadata`, …).
        what: &'static str,
        /// Where.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The request could not be signed.
    #[error("signing: {0}")]
    Sign(String),
}

/// How the process environment is read (a test gives its own).
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment.
pub fn process_env() -> Env {
    Arc::new(|name| std::env::var(name).ok())
}

/// The credentials of one upstream that are not a plain API key.
pub enum Credentials {
    /// A Google OAuth2 bearer token (`vertex-anthropic`, `vertex-gemini`).
    Google(google::GoogleTokens),
    /// AWS credentials that sign with SigV4 (`bedrock` without an API key).
    Aws(aws::AwsSigner),
}

impl Credentials {
    /// Adds the credentials to a request whose URL, headers and body are final
    /// (SigV4 signs all three).
    pub async fn authorize(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        match self {
            Credentials::Google(g) => {
                let token = g.token(now).await?;
                headers.insert(http::header::AUTHORIZATION, token);
                Ok(())
            }
            Credentials::Aws(a) => a.sign(method, uri, headers, body, now).await,
        }
    }

    /// The upstream said the credential expired: fetch a new one next time.
    pub fn invalidate(&self) {
        match self {
            Credentials::Google(g) => g.invalidate(),
            Credentials::Aws(a) => a.invalidate(),
        }
    }
}

/// A file of a mounted Secret (`--secrets-dir DIR/<secret>/<key>`), read at each fetch
/// so that a rotated key is used without a restart.
#[derive(Clone, Debug)]
pub struct SecretFile {
    /// The Secret's name (for messages).
    pub secret: String,
    /// The file.
    pub path: PathBuf,
}

impl SecretFile {
    async fn read(&self) -> Result<Vec<u8>, AuthError> {
        tokio::fs::read(&self.path)
            .await
            .map_err(|e| AuthError::Source(format!("reading Secret {:?} ({}): {e}", self.secret, self.path.display())))
    }
}

/// One HTTP call to a credential service through the upstreams' egress (proxies and
/// CA bundle included), bounded by [`FETCH_TIMEOUT`]. Returns the body of a 2xx answer.
async fn fetch(
    what: &'static str,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> Result<Bytes, AuthError> {
    let fail = |detail: String| AuthError::Fetch { what, url: url.to_string(), detail };
    let uri: Uri = url.parse().map_err(|e| fail(format!("bad URL: {e}")))?;
    let client = client_for(&uri).map_err(|e| fail(e.to_string()))?;
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    for (name, value) in headers {
        let name = http::HeaderName::try_from(*name).map_err(|e| fail(e.to_string()))?;
        let mut value = http::HeaderValue::try_from(value.as_str()).map_err(|e| fail(e.to_string()))?;
        value.set_sensitive(true);
        request.headers_mut().insert(name, value);
    }
    let exchange = async {
        let response = client.request(request).await.map_err(|e| fail(egress::describe(&e)))?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| fail(egress::describe(&e)))?.to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(fail(format!("{status}: {}", text.chars().take(300).collect::<String>())));
        }
        Ok(body)
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {}s", FETCH_TIMEOUT.as_secs())))?
}

/// A client per egress route, shared by every credential fetch that takes it.
fn client_for(uri: &Uri) -> Result<PooledClient, egress::EgressError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CLIENTS: OnceLock<Mutex<HashMap<egress::Route, PooledClient>>> = OnceLock::new();
    let route = egress::route_for(uri);
    let mut clients = CLIENTS.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = clients.get(&route) {
        return Ok(c.clone());
    }
    let client = egress::client(Duration::from_secs(2), &route)?;
    clients.insert(route, client.clone());
    Ok(client)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
