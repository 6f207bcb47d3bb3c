//! AccountLimits end to end against a real kube-apiserver (`sluice_tests::controlplane`), the
//! operator authenticated as the chart's ServiceAccount with the chart's RBAC: its real
//! controllers write each one's limits into the ledger (the full set of six), follow an
//! edit (overwriting a change made meanwhile with `admin`), refuse a second owner of a
//! subject and an unknown account or key, and remove the limits on delete (after which
//! the next AccountLimit of the subject takes it over). The test acts as the cluster's
//! admin.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use sluice_crds::AccountLimit;
use sluice_ledger::testing::eventually;
use sluice_ledger::{Ledger, Limits, LimitsUpdate, Meter, Subject};
use sluice_operator::Config;
use sluice_tests::controlplane::ControlPlane;

const WAIT: Duration = Duration::from_secs(20);

async fn create(client: &Client, namespace: &str, name: &str, spec: Value) {
    let al: AccountLimit = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "AccountLimit",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }))
    .unwrap();
    Api::<AccountLimit>::namespaced(client.clone(), namespace).create(&PostParams::default(), &al).await.unwrap();
}

async fn get(client: &Client, namespace: &str, name: &str) -> Option<AccountLimit> {
    Api::<AccountLimit>::namespaced(client.clone(), namespace).get_opt(name).await.unwrap()
}

/// `(applied, Ready status, Ready reason, Ready message)` of the AccountLimit's status.
async fn ready(client: &Client, namespace: &str, name: &str) -> Option<(Option<bool>, String, String, String)> {
    let al = get(client, namespace, name).await?;
    let status = al.status?;
    let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((status.applied, c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_reason(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> (Option<bool>, String, String, String) {
    let reached = eventually(WAIT, async || ready(client, namespace, name).await.is_some_and(|r| r.2 == reason)).await;
    let got = ready(client, namespace, name).await;
    assert!(reached, "{namespace}/{name} never reached {reason}: {got:?}");
    got.unwrap()
}

async fn wait_limits(ledger: &Ledger, subject: Subject, want: Limits) {
    let reached = eventually(WAIT, async || ledger.limits(subject).await.unwrap() == want).await;
    assert!(reached, "{subject:?}: expected {want:?}, the ledger has {:?}", ledger.limits(subject).await.unwrap());
}

#[tokio::test]
async fn account_limits_are_written_to_the_ledger_and_removed_on_delete() {
    let Some(cp) = ControlPlane::start().await.unwrap() else { return };
    cp.install_sluice_crds().await.unwrap();
    for namespace in ["team-a", "team-b"] {
        cp.create_namespace(namespace).await.unwrap();
    }
    let operator_identity = cp.chart_operator("sluice-system").await.unwrap();
    let client = cp.client();
    let path = std::env::temp_dir().join(format!("sluice-operator-limits-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let url = format!("sqlite://{}", path.display());
    let ledger = Ledger::connect(&url).await.unwrap();
    let account = ledger.create_account("team-a", 10_000_000_000).await.unwrap();
    ledger.create_key("team-a").await.unwrap();
    let key_id = ledger.keys("team-a").await.unwrap()[0].id;

    let mut config = Config::new(&url);
    config.status_interval = Duration::from_secs(1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(sluice_operator::run_until(operator_identity.client.clone(), config, async move {
        let _ = stopped.await;
    }));
    let team_a = Subject::Account(account.id);

    // Applied: the full set, absent fields unlimited; the finalizer on; use in status.
    create(&client, "team-a", "limits", json!({"account": "team-a", "rpm": 600, "dailySpend": "25.00"})).await;
    let first = Limits { rpm: Some(600), daily_spend_nanos: Some(25_000_000_000), ..Limits::default() };
    wait_limits(&ledger, team_a, first).await;
    let (applied, status, _, message) = wait_reason(&client, "team-a", "limits", "Applied").await;
    assert_eq!((applied, status.as_str()), (Some(true), "True"), "{message}");
    let al = get(&client, "team-a", "limits").await.unwrap();
    assert_eq!(al.metadata.finalizers, Some(vec!["sluice.dev/limits".to_string()]));
    let uses: Vec<String> = al.status.unwrap().uses.iter().map(|u| u.limit.clone()).collect();
    assert_eq!(uses, ["rpm", "daily_spend"]);

    // Updated: the new set replaces the old one, and a limit set meanwhile with `admin`.
    ledger.update_account_limits("team-a", &LimitsUpdate(vec![(Meter::Tokens, Some(5))])).await.unwrap();
    let patch = json!({"spec": {"rpm": 60, "dailySpend": null, "concurrency": 4}});
    Api::<AccountLimit>::namespaced(client.clone(), "team-a")
        .patch("limits", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_limits(&ledger, team_a, Limits { rpm: Some(60), concurrency: Some(4), ..Limits::default() }).await;

    // A second AccountLimit of the subject, in another namespace: the older one owns it.
    create(&client, "team-b", "newer", json!({"account": "team-a", "rpm": 1000})).await;
    let (applied, status, _, message) = wait_reason(&client, "team-b", "newer", "Conflict").await;
    assert_eq!((applied, status.as_str()), (Some(false), "False"));
    assert!(message.contains("owned by AccountLimit team-a/limits"), "{message}");
    assert_eq!(ledger.limits(team_a).await.unwrap().rpm, Some(60), "the newer one wrote nothing");

    // Unknown subjects: nothing written.
    create(&client, "team-a", "ghost", json!({"account": "nobody", "rpm": 1})).await;
    let (_, _, _, message) = wait_reason(&client, "team-a", "ghost", "UnknownAccount").await;
    assert!(message.contains("no account named \"nobody\""), "{message}");
    create(&client, "team-a", "no-such-key", json!({"account": "team-a", "keyId": 999, "rpm": 1})).await;
    let (_, _, _, message) = wait_reason(&client, "team-a", "no-such-key", "UnknownKey").await;
    assert!(message.contains("no API key 999"), "{message}");

    // A key's own limits.
    create(&client, "team-a", "key", json!({"account": "team-a", "keyId": key_id, "tpm": 5000})).await;
    wait_limits(&ledger, Subject::Key(key_id), Limits { tpm: Some(5000), ..Limits::default() }).await;

    // Deleted: the owner's limits go, and the next AccountLimit of the subject takes over.
    let delete = |ns: &'static str, name: &'static str| {
        let client = client.clone();
        async move {
            Api::<AccountLimit>::namespaced(client.clone(), ns).delete(name, &DeleteParams::default()).await.unwrap();
            let gone = eventually(WAIT, async || get(&client, ns, name).await.is_none()).await;
            assert!(gone, "{ns}/{name} kept its finalizer");
        }
    };
    delete("team-a", "limits").await;
    wait_limits(&ledger, team_a, Limits { rpm: Some(1000), ..Limits::default() }).await;
    wait_reason(&client, "team-b", "newer", "Applied").await;
    delete("team-b", "newer").await;
    wait_limits(&ledger, team_a, Limits::default()).await;
    delete("team-a", "key").await;
    wait_limits(&ledger, Subject::Key(key_id), Limits::default()).await;
    delete("team-a", "ghost").await;
    delete("team-a", "no-such-key").await;

    // With exactly the chart's rules, the authorizer refused the operator nothing.
    let refused: Vec<Value> = cp
        .audit_events(0)
        .into_iter()
        .filter(|e| e["user"]["username"] == operator_identity.username.as_str())
        .filter(|e| e["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .collect();
    assert!(refused.is_empty(), "the chart's RBAC refused the operator: {refused:#?}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), operator).await.expect("shutdown hung").unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
}
