//! Credentials the chaos upstream checks, the way each real provider does
//! (docs/design.md §6, §9).
//!
//! [`ChaosAuth::default`] checks nothing, as the OpenAI-only upstream never
//! did. Each part that is set turns one check on:
//! - `api_key`: every API-key protocol wants this key in its own header —
//!   OpenAI and Bedrock API keys `Authorization: Bearer`, Azure `api-key`,
//!   Anthropic `x-api-key` (or Bearer), Gemini `x-goog-api-key` (or `?key=`).
//! - `aws`: Bedrock wants a SigV4 signature (service `bedrock`) by these
//!   keys, within five minutes of the upstream's clock; a Bearer API key is
//!   still accepted when `api_key` is set.
//! - `google`: Vertex AI wants `Authorization: Bearer` with an access token
//!   this upstream issued, from `POST /token` (JWT-bearer grant, assertion
//!   signed by the configured service account) or from the metadata server
//!   (`GET /computeMetadata/v1/instance/service-accounts/default/token`),
//!   until it expires.
//!
//! A refused request gets the provider's own 401/403 body.

mod tokens;

use std::time::{Duration, SystemTime};

use axum::response::Response;
use http::request::Parts;
use serde_json::json;
use sluice_providers::auth::aws::AwsCredentials;
use sluice_providers::auth::gcp::ServiceAccountKey;
use sluice_providers::auth::sigv4;

use super::ChaosState;
use super::native::errors;
use super::protocol::{Protocol, query_param};

pub(crate) use tokens::{TokenCheck, Tokens, metadata_project, metadata_token, token};

/// Lifetime of issued access tokens unless configured: Google's hour.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// What the chaos upstream accepts as credentials; see the module doc.
#[derive(Clone, Debug, Default)]
pub struct ChaosAuth {
    /// The key of every API-key protocol.
    pub api_key: Option<String>,
    /// Bedrock's SigV4 keys.
    pub aws: Option<AwsKeys>,
    /// Vertex AI's OAuth tokens.
    pub google: Option<GoogleAuth>,
}

/// An AWS access key pair that Bedrock signatures are checked against.
#[derive(Clone, Debug)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// Vertex AI requires bearer tokens issued by this upstream.
#[derive(Clone, Debug)]
pub struct GoogleAuth {
    /// The service account whose assertions `POST /token` accepts; without
    /// one, it accepts any assertion (only the metadata server is real then).
    pub service_account: Option<ServiceAccount>,
    /// `expires_in` of issued tokens; 0 issues tokens already expired.
    pub token_ttl: Duration,
}

/// The public half of a service-account key.
#[derive(Clone, Debug)]
pub struct ServiceAccount {
    /// The assertion's `iss`.
    pub client_email: String,
    /// PKCS#1 `RSAPublicKey` DER the assertion's RS256 signature is checked with.
    pub public_key_der: Vec<u8>,
    /// The assertion's expected `aud` (besides this upstream's own `/token` URL).
    pub token_uri: String,
}

impl ServiceAccount {
    /// The public half of a service-account JSON key (the one the gateway
    /// signs with).
    pub fn from_key_json(json: &[u8]) -> Result<Self, String> {
        let key = ServiceAccountKey::from_json(json).map_err(|e| e.to_string())?;
        Ok(Self {
            client_email: key.client_email.clone(),
            public_key_der: key.public_key_der().to_vec(),
            token_uri: key.token_uri.clone(),
        })
    }
}

impl Default for GoogleAuth {
    fn default() -> Self {
        Self { service_account: None, token_ttl: DEFAULT_TOKEN_TTL }
    }
}

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

fn bearer(parts: &Parts) -> Option<&str> {
    header(parts, "authorization").and_then(|v| v.strip_prefix("Bearer "))
}

