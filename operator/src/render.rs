//! Pure builders of the objects rendered per (namespace, gateway group): the contract
//! with the Helm chart and with the gateway (`sluice-gateway serve --snapshot`).
//!
//! Every `desired_*` function takes resolved inputs and returns the object to apply with
//! server-side apply, or `None` when the group serves no route (nothing is rendered, and
//! the reconciler deletes what exists). No I/O happens here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sluice_crds::Snapshot;

mod configmap;
mod deployment;
mod pdb;
mod secret;
mod service;

pub use configmap::desired_configmap;
pub use deployment::{desired_deployment, secret_refs, secrets_hash};
pub use pdb::desired_pdb;
pub use secret::desired_secret;
pub use service::desired_service;

/// Field manager of every server-side apply (objects and status).
pub const FIELD_MANAGER: &str = "sluice-operator";
/// `app.kubernetes.io/managed-by` value on every rendered object.
pub const MANAGED_BY: &str = "sluice-operator";
/// `app.kubernetes.io/name` value on every rendered object.
pub const APP_NAME: &str = "sluice-gateway";
/// Label naming the gateway group.
pub const GATEWAY_LABEL: &str = "sluice.dev/gateway";
/// Label selector of everything the operator renders.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=sluice-operator";
/// Pod-template annotation: hash of the set of referenced secret names and keys.
pub const SECRETS_HASH_ANNOTATION: &str = "sluice.dev/secrets-hash";
/// Secret holding the ledger URL in each gateway namespace.
pub const LEDGER_SECRET: &str = "sluice-ledger";
/// Key of the ledger URL in [`LEDGER_SECRET`].
pub const LEDGER_SECRET_KEY: &str = "url";
/// Key of the snapshot in the group ConfigMap.
pub const SNAPSHOT_KEY: &str = "snapshot.json";
/// Where the ConfigMap is mounted.
pub const SNAPSHOT_DIR: &str = "/etc/sluice/snapshot";
/// Where the referenced Secrets are mounted, as `<secret>/<key>` files.
pub const SECRETS_DIR: &str = "/etc/sluice/secrets";
/// Port the gateway listens on in its pod.
pub const GATEWAY_PORT: i32 = 8080;

/// Name of the ConfigMap, Deployment, Service and PodDisruptionBudget of a group.
pub fn object_name(group: &str) -> String {
    format!("sluice-gateway-{group}")
}

/// How gateway clients authenticate (`sluice-gateway serve --auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GatewayAuth {
    /// API keys from the ledger; requests are billed.
    #[default]
    Keys,
    /// No keys and no billing.
    None,
}

impl GatewayAuth {
    /// The `--auth` argument value.
    pub fn as_str(self) -> &'static str {
        match self {
            GatewayAuth::Keys => "keys",
            GatewayAuth::None => "none",
        }
    }
}

/// Operator-wide settings of every gateway Deployment (from the operator's flags).
#[derive(Clone, Debug, PartialEq)]
pub struct GatewaySettings {
    /// Container image.
    pub image: String,
    /// Replicas per group.
    pub replicas: i32,
    /// Client authentication.
    pub auth: GatewayAuth,
    /// Container resources.
    pub resources: ResourceRequirements,
    /// Extra environment variables, after the operator's own.
    pub env: Vec<EnvVar>,
}

/// The gateway environment variables the operator sets itself.
pub const OWN_GATEWAY_ENV: [&str; 2] = ["SLUICE_LEDGER_URL", "POD_NAME"];

impl GatewaySettings {
    /// The defaults of the operator's flags.
    pub fn defaults() -> Self {
        GatewaySettings {
            image: default_image().to_string(),
            replicas: 2,
            auth: GatewayAuth::Keys,
            resources: default_resources(),
            env: Vec::new(),
        }
    }
}

/// `ghcr.io/sluice-dev/sluice-gateway:<crate version>`.
pub fn default_image() -> &'static str {
    concat!("ghcr.io/sluice-dev/sluice-gateway:", env!("CARGO_PKG_VERSION"))
}

/// Requests cpu 100m / memory 64Mi, limits memory 256Mi.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), Quantity("256Mi".into()))])),
        ..ResourceRequirements::default()
    }
}

/// What one gateway group serves, resolved: the input of every group builder.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a> {
    /// Namespace of the group (and of its routes and upstreams).
    pub namespace: &'a str,
    /// Group name (`ModelRoute.spec.gateway`).
    pub name: &'a str,
    /// The group's snapshot, upstreams pruned to those its routes use.
    pub snapshot: &'a Snapshot,
    /// Owner references to every ModelRoute of the group, none of them the controller
    /// (several routes share the objects; see [`crate::view::owner_references`]).
    pub owners: &'a [OwnerReference],
}

impl Group<'_> {
    /// True when the group serves at least one route (otherwise nothing is rendered).
    pub fn serves(&self) -> bool {
        !self.snapshot.routes.is_empty()
    }

    /// The three labels of every group object.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = base_labels();
        labels.insert(GATEWAY_LABEL.into(), self.name.into());
        labels
    }

    /// Pod selector of the group's Deployment, Service and PodDisruptionBudget.
    pub fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
            (GATEWAY_LABEL.to_string(), self.name.to_string()),
        ])
    }

    /// Metadata shared by the group objects: name, namespace, labels, owners.
    pub fn metadata(&self) -> ObjectMeta {
        ObjectMeta {
            name: Some(object_name(self.name)),
            namespace: Some(self.namespace.into()),
            labels: Some(self.labels()),
            owner_references: Some(self.owners.to_vec()),
            ..ObjectMeta::default()
        }
    }
}

/// `managed-by` and `name` labels (the namespace-wide ledger Secret carries only these).
pub fn base_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_string(), MANAGED_BY.to_string()),
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
    ])
}
