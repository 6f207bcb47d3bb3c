//! A real Kubernetes control plane for Rust tests: etcd and kube-apiserver (and, on
//! request, kube-controller-manager) of the release tests/kube builds, on loopback
//! ephemeral ports in a temporary directory, with a CA and certificates made for this
//! run, the Node and RBAC authorizers on, a service-account token issuer, the default
//! admission plugins plus `NodeRestriction` and `OwnerReferencesPermissionEnforcement`,
//! and an audit log of every ServiceAccount's requests: the flags of the Python fixture
//! `sluice_testsupport.controlplane` (tests/pysupport), of which this is the Rust
//! counterpart (one support module per language).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let Some(cp) = sluice_tests::controlplane::ControlPlane::start().await? else { return Ok(()) }; // skipped
//! cp.install_sluice_crds().await?;
//! let admin: kube::Client = cp.client();                   // system:masters
//! let operator = cp.chart_operator("sluice-system").await?; // the chart's ServiceAccount and RBAC
//! // … run the operator with `operator.client`, act with `admin` …
//! let writes = cp.audit_events(0);                          // what the ServiceAccounts did
//! # Ok(()) }
//! ```
//!
//! - **Binaries.** `${SLUICE_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/kube-<release>/bin}`,
//!   where `tests/kube/build` puts them (the release is that script's `K8S_VERSION`). They
//!   are not built here (a cold build takes ~13 minutes): when one is missing,
//!   [`ControlPlane::start`] is an error under `CI` (any non-empty value) saying to run
//!   `tests/kube/build`, and elsewhere returns `Ok(None)` after printing why (the test
//!   skips). `scripts/test` builds them before `cargo test --workspace`.
//! - **Start.** Ports come from binding port 0 (a port lost to another process before the
//!   server binds it is retried, as the Python fixture does); readiness is polled (etcd's
//!   `/health`, the apiserver's `/readyz`, then the `default` namespace), never slept for.
//!   ~3–5 s on 2 cores.
//! - **Stop.** Dropping the [`ControlPlane`] kills the apiserver, the controller manager
//!   and etcd (SIGKILL: their state goes with the directory) and removes the directory;
//!   when the test is panicking, the directory (with each process's log) is kept and its
//!   path printed. The processes are started under `setpriv --pdeathsig KILL` when
//!   util-linux's `setpriv` is there, so they die with the test process even if no
//!   destructor runs.
//! - **Identities.** [`ControlPlane::client`] is an admin (client certificate, group
//!   `system:masters`); [`ControlPlane::service_account`] is a ServiceAccount with a
//!   TokenRequest token, to which RBAC applies as to a pod; [`ControlPlane::chart_operator`]
//!   applies the chart's ServiceAccount and RBAC for the operator ([`chart::operator_rbac`])
//!   and returns that identity once its rules are in effect.
//! - **Audit log.** Every request of a ServiceAccount (group `system:serviceaccounts`) at
//!   the `Metadata` level: verb, resource, namespace, name, response code and the
//!   authorizer's decision ([`ControlPlane::audit_events`]). Tests use it where they
//!   used kube-fake's request log, e.g. to wait until the operator writes nothing.
//!
//! Unlike the Python fixture, this does not run against a cluster of your own
//! (`SLUICE_TEST_KUBECONFIG`): the tests using it need the audit log and a cluster to
//! themselves.

pub mod chart;
mod pki;

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long a start (or a CRD, or RBAC taking effect) may take on a loaded 2-core
/// machine before it is a failure.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Field manager of everything this module applies.
pub const FIELD_MANAGER: &str = "sluice-tests";

/// The audit policy: what the ServiceAccounts (the components under test) do, at the
/// Metadata level; nothing of the admin (the tests) or of the apiserver itself.
const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [\"system:serviceaccounts\"]
- level: None
";

/// tests/kube/build, whose `K8S_VERSION=` names the release (and its cache directory).
const BUILD_SCRIPT: &str = include_str!("../kube/build");

/// The Kubernetes release tests/kube/build builds, e.g. `v1.37.2`.
pub fn kubernetes_version() -> &'static str {
    BUILD_SCRIPT
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .map(str::trim)
        .unwrap_or("(tests/kube/build has no K8S_VERSION= line)")
}

