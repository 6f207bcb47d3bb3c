"""A real Kubernetes control plane for tests: etcd, kube-apiserver and (optionally)
kube-controller-manager, built from source by tests/kube/build, on loopback ephemeral
ports, with a CA and certificates made for this run, the Node and RBAC authorizers on,
a service-account token issuer and the default admission plugins, as a real control
plane runs them. It starts in seconds and removes its directory when stopped.

The apiserver writes an audit log (`audit_events()`): every request a ServiceAccount
makes, at the `Metadata` level (verb, resource, namespace, name, response code and the
authorizer's decision), so that a test can tell what a component running with exactly
its RBAC did, and whether anything was forbidden.

`SLUICE_TEST_KUBECONFIG=path` runs the suites against a cluster of your own instead
(an admin kubeconfig; the tests make namespaces of their own and delete them).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from .kubeapi import Kubectl
from .paths import REPO
from .procs import Proc, spawn

#: The release tests/kube builds (its README says why this one).
KUBERNETES_VERSION = "v1.37.2"
#: How long a start may take on a loaded 2-core machine before it is a failure.
START_TIMEOUT = 120.0
#: The audit policy: what the ServiceAccounts (the components under test) do, at the
#: Metadata level; nothing of the admin (tests, kubectl, the mini-kubelet, the
#: controller manager) or of the apiserver itself.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
"""


def bin_dir() -> Path:
    """The control plane's binaries: tests/kube/build builds them (or finds them cached)
    and prints the directory on its last line."""
    out = subprocess.run([str(REPO / "tests/kube/build")], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
    """A port free now (a start that loses the race is retried by the caller)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- certificates -----------------------------------------------------------------------

def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
          sans: Optional[list] = None, client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=7))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False,
                                          encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _name(cn: str, org: Optional[str] = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass
class Pki:
    """The run's CA, the apiserver's serving pair, the admin client pair and the
    service-account signing key, as files in `dir`."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def make(self) -> "Pki":
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("sluice-test-ca")
        ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
        serving_key = ec.generate_private_key(ec.SECP256R1())
        sans = [x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        serving = _cert(_name("kube-apiserver"), serving_key, ca_name, ca_key, sans=sans)
        admin_key = ec.generate_private_key(ec.SECP256R1())
        admin = _cert(_name("admin", "system:masters"), admin_key, ca_name, ca_key, client=True)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        files = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": _pem_key(ca_key),
            "serving.crt": serving.public_bytes(serialization.Encoding.PEM),
            "serving.key": _pem_key(serving_key),
            "admin.crt": admin.public_bytes(serialization.Encoding.PEM),
            "admin.key": _pem_key(admin_key),
            "sa.key": _pem_key(sa_key),
        }
        for name, data in files.items():
            (self.dir / name).write_bytes(data)
            (self.dir / name).chmod(0o600)
        return self


# --- kubeconfigs ------------------------------------------------------------------------

def write_kubeconfig(path: Path, server: str, ca: Path, *, user: str, token: Optional[str] = None,
                     cert: Optional[Path] = None, key: Optional[Path] = None, namespace: str = "default") -> Path:
    """A kubeconfig with one cluster, one user and one context (`test`)."""
    creds: dict = {}
    if token is not None:
        creds["token"] = token
    if cert is not None and key is not None:
        creds["client-certificate"] = str(cert)
        creds["client-key"] = str(key)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user, "namespace": namespace}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


# --- the control plane ------------------------------------------------------------------