impl ChaosState {
    /// Checks a request's credentials for `protocol`: `Some` is the
    /// provider's refusal.
    pub(crate) fn refuse_auth(&self, protocol: Protocol, parts: &Parts, body: &[u8]) -> Option<Response> {
        if !self.auth_on() {
            return None;
        }
        let auth = self.auth();
        let key = auth.api_key.as_deref();
        match protocol {
            Protocol::OpenAi => match (key, bearer(parts)) {
                (None, _) => None,
                (Some(k), Some(sent)) if k == sent => None,
                (Some(_), None) => Some(errors::openai(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    "invalid_request_error",
                    "missing_api_key",
                )),
                (Some(_), Some(_)) => Some(errors::openai(
                    401,
                    "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                    "invalid_request_error",
                    "invalid_api_key",
                )),
            },
            Protocol::AzureOpenAi => match key {
                Some(k) if header(parts, "api-key") != Some(k) => {
                    let body = json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}});
                    Some(super::plan::json_response(
                        http::StatusCode::UNAUTHORIZED,
                        bytes::Bytes::from(body.to_string()),
                    ))
                }
                _ => None,
            },
            // Anthropic takes the key as `x-api-key` or as a Bearer token
            // (what its current SDKs send).
            Protocol::Anthropic => match (key, header(parts, "x-api-key").or_else(|| bearer(parts))) {
                (None, _) => None,
                (Some(k), Some(sent)) if k == sent => None,
                (Some(_), None) => Some(errors::anthropic(401, "authentication_error", "x-api-key header is required")),
                (Some(_), Some(_)) => Some(errors::anthropic(401, "authentication_error", "invalid x-api-key")),
            },
            Protocol::Gemini => {
                let sent = header(parts, "x-goog-api-key")
                    .map(str::to_owned)
                    .or_else(|| query_param(parts.uri.query(), "key"));
                match (key, sent) {
                    (None, _) => None,
                    (Some(k), Some(sent)) if k == sent => None,
                    (Some(_), None) => Some(errors::google(
                        403,
                        "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
                        Vec::new(),
                        None,
                    )),
                    (Some(_), Some(_)) => Some(errors::google(
                        400,
                        "API key not valid. Please pass a valid API key.",
                        vec![super::native::google_error_info("API_KEY_INVALID", "generativelanguage.googleapis.com")],
                        None,
                    )),
                }
            }
            Protocol::VertexAnthropic | Protocol::VertexGemini => {
                // Without Google auth configured, any token (or none) passes.
                auth.google.as_ref()?;
                let (reason, message) = match bearer(parts).map(|t| self.tokens().check(t)) {
                    Some(TokenCheck::Valid) => return None,
                    None => (
                        "CREDENTIALS_MISSING",
                        "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                    ),
                    Some(TokenCheck::Expired) => ("ACCESS_TOKEN_EXPIRED", INVALID_CREDENTIALS),
                    Some(TokenCheck::Unknown) => ("ACCESS_TOKEN_TYPE_UNSUPPORTED", INVALID_CREDENTIALS),
                };
                Some(errors::google(
                    401,
                    message,
                    vec![super::native::google_error_info(reason, "aiplatform.googleapis.com")],
                    None,
                ))
            }
            Protocol::Bedrock => check_bedrock(&auth, parts, body),
        }
    }
}

/// Google's 401 text for a token it does not accept.
const INVALID_CREDENTIALS: &str = "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";

fn check_bedrock(auth: &ChaosAuth, parts: &Parts, body: &[u8]) -> Option<Response> {
    let unrecognized = || {
        errors::bedrock(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    };
    if let Some(sent) = bearer(parts) {
        return match auth.api_key.as_deref() {
            Some(k) if k == sent => None,
            Some(_) => Some(unrecognized()),
            None if auth.aws.is_none() => None,
            None => Some(unrecognized()),
        };
    }
    let Some(keys) = &auth.aws else {
        // Only an API key is expected, and none was sent.
        return auth
            .api_key
            .as_ref()
            .map(|_| errors::bedrock(403, "MissingAuthenticationTokenException", "Missing Authentication Token"));
    };
    let host = header(parts, "host")
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{host}{path}");
    let request = sigv4::Request { method: parts.method.as_str(), url: &url, headers: &parts.headers, body };
    let secret_for = |id: &str| (id == keys.access_key_id).then(|| keys.secret_access_key.clone());
    match sigv4::verify(&request, secret_for, SystemTime::now()) {
        Ok(v) if v.service == sigv4::BEDROCK => None,
        Ok(v) => Some(errors::bedrock(
            403,
            "InvalidSignatureException",
            &format!("Credential should be scoped to correct service: '{}'. (got '{}')", sigv4::BEDROCK, v.service),
        )),
        Err(e) => Some(errors::bedrock(e.status(), e.aws_error_type(), &e.to_string())),
    }
}

/// Keeps [`AwsCredentials`] reachable for callers that sign test requests
/// with the same keys the upstream checks.
impl AwsKeys {
    /// These keys as credentials to sign with.
    pub fn credentials(&self) -> AwsCredentials {
        AwsCredentials::new(self.access_key_id.clone(), self.secret_access_key.clone())
    }
}
