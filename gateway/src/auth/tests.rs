//! Credential fetching against fake token, metadata, STS, container and instance
//! metadata endpoints on 127.0.0.1, with the time passed in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post, put};
use http::{Method, Uri};
use sluice_providers::auth::gcp::{self, ServiceAccountKey};
use sluice_providers::auth::sigv4;

use super::aws::{AwsSigner, CredentialSource};
use super::google::{GoogleTokens, TokenSource};
use super::{AuthError, Env, SecretFile};

/// The test-only service-account key of the providers crate's fixtures.
const TEST_KEY: &str = include_str!("../../../providers/tests/fixtures/gcp/service-account.json");

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

async fn serve(router: Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(format!("http://{addr}"))
}

fn env(vars: &[(&str, String)]) -> Env {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_string(), v.clone())).collect();
    Arc::new(move |name| vars.get(name).cloned())
}

#[derive(Clone, Default)]
struct TokenServer {
    issued: Arc<AtomicU32>,
    /// The assertion's verification result of each exchange.
    checks: Arc<Mutex<Vec<Result<String, String>>>>,
    public_key: Arc<Vec<u8>>,
    aud: Arc<Mutex<String>>,
    /// The token endpoint's clock, set by the test to the time it passes the gateway.
    now_unix: Arc<AtomicU64>,
}

