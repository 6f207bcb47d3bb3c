//! Credentials checked as each provider checks them: API-key headers, SigV4
//! against the keys the upstream was given, and OAuth tokens from its own
//! token endpoint and metadata server.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sluice_chaos::{AwsKeys, ChaosAuth, GoogleAuth, ServiceAccount};
use sluice_providers::auth::aws::AwsCredentials;
use sluice_providers::auth::gcp::ServiceAccountKey;
use sluice_providers::auth::sigv4;

use super::native::aws_error_type;
use super::{Chaos, start};

const KEY: &str = "sk-chaos-test";
const VERTEX: &str = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude@1:rawPredict";
const BEDROCK: &str = "/model/anthropic.claude-v2%3A1/converse";

fn service_account_json(pem: &str, token_uri: &str) -> Vec<u8> {
    json!({"type": "service_account", "client_email": "chaos@p.iam.gserviceaccount.com",
           "private_key_id": "k1", "private_key": pem, "token_uri": token_uri, "project_id": "p"})
    .to_string()
    .into_bytes()
}

fn keys() -> AwsKeys {
    AwsKeys { access_key_id: "AKIDCHAOS".to_owned(), secret_access_key: "chaos-secret".to_owned() }
}

fn vertex_body() -> Value {
    json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

impl Chaos {
    async fn bearer(&self, path: &str, body: &Value, token: &str) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        self.call_json(path, body, &[("authorization", &auth)]).await
    }

    /// A Bedrock call signed with `creds` at `at`.
    async fn signed(&self, creds: &AwsCredentials, at: SystemTime) -> (u16, Option<String>, Value) {
        let url = format!("{}{BEDROCK}", self.base);
        let body = serde_json::to_vec(&json!({"messages": []})).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let req = sigv4::Request { method: "POST", url: &url, headers: &headers, body: &body };
        for (name, value) in sigv4::sign(&req, creds, "us-east-1", sigv4::BEDROCK, at).unwrap() {
            headers.insert(name, value);
        }
        let resp = self.http.post(&url).headers(headers).body(body).send().await.unwrap();
        let status = resp.status().as_u16();
        let kind = resp.headers().get("x-amzn-errortype").map(|v| v.to_str().unwrap().to_owned());
        (status, kind, resp.json().await.unwrap())
    }

    async fn token(&self, form: String) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/token", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }
}