@dataclass
class ControlPlane(Kubectl):
    """etcd + kube-apiserver (+ kube-controller-manager), or a cluster of your own."""

    dir: Path
    kubeconfig: Path
    server: str = ""
    procs: list[Proc] = field(default_factory=list)
    own_dir: bool = True
    #: Seconds from the first process started to `/readyz` answering 200.
    start_seconds: float = 0.0
    #: The apiserver's audit log (JSON lines); None on a cluster of your own.
    audit_log: Optional[Path] = None

    @classmethod
    def start(cls, *, controller_manager: bool = False, logdir: Optional[Path] = None) -> "ControlPlane":
        """Starts a control plane of its own, or uses `SLUICE_TEST_KUBECONFIG`."""
        own = os.environ.get("SLUICE_TEST_KUBECONFIG")
        if own:
            tmp = Path(tempfile.mkdtemp(prefix="sluice-kube-"))
            cp = cls(dir=tmp, kubeconfig=Path(own), own_dir=True)
            cp.server = cp.kubectl_json("config", "view", "--minify", "-o", "json")["clusters"][0]["cluster"]["server"]
            return cp
        bins = bin_dir()
        last: Optional[Exception] = None
        for _ in range(3):  # a port lost to another process between pick and bind: retry
            tmp = Path(tempfile.mkdtemp(prefix="sluice-kube-"))
            cp = cls(dir=tmp, kubeconfig=tmp / "admin.kubeconfig")
            try:
                cp._start(bins, controller_manager, logdir or tmp / "logs")
                return cp
            except _PortTaken as e:
                last = e
                cp.stop()
        raise AssertionError(f"control plane did not start: {last}")

    def _start(self, bins: Path, controller_manager: bool, logdir: Path) -> None:
        t0 = time.monotonic()
        pki = Pki(self.dir / "pki").make()
        client, peer, secure = free_port(), free_port(), free_port()
        etcd = spawn("etcd", [
            str(bins / "etcd"), "--name=test", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=test=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn",
            "--listen-metrics-urls=", "--watch-progress-notify-interval=5s",
        ], logdir)
        self.procs.append(etcd)
        _wait_http(etcd, f"http://127.0.0.1:{client}/health", None)
        self.server = f"https://127.0.0.1:{secure}"
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self.audit_log = self.dir / "audit.log"
        apiserver = spawn("kube-apiserver", [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{client}",
            "--bind-address=127.0.0.1", f"--secure-port={secure}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.dir / 'certs'}",
            f"--tls-cert-file={pki.dir / 'serving.crt'}", f"--tls-private-key-file={pki.dir / 'serving.key'}",
            f"--client-ca-file={pki.ca}",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.dir / 'sa.key'}",
            f"--service-account-signing-key-file={pki.dir / 'sa.key'}",
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking", "--audit-log-maxsize=0",
            # Without the controller manager nobody makes the `default` ServiceAccounts
            # the ServiceAccount admission plugin requires of pods.
            *([] if controller_manager else ["--disable-admission-plugins=ServiceAccount"]),
        ], logdir)
        self.procs.append(apiserver)
        write_kubeconfig(self.kubeconfig, self.server, pki.ca, user="admin",
                         cert=pki.dir / "admin.crt", key=pki.dir / "admin.key")
        _wait_http(apiserver, f"{self.server}/readyz", pki.ca)
        self._wait_default_namespace()
        if controller_manager:
            kcm = spawn("kube-controller-manager", [
                str(bins / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--secure-port=0", f"--root-ca-file={pki.ca}",
                "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,"
                "root-ca-certificate-publisher-controller,clusterrole-aggregation-controller",
            ], logdir)
            self.procs.append(kcm)
        self.start_seconds = time.monotonic() - t0

    def _wait_default_namespace(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.kubectl("get", "namespace", "default", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError("kube-apiserver is ready but the default namespace never appeared")

    # --- use -----------------------------------------------------------------------------

    @property
    def cache(self) -> Path:
        """kubectl's discovery cache (`Kubectl`), with the run's other files."""
        return self.dir / "kube-cache"

    def kubectl_json(self, *args: str) -> dict:
        """`kubectl ARGS` (with the admin kubeconfig), its output parsed as JSON."""
        return json.loads(self.kubectl(*args).stdout)

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig authenticating as ServiceAccount `namespace/name` with a
        TokenRequest token (never an admin: RBAC applies to it as to a pod)."""
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration=2h").stdout.strip()
        ca = self.dir / "pki" / "ca.crt"
        if not ca.exists():  # a cluster of your own: its CA from the admin kubeconfig
            view = self.kubectl_json("config", "view", "--minify", "--raw", "-o", "json")
            cluster = view["clusters"][0]["cluster"]
            data = cluster.get("certificate-authority-data")
            ca.parent.mkdir(parents=True, exist_ok=True)
            if data:
                ca.write_bytes(base64.b64decode(data))
            else:
                shutil.copy(cluster["certificate-authority"], ca)
        return write_kubeconfig(path, self.server, ca, user=f"{namespace}-{name}", token=token, namespace=namespace)

    def audit_events(self, offset: int = 0) -> Optional[list[dict]]:
        """The audit log's events from byte `offset` on (a ServiceAccount's requests, see
        AUDIT_POLICY), or None on a cluster of your own (no audit log to read)."""
        if self.audit_log is None:
            return None
        with open(self.audit_log, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
        # A line still being written has no newline yet: leave it for the next read.
        return [json.loads(line) for line in data.split(b"\n")[:-1] if line.strip()]

    def audit_offset(self) -> int:
        """Where the audit log ends now (0 without one)."""
        return self.audit_log.stat().st_size if self.audit_log and self.audit_log.exists() else 0

    # --- faults (tests/kube/test_operator_faults_real.py) --------------------------------

    def _proc(self, name: str) -> Proc:
        found = [p for p in self.procs if p.name == name]
        assert found, f"no {name} in this control plane (a cluster of your own has none to stop)"
        return found[0]

    def _respawn(self, old: Proc) -> Proc:
        """`old` started again with the same argv (ports, data dir, certificates), its
        output appended to the same log."""
        new = spawn(old.name, old.argv, old.log.parent)
        self.procs[self.procs.index(old)] = new
        return new

    def restart_apiserver(self, *, kill: bool = False) -> float:
        """Stops kube-apiserver (SIGTERM, or SIGKILL with `kill`: a crash) and starts it
        again on the same port with the same etcd, certificates and audit log; returns
        once `/readyz` answers 200, with the seconds it was away."""
        old = self._proc("kube-apiserver")
        t0 = time.monotonic()
        if kill:
            old.popen.kill()
            old.popen.wait(timeout=10)
        else:
            old.stop(timeout=30)
        new = self._respawn(old)
        _wait_http(new, f"{self.server}/readyz", self.dir / "pki" / "ca.crt")
        return time.monotonic() - t0

    def stop_etcd(self) -> None:
        """Stops etcd (SIGTERM); the apiserver keeps running without it."""
        self._proc("etcd").stop(timeout=30)

    def start_etcd(self) -> None:
        """Starts the stopped etcd again on its ports and data dir; returns once its
        `/health` answers 200."""
        old = self._proc("etcd")
        assert not old.alive(), "etcd is running"
        new = self._respawn(old)
        client = next(a.split("=", 1)[1] for a in old.argv if a.startswith("--listen-client-urls="))
        _wait_http(new, f"{client}/health", None)

    def logs(self) -> str:
        """The tail of each process's log, for a failure message."""
        return "\n".join(f"--- {p.name} ---\n{p.log_text()[-3000:]}" for p in self.procs)

    def stop(self) -> None:
        """Stops the apiserver first, then the controller manager and etcd, then
        removes the directory."""
        order = sorted(self.procs, key=lambda p: {"kube-apiserver": 0, "kube-controller-manager": 1}.get(p.name, 2))
        for p in order:
            p.stop(timeout=10)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class _PortTaken(Exception):
    pass


def _wait_http(proc: Proc, url: str, ca: Optional[Path]) -> None:
    """Polls `url` until it answers 200; fails with the process's log if it exits or
    takes longer than START_TIMEOUT."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         *([urllib.request.HTTPSHandler(context=ctx)] if ctx else []))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            text = proc.log_text()
            if "address already in use" in text:
                raise _PortTaken(f"{proc.name}: address already in use")
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}; its log:\n{text[-4000:]}")
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{proc.name} did not answer 200 at {url} within {START_TIMEOUT:.0f} s; its log:\n"
                         f"{proc.log_text()[-4000:]}")
