//! The SigV4 verifier used by fake upstreams: it accepts what the signer sends and
//! refuses, as AWS does, changed requests, unknown keys and skewed clocks.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use sluice_providers::auth::aws::AwsCredentials;
use sluice_providers::auth::sigv4::{self, BEDROCK, Request, VerifyError};

use crate::sigv4::{AKID, SECRET, known, suite_time};

/// A signed Bedrock request as the gateway would send it: headers include the signature.
fn signed_request(url: &str, body: &[u8], creds: &AwsCredentials, at: SystemTime) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("host", HeaderValue::from_static("bedrock-runtime.us-east-1.amazonaws.com"));
    let req = Request { method: "POST", url, headers: &headers, body };
    let added = sigv4::sign(&req, creds, "us-east-1", BEDROCK, at).unwrap();
    for (name, value) in added {
        headers.insert(name, value);
    }
    // Headers a client adds after signing are not signed and must not matter.
    headers.insert("user-agent", HeaderValue::from_static("botocore/1.35"));
    headers.insert("content-length", HeaderValue::from(body.len()));
    headers
}

const URL: &str =
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream";

#[test]
fn verify_accepts_a_signed_request_and_reports_the_scope() {
    let creds = AwsCredentials {
        session_token: Some("FwoGZXIvYXdzEXAMPLETOKEN".to_owned()),
        ..AwsCredentials::new(AKID, SECRET)
    };
    let body = br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;
    let headers = signed_request(URL, body, &creds, suite_time());
    let req = Request { method: "POST", url: URL, headers: &headers, body };
    let verified = sigv4::verify(&req, known, suite_time() + Duration::from_secs(299)).unwrap();
    assert_eq!(verified.access_key_id, AKID);
    assert_eq!(verified.region, "us-east-1");
    assert_eq!(verified.service, "bedrock");
    assert_eq!(verified.session_token.as_deref(), Some("FwoGZXIvYXdzEXAMPLETOKEN"));
}

#[test]
fn verify_refuses_a_changed_body_path_or_secret() {
    let creds = AwsCredentials::new(AKID, SECRET);
    let body = br#"{"messages":[]}"#;
    let headers = signed_request(URL, body, &creds, suite_time());
    let changed_body = Request { method: "POST", url: URL, headers: &headers, body: b"{}" };
    assert_eq!(sigv4::verify(&changed_body, known, suite_time()), Err(VerifyError::Mismatch));
    let decoded_path = URL.replace("%3A", ":");
    let changed_path = Request { method: "POST", url: &decoded_path, headers: &headers, body };
    assert_eq!(sigv4::verify(&changed_path, known, suite_time()), Err(VerifyError::Mismatch));
    let wrong_secret = |_: &str| Some("not-the-secret".to_owned());
    let req = Request { method: "POST", url: URL, headers: &headers, body };
    let err = sigv4::verify(&req, wrong_secret, suite_time()).unwrap_err();
    assert_eq!(err.aws_error_type(), "InvalidSignatureException");
    assert_eq!(err.status(), 403);
}

#[test]
fn verify_refuses_unknown_keys_and_unsigned_requests() {
    let body = b"{}";
    let headers = signed_request(URL, body, &AwsCredentials::new("AKIDOTHER", SECRET), suite_time());
    let req = Request { method: "POST", url: URL, headers: &headers, body };
    let err = sigv4::verify(&req, known, suite_time()).unwrap_err();
    assert_eq!(err, VerifyError::UnknownKey("AKIDOTHER".to_owned()));
    assert_eq!(err.aws_error_type(), "UnrecognizedClientException");

    let bare = HeaderMap::new();
    let req = Request { method: "POST", url: URL, headers: &bare, body };
    assert_eq!(sigv4::verify(&req, known, suite_time()), Err(VerifyError::Missing));
}

#[test]
fn verify_refuses_a_clock_skewed_more_than_five_minutes_as_aws_does() {
    let body = b"{}";
    let headers = signed_request(URL, body, &AwsCredentials::new(AKID, SECRET), suite_time());
    let req = Request { method: "POST", url: URL, headers: &headers, body };

    let late = sigv4::verify(&req, known, suite_time() + Duration::from_secs(301)).unwrap_err();
    assert_eq!(late.aws_error_type(), "InvalidSignatureException");
    assert_eq!(
        late.to_string(),
        "Signature expired: 20150830T123600Z is now earlier than 20150830T123601Z \
         (20150830T124101Z - 5 min.)"
    );
    let early = sigv4::verify(&req, known, suite_time() - Duration::from_secs(301)).unwrap_err();
    assert_eq!(
        early.to_string(),
        "Signature not yet current: 20150830T123600Z is still later than 20150830T123559Z \
         (20150830T123059Z + 5 min.)"
    );
    assert!(sigv4::verify(&req, known, suite_time() - Duration::from_secs(300)).is_ok());
}
