//! File mode reads a manifest the same with the `kube` feature (the kinds are kube's
//! `CustomResource` types: the operator's build, and these tests') and without it
//! (`object::Object`: the gateway's build): a document that loads one way loads the
//! other with the same metadata and spec, and one that is refused is refused at the same
//! field with the same message. Both read it as `Manifests` does (`serde_path_to_error`).
//!
//! Two differences, on members that only the API server writes: `status` is not read
//! without the feature (a malformed one is refused only with it), and an entry of
//! `ownerReferences` or `managedFields` written as a list rather than a mapping is read
//! by position without it. The generated documents below leave those out.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sluice_crds::object::{Object, ObjectMeta};
use sluice_crds::{
    AccountLimit, AccountLimitSpec, ErrorBudget, ErrorBudgetSpec, ModelRoute, ModelRouteSpec, Upstream, UpstreamSpec,
};

/// What the two readings must agree on: the metadata members, and the spec as JSON.
#[derive(Debug, PartialEq)]
struct Read {
    name: Option<String>,
    namespace: Option<String>,
    generate_name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    finalizers: Option<Vec<String>>,
    uid: Option<String>,
    resource_version: Option<String>,
    self_link: Option<String>,
    generation: Option<i64>,
    deletion_grace_period_seconds: Option<i64>,
    creation_timestamp: Option<jiff::Timestamp>,
    deletion_timestamp: Option<jiff::Timestamp>,
    owner_references: Option<usize>,
    managed_fields: Option<usize>,
    spec: Value,
}

/// One reading of a document: what was read, or the refusal's field and message.
type Reading = Result<Read, (String, String)>;

fn spec_json(spec: &impl Serialize) -> Value {
    serde_json::to_value(spec).expect("specs serialize")
}

fn read_kube(m: &meta::ObjectMeta, spec: Value) -> Read {
    Read {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        generate_name: m.generate_name.clone(),
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
        finalizers: m.finalizers.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        self_link: m.self_link.clone(),
        generation: m.generation,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        creation_timestamp: m.creation_timestamp.as_ref().map(|t| t.0),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| t.0),
        owner_references: m.owner_references.as_ref().map(Vec::len),
        managed_fields: m.managed_fields.as_ref().map(Vec::len),
        spec,
    }
}

fn read_object(m: &ObjectMeta, spec: Value) -> Read {
    Read {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        generate_name: m.generate_name.clone(),
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
        finalizers: m.finalizers.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        self_link: m.self_link.clone(),
        generation: m.generation,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        owner_references: m.owner_references.as_ref().map(Vec::len),
        managed_fields: m.managed_fields.as_ref().map(Vec::len),
        spec,
    }
}

/// A document read as `T`, as `Manifests` reads it: the value, or the refusal's field
/// and message.
fn read<T: DeserializeOwned>(doc: &Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(doc.clone()).map_err(|e| (e.path().to_string(), e.into_inner().to_string()))
}

/// Reads `doc` as the kube type `K` and as `Object<S>`.
fn both<K: DeserializeOwned, S: DeserializeOwned + Serialize>(
    doc: &Value,
    kube: impl Fn(&K) -> Read,
) -> (Reading, Reading) {
    let with = read::<K>(doc).map(|k| kube(&k));
    let without = read::<Object<S>>(doc).map(|o| read_object(&o.metadata, spec_json(&o.spec)));
    (with, without)
}

/// Both readings of a sluice document, by its `kind`.
fn readings(doc: &Value) -> (Reading, Reading) {
    match doc["kind"].as_str() {
        Some("Upstream") => both::<Upstream, UpstreamSpec>(doc, |k| read_kube(&k.metadata, spec_json(&k.spec))),
        Some("ModelRoute") => both::<ModelRoute, ModelRouteSpec>(doc, |k| read_kube(&k.metadata, spec_json(&k.spec))),
        Some("ErrorBudget") => {
            both::<ErrorBudget, ErrorBudgetSpec>(doc, |k| read_kube(&k.metadata, spec_json(&k.spec)))
        }
        Some("AccountLimit") => {
            both::<AccountLimit, AccountLimitSpec>(doc, |k| read_kube(&k.metadata, spec_json(&k.spec)))
        }
        other => panic!("not a sluice kind: {other:?}"),
    }
}

fn assert_same(doc: &Value) {
    let (with, without) = readings(doc);
    assert_eq!(with, without, "read differently with and without the kube feature: {doc}");
}

/// Every sluice document of the CEL fixtures and the examples.
fn fixture_documents() -> Vec<Value> {
    let mut problems = Vec::new();
    let mut files = sluice_crds::manifests::yaml_files(&common::testdata("cel"), &mut problems);
    files.extend(sluice_crds::manifests::yaml_files(&common::repo_root().join("examples"), &mut problems));
    assert!(problems.is_empty(), "{problems:?}");
    let mut docs = Vec::new();
    for file in files {
        let text = common::read(&file);
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).expect("fixtures are YAML");
            if value["apiVersion"] == sluice_crds::API_VERSION {
                docs.push(value);
            }
        }
    }
    docs
}

#[test]
fn the_fixtures_and_examples_read_the_same_either_way() {
    let docs = fixture_documents();
    assert!(docs.len() > 50, "only {} documents found", docs.len());
    for doc in &docs {
        assert_same(doc);
        assert!(readings(doc).1.is_ok(), "a fixture does not load: {doc}");
    }
}

