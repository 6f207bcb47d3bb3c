//! The headers the gateway reads and writes (docs/design.md §3.1), as values made once: a
//! header name given as a string is parsed again on every insert.

use http::{HeaderMap, HeaderName, HeaderValue};

/// `x-request-id`: echoed, or made, on every answer and sent upstream.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `x-sluice-upstream`: the upstream that served.
pub const X_SLUICE_UPSTREAM: HeaderName = HeaderName::from_static("x-sluice-upstream");
/// `x-sluice-attempts`: attempts made.
pub const X_SLUICE_ATTEMPTS: HeaderName = HeaderName::from_static("x-sluice-attempts");
/// `x-sluice-failover`: why each failed attempt failed over.
pub const X_SLUICE_FAILOVER: HeaderName = HeaderName::from_static("x-sluice-failover");
/// The hints a translated Messages request was sent without (docs/gateway.md).
pub const X_SLUICE_DROPPED: HeaderName = HeaderName::from_static("x-sluice-dropped");

/// Longest client-chosen request id kept; a longer one is replaced.
const MAX_CLIENT_ID: usize = 128;

/// A request's id: the client's `x-request-id` when it is 1–128 visible ASCII
/// characters, else a new `req_` + 32 hex digits. Kept as the header value it is sent as.
#[derive(Clone, Debug)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id of a request with these headers.
    pub fn of(headers: &HeaderMap) -> Self {
        match headers.get(X_REQUEST_ID) {
            Some(v) if !v.is_empty() && v.len() <= MAX_CLIENT_ID && v.to_str().is_ok() => Self(v.clone()),
            _ => Self::new(),
        }
    }

    /// A new random id.
    pub fn new() -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n: u128 = rand::random();
        let mut id = *b"req_00000000000000000000000000000000";
        for (i, digit) in id[4..].iter_mut().enumerate() {
            *digit = HEX[((n >> (124 - 4 * i)) & 0xf) as usize];
        }
        // Hex digits are always a valid header value.
        Self(HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("req_unknown")))
    }

    /// As text (always visible ASCII).
    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }

    /// As a header value.
    pub fn header(&self) -> HeaderValue {
        self.0.clone()
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_sane_client_id_and_replaces_others() {
        let mut h = HeaderMap::new();
        assert!(RequestId::of(&h).as_str().starts_with("req_"));
        h.insert(X_REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(RequestId::of(&h).as_str(), "abc-123");
        h.insert(X_REQUEST_ID, HeaderValue::from_str(&"x".repeat(129)).unwrap());
        assert!(RequestId::of(&h).as_str().starts_with("req_"));
        h.insert(X_REQUEST_ID, HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert!(RequestId::of(&h).as_str().starts_with("req_"));
        let a = RequestId::new();
        assert_eq!(a.as_str().len(), 36);
        assert!(a.as_str()[4..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), RequestId::new().as_str());
    }
}
