//! The pure parts of the AWS credential chain: Secret keys, environment, STS web
//! identity (AWS's documented example answers), container credentials and IMDSv2.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use sluice_providers::auth::aws::{self, AwsCredentials, ContainerEndpoint, CredentialsError, WebIdentity, imds};

fn at(unix: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(unix)
}

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
}

#[test]
fn credentials_from_a_secret() {
    let mut data: BTreeMap<&str, &[u8]> = BTreeMap::new();
    data.insert("AWS_ACCESS_KEY_ID", b"AKIAIOSFODNN7EXAMPLE\n");
    data.insert("AWS_SECRET_ACCESS_KEY", b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    let creds = AwsCredentials::from_secret("bedrock-keys", |k| data.get(k).copied()).unwrap();
    assert_eq!(creds, AwsCredentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"));

    data.insert("AWS_SESSION_TOKEN", b"token");
    let creds = AwsCredentials::from_secret("bedrock-keys", |k| data.get(k).copied()).unwrap();
    assert_eq!(creds.session_token.as_deref(), Some("token"));

    data.remove("AWS_SECRET_ACCESS_KEY");
    let err = AwsCredentials::from_secret("bedrock-keys", |k| data.get(k).copied()).unwrap_err();
    assert_eq!(err.to_string(), "Secret bedrock-keys has no AWS_SECRET_ACCESS_KEY");
}

#[test]
fn credentials_from_the_environment() {
    assert_eq!(AwsCredentials::from_env(env(&[])), Ok(None));
    let vars = [("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "S"), ("AWS_SESSION_TOKEN", "T")];
    let creds = AwsCredentials::from_env(env(&vars)).unwrap().unwrap();
    assert_eq!((creds.access_key_id.as_str(), creds.session_token.as_deref()), ("AKID", Some("T")));
    assert!(matches!(
        AwsCredentials::from_env(env(&[("AWS_ACCESS_KEY_ID", "AKID")])),
        Err(CredentialsError::Missing { key: "AWS_SECRET_ACCESS_KEY", .. })
    ));
    assert_eq!(aws::region_from_env(env(&[("AWS_DEFAULT_REGION", "eu-west-1")])).as_deref(), Some("eu-west-1"));
    assert_eq!(
        aws::region_from_env(env(&[("AWS_DEFAULT_REGION", "eu-west-1"), ("AWS_REGION", "us-west-2")])).as_deref(),
        Some("us-west-2")
    );
}

#[test]
fn web_identity_settings_and_sts_request() {
    assert_eq!(WebIdentity::from_env(env(&[("AWS_ROLE_ARN", "arn")])), None);
    let vars = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/sluice"),
        ("AWS_REGION", "us-east-1"),
    ];
    let wi = WebIdentity::from_env(env(&vars)).unwrap();
    assert_eq!(wi.sts_endpoint, "https://sts.us-east-1.amazonaws.com");
    assert_eq!(wi.session_name, "sluice");
    assert_eq!(
        wi.request_body("eyJhbGciOi.J9x+y/z=\n"),
        "Action=AssumeRoleWithWebIdentity&Version=2011-06-15\
         &RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fsluice\
         &RoleSessionName=sluice&WebIdentityToken=eyJhbGciOi.J9x%2By%2Fz%3D"
    );
    let vars = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
        ("AWS_ROLE_ARN", "arn"),
        ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:4566/"),
        ("AWS_ROLE_SESSION_NAME", "gw-1"),
    ];
    let wi = WebIdentity::from_env(env(&vars)).unwrap();
    assert_eq!((wi.sts_endpoint.as_str(), wi.session_name.as_str()), ("http://127.0.0.1:4566", "gw-1"));
}

/// AWS's documented AssumeRoleWithWebIdentity example answer.
const STS_OK: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>amzn1.account.AF6RHO7KZU5XRVQJGXK6HB56KR2A</SubjectFromWebIdentityToken>
    <Audience>client.5498841531868486423.1548@apps.example.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/FederatedWebIdentityRole/app1</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:app1</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2014-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <SourceIdentity>SourceIdentityValue</SourceIdentity>
    <Provider>www.amazon.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

#[test]
fn parses_the_sts_answer() {
    let creds = aws::parse_sts_response(STS_OK.as_bytes()).unwrap();
    assert_eq!(creds.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
    assert_eq!(creds.secret_access_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY");
    assert_eq!(creds.session_token.as_deref(), Some("AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE"));
    assert_eq!(creds.expires_at, Some(at(1_414_191_623)));
    assert!(creds.needs_refresh(at(1_414_191_623 - 299), Duration::from_secs(300)));
    assert!(!creds.needs_refresh(at(1_414_191_623 - 301), Duration::from_secs(300)));
}

#[test]
fn parses_sts_errors_and_refuses_garbage() {
    let refused = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>InvalidIdentityToken</Code>
    <Message>No OpenIDConnect provider found in your account for https://oidc.example &amp; co</Message>
  </Error>
  <RequestId>c5b4d5e3-0000-0000-0000-EXAMPLE</RequestId>
</ErrorResponse>"#;
    assert_eq!(
        aws::parse_sts_response(refused.as_bytes()),
        Err(CredentialsError::Refused {
            what: "STS",
            code: "InvalidIdentityToken".to_owned(),
            message: "No OpenIDConnect provider found in your account for https://oidc.example & co".to_owned(),
        })
    );
    assert!(aws::parse_sts_response(b"<html>503</html>").is_err());
    let no_token = STS_OK.replace("<SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>", "");
    assert!(aws::parse_sts_response(no_token.as_bytes()).is_err());
}

#[test]
fn container_endpoint_and_its_json() {
    assert_eq!(ContainerEndpoint::from_env(env(&[])), None);
    let rel =
        ContainerEndpoint::from_env(env(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc")])).unwrap();
    assert_eq!(rel.url, "http://169.254.170.2/v2/credentials/abc");
    let pod_identity = ContainerEndpoint::from_env(env(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
        ),
    ]))
    .unwrap();
    assert_eq!(pod_identity.url, "http://169.254.170.23/v1/credentials");
    assert!(pod_identity.authorization_file.is_some() && pod_identity.authorization.is_none());

    let body = br#"{"AccessKeyId":"ASIAEXAMPLE","SecretAccessKey":"secret","Token":"token","Expiration":"2026-12-01T06:03:22Z","RoleArn":"arn:aws:iam::1:role/x"}"#;
    let creds = aws::parse_credentials_json(body).unwrap();
    assert_eq!(creds.access_key_id, "ASIAEXAMPLE");
    assert_eq!(creds.expires_at, Some(at(1_796_105_002)));
}

#[test]
fn imds_v2_answers() {
    assert_eq!(imds::endpoint(env(&[])), "http://169.254.169.254");
    assert_eq!(
        imds::endpoint(env(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1338/")])),
        "http://127.0.0.1:1338"
    );
    assert_eq!(imds::role_name("\nsluice-node-role\n"), Some("sluice-node-role"));
    let body = br#"{
  "Code" : "Success",
  "LastUpdated" : "2026-12-01T05:03:22Z",
  "Type" : "AWS-HMAC",
  "AccessKeyId" : "ASIAIMDSEXAMPLE",
  "SecretAccessKey" : "imds-secret",
  "Token" : "imds-token",
  "Expiration" : "2026-12-01T06:03:22.123Z"
}"#;
    let creds = aws::parse_credentials_json(body).unwrap();
    assert_eq!(creds.session_token.as_deref(), Some("imds-token"));
    assert_eq!(creds.expires_at, Some(at(1_796_105_002)));
    let failed = br#"{"Code":"AssumeRoleUnauthorizedAccess","Message":"denied","LastUpdated":"2026-12-01T05:03:22Z"}"#;
    assert!(
        matches!(aws::parse_credentials_json(failed), Err(CredentialsError::Refused { code, .. }) if code == "AssumeRoleUnauthorizedAccess")
    );
}

#[test]
fn timestamps_parse_as_utc() {
    assert_eq!(aws::parse_timestamp("2000-02-29T00:00:00Z"), Some(at(951_782_400)));
    assert_eq!(aws::parse_timestamp("2014-10-24T23:00:23+00:00"), Some(at(1_414_191_623)));
    assert_eq!(aws::parse_timestamp("2014-13-24T23:00:23Z"), None);
    assert_eq!(aws::parse_timestamp("2014-10-24 23:00:23"), None);
}