/// An Upstream with `metadata` as given.
fn upstream_with(metadata: Value) -> Value {
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream", "metadata": metadata, "spec": {"baseUrl": "http://x"}})
}

#[test]
fn metadata_members_are_read_with_their_types_and_unknown_ones_ignored() {
    let loads = [
        json!({"name": "a", "namespace": "team-a", "labels": {"app": "chat"}, "annotations": {"note": "x"}}),
        json!({"name": "a", "labels": null, "annotations": {}, "finalizers": ["sluice.dev/cleanup"]}),
        json!({"name": "a", "generateName": "a-", "uid": "0b1c", "resourceVersion": "42", "generation": 3}),
        json!({"name": "a", "creationTimestamp": "2026-12-01T10:44:46Z", "deletionTimestamp": "2026-12-01T10:44:46.5+01:00"}),
        json!({"name": "a", "deletionGracePeriodSeconds": 30, "selfLink": "/apis/x"}),
        json!({"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u", "controller": true}, {}]}),
        json!({"name": "a", "managedFields": [{"manager": "kubectl", "operation": "Apply", "time": "2026-12-01T10:44:46Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]}),
        json!({"name": "a", "unknownMember": {"any": ["thing"]}, "clusterName": 5}),
    ];
    for metadata in loads {
        let doc = upstream_with(metadata);
        assert_same(&doc);
        assert!(readings(&doc).1.is_ok(), "refused: {doc}");
    }
    let refused = [
        (json!({"name": "a", "labels": {"tier": 1}}), "metadata.labels.tier"),
        (json!({"name": "a", "annotations": ["a"]}), "metadata.annotations"),
        (json!({"name": "a", "namespace": 5}), "metadata.namespace"),
        (json!({"name": "a", "finalizers": "x"}), "metadata.finalizers"),
        (json!({"name": "a", "generation": "3"}), "metadata.generation"),
        (json!({"name": "a", "creationTimestamp": "yesterday"}), "metadata.creationTimestamp"),
        (json!({"name": "a", "deletionTimestamp": 1}), "metadata.deletionTimestamp"),
        (json!({"name": "a", "ownerReferences": [{"name": 5}]}), "metadata.ownerReferences[0].name"),
        (json!({"name": "a", "ownerReferences": [{"controller": "yes"}]}), "metadata.ownerReferences[0].controller"),
        (json!({"name": "a", "managedFields": [{"time": "soon"}]}), "metadata.managedFields[0].time"),
        (json!({"name": "a", "managedFields": [null]}), "metadata.managedFields[0]"),
        (json!({"name": "a", "ownerReferences": ["owner"]}), "metadata.ownerReferences[0]"),
    ];
    for (metadata, field) in refused {
        let doc = upstream_with(metadata);
        assert_same(&doc);
        let (_, without) = readings(&doc);
        assert_eq!(without.err().map(|(at, _)| at).as_deref(), Some(field), "{doc}");
    }
}

#[test]
fn a_status_loads_and_is_not_read_without_the_feature() {
    // As `kubectl get -o yaml` writes it.
    let exported = json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream",
        "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "7", "generation": 2,
                     "creationTimestamp": "2026-12-01T10:44:46Z"},
        "spec": {"baseUrl": "http://x"},
        "status": {"observedGeneration": 2, "successRate": "99.9", "circuit": "Closed",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Serving", "message": "",
                                   "lastTransitionTime": "2026-12-01T10:44:46Z"}]}
    });
    assert_same(&exported);
    assert!(readings(&exported).1.is_ok());

    let mut malformed = exported;
    malformed["status"]["circuit"] = json!("Ajar");
    let (with, without) = readings(&malformed);
    assert_eq!(with.err().map(|(at, _)| at).as_deref(), Some("status.circuit"));
    assert!(without.is_ok());
}

/// Values for a metadata member: mostly of the right type, often not.
fn member_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z0-9:.-]{0,12}".prop_map(Value::from),
        prop::sample::select(vec!["2026-12-01T10:44:46Z", "2026-12-01T10:44:46.123+02:00", "2026-12-01", "Apply"])
            .prop_map(Value::from),
    ];
    let key = prop::sample::select(vec![
        "apiVersion",
        "kind",
        "name",
        "uid",
        "controller",
        "blockOwnerDeletion",
        "manager",
        "operation",
        "time",
        "fieldsType",
        "fieldsV1",
        "subresource",
        "other",
    ]);
    let object = prop::collection::btree_map(key, leaf.clone(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    // No list directly inside a list: an entry of `ownerReferences` or `managedFields`
    // written as a list is the one shape the two readings differ on (see above).
    let item = prop_oneof![leaf.clone(), object.clone()];
    prop_oneof![leaf, object, prop::collection::vec(item, 0..3).prop_map(Value::Array)]
}

proptest! {
    #[test]
    fn arbitrary_metadata_reads_the_same_either_way(
        members in prop::collection::btree_map(
            prop::sample::select(vec![
                "namespace", "generateName", "labels", "annotations", "finalizers", "ownerReferences", "uid",
                "resourceVersion", "selfLink", "generation", "creationTimestamp", "deletionTimestamp",
                "deletionGracePeriodSeconds", "managedFields", "clusterName", "other",
            ]),
            member_value(),
            0..4,
        ),
    ) {
        let mut metadata: serde_json::Map<String, Value> = members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        metadata.insert("name".into(), json!("a"));
        assert_same(&upstream_with(Value::Object(metadata)));
    }
}
