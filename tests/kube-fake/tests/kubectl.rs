//! The real `kubectl` (and kube-rs through a kubeconfig) against the `kube-fake` binary
//! served on 127.0.0.1. Without `kubectl` on the PATH these tests fail when `CI` is set
//! and are skipped (with a message) otherwise.
//!
//! (Just over ~400 lines: one scenario per kubectl verb against one shared fake server
//! process; splitting it would start a server per file.)
#![expect(clippy::expect_used, clippy::unwrap_used, reason = "tests: a panic is how a test reports")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether kubectl can run here; panics under CI when it cannot.
fn have_kubectl() -> bool {
    let ok = Command::new("kubectl").args(["version", "--client"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "kubectl is not on the PATH, and CI is set: install kubectl");
        eprintln!("SKIPPED: kubectl is not on the PATH (set CI=1 to make this a failure)");
    }
    ok
}

/// A running `kube-fake` process.
struct Fake {
    child: Child,
    dir: tempfile::TempDir,
    url: String,
}

impl Fake {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_kube-fake"))
            .arg("--kubeconfig-out")
            .arg(dir.path().join("kubeconfig"))
            .arg("--request-log")
            .arg(dir.path().join("requests.json"))
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kube-fake");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_string());
                }
                eprintln!("kube-fake: {line}");
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(20)).expect("kube-fake printed `listening on …`");
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Self { child, dir, url }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .current_dir(repo_root())
            .output()
            .expect("run kubectl")
    }

    /// Runs kubectl and returns stdout, panicking with both streams on failure.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// `kubectl apply -f charts/sluice/crds/`, or of CRDs rendered into a tempdir when
    /// the chart directory has not been generated.
    fn apply_crds(&self) -> String {
        let chart = repo_root().join("charts/sluice/crds");
        let dir = if chart.join("modelroutes.sluice.dev.yaml").is_file() {
            chart
        } else {
            let d = self.dir.path().join("crds");
            std::fs::create_dir_all(&d).unwrap();
            for (name, yaml) in sluice_crds::crd_files().unwrap() {
                std::fs::write(d.join(name), yaml).unwrap();
            }
            d
        };
        self.ok(&["apply", "-f", dir.to_str().unwrap()])
    }

    /// SIGTERM, then the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "kube-fake did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn assert_contains_all(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "missing {p:?} in:\n{text}");
    }
}

