//! Token counts: Anthropic's `/v1/messages/count_tokens`, Claude's
//! `count-tokens:rawPredict` on Vertex AI and Bedrock's CountTokens, answered with the
//! input tokens the same request's answer bills (`{"input_tokens": N}`; Bedrock
//! `{"inputTokens": N}`).
//!
//! A count goes the way of a whole (non-streamed) call — plan → read the body → check
//! auth → check the body → delay before headers → hang → reset before headers →
//! scripted error → answer — but it is not counted as an inference call.

use axum::extract::Request;
use axum::extract::connect_info::ConnectInfo;
use axum::response::Response;
use bytes::Bytes;

use super::errors;
use super::request::count::Counted;
use crate::ChaosState;
use crate::conn::ConnHandle;
use crate::endpoints::BODY_LIMIT;
use crate::plan::json_response;
use crate::protocol::{Call, Protocol};
use crate::stream::sleep;

/// Answers the count `call` (`call.count_tokens`).
pub(super) async fn count(state: ChaosState, call: &Call, request: Request) -> Response {
    let (protocol, family) = (call.protocol, call.family);
    let (parts, body) = request.into_parts();
    let conn = parts.extensions.get::<ConnectInfo<ConnHandle>>().map(|ConnectInfo(handle)| handle.clone());
    let plan = match state.plan_for(&parts.headers) {
        Ok(plan) => plan,
        Err(e) => return errors::invalid(family, &e.to_string()),
    };
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(body) => body,
        Err(e) => return errors::invalid(family, &format!("cannot read request body: {e}")),
    };
    if let Some(response) = state.refuse_auth(protocol, &parts, &body) {
        return response;
    }
    if protocol == Protocol::Anthropic && !parts.headers.contains_key("anthropic-version") {
        return errors::invalid(family, "anthropic-version: header is required");
    }
    let counted = match Counted::parse(call, &body) {
        Ok(counted) => counted,
        Err(invalid) => return errors::refuse(family, &invalid),
    };
    sleep(plan.headers_delay).await;
    sleep(plan.first_byte).await;
    let counters = &state.inner.counters;
    if plan.hang {
        counters.hang();
        return std::future::pending().await;
    }
    if plan.reset_after == Some(0) {
        counters.reset();
        return crate::endpoints::reset_before_headers(conn);
    }
    if let Some(reply) = plan.failure(counted.answers_tool) {
        return errors::scripted(protocol, reply);
    }
    let n = counted.input_tokens;
    let answer = match protocol {
        Protocol::Bedrock => serde_json::json!({"inputTokens": n}),
        _ => serde_json::json!({"input_tokens": n}),
    };
    json_response(plan.success_status, Bytes::from(answer.to_string()))
}
