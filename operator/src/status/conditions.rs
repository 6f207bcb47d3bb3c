//! Kubernetes conditions: [`set_condition`] keeps `lastTransitionTime` unless the
//! condition's status actually changes, as API conventions ask.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl Status {
    /// `True` or `False`.
    pub fn from_bool(value: bool) -> Status {
        if value { Status::True } else { Status::False }
    }

    /// As written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Sets condition `type_` in `conditions`: a new condition, or an existing one whose
/// status changed, gets `lastTransitionTime = now`; otherwise only reason, message and
/// observedGeneration are refreshed and the transition time is kept. Order is stable
/// (new types are appended).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status.as_str() {
                c.status = status.as_str().into();
                c.last_transition_time = now.clone();
            }
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.as_str().into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// `message` with a pointer to its runbook in docs/operate.md (`anchor` is a heading
/// there, checked by the chart's docs test), for a condition that needs someone.
pub fn with_runbook(message: impl Into<String>, anchor: &str) -> String {
    format!("{}; runbook: docs/operate.md#{anchor}", message.into())
}

/// The status of condition `type_`, if set.
pub fn status_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::status::format::time;

    fn at(secs: u64) -> Time {
        time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs))
    }

    #[test]
    fn a_new_condition_gets_the_transition_time() {
        let mut cs = Vec::new();
        set_condition(&mut cs, "Ready", Status::True, "Serving", "ok", Some(3), &at(0));
        assert_eq!(cs.len(), 1);
        assert_eq!(
            (cs[0].status.as_str(), cs[0].reason.as_str(), cs[0].observed_generation),
            ("True", "Serving", Some(3))
        );
        assert_eq!(cs[0].last_transition_time, at(0));
    }

    #[test]
    fn same_status_keeps_the_transition_time_but_refreshes_the_rest() {
        let mut cs = Vec::new();
        set_condition(&mut cs, "Ready", Status::True, "Serving", "2/2 replicas", Some(1), &at(0));
        set_condition(&mut cs, "Ready", Status::True, "Serving", "1/2 replicas", Some(2), &at(60));
        assert_eq!(cs[0].last_transition_time, at(0));
        assert_eq!(cs[0].message, "1/2 replicas");
        assert_eq!(cs[0].observed_generation, Some(2));
    }

    #[test]
    fn a_status_change_bumps_the_transition_time() {
        let mut cs = Vec::new();
        set_condition(&mut cs, "Ready", Status::True, "Serving", "", Some(1), &at(0));
        set_condition(&mut cs, "Ready", Status::False, "GatewayUnavailable", "0/2", Some(1), &at(60));
        assert_eq!(cs[0].last_transition_time, at(60));
        assert_eq!(cs[0].status, "False");
        set_condition(&mut cs, "Ready", Status::Unknown, "GatewayPending", "", Some(1), &at(90));
        assert_eq!(cs[0].last_transition_time, at(90));
        // A reason change alone is not a transition.
        set_condition(&mut cs, "Ready", Status::Unknown, "Other", "", Some(1), &at(120));
        assert_eq!(cs[0].last_transition_time, at(90));
    }

    #[test]
    fn types_are_independent_and_keep_their_order() {
        let mut cs = Vec::new();
        set_condition(&mut cs, "ResolvedRefs", Status::True, "Resolved", "", None, &at(0));
        set_condition(&mut cs, "Ready", Status::True, "Serving", "", None, &at(0));
        set_condition(&mut cs, "ResolvedRefs", Status::False, "NoCandidateResolved", "", None, &at(5));
        let types: Vec<&str> = cs.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["ResolvedRefs", "Ready"]);
        assert_eq!(status_of(&cs, "Ready"), Some("True"));
        assert_eq!(cs[1].last_transition_time, at(0));
        assert_eq!(status_of(&cs, "Degraded"), None);
    }
}
