//! The group PodDisruptionBudget: voluntary disruptions take one gateway pod at a time.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Group;

/// PodDisruptionBudget `sluice-gateway-<group>` with `maxUnavailable: 1`; `None` when
/// the group serves no route.
pub fn desired_pdb(group: &Group<'_>) -> Option<PodDisruptionBudget> {
    if !group.serves() {
        return None;
    }
    Some(PodDisruptionBudget {
        metadata: group.metadata(),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(group.selector()), ..LabelSelector::default() }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