#[test]
fn kubectl_applies_the_crds_and_the_quickstart_and_prints_the_columns() {
    if !have_kubectl() {
        return;
    }
    let fake = Fake::start();
    let out = fake.apply_crds();
    assert_contains_all(
        &out,
        &[
            "customresourcedefinition.apiextensions.k8s.io/upstreams.sluice.dev created",
            "customresourcedefinition.apiextensions.k8s.io/modelroutes.sluice.dev created",
            "customresourcedefinition.apiextensions.k8s.io/errorbudgets.sluice.dev created",
        ],
    );
    fake.ok(&["wait", "--for=condition=Established", "crd/modelroutes.sluice.dev", "--timeout=10s"]);
    // The secrets/ subdirectory is not read without -R.
    let out = fake.ok(&["apply", "-f", "examples/quickstart/"]);
    assert_contains_all(
        &out,
        &[
            "upstream.sluice.dev/anthropic created",
            "upstream.sluice.dev/vertex-us-east5 created",
            "modelroute.sluice.dev/claude-opus created",
            "errorbudget.sluice.dev/chat-availability created",
        ],
    );
    let again = fake.ok(&["apply", "-f", "examples/quickstart/"]);
    assert_contains_all(
        &again,
        &["modelroute.sluice.dev/claude-opus unchanged", "upstream.sluice.dev/azure-eastus unchanged"],
    );

    // Status through the subresource, so that status columns have something to show.
    fake.ok(&[
        "patch", "errorbudget", "chat-availability", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"consumedPercent":"12.5","remainingPercent":"87.5","burnRates":{"1h":"2.4","5m":"9.9"},"state":"Burning"}}"#,
    ]);
    fake.ok(&[
        "patch", "modelroute", "claude-opus", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"candidateCount":2,"availability5m":"99.95","failovers5m":3,"conditions":[{"type":"Degraded","status":"False","reason":"Ok","message":"","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","reason":"Ok","message":"","lastTransitionTime":"2025-01-01T00:00:00Z"}]}}"#,
    ]);

    let all = fake.ok(&["get", "upstreams,modelroutes,errorbudgets"]);
    assert_contains_all(
        &all,
        &[
            "PROTOCOL",
            "REGION",
            "SUCCESS",
            "TTFB-P99",
            "CIRCUIT",
            "MODEL",
            "GATEWAY",
            "CANDIDATES",
            "AVAILABILITY",
            "FAILOVERS",
            "READY",
            "OBJECTIVE",
            "WINDOW",
            "CONSUMED",
            "REMAINING",
            "BURN-1H",
            "STATE",
            "AGE",
            "upstream.sluice.dev/vertex-us-east5",
            "modelroute.sluice.dev/gemini-pro",
            "modelroute.sluice.dev/gpt-4o",
            "errorbudget.sluice.dev/opus-timeslices",
        ],
    );
    let mr = fake.ok(&["get", "mr"]);
    let line = mr.lines().find(|l| l.starts_with("claude-opus ")).expect("a claude-opus row");
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cells[..7], ["claude-opus", "claude-opus-4", "2", "99.95", "3", "True", cells[6]], "{mr}");
    assert!(cells[6].ends_with('s'), "the Age column renders as an age: {line}");
    let eb = fake.ok(&["get", "eb"]);
    let line = eb.lines().find(|l| l.starts_with("chat-availability ")).expect("a chat-availability row");
    assert_eq!(
        &line.split_whitespace().collect::<Vec<_>>()[..7],
        ["chat-availability", "99.9", "30d", "12.5", "87.5", "2.4", "Burning"],
        "{eb}"
    );
    let ups = fake.ok(&["get", "ups"]);
    assert!(ups.lines().next().unwrap_or_default().starts_with("NAME"), "{ups}");
    // Each Upstream's native protocol, in the PROTOCOL column next to its name.
    for (name, protocol) in
        [("anthropic", "anthropic"), ("vertex-us-east5", "vertex-anthropic"), ("azure-eastus", "azure-openai")]
    {
        let row = ups.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default();
        assert_eq!(row.split_whitespace().nth(1), Some(protocol), "{ups}");
    }
    let sluice = fake.ok(&["get", "sluice"]);
    assert_contains_all(
        &sluice,
        &[
            "modelroute.sluice.dev/claude-opus",
            "upstream.sluice.dev/openai",
            "errorbudget.sluice.dev/chat-availability",
        ],
    );

    let yaml = fake.ok(&["get", "errorbudget", "chat-availability", "-o", "yaml"]);
    let doc: Value = serde_yaml::from_str(&yaml).expect("YAML");
    assert_eq!(doc["kind"], "ErrorBudget");
    assert_eq!(doc["apiVersion"], "sluice.dev/v1alpha1");
    assert_eq!(doc["spec"]["objective"], "99.9");
    assert_eq!(doc["status"]["burnRates"]["1h"], "2.4");
    assert_eq!(doc["metadata"]["generation"], 1);
    assert!(doc["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));

    let json_out = fake.ok(&["get", "mr", "-o", "json"]);
    let list: Value = serde_json::from_str(&json_out).expect("JSON");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3));
    let names = fake.ok(&["get", "mr", "-o", "name"]);
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["modelroute.sluice.dev/claude-opus", "modelroute.sluice.dev/gemini-pro", "modelroute.sluice.dev/gpt-4o"]
    );
    let described = fake.ok(&["describe", "mr", "gpt-4o"]);
    assert_contains_all(&described, &["Name:", "gpt-4o", "openai", "azure-eastus", "Events:"]);
    fake.ok(&["delete", "mr", "gpt-4o"]);
    let err = fake.kubectl(&["get", "mr", "gpt-4o"]);
    assert!(!err.status.success());
    assert_contains_all(&String::from_utf8_lossy(&err.stderr), &["modelroutes.sluice.dev \"gpt-4o\" not found"]);
}