/// Where tests/kube/build puts the binaries (see the module docs).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLUICE_KUBE_BIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
    cache.join("sluice").join(format!("kube-{}", kubernetes_version())).join("bin")
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The binary directory, once every binary `options` needs is there; `Ok(None)` (the
/// reason printed) when one is missing outside CI, an error under CI.
pub fn binaries(options: Options) -> anyhow::Result<Option<PathBuf>> {
    let dir = bin_dir();
    let mut names = vec!["etcd", "kube-apiserver"];
    if options.controller_manager {
        names.push("kube-controller-manager");
    }
    let missing: Vec<&str> = names.into_iter().filter(|n| !dir.join(n).is_file()).collect();
    if missing.is_empty() {
        return Ok(Some(dir));
    }
    let reason = format!(
        "the Kubernetes {} control plane is not built: {} missing in {} (build it with `tests/kube/build`: \
         Go, ~13 minutes cold, cached afterwards; SLUICE_KUBE_BIN overrides the directory)",
        kubernetes_version(),
        missing.join(", "),
        dir.display(),
    );
    if in_ci() {
        anyhow::bail!("{reason}; CI is set: this is a failure, not a skip");
    }
    eprintln!("skipped: {reason}");
    Ok(None)
}

/// What to start besides etcd and kube-apiserver.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// kube-controller-manager, with the controllers the Python fixture runs: garbage
    /// collection of owned objects, namespace deletion, the `default` ServiceAccounts
    /// (and so the ServiceAccount admission plugin, which the apiserver otherwise runs
    /// without), the root CA ConfigMap, ClusterRole aggregation.
    pub controller_manager: bool,
}

/// A ServiceAccount's identity: a client with its TokenRequest token.
#[derive(Clone)]
pub struct Identity {
    pub client: Client,
    /// `system:serviceaccount:NAMESPACE:NAME`, as the audit log names it.
    pub username: String,
    /// A kubeconfig file with the token (for a process of its own).
    pub kubeconfig: PathBuf,
}

struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn log_tail(&self) -> String {
        tail(&self.log, 4000)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes of one start, killed (apiserver first, etcd last) when dropped, also
/// when the start fails half-way.
struct Procs(Vec<Proc>);

impl Drop for Procs {
    fn drop(&mut self) {
        let rank = |p: &Proc| match p.name {
            "kube-apiserver" => 0,
            "kube-controller-manager" => 1,
            _ => 2,
        };
        self.0.sort_by_key(rank);
        for p in &mut self.0 {
            p.kill();
        }
    }
}

/// A running control plane (see the module docs).
pub struct ControlPlane {
    procs: Procs,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    server: String,
    ca: PathBuf,
    kubeconfig: PathBuf,
    audit_log: PathBuf,
    client: Client,
    start_time: Duration,
}

enum Failure {
    /// A port picked free was taken before the server bound it: start again.
    PortTaken(String),
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Other(e.into())
    }
}

impl ControlPlane {
    /// etcd and kube-apiserver, ready; `Ok(None)` when the binaries are missing outside CI.
    pub async fn start() -> anyhow::Result<Option<Self>> {
        Self::start_with(Options::default()).await
    }

