//! The resource types the fake serves: a fixed table of built-in kinds plus one entry per
//! served version of every stored `CustomResourceDefinition`.

use serde::Serialize;
use serde_json::Value;

/// The `group/version/resource` of `CustomResourceDefinition`s, as used in store keys.
pub const CRD_GVR: &str = "apiextensions.k8s.io/v1/customresourcedefinitions";
/// The `group/version/resource` of `Namespace`s, as used in store keys.
pub const NAMESPACE_GVR: &str = "core/v1/namespaces";

/// One resource type (a `group/version/resource` and what goes with it).
#[derive(Clone, Debug, Serialize)]
pub struct ResourceType {
    /// API group; `""` for the core group.
    pub group: String,
    pub version: String,
    /// Plural resource name, as in URLs.
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Whether a `/status` subresource exists (then the main resource ignores `.status`).
    pub status_subresource: bool,
    /// For custom resources: the schema and printer columns of this version.
    pub crd: Option<CrdVersion>,
}

/// What a CRD says about one of its versions.
#[derive(Clone, Debug, Serialize)]
pub struct CrdVersion {
    /// `metadata.name` of the CRD.
    pub crd_name: String,
    /// `openAPIV3Schema`, if any.
    pub schema: Option<Value>,
    /// `additionalPrinterColumns`.
    pub printer_columns: Vec<PrinterColumn>,
    pub list_kind: String,
}

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug, Serialize)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl ResourceType {
    /// `apiVersion` of objects of this type (`v1`, `apps/v1`, `sluice.dev/v1alpha1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// Store key prefix: `group/version/resource`, `core` standing for the core group.
    pub fn gvr(&self) -> String {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        format!("{group}/{}/{}", self.version, self.plural)
    }

    /// `resource.group` as the real API server names it in messages (`configmaps`,
    /// `modelroutes.sluice.dev`).
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// `Kind.group` as used in `... is invalid` messages (`ConfigMap`, `ModelRoute.sluice.dev`).
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() { self.kind.clone() } else { format!("{}.{}", self.kind, self.group) }
    }

    /// `kind` of a list of these objects.
    pub fn list_kind(&self) -> String {
        match &self.crd {
            Some(c) if !c.list_kind.is_empty() => c.list_kind.clone(),
            _ => format!("{}List", self.kind),
        }
    }

    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
}

/// `(group, version, plural, singular, kind, namespaced, short names, categories, status subresource)`.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
    bool,
);

const BUILTINS: &[Builtin] = &[
    ("", "v1", "namespaces", "namespace", "Namespace", false, &["ns"], &[], true),
    ("", "v1", "configmaps", "configmap", "ConfigMap", true, &["cm"], &[], false),
    ("", "v1", "secrets", "secret", "Secret", true, &[], &[], false),
    ("", "v1", "services", "service", "Service", true, &["svc"], &["all"], true),
    ("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, &["sa"], &[], false),
    ("", "v1", "events", "event", "Event", true, &["ev"], &[], false),
    ("", "v1", "pods", "pod", "Pod", true, &["po"], &["all"], true),
    ("", "v1", "endpoints", "endpoints", "Endpoints", true, &["ep"], &[], false),
    ("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true, &["pvc"], &[], true),
    ("apps", "v1", "deployments", "deployment", "Deployment", true, &["deploy"], &["all"], true),
    ("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true, &["rs"], &["all"], true),
    ("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true, &["sts"], &["all"], true),
    ("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", true, &["pdb"], &[], true),
    ("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, &[], &[], false),
    ("events.k8s.io", "v1", "events", "event", "Event", true, &["ev"], &[], false),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        &["api-extensions"],
        true,
    ),
    ("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, &[], &[], false),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true, &[], &[], false),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", false, &[], &[], false),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
        &[],
        &[],
        false,
    ),
    ("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", true, &["netpol"], &[], false),
];

/// The built-in resource types.
pub fn builtins() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(|&(group, version, plural, singular, kind, namespaced, short, cats, status)| ResourceType {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: singular.into(),
            kind: kind.into(),
            namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: cats.iter().map(|s| s.to_string()).collect(),
            status_subresource: status,
            crd: None,
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The resource types one stored CRD defines (one per served version).
pub fn from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = text(&spec["group"]);
    let plural = text(&names["plural"]);
    let kind = text(&names["kind"]);
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = match names["singular"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => kind.to_lowercase(),
    };
    let mut out = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        if v["served"] == Value::Bool(false) {
            continue;
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: text(&c["name"]),
                type_: text(&c["type"]),
                format: text(&c["format"]),
                description: text(&c["description"]),
                priority: c["priority"].as_i64().unwrap_or(0),
                json_path: text(&c["jsonPath"]),
            })
            .collect();
        out.push(ResourceType {
            group: group.clone(),
            version: text(&v["name"]),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            status_subresource: v["subresources"]["status"].is_object(),
            crd: Some(CrdVersion {
                crd_name: text(&crd["metadata"]["name"]),
                schema: v["schema"].get("openAPIV3Schema").cloned(),
                printer_columns: columns,
                list_kind: text(&names["listKind"]),
            }),
        });
    }
    out
}
