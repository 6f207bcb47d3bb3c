//! `AccountLimitStatus` from what the AccountLimit reconciler found and did
//! ([`Outcome`]).
//!
//! Condition `Ready`:
//! - True (`Applied`): the ledger holds the spec's six limits for its subject;
//! - False (`Conflict`): an older AccountLimit owns the same subject (named);
//! - False (`UnknownAccount`, `UnknownKey`): the subject is not in the ledger, nothing
//!   was written;
//! - False (`Invalid`): the spec breaks a rule of the CRD (only when the API server
//!   did not check it);
//! - Unknown (`LedgerUnavailable`): the ledger could not be read or written; `applied`
//!   and `use` are kept from the previous status.

use std::time::SystemTime;

use sluice_crds::account_limit::{AccountLimitStatus, LimitUse};
use sluice_ledger::{Limits, MeterUse, format_usd};

use super::Transition;
use super::conditions::{Status, set_condition};
use super::format::{rfc3339, time};

/// What a reconcile of one AccountLimit found and did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The ledger holds the limits (`written`: this reconcile wrote them).
    Applied {
        /// `account team-a` or `key 7 of account team-a`.
        subject: String,
        /// The limits now in the ledger.
        limits: Limits,
        /// Whether this reconcile changed them.
        written: bool,
        /// Each limit's use now.
        uses: Vec<MeterUse>,
    },
    /// An older AccountLimit (`namespace/name`) owns the subject.
    Conflict {
        /// The subject.
        subject: String,
        /// The owner, `namespace/name`.
        owner: String,
    },
    /// No account of that name in the ledger.
    UnknownAccount(String),
    /// No such key, or one of another account; the message says which.
    UnknownKey(String),
    /// The spec breaks the CRD's rules (`field: message` each).
    Invalid(Vec<String>),
    /// The ledger failed.
    LedgerUnavailable(String),
}

impl Outcome {
    /// The `Ready` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Outcome::Applied { .. } => "Applied",
            Outcome::Conflict { .. } => "Conflict",
            Outcome::UnknownAccount(_) => "UnknownAccount",
            Outcome::UnknownKey(_) => "UnknownKey",
            Outcome::Invalid(_) => "Invalid",
            Outcome::LedgerUnavailable(_) => "LedgerUnavailable",
        }
    }
}

/// One limit's use as the status shows it: spend in USD, the window's end in RFC 3339
/// (none for concurrency, which has no window).
pub fn limit_use(u: &MeterUse) -> LimitUse {
    let amount = |n: i64| if u.meter.is_spend() { format_usd(n) } else { n.to_string() };
    let window_ends = (u.window_end_ms != i64::MAX)
        .then(|| u64::try_from(u.window_end_ms).ok())
        .flatten()
        .map(|ms| rfc3339(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms)));
    LimitUse {
        limit: u.meter.as_str().to_owned(),
        value: amount(u.limit),
        used: amount(u.used),
        allowed_now: amount(u.allowance),
        window_ends,
    }
}

/// Computes the status from the previous one.
pub fn limit_status(
    prev: Option<&AccountLimitStatus>,
    generation: Option<i64>,
    outcome: &Outcome,
    now: SystemTime,
) -> AccountLimitStatus {
    let mut next = prev.cloned().unwrap_or_default();
    next.observed_generation = generation;
    let (status, message) = match outcome {
        Outcome::Applied { subject, limits, uses, .. } => {
            next.applied = Some(true);
            next.uses = uses.iter().map(limit_use).collect();
            (Status::True, format!("the ledger holds the limits of {subject}: {limits}"))
        }
        Outcome::Conflict { subject, owner } => {
            next.applied = Some(false);
            next.uses.clear();
            let message = format!(
                "the limits of {subject} are owned by AccountLimit {owner}, the oldest AccountLimit naming it; \
                 this one is not applied"
            );
            (Status::False, message)
        }
        Outcome::UnknownAccount(account) => {
            next.applied = Some(false);
            next.uses.clear();
            let message = format!(
                "no account named {account:?} in the ledger (create it with `sluice-gateway admin account create`); \
                 nothing was written"
            );
            (Status::False, message)
        }
        Outcome::UnknownKey(why) => {
            next.applied = Some(false);
            next.uses.clear();
            (Status::False, format!("{why}; nothing was written"))
        }
        Outcome::Invalid(errors) => {
            next.applied = Some(false);
            next.uses.clear();
            (Status::False, errors.join("; "))
        }
        Outcome::LedgerUnavailable(e) => {
            (Status::Unknown, format!("the ledger could not be read or written: {e}; retrying"))
        }
    };
    set_condition(&mut next.conditions, "Ready", status, outcome.reason(), message, generation, &time(now));
    next
}

