//! The integration tests of sluice-providers: one binary, one module per area under
//! `providers/` (docs/contributing.md).

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

#[path = "providers/anthropic.rs"]
mod anthropic;
#[path = "providers/aws.rs"]
mod aws;
#[path = "providers/bedrock.rs"]
mod bedrock;
#[path = "providers/bedrock_errors.rs"]
mod bedrock_errors;
#[path = "providers/eventstream.rs"]
mod eventstream;
#[path = "providers/fixture.rs"]
mod fixture;
#[path = "providers/gcp.rs"]
mod gcp;
#[path = "providers/gemini.rs"]
mod gemini;
#[path = "providers/malformed.rs"]
mod malformed;
#[path = "providers/openai.rs"]
mod openai;
#[path = "providers/regressions.rs"]
mod regressions;
#[path = "providers/requests.rs"]
mod requests;
#[path = "providers/sigv4.rs"]
mod sigv4;
#[path = "providers/sigv4_verify.rs"]
mod sigv4_verify;
#[path = "providers/streams.rs"]
mod streams;
