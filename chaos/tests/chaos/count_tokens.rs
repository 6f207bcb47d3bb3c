//! Token counts as each provider serves them: Anthropic's `/v1/messages/count_tokens`,
//! Claude's `count-tokens:rawPredict` on Vertex AI (the model in the body), Bedrock's
//! CountTokens (an InvokeModel body, base64, for a foundation model, signed like any
//! Bedrock call). Each counts what the same request's answer bills.

use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sluice_chaos::{AwsKeys, ChaosAuth, GoogleAuth};
use sluice_providers::auth::sigv4;

use super::native::aws_error_type;
use super::{Chaos, start};

const PREFIX: &str = "/v1/projects/p/locations/us-east5/publishers/anthropic/models";
const CLAUDE: &str = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0";

fn conversation() -> Value {
    json!({"system": "be brief", "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
           "messages": [{"role": "user", "content": "how many tokens is this?"}]})
}

fn with(mut b: Value, members: Value) -> Value {
    for (k, v) in members.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn invoke_model(body: &Value) -> Value {
    json!({"input": {"invokeModel": {"body": B64.encode(body.to_string())}}})
}

fn keys() -> AwsKeys {
    AwsKeys { access_key_id: "AKIDCHAOS".to_owned(), secret_access_key: "chaos-secret".to_owned() }
}

impl Chaos {
    /// A Bedrock call to `path` signed with the keys the upstream checks.
    async fn signed_json(&self, path: &str, body: &Value) -> (u16, Option<String>, Value) {
        let url = format!("{}{path}", self.base);
        let body = serde_json::to_vec(body).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let req = sigv4::Request { method: "POST", url: &url, headers: &headers, body: &body };
        let signed = sigv4::sign(&req, &keys().credentials(), "us-east-1", sigv4::BEDROCK, SystemTime::now());
        for (name, value) in signed.unwrap() {
            headers.insert(name, value);
        }
        let resp = self.http.post(&url).headers(headers).body(body).send().await.unwrap();
        let status = resp.status().as_u16();
        let kind = resp.headers().get("x-amzn-errortype").map(|v| v.to_str().unwrap().to_owned());
        (status, kind, resp.json().await.unwrap())
    }
}

#[tokio::test]
async fn every_count_is_what_the_answer_bills() {
    let c = start().await;
    let version = [("anthropic-version", "2023-06-01")];
    let (status, billed) =
        c.call_json("/v1/messages", &with(conversation(), json!({"model": "c", "max_tokens": 5})), &version).await;
    assert_eq!(status, 200, "{billed}");
    let billed = billed["usage"]["input_tokens"].as_u64().unwrap();
    assert!(billed > 1);

    let counted = with(conversation(), json!({"model": "c"}));
    let (status, v) = c.call_json("/v1/messages/count_tokens", &counted, &version).await;
    assert_eq!((status, v), (200, json!({"input_tokens": billed})));

    let vertex = with(conversation(), json!({"model": "claude@1", "anthropic_version": "vertex-2023-10-16"}));
    let (status, v) = c.call_json(&format!("{PREFIX}/count-tokens:rawPredict"), &vertex, &[]).await;
    assert_eq!((status, v), (200, json!({"input_tokens": billed})));

    let invoke = with(conversation(), json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1}));
    let (status, v) = c.call_json(&format!("{CLAUDE}/count-tokens"), &invoke_model(&invoke), &[]).await;
    assert_eq!((status, v), (200, json!({"inputTokens": billed})));
    assert_eq!(c.state.requests(), 1, "a count is not an inference call");
}