    /// As [`start`](Self::start), with `options`.
    pub async fn start_with(options: Options) -> anyhow::Result<Option<Self>> {
        let Some(bins) = binaries(options)? else { return Ok(None) };
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_once(&bins, options).await {
                Ok(cp) => return Ok(Some(cp)),
                Err(Failure::PortTaken(e)) => last = e,
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        anyhow::bail!("the control plane did not start: {last}")
    }

    async fn start_once(bins: &Path, options: Options) -> Result<Self, Failure> {
        let t0 = Instant::now();
        let dir = tempfile::Builder::new().prefix("sluice-kube-").tempdir()?;
        let path = dir.path().to_path_buf();
        let pki = pki::make(&path.join("pki"))?;
        let logs = path.join("logs");
        std::fs::create_dir_all(&logs)?;
        let mut procs = Procs(Vec::new());

        let (client_port, peer_port, secure_port) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        procs.0.push(spawn(
            "etcd",
            &bins.join("etcd"),
            &[
                "--name=test".into(),
                format!("--data-dir={}", path.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=test={peer_url}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
                "--listen-metrics-urls=".into(),
                "--watch-progress-notify-interval=5s".into(),
            ],
            &logs,
        )?);
        let etcd_addr = format!("127.0.0.1:{client_port}");
        wait_until(&mut procs.0[0], || http_get_ok(&etcd_addr, "/health"), "/health").await?;

        let server = format!("https://127.0.0.1:{secure_port}");
        let policy = path.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY)?;
        let audit_log = path.join("audit.log");
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={secure_port}"),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", path.join("certs").display()),
            format!("--tls-cert-file={}", pki.serving_cert.display()),
            format!("--tls-private-key-file={}", pki.serving_key.display()),
            format!("--client-ca-file={}", pki.ca.display()),
            "--authorization-mode=Node,RBAC".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", pki.sa_pub.display()),
            format!("--service-account-signing-key-file={}", pki.sa_key.display()),
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement".into(),
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
        ];
        if !options.controller_manager {
            // Without the controller manager nobody makes the `default` ServiceAccounts
            // the ServiceAccount admission plugin requires of pods.
            args.push("--disable-admission-plugins=ServiceAccount".into());
        }
        procs.0.push(spawn("kube-apiserver", &bins.join("kube-apiserver"), &args, &logs)?);

        let kubeconfig = path.join("admin.kubeconfig");
        let admin = json!({"client-certificate": pki.admin_cert, "client-key": pki.admin_key});
        let yaml = kubeconfig_yaml(&server, &pki.ca, "admin", admin, "default")?;
        write_private(&kubeconfig, yaml.as_bytes())?;
        let client = client_from_yaml(&yaml).await?;
        let readyz = async || {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap_or_default();
            matches!(tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await, Ok(Ok(_)))
        };
        wait_until(&mut procs.0[1], readyz, "/readyz").await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let default_ns = async || matches!(namespaces.get_opt("default").await, Ok(Some(_)));
        wait_until(&mut procs.0[1], default_ns, "the `default` namespace").await?;

        if options.controller_manager {
            procs.0.push(spawn(
                "kube-controller-manager",
                &bins.join("kube-controller-manager"),
                &[
                    format!("--kubeconfig={}", kubeconfig.display()),
                    "--leader-elect=false".into(),
                    "--secure-port=0".into(),
                    format!("--root-ca-file={}", pki.ca.display()),
                    "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,\
                     root-ca-certificate-publisher-controller,clusterrole-aggregation-controller"
                        .into(),
                ],
                &logs,
            )?);
        }

