//! The pure parts of the AWS credential chain of docs/design.md §9.
//!
//! Order (the gateway walks it and does the I/O): an Upstream's Secret
//! ([`AwsCredentials::from_secret`]); else the environment ([`AwsCredentials::from_env`]);
//! else web identity ([`WebIdentity`], STS `AssumeRoleWithWebIdentity`, answer parsed by
//! [`parse_sts_response`]); else container credentials ([`ContainerEndpoint`],
//! [`parse_credentials_json`]); else instance metadata (IMDSv2, [`imds`]).
//! Every function takes the values it reads (a lookup for variables or Secret keys)
//! so that tests never touch the process environment.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

mod xml;

pub use xml::parse_sts_response;

/// Secret / environment key of the access key id.
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// Secret / environment key of the secret access key.
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// Secret / environment key of the (optional) session token.
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// A set of AWS credentials. `Debug` never shows the secret or the token.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// `AKIA…` (long-term) or `ASIA…` (temporary).
    pub access_key_id: String,
    /// The secret half of the key.
    pub secret_access_key: String,
    /// Set for temporary credentials; signed as `x-amz-security-token`.
    pub session_token: Option<String>,
    /// When temporary credentials stop working; `None` for long-term keys.
    pub expires_at: Option<SystemTime>,
}

/// Why credentials could not be read or parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialsError {
    /// A required key is absent or empty in the named source.
    #[error("{source_name} has no {key}")]
    Missing {
        /// Where it was looked up, e.g. `Secret bedrock-keys`, `the environment`.
        source_name: String,
        /// The missing key.
        key: &'static str,
    },
    /// An answer (STS, container endpoint, instance metadata) did not parse.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which answer.
        what: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The credential service answered with an error.
    #[error("{what} refused: {code}: {message}")]
    Refused {
        /// Which service.
        what: &'static str,
        /// Its error code, e.g. `InvalidIdentityToken`.
        code: String,
        /// Its message.
        message: String,
    },
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl AwsCredentials {
    /// Long-term credentials (no token, no expiry).
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
            expires_at: None,
        }
    }

    /// From a Secret's data (`aws.credentials.secretRef`): keys `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN`. `secret_name` is used
    /// in the error message only.
    pub fn from_secret<'a>(
        secret_name: &str,
        get: impl Fn(&str) -> Option<&'a [u8]>,
    ) -> Result<Self, CredentialsError> {
        let text = |key: &str| get(key).and_then(|v| std::str::from_utf8(v).ok()).map(|s| s.trim().to_owned());
        Self::from_lookup(&format!("Secret {secret_name}"), text)
    }

    /// From environment variables, read through `var` (e.g. `|k| std::env::var(k).ok()`).
    /// `Ok(None)` when `AWS_ACCESS_KEY_ID` is unset: the chain moves on.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, CredentialsError> {
        if non_empty(var(ACCESS_KEY_ID)).is_none() {
            return Ok(None);
        }
        Self::from_lookup("the environment", var).map(Some)
    }

    fn from_lookup(source_name: &str, get: impl Fn(&str) -> Option<String>) -> Result<Self, CredentialsError> {
        let required = |key: &'static str| {
            non_empty(get(key)).ok_or_else(|| CredentialsError::Missing { source_name: source_name.to_owned(), key })
        };
        Ok(AwsCredentials {
            access_key_id: required(ACCESS_KEY_ID)?,
            secret_access_key: required(SECRET_ACCESS_KEY)?,
            session_token: non_empty(get(SESSION_TOKEN)),
            expires_at: None,
        })
    }

    /// Whether these credentials should be replaced at `now`: they expire within `margin`.
    pub fn needs_refresh(&self, now: SystemTime, margin: Duration) -> bool {
        self.expires_at.is_some_and(|at| now + margin >= at)
    }
}

/// The region from `AWS_REGION`, else `AWS_DEFAULT_REGION`.
pub fn region_from_env(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    non_empty(var("AWS_REGION")).or_else(|| non_empty(var("AWS_DEFAULT_REGION")))
}

/// Web identity (EKS IRSA): a token file and a role to assume with it at STS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`: the gateway reads the token from it at each refresh.
    pub token_file: String,
    /// `AWS_ROLE_ARN`.
    pub role_arn: String,
    /// `AWS_ROLE_SESSION_NAME`, else `sluice`.
    pub session_name: String,
    /// `AWS_ENDPOINT_URL_STS`, else `https://sts.{region}.amazonaws.com` (or the global
    /// endpoint when no region is known).
    pub sts_endpoint: String,
}

