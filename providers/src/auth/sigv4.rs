//! AWS Signature Version 4 for Bedrock (docs/design.md §9), on `aws-sigv4`.
//!
//! [`sign`] returns the headers to add to a request (`authorization`, `x-amz-date`,
//! `x-amz-security-token` for temporary credentials); [`verify`] recomputes a received
//! request's signature from the keys a fake upstream was given and refuses it as AWS
//! would, including a clock more than [`MAX_SKEW`] away.
//!
//! Bedrock puts the model id in the path as ONE percent-encoded segment (`%3A`, `%2F`).
//! For every service but S3, AWS's canonical request encodes the already-encoded path
//! once more (`%2F` → `%252F`): that is `aws-sigv4`'s `PercentEncodingMode::Double`, with
//! dot-segment normalisation, both set explicitly below.

use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    PercentEncodingMode, SignableBody, SignableRequest, SigningSettings, UriPathNormalizationMode, sign as aws_sign,
};
use aws_sigv4::sign::v4;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use super::aws::AwsCredentials;

mod verify;

pub use verify::{Verified, VerifyError, verify};

/// The signing name of Bedrock (also for the `bedrock-runtime` endpoints).
pub const BEDROCK: &str = "bedrock";
/// How far a request's `x-amz-date` may be from the receiver's clock (AWS: 5 minutes).
pub const MAX_SKEW: Duration = Duration::from_secs(5 * 60);

/// The parts of a request that are signed. `url` is absolute and exactly what is sent
/// (path percent-encoded once, query included); `headers` are the headers that will be
/// sent (a `host` header, if present, wins over the URL's authority).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `GET`, `POST`, ….
    pub method: &'a str,
    /// `https://bedrock-runtime.us-east-1.amazonaws.com/model/…/converse`.
    pub url: &'a str,
    /// Headers sent with the request.
    pub headers: &'a HeaderMap,
    /// The exact body bytes sent.
    pub body: &'a [u8],
}

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The URL is not absolute or does not parse.
    #[error("cannot sign {url:?}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header value is not visible ASCII and cannot be canonicalised.
    #[error("cannot sign header {0}: value is not text")]
    Header(String),
    /// The signer refused the request.
    #[error("signing failed: {0}")]
    Signer(String),
}

/// Signs `req` for `service` (use [`BEDROCK`]) in `region` at `now`, and returns the
/// headers to add to it.
pub fn sign(
    req: &Request<'_>,
    creds: &AwsCredentials,
    region: &str,
    service: &str,
    now: SystemTime,
) -> Result<Vec<(HeaderName, HeaderValue)>, SignError> {
    let (_, headers) = compute(req, creds, region, service, now, settings(true))?;
    Ok(headers)
}

/// The settings AWS expects for non-S3 services (see the module doc).
fn settings(exclude_default_headers: bool) -> SigningSettings {
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Double;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Enabled;
    if !exclude_default_headers {
        // The verifier passes exactly the headers the sender signed.
        settings.excluded_headers = None;
    }
    settings
}

/// Signs and returns (signature, headers to add).
fn compute(
    req: &Request<'_>,
    creds: &AwsCredentials,
    region: &str,
    service: &str,
    now: SystemTime,
    settings: SigningSettings,
) -> Result<(String, Vec<(HeaderName, HeaderValue)>), SignError> {
    let uri: Uri = req
        .url
        .parse()
        .map_err(|e: http::uri::InvalidUri| SignError::Url { url: req.url.to_owned(), reason: e.to_string() })?;
    // aws-sigv4 panics on a URI without a host unless a host header is given.
    if uri.host().is_none() && !req.headers.contains_key(http::header::HOST) {
        return Err(SignError::Url { url: req.url.to_owned(), reason: "no host".to_owned() });
    }
    let mut headers = Vec::with_capacity(req.headers.len());
    for (name, value) in req.headers {
        // Hop-by-hop headers may change on the way; never sign them.
        if matches!(name.as_str(), "connection" | "expect") {
            continue;
        }
        let value = value.to_str().map_err(|_| SignError::Header(name.as_str().to_owned()))?;
        headers.push((name.as_str(), value));
    }
    let signable = SignableRequest::new(req.method, req.url, headers.into_iter(), SignableBody::Bytes(req.body))
        .map_err(|e| SignError::Signer(e.to_string()))?;
    let identity = aws_credential_types::Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.clone(),
        creds.session_token.clone(),
        creds.expires_at,
        "sluice",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into();
    let (instructions, signature) =
        aws_sign(signable, &params).map_err(|e| SignError::Signer(e.to_string()))?.into_parts();
    let (added, _) = instructions.into_parts();
    let mut out = Vec::with_capacity(added.len());
    for header in added {
        let name = HeaderName::from_static(header.name());
        let mut value =
            HeaderValue::from_str(header.value()).map_err(|_| SignError::Header(header.name().to_owned()))?;
        value.set_sensitive(header.sensitive());
        out.push((name, value));
    }
    Ok((signature, out))
}

/// The `x-amz-date` format, `YYYYMMDD'T'HHMMSS'Z'`.
const AMZ_DATE: &str = "%Y%m%dT%H%M%SZ";

/// `t` as an `x-amz-date` value.
pub(crate) fn amz_date(t: SystemTime) -> String {
    crate::date::format_utc(t, AMZ_DATE).unwrap_or_default()
}

/// Parses an `x-amz-date` value.
pub(crate) fn parse_amz_date(text: &str) -> Option<SystemTime> {
    crate::date::parse_utc(AMZ_DATE, text)
}
