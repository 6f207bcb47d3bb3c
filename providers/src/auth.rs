//! Credentials and request signing for the providers of docs/design.md §9, without I/O.
//!
//! - [`sigv4`] signs a Bedrock request with AWS Signature Version 4 and verifies one
//!   (the fake upstream checks signatures the way AWS does).
//! - [`aws`] holds the pure parts of the AWS credential chain: a Secret's keys, the
//!   environment, and the answers of STS, the container endpoint and instance metadata.
//! - [`gcp`] turns a Google service-account key into the signed JWT assertion that is
//!   exchanged for an access token, and parses the token answers.
//!
//! The gateway does the fetching, caching and refreshing; everything here takes the
//! time it needs as an argument.

pub mod aws;
pub mod gcp;
pub mod sigv4;
