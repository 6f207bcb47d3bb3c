//! The namespace's ledger Secret: the operator copies its own ledger URL next to the
//! gateways, which read it as env `SLUICE_LEDGER_URL` through a `secretKeyRef`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{LEDGER_SECRET, LEDGER_SECRET_KEY, base_labels};

/// Secret `sluice-ledger` (key `url`) in `namespace`.
///
/// It is shared by every group of the namespace, so it carries the `managed-by` and
/// `name` labels but no `sluice.dev/gateway` label and no owner references; the
/// reconciler deletes it when the namespace's last route goes.
pub fn desired_secret(namespace: &str, ledger_url: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(LEDGER_SECRET.into()),
            namespace: Some(namespace.into()),
            labels: Some(base_labels()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        // `data`, not `stringData`: stringData is write-only and does not round-trip
        // through server-side apply.
        data: Some(BTreeMap::from([(LEDGER_SECRET_KEY.to_string(), ByteString(ledger_url.as_bytes().to_vec()))])),
        ..Secret::default()
    }
}