#[test]
fn kubectl_refuses_invalid_model_routes_naming_the_fields() {
    if !have_kubectl() {
        return;
    }
    let fake = Fake::start();
    fake.apply_crds();
    let cases = [
        (
            "weight: 0",
            "  candidates:\n  - upstream: a\n    weight: 0\n",
            "spec.candidates[0].weight: Invalid value: 0: spec.candidates[0].weight in body should be greater than or equal to 1",
        ),
        (
            "retryOn: [404]",
            "  candidates:\n  - upstream: a\n  failover:\n    retryOn: [404]\n",
            "spec.failover.retryOn: Invalid value: \"array\": retryOn may only list 408, 429 and 5xx statuses: other 4xx are client errors and are passed through",
        ),
        (
            "a duplicate candidate upstream",
            "  candidates:\n  - upstream: a\n  - upstream: a\n",
            "spec.candidates: Invalid value: \"array\": candidates must name each upstream at most once",
        ),
    ];
    for (what, spec, message) in cases {
        let path = fake.dir.path().join("bad.yaml");
        let manifest = format!(
            "apiVersion: sluice.dev/v1alpha1\nkind: ModelRoute\nmetadata:\n  name: bad\nspec:\n  model: m\n{spec}"
        );
        std::fs::write(&path, manifest).unwrap();
        let out = fake.kubectl(&["apply", "-f", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: kubectl apply accepted it");
        assert_contains_all(&stderr, &["The ModelRoute \"bad\" is invalid", message]);
    }
    // Unknown fields are refused too: kubectl validates strictly through the server.
    let path = fake.dir.path().join("unknown.yaml");
    std::fs::write(&path, "apiVersion: sluice.dev/v1alpha1\nkind: ModelRoute\nmetadata:\n  name: bad\nspec:\n  model: m\n  candidates:\n  - upstream: a\n  retries: 3\n").unwrap();
    let out = fake.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_contains_all(&String::from_utf8_lossy(&out.stderr), &["unknown field \"spec.retries\""]);
    let none = fake.kubectl(&["get", "mr", "bad"]);
    assert!(!none.status.success(), "nothing invalid was stored");
}

#[test]
fn kubectl_generators_work_and_the_log_yields_what_kubectl_needed() {
    if !have_kubectl() {
        return;
    }
    let fake = Fake::start();
    // These send protobuf bodies, which the fake decodes for these four kinds.
    fake.ok(&["create", "namespace", "team-a"]);
    fake.ok(&["-n", "team-a", "create", "secret", "generic", "openai-key", "--from-literal=apiKey=sk-test"]);
    fake.ok(&["-n", "team-a", "create", "configmap", "settings", "--from-literal=mode=fast"]);
    fake.ok(&["-n", "team-a", "create", "serviceaccount", "robot"]);
    let key = fake.ok(&["-n", "team-a", "get", "secret", "openai-key", "-o", "jsonpath={.data.apiKey}"]);
    assert_eq!(key, "c2stdGVzdA==", "base64 of sk-test");
    let mode = fake.ok(&["-n", "team-a", "get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]);
    assert_eq!(mode, "fast");
    // Other kinds are refused clearly rather than misread.
    let out = fake.kubectl(&["create", "deployment", "web", "--image=x"]);
    assert!(!out.status.success());
    assert_contains_all(&String::from_utf8_lossy(&out.stderr), &["protobuf", "Deployment"]);

    let log: Vec<Value> =
        serde_json::from_slice(&fake_get(&fake.url, "/_fake/permissions?userAgent=kubectl/")).unwrap();
    let perms: Vec<&str> = log.iter().filter_map(Value::as_str).collect();
    for p in [
        "\"\" namespaces create",
        "\"\" secrets create",
        "\"\" secrets get",
        "\"\" configmaps create",
        "\"\" serviceaccounts create",
    ] {
        assert!(perms.contains(&p), "{p} missing from {perms:?}");
    }
}

/// A GET with a bare HTTP/1.1 client (no extra dependency).
fn fake_get(url: &str, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("headers end") + 4;
    let head = String::from_utf8_lossy(&buf[..split]).to_lowercase();
    let body = buf[split..].to_vec();
    if !head.contains("transfer-encoding: chunked") {
        return body;
    }
    // De-chunk.
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(end) = body[i..].windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[i..i + end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[i + end + 2..i + end + 2 + size]);
        i += end + 2 + size + 2;
    }
    out
}

#[tokio::test]
async fn the_served_binary_serves_kube_rs_from_its_kubeconfig_and_logs_requests_on_sigterm() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, ListParams, PostParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let mut fake = Fake::start();
    let kubeconfig = Kubeconfig::read_from(fake.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("config");
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), fake.url);
    let client = kube::Client::try_from(config).expect("client");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, ["default", "kube-node-lease", "kube-public", "kube-system"]);
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("hello".into());
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let status = tokio::task::spawn_blocking(move || {
        let status = fake.terminate();
        let log = std::fs::read_to_string(fake.dir.path().join("requests.json")).expect("request log written on exit");
        (status, log)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "kube-fake exits 0 on SIGTERM: {:?}", status.0);
    let log: Vec<Value> = serde_json::from_str(&status.1).unwrap();
    let create = log.iter().find(|r| r["verb"] == "create").expect("the create is logged");
    assert_eq!(create["resource"], "configmaps");
    assert_eq!(create["namespace"], "default");
    assert_eq!(create["status"], 201);
}