async fn token_endpoint(State(s): State<TokenServer>, body: String) -> (StatusCode, String) {
    let assertion = body.split('&').find_map(|p| p.strip_prefix("assertion=")).unwrap_or_default();
    let grant_ok = body.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer");
    let aud = s.aud.lock().map(|a| a.clone()).unwrap_or_default();
    let check = gcp::verify_assertion(assertion, &s.public_key, &aud, s.now_unix.load(Ordering::SeqCst)).map(|c| c.iss);
    let ok = check.is_ok() && grant_ok;
    s.checks.lock().map(|mut c| c.push(check)).ok();
    if !ok {
        return (
            StatusCode::BAD_REQUEST,
            r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.into(),
        );
    }
    let n = s.issued.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::OK, format!(r#"{{"access_token":"ya29.t{n}","expires_in":3599,"token_type":"Bearer"}}"#))
}

/// The test key, exchanged at `token_uri`.
fn service_account_json(token_uri: &str) -> String {
    let mut key: serde_json::Value = serde_json::from_str(TEST_KEY).unwrap_or_default();
    key["token_uri"] = serde_json::Value::from(token_uri);
    key.to_string()
}

#[tokio::test]
async fn a_service_account_key_is_exchanged_at_its_token_uri_and_cached() -> anyhow::Result<()> {
    // The public key does not depend on the token URI, which is known once the server listens.
    let key = ServiceAccountKey::from_json(service_account_json("http://127.0.0.1/token").as_bytes())?;
    let state = TokenServer { public_key: Arc::new(key.public_key_der().to_vec()), ..TokenServer::default() };
    let base = serve(Router::new().route("/token", post(token_endpoint)).with_state(state.clone())).await?;
    let token_uri = format!("{base}/token");
    *state.aud.lock().map_err(|_| anyhow::anyhow!("poisoned"))? = token_uri.clone();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("key.json");
    std::fs::write(&path, service_account_json(&token_uri))?;
    let tokens = GoogleTokens::new(TokenSource::ServiceAccount(SecretFile { secret: "vertex-sa".into(), path }));

    let token_at = |secs: u64| {
        state.now_unix.store(1_800_000_000 + secs, Ordering::SeqCst);
        tokens.token(at(secs))
    };
    assert_eq!(token_at(0).await?.to_str()?, "Bearer ya29.t1");
    assert_eq!(token_at(3000).await?.to_str()?, "Bearer ya29.t1", "cached while more than 5 min are left");
    assert_eq!(token_at(3300).await?.to_str()?, "Bearer ya29.t2", "refreshed 5 min before expiry");
    tokens.invalidate();
    assert_eq!(token_at(3301).await?.to_str()?, "Bearer ya29.t3", "an expired-token 401 forces a new one");
    let checks = state.checks.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    assert_eq!(checks.len(), 3);
    for c in checks {
        assert_eq!(c, Ok("sluice-test@sluice-test.iam.gserviceaccount.com".to_string()), "the assertion verifies");
    }
    Ok(())
}

#[tokio::test]
async fn a_refused_exchange_is_an_error_naming_the_token_endpoint() -> anyhow::Result<()> {
    // No public key: every assertion fails verification.
    let state = TokenServer::default();
    let base = serve(Router::new().route("/token", post(token_endpoint)).with_state(state)).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("key.json");
    std::fs::write(&path, service_account_json(&format!("{base}/token")))?;
    let tokens = GoogleTokens::new(TokenSource::ServiceAccount(SecretFile { secret: "vertex-sa".into(), path }));
    let err = tokens.token(at(0)).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("token endpoint at") && err.contains("/token") && err.contains("invalid_grant"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_missing_key_file_names_the_secret() {
    let source = TokenSource::ServiceAccount(SecretFile {
        secret: "vertex-sa".into(),
        path: "/nonexistent/sluice/key.json".into(),
    });
    let err = GoogleTokens::new(source).token(at(0)).await.err();
    assert!(matches!(&err, Some(AuthError::Source(m)) if m.contains("\"vertex-sa\"")), "{err:?}");
}

#[tokio::test]
async fn without_a_key_the_metadata_server_at_gce_metadata_host_is_asked() -> anyhow::Result<()> {
    async fn metadata(headers: HeaderMap) -> (StatusCode, &'static str) {
        if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
            return (StatusCode::FORBIDDEN, "Missing Metadata-Flavor:Google header.");
        }
        (StatusCode::OK, r#"{"access_token":"ya29.node","expires_in":1800,"token_type":"Bearer"}"#)
    }
    let base = serve(Router::new().route(gcp::metadata::TOKEN_PATH, get(metadata))).await?;
    let host = base.trim_start_matches("http://").to_string();
    let source = TokenSource::new(None, &env(&[("GCE_METADATA_HOST", host)]));
    assert_eq!(GoogleTokens::new(source).token(at(0)).await?.to_str()?, "Bearer ya29.node");
    Ok(())
}

/// Signs a request the way the attempt does and verifies it as the provider would.
async fn sign_and_verify(signer: &AwsSigner, secrets: &[(&str, &str)]) -> anyhow::Result<sigv4::Verified> {
    let uri: Uri =
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
            .parse()?;
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    let body = br#"{"messages":[]}"#;
    signer.sign(&Method::POST, &uri, &mut headers, body, at(0)).await?;
    let url = uri.to_string();
    let request = sigv4::Request { method: "POST", url: &url, headers: &headers, body };
    let secrets: HashMap<String, String> = secrets.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    Ok(sigv4::verify(&request, |id| secrets.get(id).cloned(), at(30))?)
}

#[tokio::test]
async fn keys_from_a_secret_sign_a_bedrock_request() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDTESTSECRET\n")?;
    std::fs::write(dir.path().join("AWS_SECRET_ACCESS_KEY"), "secret-from-the-secret")?;
    let signer = AwsSigner::new(
        "us-east-1",
        CredentialSource::Secret { dir: dir.path().to_path_buf(), name: "bedrock-keys".into() },
    );
    let verified = sign_and_verify(&signer, &[("AKIDTESTSECRET", "secret-from-the-secret")]).await?;
    assert_eq!(
        (verified.access_key_id.as_str(), verified.region.as_str(), verified.service.as_str()),
        ("AKIDTESTSECRET", "us-east-1", "bedrock")
    );
    // A wrong secret on the provider's side refuses the signature.
    assert!(sign_and_verify(&signer, &[("AKIDTESTSECRET", "another-secret")]).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_secret_without_the_secret_key_names_what_is_missing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDTESTSECRET")?;
    let signer = AwsSigner::new(
        "us-east-1",
        CredentialSource::Secret { dir: dir.path().to_path_buf(), name: "bedrock-keys".into() },
    );
    let err = sign_and_verify(&signer, &[]).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("bedrock-keys") && err.contains("AWS_SECRET_ACCESS_KEY"), "{err}");
    Ok(())
}

#[tokio::test]
async fn the_chain_reads_the_environment_first() -> anyhow::Result<()> {
    let vars = env(&[("AWS_ACCESS_KEY_ID", "AKIDENV".into()), ("AWS_SECRET_ACCESS_KEY", "env-secret".into())]);
    let signer = AwsSigner::new("us-east-1", CredentialSource::Chain(vars));
    assert_eq!(sign_and_verify(&signer, &[("AKIDENV", "env-secret")]).await?.access_key_id, "AKIDENV");
    Ok(())
}

const TEMPORARY_JSON: &str = r#"{"Code":"Success","AccessKeyId":"ASIATEMP","SecretAccessKey":"temp-secret","Token":"session-token","Expiration":"2027-01-15T08:00:00Z"}"#;

#[tokio::test]
async fn web_identity_assumes_the_role_at_sts() -> anyhow::Result<()> {
    async fn sts(body: String) -> (StatusCode, String) {
        let ok = body.contains("Action=AssumeRoleWithWebIdentity") && body.contains("WebIdentityToken=projected-jwt");
        if !ok {
            return (
                StatusCode::BAD_REQUEST,
                "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>no</Message></Error></ErrorResponse>"
                    .into(),
            );
        }
        let xml = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
            <AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>web-secret</SecretAccessKey>\
            <SessionToken>web-session</SessionToken><Expiration>2027-01-15T08:00:00Z</Expiration>\
            </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        (StatusCode::OK, xml.into())
    }
    let base = serve(Router::new().route("/", post(sts))).await?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "projected-jwt\n")?;
    let vars = env(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.display().to_string()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/sluice".into()),
        ("AWS_ENDPOINT_URL_STS", base),
    ]);
    let signer = AwsSigner::new("us-east-1", CredentialSource::Chain(vars));
    let verified = sign_and_verify(&signer, &[("ASIAWEB", "web-secret")]).await?;
    assert_eq!((verified.access_key_id.as_str(), verified.session_token.as_deref()), ("ASIAWEB", Some("web-session")));
    Ok(())
}