#[tokio::test]
async fn api_keys_go_in_each_providers_header() {
    let c = start().await;
    c.state.set_auth(ChaosAuth { api_key: Some(KEY.to_owned()), ..ChaosAuth::default() });
    let anthropic = json!({"model": "c", "max_tokens": 5, "messages": []});
    let version = ("anthropic-version", "2023-06-01");
    let (status, _) = c.call_json("/v1/messages", &anthropic, &[version, ("x-api-key", KEY)]).await;
    assert_eq!(status, 200);
    let (status, v) = c.call_json("/v1/messages", &anthropic, &[version, ("x-api-key", "wrong")]).await;
    assert_eq!(status, 401);
    assert_eq!(v["error"], json!({"type": "authentication_error", "message": "invalid x-api-key"}));
    let (status, v) = c.call_json("/v1/messages", &anthropic, &[version]).await;
    assert_eq!((status, v["error"]["message"].as_str()), (401, Some("x-api-key header is required")));

    let gemini = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let path = "/v1beta/models/g:generateContent";
    assert_eq!(c.call_json(path, &gemini, &[("x-goog-api-key", KEY)]).await.0, 200);
    assert_eq!(c.call_json(&format!("{path}?key={KEY}"), &gemini, &[]).await.0, 200);
    let (status, v) = c.call_json(path, &gemini, &[("x-goog-api-key", "wrong")]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
    assert_eq!(v["error"]["details"][0]["reason"], "API_KEY_INVALID");
    let (status, v) = c.call_json(path, &gemini, &[]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (403, Some("PERMISSION_DENIED")));

    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let azure = "/openai/deployments/d/chat/completions?api-version=2024-10-21";
    assert_eq!(c.call_json(azure, &chat, &[("api-key", KEY)]).await.0, 200);
    let (status, v) = c.call_json(azure, &chat, &[("api-key", "wrong")]).await;
    assert_eq!((status, v["error"]["code"].as_str()), (401, Some("401")));
    // Azure's Responses API: the deployment is the body's `model`, the key `api-key`.
    let asked = json!({"model": "d", "input": "hi"});
    let responses = "/openai/responses?api-version=2025-04-01-preview";
    let (status, v) = c.call_json(responses, &asked, &[("api-key", KEY)]).await;
    assert_eq!((status, v["object"].as_str()), (200, Some("response")), "{v}");
    assert_eq!(c.call_json(responses, &asked, &[("api-key", "wrong")]).await.0, 401);
    assert_eq!(c.call_json("/openai/responses", &asked, &[("api-key", KEY)]).await.0, 404, "no api-version");
    let bearer = format!("Bearer {KEY}");
    assert_eq!(c.call_json("/v1/chat/completions", &chat, &[("authorization", &bearer)]).await.0, 200);
    let (status, v) = c.call_json("/v1/chat/completions", &chat, &[("authorization", "Bearer wrong")]).await;
    assert_eq!((status, v["error"]["code"].as_str()), (401, Some("invalid_api_key")));
    // Bedrock API keys are Bearer tokens.
    let converse = json!({"messages": []});
    assert_eq!(c.call_json(BEDROCK, &converse, &[("authorization", &bearer)]).await.0, 200);
    let (status, resp) = c.call(BEDROCK, &converse, &[]).await;
    assert_eq!(status, 403);
    assert!(aws_error_type(&resp).starts_with("MissingAuthenticationTokenException"));
}

#[tokio::test]
async fn sigv4_is_checked_against_the_given_keys() {
    let c = start().await;
    c.state.set_auth(ChaosAuth { aws: Some(keys()), ..ChaosAuth::default() });
    let now = SystemTime::now();
    let (status, _, v) = c.signed(&keys().credentials(), now).await;
    assert_eq!(status, 200, "{v}");

    let wrong = AwsCredentials::new("AKIDCHAOS", "not-the-secret");
    let (status, kind, v) = c.signed(&wrong, now).await;
    assert_eq!(status, 403);
    assert!(kind.unwrap().starts_with("InvalidSignatureException:"));
    assert!(v["message"].as_str().unwrap().starts_with("The request signature we calculated does not match"));

    let (status, kind, v) = c.signed(&keys().credentials(), now - Duration::from_secs(600)).await;
    assert_eq!(status, 403);
    assert!(kind.unwrap().starts_with("InvalidSignatureException:"));
    assert!(v["message"].as_str().unwrap().starts_with("Signature expired"), "{v}");

    let unknown = AwsCredentials::new("AKIDOTHER", "chaos-secret");
    let (status, kind, _) = c.signed(&unknown, now).await;
    assert_eq!(status, 403);
    assert!(kind.unwrap().starts_with("UnrecognizedClientException:"));
    let (status, resp) = c.call(BEDROCK, &json!({"messages": []}), &[]).await;
    assert_eq!(status, 403);
    assert!(aws_error_type(&resp).starts_with("MissingAuthenticationTokenException"));
}

#[tokio::test]
async fn vertex_accepts_tokens_from_the_token_endpoint_until_they_expire() {
    let c = start().await;
    let pem = include_str!("testdata/service-account-key.pem");
    let sa = service_account_json(pem, &format!("{}/token", c.base));
    let account = ServiceAccount::from_key_json(&sa).unwrap();
    let google = GoogleAuth { service_account: Some(account), token_ttl: Duration::from_secs(600) };
    c.state.set_auth(ChaosAuth { google: Some(google), ..ChaosAuth::default() });

    let (status, v) = c.call_json(VERTEX, &vertex_body(), &[]).await;
    assert_eq!((status, v["error"]["status"].as_str()), (401, Some("UNAUTHENTICATED")));
    assert_eq!(v["error"]["details"][0]["reason"], "CREDENTIALS_MISSING");

    let key = ServiceAccountKey::from_json(&sa).unwrap();
    let (status, grant) = c.token(key.exchange_body(unix(SystemTime::now())).unwrap()).await;
    assert_eq!(status, 200, "{grant}");
    assert_eq!((grant["token_type"].as_str(), grant["expires_in"].as_u64()), (Some("Bearer"), Some(600)));
    let token = grant["access_token"].as_str().unwrap();
    let (status, v) = c.bearer(VERTEX, &vertex_body(), token).await;
    assert_eq!(status, 200, "{v}");
    let gemini = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let path = "/v1/projects/p/locations/global/publishers/google/models/g:generateContent";
    assert_eq!(c.bearer(path, &gemini, token).await.0, 200);

    c.state.expire_tokens();
    let (status, v) = c.bearer(VERTEX, &vertex_body(), token).await;
    assert_eq!(status, 401);
    assert!(v["error"]["message"].as_str().unwrap().starts_with("Request had invalid authentication credentials."));
    assert_eq!(v["error"]["details"][0]["reason"], "ACCESS_TOKEN_EXPIRED");
    let (status, v) = c.bearer(VERTEX, &vertex_body(), "ya29.made-up").await;
    assert_eq!((status, v["error"]["status"].as_str()), (401, Some("UNAUTHENTICATED")));

    // An assertion signed by another key, or a stale one, is refused.
    let other = service_account_json(include_str!("testdata/other-key.pem"), &format!("{}/token", c.base));
    let other = ServiceAccountKey::from_json(&other).unwrap();
    let (status, v) = c.token(other.exchange_body(unix(SystemTime::now())).unwrap()).await;
    assert_eq!((status, v["error"].as_str()), (400, Some("invalid_grant")));
    assert_eq!(v["error_description"], "Invalid JWT Signature.");
    let (status, v) = c.token(key.exchange_body(unix(SystemTime::now()) - 7200).unwrap()).await;
    assert_eq!((status, v["error"].as_str()), (400, Some("invalid_grant")));
    // google-auth signs for Google's own endpoint whatever the key's token_uri.
    let google_aud = service_account_json(pem, "https://oauth2.googleapis.com/token");
    let google_aud = ServiceAccountKey::from_json(&google_aud).unwrap();
    let (status, _) = c.token(google_aud.exchange_body(unix(SystemTime::now())).unwrap()).await;
    assert_eq!(status, 200);
    let (status, v) = c.token("grant_type=password&username=x".to_owned()).await;
    assert_eq!((status, v["error"].as_str()), (400, Some("unsupported_grant_type")));
    assert_eq!(c.state.counters().tokens_issued, 2);
}

#[tokio::test]
async fn metadata_server_issues_tokens_to_callers_that_say_so() {
    let c = start().await;
    let google = GoogleAuth { service_account: None, token_ttl: Duration::ZERO };
    c.state.set_auth(ChaosAuth { google: Some(google), ..ChaosAuth::default() });
    let url = format!("{}/computeMetadata/v1/instance/service-accounts/default/token", c.base);
    let resp = c.http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    let resp = c.http.get(&url).header("Metadata-Flavor", "Google").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["metadata-flavor"], "Google");
    let grant: Value = resp.json().await.unwrap();
    assert_eq!(grant["expires_in"], 0);
    // A zero lifetime issues tokens that are already expired.
    let (status, v) = c.bearer(VERTEX, &vertex_body(), grant["access_token"].as_str().unwrap()).await;
    assert_eq!((status, v["error"]["details"][0]["reason"].as_str()), (401, Some("ACCESS_TOKEN_EXPIRED")));
}
