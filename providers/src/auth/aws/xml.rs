//! A tiny extractor for STS's XML answers: STS answers only in XML, and the few
//! elements read here do not justify an XML crate. Elements are found by name inside
//! their parent; text is entity-decoded; anything unexpected is `Malformed`.

use super::{AwsCredentials, CredentialsError, parse_timestamp};

const WHAT: &str = "STS AssumeRoleWithWebIdentity answer";

/// Parses an `AssumeRoleWithWebIdentityResponse` (its `Credentials` element) or an
/// `ErrorResponse` (→ [`CredentialsError::Refused`] with STS's code and message).
pub fn parse_sts_response(body: &[u8]) -> Result<AwsCredentials, CredentialsError> {
    let text = std::str::from_utf8(body).map_err(|_| malformed("not UTF-8"))?;
    if let Some(error) = element(text, "Error") {
        return Err(CredentialsError::Refused {
            what: "STS",
            code: element(error, "Code").map(decode).unwrap_or_default(),
            message: element(error, "Message").map(decode).unwrap_or_default(),
        });
    }
    let creds = element(text, "Credentials").ok_or_else(|| malformed("no Credentials element"))?;
    let field = |name: &'static str| {
        element(creds, name).map(decode).filter(|v| !v.is_empty()).ok_or_else(|| malformed(&format!("no {name}")))
    };
    let expiration = field("Expiration")?;
    Ok(AwsCredentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expires_at: Some(
            parse_timestamp(&expiration).ok_or_else(|| malformed(&format!("bad Expiration {expiration:?}")))?,
        ),
    })
}

fn malformed(reason: &str) -> CredentialsError {
    CredentialsError::Malformed { what: WHAT, reason: reason.to_owned() }
}

/// The inner text of the first `<name>…</name>` (an opening tag may carry attributes).
fn element<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    loop {
        let at = from + text[from..].find('<')?;
        if let Some(after) = text[at + 1..].strip_prefix(name)
            && matches!(after.chars().next(), Some('>' | ' ' | '\t' | '\n' | '\r'))
        {
            let open_end = at + 1 + name.len() + after.find('>')? + 1;
            let close = format!("</{name}>");
            let len = text[open_end..].find(&close)?;
            return Some(&text[open_end..open_end + len]);
        }
        from = at + 1;
    }
}

fn decode(text: &str) -> String {
    text.trim()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}
