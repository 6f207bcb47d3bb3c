//! SigV4 signing: AWS's published test-suite vectors, an independent recomputation of a
//! Bedrock ARN request (double-encoded canonical path) and requests botocore signed.
//! The verifier used by fake upstreams is tested in `sigv4_verify.rs`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use ring::{digest, hmac};
use sluice_providers::auth::aws::AwsCredentials;
use sluice_providers::auth::sigv4::{self, BEDROCK, Request};

pub(crate) const AKID: &str = "AKIDEXAMPLE";
pub(crate) const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

/// 2015-08-30T12:36:00Z, the time of AWS's test suite.
pub(crate) fn suite_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

fn header<'a>(added: &'a [(http::HeaderName, HeaderValue)], name: &str) -> Option<&'a str> {
    added.iter().find(|(n, _)| n.as_str() == name).map(|(_, v)| v.to_str().unwrap())
}

fn sign(
    method: &str,
    url: &str,
    headers: &HeaderMap,
    body: &[u8],
    creds: &AwsCredentials,
    service: &str,
) -> Vec<(http::HeaderName, HeaderValue)> {
    let req = Request { method, url, headers, body };
    sigv4::sign(&req, creds, "us-east-1", service, suite_time()).unwrap()
}

#[test]
fn get_vanilla_matches_the_aws_test_suite() {
    let added = sign(
        "GET",
        "https://example.amazonaws.com/",
        &HeaderMap::new(),
        b"",
        &AwsCredentials::new(AKID, SECRET),
        "service",
    );
    assert_eq!(header(&added, "x-amz-date"), Some("20150830T123600Z"));
    assert_eq!(
        header(&added, "authorization"),
        Some(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        )
    );
    assert_eq!(header(&added, "x-amz-security-token"), None);
}

#[test]
fn post_vanilla_matches_the_aws_test_suite() {
    let added = sign(
        "POST",
        "https://example.amazonaws.com/",
        &HeaderMap::new(),
        b"",
        &AwsCredentials::new(AKID, SECRET),
        "service",
    );
    assert!(
        header(&added, "authorization")
            .unwrap()
            .ends_with("Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
    );
}

#[test]
fn get_vanilla_with_session_token_matches_the_aws_test_suite() {
    let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
    let creds = AwsCredentials { session_token: Some(token.to_owned()), ..AwsCredentials::new(AKID, SECRET) };
    let added = sign("GET", "https://example.amazonaws.com/", &HeaderMap::new(), b"", &creds, "service");
    assert_eq!(header(&added, "x-amz-security-token"), Some(token));
    assert_eq!(
        header(&added, "authorization"),
        Some(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-security-token, \
             Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
        )
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SigV4 signature of `canonical_request`, computed here by hand from the spec.
fn reference_signature(canonical_request: &str, date: &str, region: &str, service: &str) -> String {
    let scope = format!("{}/{region}/{service}/aws4_request", &date[..8]);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let mac =
        |key: &[u8], data: &str| hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes()).as_ref().to_vec();
    let k = mac(format!("AWS4{SECRET}").as_bytes(), &date[..8]);
    let k = mac(&k, region);
    let k = mac(&k, service);
    let k = mac(&k, "aws4_request");
    hex(&mac(&k, &string_to_sign))
}

/// Regression (percent-encoded Bedrock model ids and ARNs): the model id is one
/// percent-encoded path segment in the URL, and AWS's canonical request for a non-S3
/// service encodes that path once more (`%2F` → `%252F`).
#[test]
fn bedrock_arn_path_is_double_encoded_in_the_canonical_request() {
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/\
               arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fabc123/converse";
    let body = br#"{"messages":[]}"#;
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    let added = sign("POST", url, &headers, body, &AwsCredentials::new(AKID, SECRET), BEDROCK);

    let canonical = format!(
        "POST\n\
         /model/arn%253Aaws%253Abedrock%253Aus-east-1%253A123456789012%253Aapplication-inference-profile%252Fabc123/converse\n\
         \n\
         content-type:application/json\n\
         host:bedrock-runtime.us-east-1.amazonaws.com\n\
         x-amz-date:20150830T123600Z\n\
         \n\
         content-type;host;x-amz-date\n{}",
        hex(digest::digest(&digest::SHA256, body).as_ref())
    );
    let expected = reference_signature(&canonical, "20150830T123600Z", "us-east-1", BEDROCK);
    assert_eq!(
        header(&added, "authorization").unwrap(),
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, Signature={expected}"
        )
    );
}

/// The secret of the one key the verifier knows.
pub(crate) fn known(akid: &str) -> Option<String> {
    (akid == AKID).then(|| SECRET.to_owned())
}

#[test]
fn sign_refuses_a_url_without_host() {
    let headers = HeaderMap::new();
    let req = Request { method: "GET", url: "/model/x/converse", headers: &headers, body: b"" };
    let err = sigv4::sign(&req, &AwsCredentials::new(AKID, SECRET), "us-east-1", BEDROCK, suite_time());
    assert!(err.is_err());
}

#[test]
fn credentials_debug_hides_the_secret() {
    let creds = AwsCredentials { session_token: Some("tok".to_owned()), ..AwsCredentials::new(AKID, SECRET) };
    let shown = format!("{creds:?}");
    assert!(shown.contains(AKID));
    assert!(!shown.contains(SECRET) && !shown.contains("tok\""));
}

/// Requests botocore signed (fixtures/bedrock/botocore-signed.json): AWS's own SDK and
/// this signer agree, and the verifier accepts what the SDK sends.
#[test]
fn botocore_signed_bedrock_requests_verify_and_match_our_signature() {
    let path = format!("{}/tests/fixtures/bedrock/botocore-signed.json", env!("CARGO_MANIFEST_DIR"));
    let requests: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for r in requests.as_array().unwrap() {
        let url = r["url"].as_str().unwrap();
        let body = r["body"].as_str().unwrap().as_bytes();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(r["now_unix"].as_u64().unwrap());
        let mut sent = HeaderMap::new();
        for (name, value) in r["headers"].as_object().unwrap() {
            let name = http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).unwrap();
            sent.insert(name, HeaderValue::from_str(value.as_str().unwrap()).unwrap());
        }
        // Over HTTP/1 the server sees the Host header; over HTTP/2 only the URL.
        let req = Request { method: "POST", url, headers: &sent, body };
        let verified = sigv4::verify(&req, known, now).unwrap();
        assert_eq!((verified.region.as_str(), verified.service.as_str()), ("us-east-1", BEDROCK));
        let mut with_host = sent.clone();
        with_host.insert("host", HeaderValue::from_static("bedrock-runtime.us-east-1.amazonaws.com"));
        let req = Request { headers: &with_host, ..req };
        assert!(sigv4::verify(&req, known, now).is_ok());

        // Our signer, given what botocore signed, computes botocore's signature.
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let creds = AwsCredentials {
            session_token: sent.get("x-amz-security-token").map(|v| v.to_str().unwrap().to_owned()),
            ..AwsCredentials::new(AKID, SECRET)
        };
        let req = Request { method: "POST", url, headers: &headers, body };
        let added = sigv4::sign(&req, &creds, "us-east-1", BEDROCK, now).unwrap();
        assert_eq!(header(&added, "authorization"), sent.get("authorization").map(|v| v.to_str().unwrap()));
    }
}
