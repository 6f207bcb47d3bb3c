//! The `AccountLimit` resource: the limits (docs/design.md §5b) of one ledger account,
//! or of one API key of it, declared on Kubernetes and written to the ledger by the
//! operator (docs/design.md §2, §7).
//!
//! Unlike the other kinds it is not part of a gateway's configuration: file mode does
//! not read it (limits are set there with `sluice-gateway admin key update|account
//! update`), and [`resolve`] turns its spec into the six limit values the operator
//! writes.

#[cfg(feature = "kube")]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

#[cfg(feature = "kube")]
use crate::schema::{MONEY_RULE, conditions_schema, msg};
use crate::validate::{self, FieldError};

/// The longest account name a ledger holds (docs/design.md §5).
pub const ACCOUNT_MAX_LEN: usize = 128;
/// The account names an AccountLimit may name: letters, digits and `. _ : @ / + = -`,
/// starting with a letter or digit (a subset of what the ledger accepts: 1–128
/// characters without whitespace or control characters).
#[cfg(feature = "kube")]
pub const ACCOUNT_RULE: &str = "self.matches('^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$')";
/// At least one of the six limits is set.
#[cfg(feature = "kube")]
pub const ANY_LIMIT_RULE: &str = "has(self.rpm) || has(self.tpm) || has(self.tpd) || has(self.concurrency) \
    || has(self.dailySpend) || has(self.monthlySpend)";
/// `account` never changes (a transition rule: checked on updates only).
#[cfg(feature = "kube")]
pub const ACCOUNT_IMMUTABLE_RULE: &str = "self == oldSelf";
/// `keyId` is neither added, removed nor changed (a transition rule on the spec).
#[cfg(feature = "kube")]
pub const KEY_IMMUTABLE_RULE: &str =
    "has(self.keyId) == has(oldSelf.keyId) && (!has(self.keyId) || self.keyId == oldSelf.keyId)";

/// The limits of one ledger account (or of one API key of it), owned by this resource.
// kube's `printcolumn(.., type_ = "string", ..)` repeats arguments, not attributes.
#[cfg_attr(
    feature = "kube",
    expect(clippy::duplicated_attributes, reason = "false positive on kube's printcolumn arguments")
)]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(CustomResource, KubeSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "sluice.dev",
        version = "v1alpha1",
        kind = "AccountLimit",
        namespaced,
        status = "AccountLimitStatus",
        shortname = "al",
        category = "sluice",
        derive = "PartialEq",
        printcolumn(name = "Account", type_ = "string", json_path = ".spec.account"),
        printcolumn(name = "Key", type_ = "integer", json_path = ".spec.keyId"),
        printcolumn(name = "RPM", type_ = "integer", json_path = ".spec.rpm"),
        printcolumn(name = "TPM", type_ = "integer", json_path = ".spec.tpm"),
        printcolumn(name = "Concurrency", type_ = "integer", json_path = ".spec.concurrency"),
        printcolumn(name = "Daily-Spend", type_ = "string", json_path = ".spec.dailySpend"),
        printcolumn(name = "Applied", type_ = "boolean", json_path = ".status.applied"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ANY_LIMIT_RULE).message(msg::ANY_LIMIT)))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(KEY_IMMUTABLE_RULE).field_path(".keyId").message(msg::KEY_IMMUTABLE)))]
pub struct AccountLimitSpec {
    /// The ledger account (its name). Cannot be changed.
    #[cfg_attr(feature = "kube", schemars(length(max = ACCOUNT_MAX_LEN)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ACCOUNT_RULE).message(msg::ACCOUNT)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ACCOUNT_IMMUTABLE_RULE).message(msg::ACCOUNT_IMMUTABLE)))]
    pub account: String,
    /// The id of one API key of the account (`admin key list`): the limits are that
    /// key's instead of the account's. Cannot be added, removed or changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1)))]
    pub key_id: Option<i64>,
    /// Requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1)))]
    pub rpm: Option<i64>,
    /// Input plus output tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1)))]
    pub tpm: Option<i64>,
    /// Input plus output tokens per day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1)))]
    pub tpd: Option<i64>,
    /// Requests in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 1)))]
    pub concurrency: Option<i64>,
    /// Spend per UTC calendar day, USD (`"25.00"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(msg::DAILY_SPEND)))]
    pub daily_spend: Option<String>,
    /// Spend per UTC calendar month, USD (`"500.00"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(max = 17)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(MONEY_RULE).message(msg::MONTHLY_SPEND)))]
    pub monthly_spend: Option<String>,
}

