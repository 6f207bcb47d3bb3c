//! The `ErrorBudget` resource: an SLO over some routes, and its burn.

#[cfg(feature = "kube")]
use std::collections::BTreeMap;

#[cfg(feature = "kube")]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

#[cfg(feature = "kube")]
use crate::schema::{DURATION_MESSAGE, DURATION_RULE, conditions_schema};

/// An objective over a set of routes in this namespace.
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
        kind = "ErrorBudget",
        namespaced,
        status = "ErrorBudgetStatus",
        shortname = "eb",
        category = "sluice",
        derive = "PartialEq",
        printcolumn(name = "Objective", type_ = "string", json_path = ".spec.objective"),
        printcolumn(name = "Window", type_ = "string", json_path = ".spec.window"),
        printcolumn(name = "Consumed", type_ = "string", json_path = ".status.consumedPercent"),
        printcolumn(name = "Remaining", type_ = "string", json_path = ".status.remainingPercent"),
        printcolumn(name = "Burn-1h", type_ = "string", json_path = ".status.burnRates.1h"),
        printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!has(self.method) || self.method != 'timeslices' || has(self.timeslice)").message(crate::schema::msg::TIMESLICE_REQUIRED)))]
pub struct ErrorBudgetSpec {
    /// ModelRoute names in this namespace, 1..64.
    // Bounded items keep the apiserver's cost estimate of the uniqueness rule in budget.
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 64), inner(length(min = 1, max = 253))))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.all(r, self.exists_one(s, s == r))").message(crate::schema::msg::ROUTES_UNIQUE)))]
    pub routes: Vec<String>,
    /// Target percentage of good events, a decimal string with 50 < x < 100.
    #[cfg_attr(feature = "kube", schemars(length(max = 9)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[0-9]{1,2}(\\\\.[0-9]{1,6})?$') && double(self) > 50.0 && double(self) < 100.0").message(crate::schema::msg::OBJECTIVE)))]
    pub objective: String,
    /// Rolling window, `1h`..`90d`.
    #[cfg_attr(feature = "kube", schemars(length(max = 5)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(WINDOW_RULE).message(crate::schema::msg::WINDOW)))]
    pub window: String,
    /// `occurrences` (default) or `timeslices`.
    #[serde(default)]
    pub method: BudgetMethod,
    /// Slice length for `timeslices`; shorter than an hour (and so than any window).
    #[cfg_attr(feature = "kube", schemars(length(max = 5)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(TIMESLICE_RULE).message(crate::schema::msg::TIMESLICE)))]
    pub timeslice: Option<String>,
    /// Optional latency SLI: slower requests count as bad.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySpec>,
    /// Burn-rate alerts; default the Google SRE workbook tiers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(length(min = 1, max = 8)))]
    pub alerts: Option<Vec<BurnAlert>>,
}

/// An objective over some routes as a manifest holds it, `metadata` and `spec`
/// ([`Object`](crate::object::Object)); with the `kube` feature, kube's `CustomResource`.
#[cfg(not(feature = "kube"))]
pub type ErrorBudget = crate::object::Object<ErrorBudgetSpec>;

/// Whole hours 1..2160 or whole days 1..90.
#[cfg(feature = "kube")]
const WINDOW_RULE: &str = "self.matches('^([1-9]|[1-8][0-9]|90)d$') || self.matches('^([1-9][0-9]{0,2}|1[0-9]{3}|20[0-9]{2}|21[0-5][0-9]|2160)h$')";
/// 1s..3599s or 1m..59m.
#[cfg(feature = "kube")]
const TIMESLICE_RULE: &str =
    "self.matches('^([1-9][0-9]{0,2}|[1-2][0-9]{3}|3[0-5][0-9]{2})s$') || self.matches('^([1-9]|[1-5][0-9])m$')";

