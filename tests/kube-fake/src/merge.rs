//! The patch flavours and server-side apply:
//! - JSON merge patch (RFC 7386);
//! - strategic merge patch (merge patch whose keyed lists merge by key, plus the `$patch`,
//!   `$retainKeys`, `$setElementOrder` and `$deleteFromPrimitiveList` directives kubectl sends);
//! - JSON patch (RFC 6902) where a `test` of `null` on a missing path succeeds;
//! - server-side apply with minimal field ownership (`metadata.managedFields`, FieldsV1):
//!   per-manager field sets, conflicts unless `force`, and removal of fields a manager
//!   stopped applying.
//!
//! Which lists merge by key: for custom resources, what the schema says
//! (`x-kubernetes-list-type: map|set`, otherwise atomic); for built-in kinds, the usual
//! merge keys (`containers` by `name`, `volumeMounts` by `mountPath`, …) and otherwise
//! lists of maps that all carry `name` (or else `type`).

//!
//! [`Ctx`] (here) says how a list merges; [`patch`] has the three patch flavours,
//! [`fields`] the field sets and paths ownership is tracked in, [`apply`] the
//! managedFields and server-side apply.

use serde_json::{Map, Value};

mod apply;
mod fields;
mod patch;
#[cfg(test)]
mod tests;

pub use apply::{Conflict, Managed, apply_merge, read_managed, record_update, server_side_apply, write_managed};
pub use fields::{FieldPath, FieldSet, Scope, collect_fields, display_path, fields_of, get_at, remove_at, scoped};
pub use patch::{json_patch, merge_patch, strategic_merge};

/// How a list merges.
#[derive(Clone, Debug, PartialEq)]
pub enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// Where we are in an object: the schema node (custom resources) and the field path.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    /// `Some` for custom resources (the schema decides list kinds); `None` for built-ins.
    pub schema: Option<&'a Value>,
    /// Whether the object has a schema at all (a CR): then schema-less subtrees are atomic.
    pub custom: bool,
    pub depth: usize,
    /// The field name this value sits under (`""` at the root).
    pub field: &'a str,
    /// Whether this node is the root's `metadata`.
    pub is_metadata: bool,
    /// Whether this node is a direct child of the root's `metadata`.
    pub under_metadata: bool,
}

impl<'a> Ctx<'a> {
    pub fn root(schema: Option<&'a Value>) -> Self {
        Self { schema, custom: schema.is_some(), depth: 0, field: "", is_metadata: false, under_metadata: false }
    }

    pub fn key(&self, k: &'a str) -> Ctx<'a> {
        let schema = self.schema.and_then(|s| {
            s["properties"].get(k).or(if s["additionalProperties"].is_object() {
                Some(&s["additionalProperties"])
            } else {
                None
            })
        });
        Ctx {
            schema,
            custom: self.custom,
            depth: self.depth + 1,
            field: k,
            is_metadata: self.depth == 0 && k == "metadata",
            under_metadata: self.is_metadata,
        }
    }

    pub fn item(&self) -> Ctx<'a> {
        Ctx {
            schema: self.schema.and_then(|s| s.get("items")),
            custom: self.custom,
            depth: self.depth + 1,
            field: "",
            is_metadata: false,
            under_metadata: false,
        }
    }

    /// The merge behaviour of the list at this position.
    pub fn list_kind(&self, items: &[&Value]) -> ListKind {
        if self.under_metadata && self.field == "finalizers" {
            return ListKind::Set;
        }
        if self.under_metadata && self.field == "ownerReferences" {
            return ListKind::Map(vec!["uid".into()]);
        }
        if self.custom {
            let Some(s) = self.schema else { return ListKind::Atomic };
            return match s["x-kubernetes-list-type"].as_str() {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map(
                    s["x-kubernetes-list-map-keys"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect(),
                ),
                _ => ListKind::Atomic,
            };
        }
        let all_have = |k: &str| !items.is_empty() && items.iter().all(|i| i.get(k).is_some());
        let keys: &[&str] = match self.field {
            "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets" => {
                &["name"]
            }
            "volumeMounts" => &["mountPath"],
            "volumeDevices" => &["devicePath"],
            "conditions" => &["type"],
            "ports" if all_have("containerPort") => &["containerPort"],
            "ports" if all_have("port") => &["port"],
            _ if all_have("name") && items.iter().all(|i| i.is_object()) => &["name"],
            _ if all_have("type") && items.iter().all(|i| i.is_object()) => &["type"],
            _ => return ListKind::Atomic,
        };
        ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
    }
}

fn key_of(item: &Value, keys: &[String]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k.as_str()) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

fn same_key(a: &Value, b: &Value, keys: &[String]) -> bool {
    keys.iter().all(|k| a.get(k.as_str()) == b.get(k.as_str()))
}
