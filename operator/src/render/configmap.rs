//! The group ConfigMap: the Snapshot JSON the gateway serves (and reloads in place).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::{Group, SNAPSHOT_KEY};

/// ConfigMap `sluice-gateway-<group>` with key `snapshot.json`; `None` when the group
/// serves no route.
pub fn desired_configmap(group: &Group<'_>) -> Option<ConfigMap> {
    if !group.serves() {
        return None;
    }
    // A Snapshot is plain data (maps, strings, numbers): serialising it cannot fail.
    let json = serde_json::to_string_pretty(group.snapshot).unwrap_or_default();
    Some(ConfigMap {
        metadata: group.metadata(),
        data: Some(BTreeMap::from([(SNAPSHOT_KEY.to_string(), json)])),
        ..ConfigMap::default()
    })
}
