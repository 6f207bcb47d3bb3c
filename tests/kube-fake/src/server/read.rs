//! GET and LIST, and the selectors a list or watch filters by.

use axum::response::Response;
use serde_json::{Value, json};

use super::wire::{Want, key_of, q, render, respond};
use super::{Shared, lock};
use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::table;
use crate::util::meta_str;

pub(super) fn get(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    want: Want,
    query: &[(String, String)],
) -> Result<Response, ApiError> {
    let store = lock(&shared.store);
    let obj = store.get(&key_of(rt, ns, name)).ok_or_else(|| ApiError::not_found(rt, name))?;
    Ok(respond(200, &render(rt, obj, want, query, store.resource_version()), &[]))
}

/// Which objects a list, watch or deletecollection sees: namespace, name, and the label
/// and field selectors of the query.
pub(super) struct Filter {
    /// `None` for all namespaces.
    pub ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    pub fn parse(ns: &str, name: &str, query: &[(String, String)]) -> Result<Self, ApiError> {
        let labels =
            LabelSelector::parse(q(query, "labelSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
        let fields =
            FieldSelector::parse(q(query, "fieldSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
        Ok(Self {
            ns: if ns.is_empty() { None } else { Some(ns.to_string()) },
            name: if name.is_empty() { None } else { Some(name.to_string()) },
            labels,
            fields,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.ns.as_deref().is_none_or(|ns| meta_str(obj, "namespace") == ns)
            && self.name.as_deref().is_none_or(|n| meta_str(obj, "name") == n)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

pub(super) fn list(
    shared: &Shared,
    rt: &ResourceType,
    ns: &str,
    want: Want,
    query: &[(String, String)],
) -> Result<Response, ApiError> {
    let filter = Filter::parse(ns, "", query)?;
    let store = lock(&shared.store);
    let rv = store.resource_version().to_string();
    let all: Vec<&Value> =
        store.list(&rt.gvr(), filter.ns.as_deref()).into_iter().filter(|o| filter.matches(o)).collect();
    let offset: usize = q(query, "continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q(query, "limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let page: Vec<&Value> = all.iter().skip(offset).take(limit).copied().collect();
    let next = offset.saturating_add(page.len());
    let mut meta = json!({"resourceVersion": rv});
    if next < all.len() {
        meta["continue"] = json!(next.to_string());
        meta["remainingItemCount"] = json!(all.len() - next);
    }
    let body = match want {
        Want::Table => {
            let mut t = table::table(rt, &page, q(query, "includeObject").unwrap_or_default(), &rv);
            t["metadata"] = meta;
            t
        }
        Want::Metadata => json!({
            "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "items": page.iter().map(|o| table::partial_metadata(o)).collect::<Vec<_>>(),
        }),
        Want::Json => json!({"apiVersion": rt.api_version(), "kind": rt.list_kind(), "metadata": meta, "items": page}),
    };
    Ok(respond(200, &body, &[]))
}
