//! Google service-account assertions with the checked-in test-only key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use sluice_providers::auth::gcp::{
    self, CLOUD_PLATFORM_SCOPE, GcpAuthError, ServiceAccountKey, metadata, verify_assertion,
};

const KEY_JSON: &[u8] = include_bytes!("../fixtures/gcp/service-account.json");
const NOW: u64 = 1_760_000_000;
const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

fn key() -> ServiceAccountKey {
    ServiceAccountKey::from_json(KEY_JSON).unwrap()
}

fn segment(jwt: &str, i: usize) -> Value {
    serde_json::from_slice(&B64.decode(jwt.split('.').nth(i).unwrap()).unwrap()).unwrap()
}

#[test]
fn parses_the_key_json() {
    let key = key();
    assert_eq!(key.client_email, "sluice-test@sluice-test.iam.gserviceaccount.com");
    assert_eq!(key.private_key_id, "0123456789abcdef0123456789abcdef01234567");
    assert_eq!(key.token_uri, TOKEN_URI);
    assert_eq!(key.project_id.as_deref(), Some("sluice-test"));
    assert!(!format!("{key:?}").contains("PRIVATE"));
}

#[test]
fn assertion_has_the_claims_google_requires() {
    let jwt = key().assertion(NOW).unwrap();
    assert_eq!(jwt.split('.').count(), 3);
    assert!(!jwt.contains('='), "base64url without padding");
    assert_eq!(
        segment(&jwt, 0),
        json!({"alg": "RS256", "typ": "JWT", "kid": "0123456789abcdef0123456789abcdef01234567"})
    );
    assert_eq!(
        segment(&jwt, 1),
        json!({
            "iss": "sluice-test@sluice-test.iam.gserviceaccount.com",
            "scope": CLOUD_PLATFORM_SCOPE,
            "aud": TOKEN_URI,
            "iat": NOW,
            "exp": NOW + 3600,
        })
    );
}

#[test]
fn assertion_verifies_with_the_public_key() {
    let key = key();
    let jwt = key.assertion(NOW).unwrap();
    let claims = verify_assertion(&jwt, key.public_key_der(), TOKEN_URI, NOW + 10).unwrap();
    assert_eq!(claims.iss, key.client_email);
    assert_eq!(claims.exp - claims.iat, 3600);
}

#[test]
fn verify_refuses_a_tampered_expired_or_misaddressed_assertion() {
    let key = key();
    let jwt = key.assertion(NOW).unwrap();
    let der = key.public_key_der();
    assert!(verify_assertion(&jwt, der, "https://elsewhere/token", NOW).unwrap_err().contains("aud"));
    assert!(verify_assertion(&jwt, der, TOKEN_URI, NOW + 3601).is_err());

    // Claims swapped for a two-hour lifetime with the old signature.
    let parts: Vec<&str> = jwt.split('.').collect();
    let mut claims = segment(&jwt, 1);
    claims["exp"] = json!(NOW + 7200);
    let forged = format!("{}.{}.{}", parts[0], B64.encode(claims.to_string()), parts[2]);
    assert_eq!(verify_assertion(&forged, der, TOKEN_URI, NOW).unwrap_err(), "Invalid JWT Signature.");
    assert!(verify_assertion("a.b", der, TOKEN_URI, NOW).is_err());
}

#[test]
fn exchange_body_is_the_jwt_bearer_grant() {
    let key = key();
    let body = key.exchange_body(NOW).unwrap();
    let (grant, assertion) = body.split_once('&').unwrap();
    assert_eq!(grant, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer");
    let jwt = assertion.strip_prefix("assertion=").unwrap();
    verify_assertion(jwt, key.public_key_der(), TOKEN_URI, NOW).unwrap();
}

#[test]
fn honours_the_keys_token_uri() {
    let mut json: Value = serde_json::from_slice(KEY_JSON).unwrap();
    json["token_uri"] = json!("http://127.0.0.1:9/token");
    let key = ServiceAccountKey::from_json(json.to_string().as_bytes()).unwrap();
    let jwt = key.assertion(NOW).unwrap();
    assert_eq!(segment(&jwt, 1)["aud"], "http://127.0.0.1:9/token");
}

#[test]
fn refuses_keys_that_are_not_service_account_keys() {
    let user = br#"{"type":"authorized_user","client_id":"x","refresh_token":"y"}"#;
    assert!(matches!(ServiceAccountKey::from_json(user), Err(GcpAuthError::Key(m)) if m.contains("authorized_user")));
    let mut json: Value = serde_json::from_slice(KEY_JSON).unwrap();
    json["private_key"] = json!("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
    assert!(ServiceAccountKey::from_json(json.to_string().as_bytes()).is_err());
    json.as_object_mut().unwrap().remove("client_email");
    assert!(ServiceAccountKey::from_json(json.to_string().as_bytes()).is_err());
}

#[test]
fn parses_token_answers_and_oauth_errors() {
    let ok = br#"{"access_token":"ya29.c.test","expires_in":3599,"token_type":"Bearer"}"#;
    let token = gcp::parse_token_response(ok, NOW).unwrap();
    assert_eq!(token.token, "ya29.c.test");
    assert_eq!(token.expires_at_unix, NOW + 3599);
    assert!(!token.needs_refresh(NOW + 3599 - 301, 300));
    assert!(token.needs_refresh(NOW + 3599 - 300, 300));
    assert!(!format!("{token:?}").contains("ya29"));

    let refused = br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#;
    assert_eq!(
        gcp::parse_token_response(refused, NOW),
        Err(GcpAuthError::Refused {
            error: "invalid_grant".to_owned(),
            description: "Invalid JWT Signature.".to_owned()
        })
    );
    assert!(gcp::parse_token_response(br#"{"expires_in":1}"#, NOW).is_err());
    assert!(gcp::parse_token_response(b"<html>", NOW).is_err());
}

#[test]
fn metadata_server_answers_and_host_override() {
    let body = br#"{"access_token":"ya29.metadata","expires_in":1800,"token_type":"Bearer"}"#;
    assert_eq!(metadata::parse_token(body, NOW).unwrap().expires_at_unix, NOW + 1800);
    assert_eq!(metadata::base_url(|_| None), "http://metadata.google.internal");
    let env = |k: &str| (k == "GCE_METADATA_HOST").then(|| "127.0.0.1:8081".to_owned());
    assert_eq!(metadata::base_url(env), "http://127.0.0.1:8081");
    assert_eq!(metadata::FLAVOR_HEADER, ("metadata-flavor", "Google"));
}

/// An assertion google-auth (the official Python library) signed with the same test
/// key: our verifier accepts it, and ours carries the same header and claims.
#[test]
fn google_auth_assertions_verify_and_match_ours() {
    let path = format!("{}/tests/fixtures/gcp/google-auth-assertion.json", env!("CARGO_MANIFEST_DIR"));
    let theirs: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let assertion = theirs["assertion"].as_str().unwrap();
    let iat = theirs["iat"].as_u64().unwrap();
    let key = key();
    let claims = verify_assertion(assertion, key.public_key_der(), TOKEN_URI, iat).unwrap();
    assert_eq!(claims.iat, iat);

    let ours = key.assertion(iat).unwrap();
    assert_eq!(segment(&ours, 0), segment(assertion, 0));
    assert_eq!(segment(&ours, 1), segment(assertion, 1));
}