impl WebIdentity {
    /// From the environment; `None` unless both the token file and the role are set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let token_file = non_empty(var("AWS_WEB_IDENTITY_TOKEN_FILE"))?;
        let role_arn = non_empty(var("AWS_ROLE_ARN"))?;
        let sts_endpoint = non_empty(var("AWS_ENDPOINT_URL_STS")).unwrap_or_else(|| match region_from_env(&var) {
            Some(region) => format!("https://sts.{region}.amazonaws.com"),
            None => "https://sts.amazonaws.com".to_owned(),
        });
        Some(WebIdentity {
            token_file,
            role_arn,
            session_name: non_empty(var("AWS_ROLE_SESSION_NAME")).unwrap_or_else(|| "sluice".to_owned()),
            sts_endpoint: sts_endpoint.trim_end_matches('/').to_owned(),
        })
    }

    /// The form body of the unsigned `POST {sts_endpoint}/` that assumes the role
    /// (`content-type: application/x-www-form-urlencoded`; also valid as a GET query).
    pub fn request_body(&self, web_identity_token: &str) -> String {
        let pairs = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", self.role_arn.as_str()),
            ("RoleSessionName", self.session_name.as_str()),
            ("WebIdentityToken", web_identity_token.trim()),
        ];
        let mut out = String::new();
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            out.push_str(k);
            out.push('=');
            // RFC 3986 unreserved characters kept, everything else `%XX`: what STS expects.
            out.push_str(&crate::encode_segment(v));
        }
        out
    }
}

/// The container credentials endpoint (ECS task roles, EKS Pod Identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEndpoint {
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI`, or `http://169.254.170.2` +
    /// `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
    pub url: String,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`, sent as `authorization`.
    pub authorization: Option<String>,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`: read at each refresh (EKS rotates it).
    pub authorization_file: Option<String>,
}

impl ContainerEndpoint {
    /// From the environment; `None` unless one of the two URI variables is set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let url = non_empty(var("AWS_CONTAINER_CREDENTIALS_FULL_URI")).or_else(|| {
            non_empty(var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")).map(|rel| format!("http://169.254.170.2{rel}"))
        })?;
        Some(ContainerEndpoint {
            url,
            authorization: non_empty(var("AWS_CONTAINER_AUTHORIZATION_TOKEN")),
            authorization_file: non_empty(var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")),
        })
    }
}

/// EC2 instance metadata (IMDSv2): `PUT {endpoint}/latest/api/token` with
/// [`imds::TOKEN_TTL_HEADER`], then `GET {endpoint}`[`imds::ROLE_PATH`] with
/// [`imds::TOKEN_HEADER`] for the role name, then `GET …/{role}` for the JSON that
/// [`parse_credentials_json`] reads.
pub mod imds {
    /// Default endpoint, overridden by `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub const DEFAULT_ENDPOINT: &str = "http://169.254.169.254";
    /// The session-token path (PUT).
    pub const TOKEN_PATH: &str = "/latest/api/token";
    /// Header asking for a session token of this many seconds.
    pub const TOKEN_TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
    /// Header carrying the session token on metadata GETs.
    pub const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";
    /// Lists the instance role (one name per line; the first is used).
    pub const ROLE_PATH: &str = "/latest/meta-data/iam/security-credentials/";

    /// The endpoint from the environment, else the default.
    pub fn endpoint(var: impl Fn(&str) -> Option<String>) -> String {
        super::non_empty(var("AWS_EC2_METADATA_SERVICE_ENDPOINT"))
            .map(|e| e.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
    }

    /// The role name out of the listing at [`ROLE_PATH`].
    pub fn role_name(listing: &str) -> Option<&str> {
        listing.lines().map(str::trim).find(|l| !l.is_empty())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CredentialsJson {
    code: Option<String>,
    message: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    token: Option<String>,
    expiration: Option<String>,
}

/// Parses the JSON of the container endpoint or of IMDS
/// (`{AccessKeyId, SecretAccessKey, Token, Expiration}`, IMDS adds `Code: "Success"`).
pub fn parse_credentials_json(body: &[u8]) -> Result<AwsCredentials, CredentialsError> {
    const WHAT: &str = "credentials JSON";
    let json: CredentialsJson =
        serde_json::from_slice(body).map_err(|e| CredentialsError::Malformed { what: WHAT, reason: e.to_string() })?;
    if let Some(code) = json.code.filter(|c| c != "Success") {
        return Err(CredentialsError::Refused {
            what: "credentials endpoint",
            code,
            message: json.message.unwrap_or_default(),
        });
    }
    let field = |v: Option<String>, name: &str| {
        non_empty(v).ok_or_else(|| CredentialsError::Malformed { what: WHAT, reason: format!("no {name}") })
    };
    let expires_at =
        match non_empty(json.expiration) {
            Some(text) => Some(parse_timestamp(&text).ok_or_else(|| CredentialsError::Malformed {
                what: WHAT,
                reason: format!("bad Expiration {text:?}"),
            })?),
            None => None,
        };
    Ok(AwsCredentials {
        access_key_id: field(json.access_key_id, "AccessKeyId")?,
        secret_access_key: field(json.secret_access_key, "SecretAccessKey")?,
        session_token: non_empty(json.token),
        expires_at,
    })
}

/// Parses a timestamp as AWS writes them, `2019-11-09T13:34:41Z` (RFC 3339: optional
/// fractional seconds, which are dropped, and `Z` or an offset).
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let ms = crate::date::rfc3339_unix_ms(text)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(ms / 1000))
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}
