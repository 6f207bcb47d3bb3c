//! Calls the API server refused for want of RBAC (HTTP 403), reported where an operator
//! looks: one `ERROR` log line naming the verb and the resource the ClusterRole (or
//! Role) lacks, and the counter `sluice_operator_forbidden_total{verb,resource}`.
//!
//! A refused call never stops the process: a refused reconcile is retried (15 s), a
//! refused watch is retried with the watcher's backoff, a refused start-up call (the CRD
//! check, the leader Lease) is retried every [`STARTUP_RETRY`]. So the operator neither
//! fails silently nor crash-loops, and carries on by itself once the rule is granted.
//!
//! The verb and the resource come from the apiserver's own message, which names the
//! check the authorizer made (`User "…" cannot patch resource "modelroutes/status" in
//! API group "sluice.dev" in the namespace "ns"`): for a server-side apply that creates
//! its object that is `create`, although the call was a `PATCH`.

use std::fmt;
use std::time::Duration;

use kube::core::Status;
use kube::runtime::watcher;

use crate::metrics::Metrics;

/// How long start-up waits before retrying a refused call.
pub const STARTUP_RETRY: Duration = Duration::from_secs(5);

/// One refused call, as the authorizer saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbidden {
    /// `get`, `list`, `watch`, `create`, `patch`, `delete`.
    pub verb: String,
    /// The resource, with its subresource: `configmaps`, `modelroutes/status`.
    pub resource: String,
    /// The API group (`""` for the core group).
    pub group: String,
    /// The namespace of the call; `None` for a call across all namespaces.
    pub namespace: Option<String>,
    /// The apiserver's message.
    pub message: String,
}

impl Forbidden {
    /// The refusal in an API error, if it is one: HTTP 403 with the authorizer's message.
    /// Other 403s are no RBAC matter and stay plain API errors: a namespace being
    /// terminated, an exceeded ResourceQuota, an admission plugin's refusal.
    pub fn from_status(status: &Status) -> Option<Self> {
        if status.code != 403 {
            return None;
        }
        parse(&status.message)
    }

    /// The refusal in a client error, if it is one.
    pub fn from_kube(error: &kube::Error) -> Option<Self> {
        match error {
            kube::Error::Api(status) => Self::from_status(status),
            _ => None,
        }
    }

    /// The refusal in a watcher error (a list or watch the ClusterRole lacks), if it is one.
    pub fn from_watch(error: &watcher::Error) -> Option<Self> {
        match error {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => Self::from_kube(e),
            watcher::Error::WatchError(status) => Self::from_status(status),
            watcher::Error::NoResourceVersion => None,
        }
    }

    /// The resource as `kubectl auth can-i` names it: `configmaps`, `deployments.apps`,
    /// `modelroutes.sluice.dev/status`.
    pub fn qualified_resource(&self) -> String {
        let (resource, sub) = match self.resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (self.resource.as_str(), None),
        };
        let mut out = resource.to_string();
        if !self.group.is_empty() {
            out.push('.');
            out.push_str(&self.group);
        }
        if let Some(sub) = sub {
            out.push('/');
            out.push_str(sub);
        }
        out
    }

    /// Logs the refusal (`ERROR`, with `verb`, `resource`, `group` and `namespace`
    /// fields) and counts it in `sluice_operator_forbidden_total`.
    pub fn report(&self, metrics: &Metrics) {
        metrics.forbidden(&self.verb, &self.qualified_resource());
        tracing::error!(
            verb = %self.verb,
            resource = %self.qualified_resource(),
            group = %self.group,
            namespace = self.namespace.as_deref().unwrap_or("(all)"),
            "permission denied: {self}"
        );
    }
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = match &self.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "across all namespaces".to_string(),
        };
        write!(
            f,
            "the operator may not {} {} {scope}: its ClusterRole (or Role) lacks verb {:?} on resource {:?} in API \
             group {:?}; runbook: docs/operate.md#operator-permission-denied; the API server said: {}",
            self.verb,
            self.qualified_resource(),
            self.verb,
            self.resource,
            self.group,
            self.message
        )
    }
}

/// Reads the authorizer's message (k8s.io/apiserver `forbiddenMessage`): `… cannot VERB
/// resource "RESOURCE" in API group "GROUP" in the namespace "NS"` or `… at the cluster
/// scope`.
fn parse(message: &str) -> Option<Forbidden> {
    let rest = &message[message.find(" cannot ")? + " cannot ".len()..];
    let (verb, rest) = rest.split_once(" resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(" in API group \"")?;
    let (group, rest) = rest.split_once('"')?;
    let namespace =
        rest.strip_prefix(" in the namespace \"").and_then(|r| r.split_once('"')).map(|(ns, _)| ns.to_string());
    Some(Forbidden {
        verb: verb.to_string(),
        resource: resource.to_string(),
        group: group.to_string(),
        namespace,
        message: message.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> Status {
        Status { code, message: message.into(), ..Status::default() }
    }

    #[test]
    fn the_authorizers_message_names_verb_resource_group_and_namespace() {
        let f = Forbidden::from_status(&status(
            403,
            "modelroutes.sluice.dev \"chat\" is forbidden: User \"system:serviceaccount:ops:sluice-operator\" \
             cannot patch resource \"modelroutes/status\" in API group \"sluice.dev\" in the namespace \"team-a\"",
        ))
        .unwrap();
        assert_eq!(
            (f.verb.as_str(), f.resource.as_str(), f.group.as_str()),
            ("patch", "modelroutes/status", "sluice.dev")
        );
        assert_eq!(f.namespace.as_deref(), Some("team-a"));
        assert_eq!(f.qualified_resource(), "modelroutes.sluice.dev/status");
        assert!(
            f.to_string().starts_with("the operator may not patch modelroutes.sluice.dev/status in namespace team-a:")
        );
    }

    #[test]
    fn a_cluster_wide_list_of_the_core_group() {
        let f = Forbidden::from_status(&status(
            403,
            "configmaps is forbidden: User \"x\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope",
        ))
        .unwrap();
        assert_eq!((f.verb.as_str(), f.qualified_resource().as_str(), f.namespace), ("list", "configmaps", None));
    }

    #[test]
    fn other_403s_and_other_codes_are_no_rbac_refusal() {
        let terminating = "configmaps \"sluice-gateway-default\" is forbidden: unable to create new content in \
                           namespace team-a because it is being terminated";
        assert_eq!(Forbidden::from_status(&status(403, terminating)), None);
        let quota = "secrets \"x\" is forbidden: exceeded quota: q, requested: secrets=1, used: secrets=10, limited: secrets=10";
        assert_eq!(Forbidden::from_status(&status(403, quota)), None);
        assert_eq!(Forbidden::from_status(&status(404, "cannot get resource \"x\" in API group \"\"")), None);
    }
}
