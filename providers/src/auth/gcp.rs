//! Google access tokens for Vertex AI (docs/design.md §9), without I/O.
//!
//! With a service-account key (`gcp.credentials.secretRef`): [`ServiceAccountKey`]
//! signs a JWT assertion (RS256 with `ring`; `iss` = `client_email`, `aud` = the key's
//! `token_uri`, scope `cloud-platform`, at most one hour) and [`exchange_body`] is the
//! form posted to `token_uri`; [`parse_token_response`] reads the answer. Without a key,
//! the metadata server ([`metadata`]) answers the same token shape.
//! [`verify_assertion`] checks an assertion as Google's token endpoint does, for the
//! fake token endpoint.

use std::fmt;

use ring::signature::RsaKeyPair;
use serde::Deserialize;

mod jwt;

pub use jwt::{Claims, verify_assertion};

/// The scope every Vertex AI call needs.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The OAuth2 grant type of a JWT assertion exchange (RFC 7523).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Google's token endpoint, used when a key names none.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The longest lifetime Google accepts for an assertion (`exp - iat`), in seconds.
pub const MAX_ASSERTION_LIFETIME: u64 = 3600;

/// A parsed service-account JSON key. `Debug` never shows the private key.
pub struct ServiceAccountKey {
    /// The account, the assertion's `iss`.
    pub client_email: String,
    /// The key's id, the assertion's `kid` header.
    pub private_key_id: String,
    /// Where the assertion is exchanged, and its `aud`.
    pub token_uri: String,
    /// The project the key belongs to, if the JSON says.
    pub project_id: Option<String>,
    key_pair: RsaKeyPair,
}

/// Why a key, an assertion or a token answer was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GcpAuthError {
    /// The key JSON is not a usable service-account key.
    #[error("service-account key: {0}")]
    Key(String),
    /// Signing failed.
    #[error("signing the JWT assertion failed")]
    Sign,
    /// A token answer did not parse.
    #[error("malformed token answer: {0}")]
    Malformed(String),
    /// The token endpoint answered with an OAuth2 error.
    #[error("token endpoint refused: {error}: {description}")]
    Refused {
        /// OAuth2 `error`, e.g. `invalid_grant`.
        error: String,
        /// OAuth2 `error_description`.
        description: String,
    },
}

/// An access token and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// Sent as `Authorization: Bearer {token}`.
    pub token: String,
    /// Unix seconds at which it stops working (`now + expires_in`).
    pub expires_at_unix: u64,
}

#[derive(Deserialize)]
struct KeyJson {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
    project_id: Option<String>,
}

#[derive(Deserialize)]
struct TokenJson {
    access_token: Option<String>,
    expires_in: Option<u64>,
    token_type: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("project_id", &self.project_id)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"<redacted>")
            .field("expires_at_unix", &self.expires_at_unix)
            .finish()
    }
}

impl ServiceAccountKey {
    /// Parses a service-account JSON key (`type: service_account`, `client_email`,
    /// `private_key` as a PKCS#8 PEM, `private_key_id`, `token_uri`).
    pub fn from_json(json: &[u8]) -> Result<Self, GcpAuthError> {
        let key: KeyJson = serde_json::from_slice(json).map_err(|e| GcpAuthError::Key(format!("not JSON: {e}")))?;
        if let Some(kind) = key.kind.as_deref().filter(|k| *k != "service_account") {
            return Err(GcpAuthError::Key(format!("type {kind:?} is not supported, only \"service_account\"")));
        }
        let required = |v: Option<String>, name: &str| {
            v.filter(|s| !s.trim().is_empty()).ok_or_else(|| GcpAuthError::Key(format!("no {name}")))
        };
        let pem = required(key.private_key, "private_key")?;
        let der = pem_to_der(&pem, "PRIVATE KEY")
            .ok_or_else(|| GcpAuthError::Key("private_key is not a PKCS#8 PEM".to_owned()))?;
        let key_pair =
            RsaKeyPair::from_pkcs8(&der).map_err(|e| GcpAuthError::Key(format!("private_key rejected: {e}")))?;
        Ok(ServiceAccountKey {
            client_email: required(key.client_email, "client_email")?,
            private_key_id: key.private_key_id.unwrap_or_default(),
            token_uri: key.token_uri.filter(|u| !u.trim().is_empty()).unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned()),
            project_id: key.project_id,
            key_pair,
        })
    }

    /// The signed assertion for `now_unix` (valid for [`MAX_ASSERTION_LIFETIME`]).
    pub fn assertion(&self, now_unix: u64) -> Result<String, GcpAuthError> {
        let claims = Claims {
            iss: self.client_email.clone(),
            scope: CLOUD_PLATFORM_SCOPE.to_owned(),
            aud: self.token_uri.clone(),
            iat: now_unix,
            exp: now_unix + MAX_ASSERTION_LIFETIME,
        };
        jwt::sign(&self.key_pair, &self.private_key_id, &claims)
    }

    /// The form body to `POST` to [`token_uri`](Self::token_uri)
    /// (`content-type: application/x-www-form-urlencoded`).
    pub fn exchange_body(&self, now_unix: u64) -> Result<String, GcpAuthError> {
        Ok(exchange_body(&self.assertion(now_unix)?))
    }

    /// The public key (PKCS#1 `RSAPublicKey` DER) that [`verify_assertion`] checks with.
    pub fn public_key_der(&self) -> &[u8] {
        self.key_pair.public().as_ref()
    }
}