#[tokio::test]
async fn the_container_endpoint_is_asked_with_its_authorization_token() -> anyhow::Result<()> {
    async fn creds(headers: HeaderMap) -> (StatusCode, &'static str) {
        match headers.get("authorization").and_then(|v| v.to_str().ok()) {
            Some("pod-identity-token") => (StatusCode::OK, TEMPORARY_JSON),
            _ => (StatusCode::UNAUTHORIZED, "{}"),
        }
    }
    let base = serve(Router::new().route("/v2/credentials", get(creds))).await?;
    let vars = env(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{base}/v2/credentials")),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token".into()),
    ]);
    let signer = AwsSigner::new("us-east-1", CredentialSource::Chain(vars));
    assert_eq!(
        sign_and_verify(&signer, &[("ASIATEMP", "temp-secret")]).await?.session_token.as_deref(),
        Some("session-token")
    );
    Ok(())
}

#[tokio::test]
async fn instance_metadata_is_asked_with_an_imdsv2_session() -> anyhow::Result<()> {
    async fn token(headers: HeaderMap) -> (StatusCode, &'static str) {
        match headers.get("x-aws-ec2-metadata-token-ttl-seconds") {
            Some(_) => (StatusCode::OK, "imds-session"),
            None => (StatusCode::BAD_REQUEST, ""),
        }
    }
    fn session(headers: &HeaderMap) -> bool {
        headers.get("x-aws-ec2-metadata-token").and_then(|v| v.to_str().ok()) == Some("imds-session")
    }
    async fn role(headers: HeaderMap) -> (StatusCode, &'static str) {
        if session(&headers) { (StatusCode::OK, "sluice-node-role\n") } else { (StatusCode::UNAUTHORIZED, "") }
    }
    async fn creds(headers: HeaderMap) -> (StatusCode, &'static str) {
        if session(&headers) { (StatusCode::OK, TEMPORARY_JSON) } else { (StatusCode::UNAUTHORIZED, "") }
    }
    let router = Router::new()
        .route("/latest/api/token", put(token))
        .route("/latest/meta-data/iam/security-credentials/", get(role))
        .route("/latest/meta-data/iam/security-credentials/sluice-node-role", get(creds));
    let base = serve(router).await?;
    let signer =
        AwsSigner::new("us-east-1", CredentialSource::Chain(env(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", base)])));
    assert_eq!(sign_and_verify(&signer, &[("ASIATEMP", "temp-secret")]).await?.access_key_id, "ASIATEMP");
    Ok(())
}