#[tokio::test]
async fn a_count_in_the_wrong_shape_gets_the_providers_own_400() {
    let c = start().await;
    let count = format!("{PREFIX}/count-tokens:rawPredict");
    let (status, v) = c.call_json(&count, &conversation(), &[]).await;
    assert_eq!((status, &v["error"]["message"]), (400, &json!("model: Field required")));
    let (status, v) = c.call_json(&count, &with(conversation(), json!({"model": "m", "max_tokens": 5})), &[]).await;
    assert_eq!((status, &v["error"]["type"]), (400, &json!("invalid_request_error")));
    assert_eq!(v["error"]["message"], "max_tokens: Extra inputs are not permitted");
    let stream = format!("{PREFIX}/count-tokens:streamRawPredict");
    assert_eq!(c.call_json(&stream, &with(conversation(), json!({"model": "m"})), &[]).await.0, 404);

    let no_bound = with(conversation(), json!({"anthropic_version": "bedrock-2023-05-31"}));
    let (status, resp) = c.call(&format!("{CLAUDE}/count-tokens"), &invoke_model(&no_bound), &[]).await;
    assert_eq!(status, 400);
    assert!(aws_error_type(&resp).starts_with("ValidationException"));
    assert_eq!(resp.json::<Value>().await.unwrap()["message"], "max_tokens: Field required");
    let bounded = with(no_bound, json!({"max_tokens": 1}));
    let profile = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens";
    let (status, resp) = c.call(profile, &invoke_model(&bounded), &[]).await;
    assert_eq!(status, 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["message"], "The provided model doesn't support counting tokens.");
    let (status, v) = c.call_json(&format!("{CLAUDE}/count-tokens"), &json!({"invokeModel": {}}), &[]).await;
    assert_eq!(status, 400);
    assert!(v["message"].as_str().unwrap().contains("Value null at 'input'"), "{v}");
}

#[tokio::test]
async fn counts_check_credentials_like_the_other_calls() {
    let c = start().await;
    let google = GoogleAuth { service_account: None, token_ttl: std::time::Duration::from_secs(600) };
    c.state.set_auth(ChaosAuth { google: Some(google), aws: Some(keys()), ..ChaosAuth::default() });
    let count = format!("{PREFIX}/count-tokens:rawPredict");
    let vertex = with(conversation(), json!({"model": "claude@1"}));
    let (status, v) = c.call_json(&count, &vertex, &[]).await;
    assert_eq!((status, v["error"]["details"][0]["reason"].as_str()), (401, Some("CREDENTIALS_MISSING")));
    let url = format!("{}/computeMetadata/v1/instance/service-accounts/default/token", c.base);
    let grant: Value = c.http.get(&url).header("Metadata-Flavor", "Google").send().await.unwrap().json().await.unwrap();
    let bearer = format!("Bearer {}", grant["access_token"].as_str().unwrap());
    let (status, v) = c.call_json(&count, &vertex, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200, "{v}");

    let invoke =
        invoke_model(&with(conversation(), json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1})));
    let path = format!("{CLAUDE}/count-tokens");
    let (status, resp) = c.call(&path, &invoke, &[]).await;
    assert_eq!(status, 403);
    assert!(aws_error_type(&resp).starts_with("MissingAuthenticationTokenException"));
    let (status, kind, v) = c.signed_json(&path, &invoke).await;
    assert_eq!((status, kind), (200, None), "{v}");
    assert!(v["inputTokens"].as_u64().is_some_and(|n| n > 1), "{v}");
}

#[tokio::test]
async fn scripted_failures_fail_counts_in_the_providers_shape() {
    let c = start().await;
    c.state.set_script(sluice_chaos::Script { status: Some(529), ..sluice_chaos::Script::default() }).unwrap();
    let count = format!("{PREFIX}/count-tokens:rawPredict");
    let (status, v) = c.call_json(&count, &with(conversation(), json!({"model": "claude@1"})), &[]).await;
    assert_eq!((status, &v["error"]["type"]), (529, &json!("overloaded_error")));
    c.state.set_script(sluice_chaos::Script { status: Some(503), ..sluice_chaos::Script::default() }).unwrap();
    let invoke =
        invoke_model(&with(conversation(), json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1})));
    let (status, resp) = c.call(&format!("{CLAUDE}/count-tokens"), &invoke, &[]).await;
    assert_eq!(status, 503);
    assert!(aws_error_type(&resp).starts_with("ServiceUnavailableException"), "{}", aws_error_type(&resp));
}
