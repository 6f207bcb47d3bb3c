//! The AccountLimit reconciler: an AccountLimit's limits → the ledger
//! (docs/design.md §2, §7).
//!
//! Each AccountLimit owns all six limits of its subject (an account, or one key of it):
//! it writes the full set, a field it leaves out as no limit. Of several AccountLimits
//! naming one subject (in any namespaces) the oldest owns it ([`owner`]:
//! `creationTimestamp`, then namespace/name); the others report `Ready=False`
//! (`Conflict`) and write nothing.
//!
//! Per reconcile:
//! 1. no finalizer [`FINALIZER`] yet: JSON-patch it on, and stop (the change triggers
//!    the next run);
//! 2. when this resource owns its subject and the subject is in the ledger (the account,
//!    and `keyId` a key of that account): read the subject's limits, write the spec's
//!    six when they differ (so a change made with `admin` is overwritten), read each
//!    limit's use;
//! 3. `POST` an event (`LimitsApplied` when it wrote; `Conflict`, `UnknownAccount`,
//!    `UnknownKey` when `Ready` turns so), and patch the status when it changed.
//!
//! On deletion the owner removes the six limits (all `None`), then the finalizer goes; a
//! resource that did not own its subject leaves the ledger alone. Also run for every
//! AccountLimit each status interval (the `use` figures), and for the other
//! AccountLimits of a subject when one of them changes or goes (a new owner takes over).

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use sluice_crds::AccountLimit;
use sluice_crds::account_limit::{LimitSubject, LimitValues, resolve};
use sluice_ledger::{KeySelector, Ledger, LedgerError, Limits, LimitsUpdate, Meter, Subject};

use super::{Context, patch_status};
use crate::error::Error;
use crate::metrics::Kind;
use crate::status::limits::{Outcome, limit_status, transition};

/// Finalizer on every AccountLimit: its limits are removed from the ledger before it goes.
pub const FINALIZER: &str = "sluice.dev/limits";

