fn main() {
    let crd = sluice_crds::crds().into_iter().find(|c| c.spec.names.kind == "ModelRoute").unwrap();
    let schema = serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap();
    let obj = serde_json::json!({"apiVersion":"sluice.dev/v1alpha1","kind":"ModelRoute","metadata":{"name":"x"},"spec":{"model":"m","gateway":null,"candidates":[{"upstream":"a"}]}});
    eprintln!("{:?}", kube::core::cel::Validator::new().validate(&schema, &obj, None));
}
