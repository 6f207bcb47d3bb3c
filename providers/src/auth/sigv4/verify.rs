//! Checking a received request's SigV4 signature, as AWS does (for fake upstreams).

use std::time::SystemTime;

use http::HeaderMap;

use super::{MAX_SKEW, Request, amz_date, compute, parse_amz_date, settings};
use crate::auth::aws::AwsCredentials;

/// What a valid signature told about its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The access key id that signed.
    pub access_key_id: String,
    /// The region of the credential scope.
    pub region: String,
    /// The service of the credential scope (`bedrock`).
    pub service: String,
    /// The session token sent (and signed), if any.
    pub session_token: Option<String>,
}

/// Why a signature was refused. [`VerifyError::aws_error_type`] and
/// [`VerifyError::status`] give the answer AWS sends in each case.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// No `authorization` header.
    #[error("Missing Authentication Token")]
    Missing,
    /// The `authorization` or `x-amz-date` header does not parse.
    #[error("{0}")]
    Incomplete(String),
    /// The access key id is not one of the known keys.
    #[error("The security token included in the request is invalid.")]
    UnknownKey(String),
    /// `x-amz-date` is more than five minutes from the receiver's clock.
    #[error("Signature {what}: {request} is {relation} than {bound} ({now} {sign} 5 min.)")]
    Skewed {
        /// `expired` or `not yet current`.
        what: &'static str,
        /// The request's `x-amz-date`.
        request: String,
        /// `now earlier` or `still later`.
        relation: &'static str,
        /// The edge of the accepted window.
        bound: String,
        /// The receiver's clock.
        now: String,
        /// `-` or `+`.
        sign: char,
    },
    /// The recomputed signature differs.
    #[error(
        "The request signature we calculated does not match the signature you provided. \
         Check your AWS Secret Access Key and signing method."
    )]
    Mismatch,
}

impl VerifyError {
    /// The `x-amzn-errortype` AWS answers with.
    pub fn aws_error_type(&self) -> &'static str {
        match self {
            VerifyError::Missing => "MissingAuthenticationTokenException",
            VerifyError::Incomplete(_) => "IncompleteSignatureException",
            VerifyError::UnknownKey(_) => "UnrecognizedClientException",
            VerifyError::Skewed { .. } | VerifyError::Mismatch => "InvalidSignatureException",
        }
    }

    /// The HTTP status AWS answers with.
    pub fn status(&self) -> u16 {
        match self {
            VerifyError::Incomplete(_) => 400,
            _ => 403,
        }
    }
}

/// Recomputes `req`'s signature with the secret that `secret_for` gives for the
/// request's access key id and compares it with the one sent. The request's
/// `x-amz-date` must be within [`MAX_SKEW`] of `now`. A session token, when sent, must
/// be signed; it is returned for the caller to check.
pub fn verify(
    req: &Request<'_>,
    secret_for: impl Fn(&str) -> Option<String>,
    now: SystemTime,
) -> Result<Verified, VerifyError> {
    let auth = header(req.headers, "authorization").ok_or(VerifyError::Missing)?;
    let parsed = parse_authorization(auth)?;
    let date_text = header(req.headers, "x-amz-date")
        .ok_or_else(|| VerifyError::Incomplete("Missing x-amz-date header".to_owned()))?;
    let date =
        parse_amz_date(date_text).ok_or_else(|| VerifyError::Incomplete(format!("Bad x-amz-date {date_text:?}")))?;
    if !date_text.starts_with(parsed.scope_date) {
        return Err(VerifyError::Incomplete(format!(
            "Credential date {} does not match x-amz-date {date_text}",
            parsed.scope_date
        )));
    }
    check_skew(date, date_text, now)?;
    let secret =
        secret_for(parsed.access_key_id).ok_or_else(|| VerifyError::UnknownKey(parsed.access_key_id.to_owned()))?;

    let session_token = header(req.headers, "x-amz-security-token").map(str::to_owned);
    let token_signed = parsed.signed_headers.contains(&"x-amz-security-token");
    if session_token.is_some() != token_signed {
        return Err(VerifyError::Mismatch);
    }
    // Exactly the signed headers, minus those the signer adds from its parameters.
    let mut signed = HeaderMap::new();
    for name in &parsed.signed_headers {
        if matches!(*name, "x-amz-date" | "x-amz-security-token") {
            continue;
        }
        let values: Vec<_> = req.headers.get_all(*name).iter().cloned().collect();
        if values.is_empty() && *name == "host" {
            // HTTP/2 carries it as `:authority`: the signer takes it from the URL.
            continue;
        }
        if values.is_empty() {
            return Err(VerifyError::Incomplete(format!("Signed header {name} is missing")));
        }
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| VerifyError::Incomplete(format!("Bad signed header {name:?}")))?;
        for value in values {
            signed.append(name.clone(), value);
        }
    }
    let creds = AwsCredentials {
        access_key_id: parsed.access_key_id.to_owned(),
        secret_access_key: secret,
        session_token: session_token.clone(),
        expires_at: None,
    };
    let recomputed = Request { headers: &signed, ..*req };
    let (signature, _) = compute(&recomputed, &creds, parsed.region, parsed.service, date, settings(false))
        .map_err(|e| VerifyError::Incomplete(e.to_string()))?;
    if !constant_time_eq(signature.as_bytes(), parsed.signature.as_bytes()) {
        return Err(VerifyError::Mismatch);
    }
    Ok(Verified {
        access_key_id: parsed.access_key_id.to_owned(),
        region: parsed.region.to_owned(),
        service: parsed.service.to_owned(),
        session_token,
    })
}

struct Authorization<'a> {
    access_key_id: &'a str,
    scope_date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/service/aws4_request,
/// SignedHeaders=host;x-amz-date, Signature=…`.
fn parse_authorization(value: &str) -> Result<Authorization<'_>, VerifyError> {
    let incomplete =
        |what: &str| VerifyError::Incomplete(format!("Authorization header requires {what}. Authorization={value}"));
    let rest = value.strip_prefix("AWS4-HMAC-SHA256 ").ok_or_else(|| incomplete("the AWS4-HMAC-SHA256 algorithm"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let credential = credential.ok_or_else(|| incomplete("'Credential' parameter"))?;
    let signed = signed.ok_or_else(|| incomplete("'SignedHeaders' parameter"))?;
    let signature = signature.ok_or_else(|| incomplete("'Signature' parameter"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, scope_date, region, service, "aws4_request"] = scope[..] else {
        return Err(incomplete("a Credential of the form KEY/DATE/REGION/SERVICE/aws4_request"));
    };
    Ok(Authorization {
        access_key_id,
        scope_date,
        region,
        service,
        signed_headers: signed.split(';').collect(),
        signature,
    })
}

fn check_skew(date: SystemTime, date_text: &str, now: SystemTime) -> Result<(), VerifyError> {
    if date + MAX_SKEW < now {
        return Err(VerifyError::Skewed {
            what: "expired",
            request: date_text.to_owned(),
            relation: "now earlier",
            bound: amz_date(now - MAX_SKEW),
            now: amz_date(now),
            sign: '-',
        });
    }
    if date > now + MAX_SKEW {
        return Err(VerifyError::Skewed {
            what: "not yet current",
            request: date_text.to_owned(),
            relation: "still later",
            bound: amz_date(now + MAX_SKEW),
            now: amz_date(now),
            sign: '+',
        });
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