/// The event a reconcile calls for: `LimitsApplied` when it wrote the ledger, and a
/// warning (`Conflict`, `UnknownAccount`, `UnknownKey`, `Invalid`) when `Ready` turned
/// to that reason.
pub fn transition(
    prev: Option<&AccountLimitStatus>,
    next: &AccountLimitStatus,
    outcome: &Outcome,
) -> Option<Transition> {
    if let Outcome::Applied { subject, limits, written: true, .. } = outcome {
        return Some(Transition {
            warning: false,
            reason: "LimitsApplied",
            note: format!("wrote the limits of {subject} to the ledger: {limits}"),
        });
    }
    let was = prev.and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready")).map(|c| c.reason.as_str());
    let reason = outcome.reason();
    let warn = matches!(
        outcome,
        Outcome::Conflict { .. } | Outcome::UnknownAccount(_) | Outcome::UnknownKey(_) | Outcome::Invalid(_)
    );
    if !warn || was == Some(reason) {
        return None;
    }
    let note = next.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.message.clone()).unwrap_or_default();
    Some(Transition { warning: true, reason, note })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice_ledger::Meter;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_746_100_800 + secs)
    }

    fn applied(written: bool) -> Outcome {
        Outcome::Applied {
            subject: "account team-a".into(),
            limits: Limits { rpm: Some(600), daily_spend_nanos: Some(25_000_000_000), ..Limits::default() },
            written,
            uses: vec![
                MeterUse {
                    meter: Meter::Requests,
                    limit: 600,
                    used: 12,
                    allowance: 590,
                    window_end_ms: 1_746_100_860_000,
                },
                MeterUse { meter: Meter::Concurrency, limit: 32, used: 1, allowance: 32, window_end_ms: i64::MAX },
                MeterUse {
                    meter: Meter::DailySpend,
                    limit: 25_000_000_000,
                    used: 1_500_000_000,
                    allowance: 25_000_000_000,
                    window_end_ms: 1_746_144_000_000,
                },
            ],
        }
    }

    #[test]
    fn applied_limits_show_their_use_in_status() {
        let s = limit_status(None, Some(2), &applied(true), at(0));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(s.applied, Some(true));
        let ready = &s.conditions[0];
        assert_eq!((ready.type_.as_str(), ready.status.as_str(), ready.reason.as_str()), ("Ready", "True", "Applied"));
        assert_eq!(ready.message, "the ledger holds the limits of account team-a: rpm 600, daily_spend 25.00 USD");
        assert_eq!(
            s.uses,
            vec![
                LimitUse {
                    limit: "rpm".into(),
                    value: "600".into(),
                    used: "12".into(),
                    allowed_now: "590".into(),
                    window_ends: Some("2025-05-01T12:01:00Z".into()),
                },
                LimitUse {
                    limit: "concurrency".into(),
                    value: "32".into(),
                    used: "1".into(),
                    allowed_now: "32".into(),
                    window_ends: None,
                },
                LimitUse {
                    limit: "daily_spend".into(),
                    value: "25.00".into(),
                    used: "1.50".into(),
                    allowed_now: "25.00".into(),
                    window_ends: Some("2025-05-02T00:00:00Z".into()),
                },
            ]
        );
        let event = transition(None, &s, &applied(true)).expect("an event");
        assert_eq!((event.warning, event.reason), (false, "LimitsApplied"));
        assert_eq!(transition(Some(&s), &s, &applied(false)), None, "nothing written, nothing to tell");
    }

    #[test]
    fn a_conflict_names_the_owner_and_clears_what_was_applied() {
        let before = limit_status(None, Some(1), &applied(true), at(0));
        let outcome = Outcome::Conflict { subject: "account team-a".into(), owner: "team-b/older".into() };
        let s = limit_status(Some(&before), Some(1), &outcome, at(60));
        assert_eq!(s.applied, Some(false));
        assert!(s.uses.is_empty());
        let ready = &s.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Conflict"));
        assert!(ready.message.contains("owned by AccountLimit team-b/older"), "{}", ready.message);
        let event = transition(Some(&before), &s, &outcome).expect("a warning");
        assert_eq!((event.warning, event.reason), (true, "Conflict"));
        assert_eq!(transition(Some(&s), &s, &outcome), None, "told once");
    }

    #[test]
    fn unknown_subjects_and_ledger_failures() {
        let s = limit_status(None, Some(1), &Outcome::UnknownAccount("team-z".into()), at(0));
        assert_eq!((s.applied, s.conditions[0].reason.as_str()), (Some(false), "UnknownAccount"));
        assert!(s.conditions[0].message.starts_with("no account named \"team-z\""), "{}", s.conditions[0].message);
        let s = limit_status(None, Some(1), &Outcome::UnknownKey("no API key 9 in the ledger".into()), at(0));
        assert_eq!(s.conditions[0].message, "no API key 9 in the ledger; nothing was written");

        let before = limit_status(None, Some(1), &applied(true), at(0));
        let s = limit_status(Some(&before), Some(1), &Outcome::LedgerUnavailable("timed out".into()), at(30));
        assert_eq!((s.applied, s.uses.len()), (Some(true), 3), "kept");
        assert_eq!(
            (s.conditions[0].status.as_str(), s.conditions[0].reason.as_str()),
            ("Unknown", "LedgerUnavailable")
        );
        assert_eq!(transition(Some(&before), &s, &Outcome::LedgerUnavailable("timed out".into())), None);
    }
}