/// How the budget is counted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum BudgetMethod {
    /// Bad requests over all requests.
    #[default]
    Occurrences,
    /// Bad slices over all slices of the window.
    Timeslices,
}

/// Latency SLI.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencySpec {
    /// Requests slower than this are bad (first byte for streams).
    #[cfg_attr(feature = "kube", schemars(length(max = crate::schema::max_len::DURATION)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE)))]
    pub threshold: String,
    /// Percentile judged for timeslices, 50..100 exclusive of 100; default 99.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(range(min = 50, max = 99)))]
    pub percentile: Option<u32>,
}

/// A multi-window burn-rate alert.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ALERT_ORDER_RULE).message(crate::schema::msg::ALERT_WINDOWS)))]
pub struct BurnAlert {
    /// Alert name, e.g. `page` or `ticket`.
    // The `maxLength`s below only restate the patterns' bounds: they keep the apiserver's
    // cost estimate of the rules (up to 8 alerts) small.
    #[cfg_attr(feature = "kube", schemars(length(max = 31)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[a-z][a-z0-9-]{0,30}$')").message(crate::schema::msg::ALERT_NAME)))]
    pub name: String,
    /// Long window, e.g. `1h`.
    #[cfg_attr(feature = "kube", schemars(length(max = 6)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ALERT_WINDOW_RULE).message(crate::schema::msg::LONG_WINDOW)))]
    pub long_window: String,
    /// Short window, e.g. `5m`.
    #[cfg_attr(feature = "kube", schemars(length(max = 6)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new(ALERT_WINDOW_RULE).message(crate::schema::msg::SHORT_WINDOW)))]
    pub short_window: String,
    /// Burn rate that both windows must exceed, a decimal string.
    #[cfg_attr(feature = "kube", schemars(length(max = 8)))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.matches('^[0-9]{1,4}(\\\\.[0-9]{1,3})?$') && double(self) > 0.0").message(crate::schema::msg::BURN_RATE)))]
    pub burn_rate: String,
}

#[cfg(feature = "kube")]
const ALERT_WINDOW_RULE: &str = "self.matches('^[1-9][0-9]{0,4}(m|h|d)$')";
/// The short window is shorter than the long one, compared in minutes (`5m` < `1h` < `3d`).
/// Windows that fail [`ALERT_WINDOW_RULE`] are left to that rule's message.
#[cfg(feature = "kube")]
const ALERT_ORDER_RULE: &str = "!self.longWindow.matches('^[1-9][0-9]{0,4}(m|h|d)$') \
    || !self.shortWindow.matches('^[1-9][0-9]{0,4}(m|h|d)$') \
    || int(self.shortWindow.substring(0, size(self.shortWindow) - 1)) \
       * (self.shortWindow.endsWith('d') ? 1440 : (self.shortWindow.endsWith('h') ? 60 : 1)) \
     < int(self.longWindow.substring(0, size(self.longWindow) - 1)) \
       * (self.longWindow.endsWith('d') ? 1440 : (self.longWindow.endsWith('h') ? 60 : 1))";

/// Observed budget state.
#[cfg(feature = "kube")]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBudgetStatus {
    /// Generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Burning`, `Exhausted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// `Healthy`, `Burning` or `Exhausted`, for the printer column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Allowed bad time (`21m36s`) for timeslices, allowed bad events for occurrences (a fraction under ten with one decimal, `0.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Bad time or bad events so far in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed: Option<String>,
    /// Percent of the budget consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_percent: Option<String>,
    /// Percent of the budget left (may be negative once overspent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_percent: Option<String>,
    /// Burn rate by window (`5m`, `1h`, `6h`, `3d`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub burn_rates: BTreeMap<String, String>,
    /// Good events in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_events: Option<u64>,
    /// Judged events in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_events: Option<u64>,
    /// Alerts whose long and short windows both exceed their burn rate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firing_alerts: Vec<String>,
    /// RFC 3339 time of the last evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated: Option<String>,
}