impl AccessToken {
    /// Whether to fetch a new token at `now_unix`: it expires within `margin_secs`.
    pub fn needs_refresh(&self, now_unix: u64, margin_secs: u64) -> bool {
        now_unix + margin_secs >= self.expires_at_unix
    }
}

/// The token-exchange form body for `assertion`. (A JWT is base64url and dots only, so
/// it needs no form encoding.)
pub fn exchange_body(assertion: &str) -> String {
    format!("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}")
}

/// Parses the token endpoint's answer (`{access_token, expires_in, token_type}`, or an
/// OAuth2 error `{error, error_description}`) received at `now_unix`.
pub fn parse_token_response(body: &[u8], now_unix: u64) -> Result<AccessToken, GcpAuthError> {
    let json: TokenJson = serde_json::from_slice(body).map_err(|e| GcpAuthError::Malformed(e.to_string()))?;
    if let Some(error) = json.error {
        return Err(GcpAuthError::Refused { error, description: json.error_description.unwrap_or_default() });
    }
    let token = json
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| GcpAuthError::Malformed("no access_token".to_owned()))?;
    if let Some(kind) = json.token_type.filter(|t| !t.eq_ignore_ascii_case("bearer")) {
        return Err(GcpAuthError::Malformed(format!("token_type {kind:?} is not Bearer")));
    }
    let expires_in = json.expires_in.ok_or_else(|| GcpAuthError::Malformed("no expires_in".to_owned()))?;
    Ok(AccessToken { token, expires_at_unix: now_unix + expires_in })
}

/// The GCE / GKE metadata server, which hands out the workload's token.
pub mod metadata {
    use super::{AccessToken, GcpAuthError};

    /// The host, overridden by `GCE_METADATA_HOST`.
    pub const DEFAULT_HOST: &str = "metadata.google.internal";
    /// The token path (GET).
    pub const TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
    /// The project id path (GET, plain text).
    pub const PROJECT_ID_PATH: &str = "/computeMetadata/v1/project/project-id";
    /// Every request carries this header (and the server refuses requests without it).
    pub const FLAVOR_HEADER: (&str, &str) = ("metadata-flavor", "Google");

    /// `http://{host}` with the host from `GCE_METADATA_HOST` if set.
    pub fn base_url(var: impl Fn(&str) -> Option<String>) -> String {
        let host = var("GCE_METADATA_HOST")
            .map(|h| h.trim().trim_end_matches('/').to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| DEFAULT_HOST.to_owned());
        if host.starts_with("http://") || host.starts_with("https://") { host } else { format!("http://{host}") }
    }

    /// Parses the token answer; the same shape as the token endpoint's.
    pub fn parse_token(body: &[u8], now_unix: u64) -> Result<AccessToken, GcpAuthError> {
        super::parse_token_response(body, now_unix)
    }
}

/// The DER inside a PEM block labelled `label`.
fn pem_to_der(pem: &str, label: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let body: String = pem[start..stop].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}