        Ok(ControlPlane {
            procs,
            dir: Some(dir),
            path,
            server,
            ca: pki.ca,
            kubeconfig,
            audit_log,
            client,
            start_time: t0.elapsed(),
        })
    }

    /// An admin client (group `system:masters`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The admin's kubeconfig file (for kubectl or a process of its own).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The run's directory (certificates, etcd's data, `logs/`, the audit log).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// From the first process started to the `default` namespace being there.
    pub fn start_time(&self) -> Duration {
        self.start_time
    }

    /// The tail of each process's log, for a failure message.
    pub fn logs(&self) -> String {
        self.procs.0.iter().map(|p| format!("--- {} ---\n{}\n", p.name, p.log_tail())).collect()
    }

    /// Applies `crds` (server-side apply) and waits until each is Established and its
    /// resource is served. A CRD the server refuses (its schema, its CEL rules' cost) is
    /// an error with the server's message.
    pub async fn install_crds(&self, crds: Vec<CustomResourceDefinition>) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(crd)).await.with_context(|| format!("applying CRD {name}"))?;
        }
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = async || {
                api.get_opt(&name).await.ok().flatten().and_then(|c| c.status).is_some_and(|s| {
                    s.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True")
                })
            };
            anyhow::ensure!(poll(START_TIMEOUT, established).await, "CRD {name} never became Established");
            let served = crd.spec.versions.iter().find(|v| v.served).map(|v| v.name.clone()).unwrap_or_default();
            let uri = format!("/apis/{}/{served}/{}?limit=1", crd.spec.group, crd.spec.names.plural);
            let listed = async || {
                let req = http::Request::get(&uri).body(Vec::new()).unwrap_or_default();
                self.client.request_text(req).await.is_ok()
            };
            anyhow::ensure!(poll(START_TIMEOUT, listed).await, "CRD {name} is Established but {uri} never answered");
        }
        Ok(())
    }

    /// The sluice CRDs (`sluice_crds::crds()`, the chart's `crds/` generated from them).
    pub async fn install_sluice_crds(&self) -> anyhow::Result<()> {
        self.install_crds(sluice_crds::crds()).await
    }

    /// Creates namespace `name` (a real server refuses objects in a missing namespace);
    /// one that exists already is fine.
    pub async fn create_namespace(&self, name: &str) -> anyhow::Result<()> {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        match Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
        }
    }

    /// Server-side applies one object (any kind the server knows, as JSON with
    /// `apiVersion`, `kind` and `metadata.name`; namespaced when it has
    /// `metadata.namespace`) as the admin.
    pub async fn apply(&self, object: &Value) -> anyhow::Result<()> {
        let field = |p: &str| object.pointer(p).and_then(Value::as_str);
        let (Some(api_version), Some(kind), Some(name)) =
            (field("/apiVersion"), field("/kind"), field("/metadata/name"))
        else {
            anyhow::bail!("not an object with apiVersion, kind and metadata.name: {object}");
        };
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = match field("/metadata/namespace") {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
        Ok(())
    }

    /// ServiceAccount `namespace/name` (which must exist), as a client with a
    /// TokenRequest token of two hours: never an admin, RBAC applies to it as to a pod.
    pub async fn service_account(&self, namespace: &str, name: &str) -> anyhow::Result<Identity> {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec { expiration_seconds: Some(7200), ..TokenRequestSpec::default() }),
            ..TokenRequest::default()
        };
        let token: TokenRequest = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace)
            .create_subresource("token", name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("TokenRequest for ServiceAccount {namespace}/{name}"))?;
        let token = token.status.and_then(|s| s.token).unwrap_or_default();
        anyhow::ensure!(!token.is_empty(), "the TokenRequest for {namespace}/{name} returned no token");
        let user = format!("{namespace}-{name}");
        let yaml = kubeconfig_yaml(&self.server, &self.ca, &user, json!({"token": token}), namespace)?;
        let kubeconfig = self.path.join(format!("{user}.kubeconfig"));
        write_private(&kubeconfig, yaml.as_bytes())?;
        Ok(Identity {
            client: client_from_yaml(&yaml).await?,
            username: format!("system:serviceaccount:{namespace}:{name}"),
            kubeconfig,
        })
    }

    /// The operator's identity as the chart installs it into release namespace
    /// `namespace` (created): the chart's ServiceAccount `sluice-operator`, ClusterRole
    /// and ClusterRoleBinding ([`chart::operator_rbac`], without leader election)
    /// applied, and that ServiceAccount's [`Identity`], returned once the authorizer
    /// allows it every rule (RBAC takes effect a moment after it is written).
    pub async fn chart_operator(&self, namespace: &str) -> anyhow::Result<Identity> {
        const NAME: &str = "sluice-operator";
        self.create_namespace(namespace).await?;
        let rbac = chart::operator_rbac(NAME, namespace, false)?;
        for object in &rbac {
            self.apply(object).await?;
        }
        let identity = self.service_account(namespace, NAME).await?;
        wait_rules_in_effect(&identity.client, &rbac).await?;
        Ok(identity)
    }

    /// Where the audit log ends now: pass it to [`audit_events`](Self::audit_events)
    /// later for the events since.
    pub fn audit_offset(&self) -> u64 {
        std::fs::metadata(&self.audit_log).map(|m| m.len()).unwrap_or(0)
    }

    /// The audit log's events (JSON, one per request of a ServiceAccount: `verb`,
    /// `user.username`, `objectRef`, `responseStatus.code`, the authorizer's
    /// `annotations`) from byte `offset` on. A line still being written is left for
    /// the next read.
    pub fn audit_events(&self, offset: u64) -> Vec<Value> {
        let mut data = Vec::new();
        if let Ok(mut f) = File::open(&self.audit_log)
            && f.seek(SeekFrom::Start(offset)).is_ok()
        {
            let _ = f.read_to_end(&mut data);
        }
        let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        data[..complete].split(|b| *b == b'\n').filter_map(|line| serde_json::from_slice(line).ok()).collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Stop the processes before their directory goes.
        drop(std::mem::replace(&mut self.procs, Procs(Vec::new())));
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("the control plane's directory (logs/, audit.log) is kept: {}", dir.keep().display());
        }
    }
}