/// The limits of an account or key as a manifest holds them, `metadata` and `spec`
/// ([`Object`](crate::object::Object)); with the `kube` feature, kube's `CustomResource`.
#[cfg(not(feature = "kube"))]
pub type AccountLimit = crate::object::Object<AccountLimitSpec>;

/// What the spec limits: the account, or one key of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitSubject {
    /// The account's name.
    pub account: String,
    /// The key's id, when the limits are a key's.
    pub key_id: Option<i64>,
}

impl std::fmt::Display for LimitSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key_id {
            Some(id) => write!(f, "key {id} of account {}", self.account),
            None => write!(f, "account {}", self.account),
        }
    }
}

impl AccountLimitSpec {
    /// The account or key this spec limits.
    pub fn subject(&self) -> LimitSubject {
        LimitSubject { account: self.account.clone(), key_id: self.key_id }
    }
}

/// The six limits of a subject as the ledger stores them; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitValues {
    /// Requests per minute.
    pub rpm: Option<i64>,
    /// Tokens per minute.
    pub tpm: Option<i64>,
    /// Tokens per day.
    pub tpd: Option<i64>,
    /// Requests in flight.
    pub concurrency: Option<i64>,
    /// Spend per UTC day, nanodollars.
    pub daily_spend_nanos: Option<i64>,
    /// Spend per UTC month, nanodollars.
    pub monthly_spend_nanos: Option<i64>,
}

/// Validates a spec (the CRD's bounds and CEL rules, with their messages:
/// [`validate::account_limit`]) and returns the six values it sets, spend in
/// nanodollars; every problem at once otherwise.
pub fn resolve(spec: &AccountLimitSpec) -> Result<LimitValues, Vec<FieldError>> {
    let errors = validate::account_limit(spec);
    if !errors.is_empty() {
        return Err(errors);
    }
    let nanos = |v: &Option<String>| -> Result<Option<i64>, Vec<FieldError>> {
        match v {
            None => Ok(None),
            // The pattern allows at most 7 whole digits, so every valid amount fits.
            Some(text) => crate::resolve::usd_to_nanos(text)
                .and_then(|n| i64::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| vec![("spec".to_owned(), format!("{text:?} is not a USD amount"))]),
        }
    };
    Ok(LimitValues {
        rpm: spec.rpm,
        tpm: spec.tpm,
        tpd: spec.tpd,
        concurrency: spec.concurrency,
        daily_spend_nanos: nanos(&spec.daily_spend)?,
        monthly_spend_nanos: nanos(&spec.monthly_spend)?,
    })
}

/// What the operator observed and did.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountLimitStatus {
    /// Generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Whether the ledger holds this spec's limits for its subject now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
    /// `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Each limit's use now, over every gateway (refreshed every status interval).
    #[serde(default, rename = "use", skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<LimitUse>,
}

/// One limit's use, as `sluice-gateway admin key show` prints it.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitUse {
    /// `rpm`, `tpm`, `tpd`, `concurrency`, `daily_spend` or `monthly_spend`.
    pub limit: String,
    /// The limit (USD for spend).
    pub value: String,
    /// In use in the current window.
    pub used: String,
    /// What the window allows now (the limit less the weighted previous window).
    pub allowed_now: String,
    /// When the current window ends (RFC 3339, UTC); absent for concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ends: Option<String>,
}
