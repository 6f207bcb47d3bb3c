//! The patch flavours and apply, on small objects.

use super::*;
use serde_json::json;

#[test]
fn merge_patch_rfc7386() {
    let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
    merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
    assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
}

#[test]
fn strategic_merge_by_key_and_directives() {
    let mut t =
        json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}], "args": ["x"]}});
    let p = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "a", "image": "2"}, {"name": "b", "$patch": "delete"}],
        "args": ["y"]
    }});
    strategic_merge(&mut t, &p, Ctx::root(None));
    assert_eq!(t, json!({"spec": {"containers": [{"name": "a", "image": "2"}], "args": ["y"]}}));
}

#[test]
fn json_patch_test_null_on_missing_path() {
    let mut doc = json!({"metadata": {"name": "x"}});
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
    ]);
    assert_eq!(json_patch(&mut doc, &ops), Ok(()));
    assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
    let bad = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "other"}]);
    assert!(json_patch(&mut doc, &bad).is_err());
}

#[test]
fn fields_v1_round_trip() {
    let obj = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]},
                     "spec": {"containers": [{"name": "c", "image": "i"}], "n": 1}});
    let set = fields_of(&obj, Scope::Main { with_status: true }, None);
    let mut o = obj.clone();
    write_managed(
        &mut o,
        &[Managed {
            manager: "m".into(),
            operation: "Apply".into(),
            subresource: String::new(),
            api_version: "v1".into(),
            time: "t".into(),
            fields: set.clone(),
        }],
    );
    assert_eq!(read_managed(&o)[0].fields, set);
    assert!(set.contains(&vec![
        "f:spec".to_string(),
        "f:containers".into(),
        "k:{\"name\":\"c\"}".into(),
        "f:image".into()
    ]));
}

#[test]
fn apply_removes_fields_a_manager_stops_applying_and_detects_conflicts() {
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
    let a = server_side_apply(
        &live,
        &json!({"data": {"a": "1", "b": "2"}}),
        "m",
        false,
        Scope::Main { with_status: true },
        None,
        "v1",
    );
    let Ok(a) = a else { panic!("apply failed") };
    let Ok(b) =
        server_side_apply(&a, &json!({"data": {"a": "1"}}), "m", false, Scope::Main { with_status: true }, None, "v1")
    else {
        panic!("apply failed")
    };
    assert_eq!(b["data"], json!({"a": "1"}));
    let c = server_side_apply(
        &b,
        &json!({"data": {"a": "other"}}),
        "n",
        false,
        Scope::Main { with_status: true },
        None,
        "v1",
    );
    assert!(matches!(c, Err(ref cs) if cs.len() == 1 && cs[0].path == ".data.a" && cs[0].manager == "m"));
    let Ok(d) = server_side_apply(
        &b,
        &json!({"data": {"a": "other"}}),
        "n",
        true,
        Scope::Main { with_status: true },
        None,
        "v1",
    ) else {
        panic!("forced apply failed")
    };
    assert_eq!(d["data"], json!({"a": "other"}));
}