/// Reconciles one AccountLimit.
pub async fn reconcile(limit: Arc<AccountLimit>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(Kind::AccountLimit);
    let namespace = limit.namespace().ok_or_else(|| Error::NoNamespace(limit.name_any()))?;
    ctx.caches_ready().await?;
    let api: Api<AccountLimit> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, limit, |event| {
        let ctx = ctx.clone();
        async move {
            match event {
                FinalizerEvent::Apply(limit) => apply(&ctx, &limit).await,
                FinalizerEvent::Cleanup(limit) => cleanup(&ctx, &limit).await,
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// `namespace/name`.
pub fn key_of(limit: &AccountLimit) -> String {
    format!("{}/{}", limit.namespace().unwrap_or_default(), limit.name_any())
}

/// The owner of `limit`'s subject among `limit` and the cached AccountLimits: the
/// oldest by `creationTimestamp`, then by namespace/name. Ones being deleted count
/// (an owner removes its limits before it goes, and only then may the next one write).
pub fn owner(limit: &AccountLimit, cached: &[Arc<AccountLimit>]) -> String {
    let subject = limit.spec.subject();
    let rank = |l: &AccountLimit| (l.metadata.creation_timestamp.as_ref().map(|t| t.0), key_of(l));
    let me = key_of(limit);
    cached
        .iter()
        .map(|l| &**l)
        .filter(|l| key_of(l) != me && l.spec.subject() == subject)
        .chain(std::iter::once(limit))
        .min_by_key(|l| rank(l))
        .map_or(me.clone(), key_of)
}

/// The other cached AccountLimits naming the subject `limit` names: the ones to
/// reconcile when it changes or goes.
pub fn peers(
    store: &Store<AccountLimit>,
    limit: &AccountLimit,
) -> Vec<kube::runtime::reflector::ObjectRef<AccountLimit>> {
    let (me, subject) = (key_of(limit), limit.spec.subject());
    store
        .state()
        .iter()
        .filter(|l| key_of(l) != me && l.spec.subject() == subject)
        .map(|l| kube::runtime::reflector::ObjectRef::from_obj(&**l))
        .collect()
}

/// The ledger's view of a subject.
enum Found {
    /// It exists.
    Subject(Subject),
    /// No account of that name.
    UnknownAccount,
    /// No such key, or a key of another account (why).
    UnknownKey(String),
}

async fn find(ledger: &Ledger, subject: &LimitSubject) -> Result<Found, LedgerError> {
    let Some(account) = ledger.account(&subject.account).await? else { return Ok(Found::UnknownAccount) };
    let Some(id) = subject.key_id else { return Ok(Found::Subject(Subject::Account(account.id))) };
    match ledger.key(KeySelector::Id(id)).await {
        Ok((_, account_id)) if account_id == account.id => Ok(Found::Subject(Subject::Key(id))),
        Ok((key, _)) => Ok(Found::UnknownKey(format!(
            "API key {id} is not a key of account {:?} (it is account {:?}'s)",
            subject.account, key.account
        ))),
        Err(LedgerError::UnknownKey(_)) => Ok(Found::UnknownKey(format!("no API key {id} in the ledger"))),
        Err(e) => Err(e),
    }
}

fn to_limits(v: LimitValues) -> Limits {
    Limits {
        rpm: v.rpm,
        tpm: v.tpm,
        tpd: v.tpd,
        concurrency: v.concurrency,
        daily_spend_nanos: v.daily_spend_nanos,
        monthly_spend_nanos: v.monthly_spend_nanos,
    }
}

/// All six meters of `limits`, `None` where unlimited: the whole set, so that the
/// resource owns every limit of its subject.
pub fn full_update(limits: &Limits) -> LimitsUpdate {
    LimitsUpdate(Meter::ALL.iter().map(|m| (*m, limits.get(*m))).collect())
}

async fn write(ledger: &Ledger, subject: &LimitSubject, found: Subject, limits: &Limits) -> Result<(), LedgerError> {
    let update = full_update(limits);
    match found {
        Subject::Account(_) => ledger.update_account_limits(&subject.account, &update).await.map(drop),
        Subject::Key(id) => ledger.update_key_limits(KeySelector::Id(id), &update).await.map(drop),
    }
}

async fn outcome(ctx: &Context, limit: &AccountLimit) -> Outcome {
    let subject = limit.spec.subject();
    let owner = owner(limit, &ctx.stores.limits.state());
    if owner != key_of(limit) {
        return Outcome::Conflict { subject: subject.to_string(), owner };
    }
    let desired = match resolve(&limit.spec) {
        Ok(values) => to_limits(values),
        Err(errors) => return Outcome::Invalid(errors.into_iter().map(|(f, m)| format!("{f}: {m}")).collect()),
    };
    let ledger = &ctx.ledger;
    let applied = async {
        let found = match find(ledger, &subject).await? {
            Found::Subject(s) => s,
            Found::UnknownAccount => return Ok(Outcome::UnknownAccount(subject.account.clone())),
            Found::UnknownKey(why) => return Ok(Outcome::UnknownKey(why)),
        };
        let written = ledger.limits(found).await? != desired;
        if written {
            write(ledger, &subject, found, &desired).await?;
            tracing::info!(resource = %key_of(limit), %subject, limits = %desired, "limits written to the ledger");
        }
        let uses = ledger.limit_use(found, ctx.now()).await?;
        Ok::<_, LedgerError>(Outcome::Applied { subject: subject.to_string(), limits: desired, written, uses })
    };
    match applied.await {
        Ok(outcome) => outcome,
        Err(e) => {
            ctx.metrics.ledger_error();
            tracing::warn!(resource = %key_of(limit), %subject, error = %e, "applying the limits failed");
            Outcome::LedgerUnavailable(e.to_string())
        }
    }
}

async fn apply(ctx: &Context, limit: &AccountLimit) -> Result<Action, Error> {
    let outcome = outcome(ctx, limit).await;
    let prev = limit.status.as_ref();
    let next = limit_status(prev, limit.metadata.generation, &outcome, ctx.now());
    if let Some(t) = transition(prev, &next, &outcome) {
        ctx.publish(limit, &t).await;
    }
    if prev != Some(&next) {
        patch_status(ctx, Kind::AccountLimit, limit, &next).await?;
    }
    Ok(match outcome {
        Outcome::LedgerUnavailable(_) => Action::requeue(std::time::Duration::from_secs(15)),
        _ => Action::await_change(),
    })
}

async fn cleanup(ctx: &Context, limit: &AccountLimit) -> Result<Action, Error> {
    let subject = limit.spec.subject();
    let owner = owner(limit, &ctx.stores.limits.state());
    if owner != key_of(limit) {
        tracing::info!(resource = %key_of(limit), %subject, %owner, "deleted; its subject is another's, the ledger is left alone");
        return Ok(Action::await_change());
    }
    let found = find(&ctx.ledger, &subject).await.inspect_err(|_| ctx.metrics.ledger_error())?;
    if let Found::Subject(s) = found {
        write(&ctx.ledger, &subject, s, &Limits::default()).await.inspect_err(|_| ctx.metrics.ledger_error())?;
        tracing::info!(resource = %key_of(limit), %subject, "deleted; its limits were removed from the ledger");
    }
    Ok(Action::await_change())
}
