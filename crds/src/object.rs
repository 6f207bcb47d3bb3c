//! The kinds as a manifest holds them, without Kubernetes' types: `metadata` and `spec`.
//!
//! Without the `kube` feature (the gateway's build) `Upstream`, `ModelRoute`,
//! `ErrorBudget` and `AccountLimit` are [`Object`]s of their specs, so that file mode
//! builds without k8s-openapi and kube; with it they are kube's `CustomResource` types.
//! Either way [`crate::manifests`] reads a manifest the same: [`ObjectMeta`] has the
//! members of k8s-openapi's `ObjectMeta` with the same types, and ignores the others as
//! it does (tests/crds/object.rs reads the same documents both ways).

use std::collections::BTreeMap;

use serde::Deserialize;

/// A sluice resource: its `metadata` and its `spec`. `apiVersion` and `kind` are checked
/// by [`crate::manifests`] before it picks the type; `status` (written by the operator,
/// and present in `kubectl get -o yaml`) is not read, nor any other member.
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct Object<Spec> {
    /// Name, namespace, labels, annotations, ….
    pub metadata: ObjectMeta,
    /// The desired state.
    pub spec: Spec,
}

/// `metadata`, member for member as k8s-openapi's `ObjectMeta` reads it: a manifest that
/// one refuses (a label that is not a string, a malformed `creationTimestamp`, …), the
/// other refuses with the same message; unknown members are ignored by both. (serde's
/// derive also reads an entry of `ownerReferences` or `managedFields` written as a list,
/// by position, where k8s-openapi refuses it; the API server writes mappings.)
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", expecting = "ObjectMeta")]
pub struct ObjectMeta {
    /// Name, unique per kind within the namespace.
    pub name: Option<String>,
    /// Namespace; `default` when absent.
    pub namespace: Option<String>,
    /// Prefix of a name the API server generates.
    pub generate_name: Option<String>,
    /// Labels.
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    pub annotations: Option<BTreeMap<String, String>>,
    /// Finalizers.
    pub finalizers: Option<Vec<String>>,
    /// Objects this one depends on.
    pub owner_references: Option<Vec<OwnerReference>>,
    /// Written by the API server.
    pub uid: Option<String>,
    /// Written by the API server.
    pub resource_version: Option<String>,
    /// Written by the API server.
    pub self_link: Option<String>,
    /// Written by the API server.
    pub generation: Option<i64>,
    /// Written by the API server.
    pub creation_timestamp: Option<jiff::Timestamp>,
    /// Written by the API server.
    pub deletion_timestamp: Option<jiff::Timestamp>,
    /// Written by the API server.
    pub deletion_grace_period_seconds: Option<i64>,
    /// Written by the API server.
    pub managed_fields: Option<Vec<ManagedFieldsEntry>>,
}

/// An entry of `metadata.ownerReferences`. k8s-openapi reads an absent (or null)
/// `apiVersion`, `kind`, `name` or `uid` as empty, so each is optional here.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", expecting = "OwnerReference")]
pub struct OwnerReference {
    /// The owner's `apiVersion`.
    pub api_version: Option<String>,
    /// The owner's kind.
    pub kind: Option<String>,
    /// The owner's name.
    pub name: Option<String>,
    /// The owner's uid.
    pub uid: Option<String>,
    /// Whether this is the managing controller.
    pub controller: Option<bool>,
    /// Whether the owner waits for this object's deletion.
    pub block_owner_deletion: Option<bool>,
}

/// An entry of `metadata.managedFields` (server-side apply).
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", expecting = "ManagedFieldsEntry")]
pub struct ManagedFieldsEntry {
    /// The manager's name.
    pub manager: Option<String>,
    /// `Apply` or `Update`.
    pub operation: Option<String>,
    /// The version of the fields.
    pub api_version: Option<String>,
    /// When the fields were last written.
    pub time: Option<jiff::Timestamp>,
    /// `FieldsV1`.
    pub fields_type: Option<String>,
    /// The fields, in the format of `fieldsType`.
    pub fields_v1: Option<serde_json::Value>,
    /// The subresource written, e.g. `status`.
    pub subresource: Option<String>,
}