/// Waits until every rule of the (Cluster)Roles in `rbac` is allowed to `client`
/// (SelfSubjectAccessReviews): the RBAC authorizer sees new bindings a moment late.
async fn wait_rules_in_effect(client: &Client, rbac: &[Value]) -> anyhow::Result<()> {
    let mut checks = Vec::new();
    for role in rbac.iter().filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole" | "Role"))) {
        let namespace = role.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
        for rule in role["rules"].as_array().into_iter().flatten() {
            let strings = |key: &str| -> Vec<String> {
                rule[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
            };
            let name = strings("resourceNames").into_iter().next();
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    let (resource, subresource) = match resource.split_once('/') {
                        Some((r, s)) => (r.to_string(), Some(s.to_string())),
                        None => (resource, None),
                    };
                    for verb in strings("verbs") {
                        checks.push(ResourceAttributes {
                            group: Some(group.clone()),
                            resource: Some(resource.clone()),
                            subresource: subresource.clone(),
                            verb: Some(verb),
                            namespace: namespace.clone(),
                            name: name.clone(),
                            ..ResourceAttributes::default()
                        });
                    }
                }
            }
        }
    }
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut pending = checks;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let mut still = Vec::new();
        for attrs in pending {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec { resource_attributes: Some(attrs.clone()), ..Default::default() },
                ..Default::default()
            };
            let allowed = reviews
                .create(&PostParams::default(), &review)
                .await
                .ok()
                .is_some_and(|r| r.status.is_some_and(|s| s.allowed));
            if !allowed {
                still.push(attrs);
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "RBAC never allowed: {still:?}");
        pending = still;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` every 50 ms until it holds or `within` has passed; returns whether it held.
async fn poll(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` until it holds; fails (with the process's log) when `proc` exits or
/// [`START_TIMEOUT`] passes, as [`Failure::PortTaken`] when the log says its port was taken.
async fn wait_until(proc: &mut Proc, mut check: impl AsyncFnMut() -> bool, what: &str) -> Result<(), Failure> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = proc.child.try_wait()? {
            let log = proc.log_tail();
            if log.contains("address already in use") {
                return Err(Failure::PortTaken(format!("{}: address already in use", proc.name)));
            }
            return Err(Failure::Other(anyhow::anyhow!(
                "{} exited ({status}) before {what}; its log:\n{log}",
                proc.name
            )));
        }
        if check().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::Other(anyhow::anyhow!(
                "{}: no {what} within {} s; its log:\n{}",
                proc.name,
                START_TIMEOUT.as_secs(),
                proc.log_tail()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET path` over plain HTTP answers 200.
async fn http_get_ok(addr: &str, path: &str) -> bool {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).await?;
        std::io::Result::Ok(reply)
    };
    match tokio::time::timeout(Duration::from_secs(2), exchange).await {
        Ok(Ok(reply)) => reply.starts_with(b"HTTP/1.1 200") || reply.starts_with(b"HTTP/1.0 200"),
        _ => false,
    }
}

/// A port free now (a start that loses it to another process is retried).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `bin ARGS` with stdout and stderr to `logs/NAME.log`, under
/// `setpriv --pdeathsig KILL` when there is one (it dies with this process).
fn spawn(name: &'static str, bin: &Path, args: &[String], logs: &Path) -> anyhow::Result<Proc> {
    let log = logs.join(format!("{name}.log"));
    let out = File::options().create(true).append(true).open(&log)?;
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().map(Path::new).find(|p| p.is_file());
    let mut cmd = match setpriv {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let child = cmd
        .args(args)
        .current_dir(logs)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(Proc { name, child, log })
}

/// A kubeconfig with one cluster, one user (`creds`) and one context (`test`).
fn kubeconfig_yaml(server: &str, ca: &Path, user: &str, creds: Value, namespace: &str) -> anyhow::Result<String> {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user, "namespace": namespace}}],
        "current-context": "test",
    });
    Ok(serde_yaml::to_string(&doc)?)
}

async fn client_from_yaml(yaml: &str) -> anyhow::Result<Client> {
    let config =
        kube::Config::from_custom_kubeconfig(Kubeconfig::from_yaml(yaml)?, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Writes `data` to `path`, readable by the owner only.
fn write_private(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The last `max` bytes of a file, as text.
fn tail(path: &Path, max: u64) -> String {
    let mut data = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_ok() {
            let _ = f.read_to_end(&mut data);
        }
    }
    String::from_utf8_lossy(&data).into_owned()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DeleteParams;
    use sluice_ledger::testing::eventually;

    use super::*;

    #[test]
    fn the_release_comes_from_tests_kube_build() {
        let v = kubernetes_version();
        assert!(v.starts_with("v1.") && v.split('.').count() == 3, "{v}");
        assert!(bin_dir().ends_with(format!("kube-{v}/bin")) || std::env::var_os("SLUICE_KUBE_BIN").is_some());
    }

    /// The module itself, with the controller manager: the release tests/kube builds, a
    /// ServiceAccount held to its RBAC (and the audit log recording the refusal), garbage
    /// collection of an owned object.
    #[tokio::test]
    async fn starts_authorizes_audits_and_collects_garbage() {
        let Some(cp) = ControlPlane::start_with(Options { controller_manager: true }).await.unwrap() else { return };
        let admin = cp.client();
        let version = admin.apiserver_version().await.unwrap();
        assert_eq!(version.git_version, kubernetes_version());

        // A ServiceAccount without any binding: its token authenticates, RBAC refuses it.
        cp.create_namespace("t").await.unwrap();
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
        Api::<ServiceAccount>::namespaced(admin.clone(), "t").create(&PostParams::default(), &sa).await.unwrap();
        let nobody = cp.service_account("t", "nobody").await.unwrap();
        let offset = cp.audit_offset();
        let err = Api::<ConfigMap>::namespaced(nobody.client.clone(), "t").list(&Default::default()).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err:?}");
        let refused = eventually(Duration::from_secs(10), async || {
            cp.audit_events(offset).iter().any(|e| {
                e["user"]["username"] == nobody.username.as_str()
                    && e["verb"] == "list"
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["annotations"]["authorization.k8s.io/decision"] == "forbid"
            })
        })
        .await;
        assert!(refused, "the audit log has no refused list: {:#?}", cp.audit_events(offset));

        // Garbage collection (the controller manager): a dependent goes with its owner.
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "t");
        let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
        let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
        let dependent: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "dependent", "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.unwrap(),
            }]}}))
            .unwrap();
        cms.create(&PostParams::default(), &dependent).await.unwrap();
        cms.delete("owner", &DeleteParams::background()).await.unwrap();
        let collected =
            eventually(Duration::from_secs(30), async || cms.get_opt("dependent").await.unwrap().is_none()).await;
        assert!(collected, "the dependent ConfigMap was not garbage-collected; logs:\n{}", cp.logs());
    }
}
