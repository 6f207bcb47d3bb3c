//! RS256 JWTs: signing the assertion and checking one (the fake token endpoint).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, RsaKeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use super::{CLOUD_PLATFORM_SCOPE, GcpAuthError, MAX_ASSERTION_LIFETIME};

/// The claims of a service-account assertion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The service account's email.
    pub iss: String,
    /// Space-separated scopes.
    pub scope: String,
    /// The token endpoint.
    pub aud: String,
    /// Issued at, unix seconds.
    pub iat: u64,
    /// Expires at, unix seconds.
    pub exp: u64,
}

#[derive(Serialize, Deserialize)]
struct Header<'a> {
    alg: &'a str,
    typ: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kid: Option<&'a str>,
}

/// Signs `claims` as `header.claims.signature` (base64url without padding).
pub(super) fn sign(key: &RsaKeyPair, kid: &str, claims: &Claims) -> Result<String, GcpAuthError> {
    let header = Header { alg: "RS256", typ: Some("JWT"), kid: Some(kid).filter(|k| !k.is_empty()) };
    let header = serde_json::to_vec(&header).map_err(|_| GcpAuthError::Sign)?;
    let claims = serde_json::to_vec(claims).map_err(|_| GcpAuthError::Sign)?;
    let mut out = format!("{}.{}", B64.encode(header), B64.encode(claims));
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), out.as_bytes(), &mut signature)
        .map_err(|_| GcpAuthError::Sign)?;
    out.push('.');
    out.push_str(&B64.encode(signature));
    Ok(out)
}

/// Checks an assertion as Google's token endpoint does: RS256 signature by
/// `public_key_der` (PKCS#1 `RSAPublicKey`, see `ServiceAccountKey::public_key_der`),
/// `aud` equal to `expected_aud`, the `cloud-platform` scope among its scopes,
/// `exp - iat` at most an hour, and `now_unix` inside `[iat - 60, exp]`.
/// The error is an OAuth2 `error_description`-style message.
pub fn verify_assertion(
    assertion: &str,
    public_key_der: &[u8],
    expected_aud: &str,
    now_unix: u64,
) -> Result<Claims, String> {
    let mut parts = assertion.split('.');
    let (Some(header), Some(claims), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("Invalid JWT: expected three segments".to_owned());
    };
    let decode = |part: &str| B64.decode(part).map_err(|_| "Invalid JWT: bad base64url".to_owned());
    let header_json = decode(header)?;
    let header: Header<'_> = serde_json::from_slice(&header_json).map_err(|_| "Invalid JWT: bad header".to_owned())?;
    if header.alg != "RS256" {
        return Err(format!("Invalid JWT: alg {} is not RS256", header.alg));
    }
    let signed_len = assertion.len() - signature.len() - 1;
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public_key_der)
        .verify(&assertion.as_bytes()[..signed_len], &decode(signature)?)
        .map_err(|_| "Invalid JWT Signature.".to_owned())?;
    let claims: Claims = serde_json::from_slice(&decode(claims)?).map_err(|_| "Invalid JWT: bad claims".to_owned())?;
    if claims.aud != expected_aud {
        return Err(format!("Invalid JWT: aud {:?} is not {expected_aud:?}", claims.aud));
    }
    if !claims.scope.split(' ').any(|s| s == CLOUD_PLATFORM_SCOPE) {
        return Err(format!("Invalid JWT: scope {:?} lacks cloud-platform", claims.scope));
    }
    if claims.exp < claims.iat || claims.exp - claims.iat > MAX_ASSERTION_LIFETIME {
        return Err("Invalid JWT: exp must be at most one hour after iat".to_owned());
    }
    if now_unix + 60 < claims.iat || now_unix > claims.exp {
        return Err("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. \
             Check your iat and exp values in the JWT claim."
            .to_owned());
    }
    Ok(claims)
}
