"""Processes and clients of the operator end-to-end tests: the fake API server
(`kube-fake`), `kubectl` against it, the operator, the ledger schema in Postgres and
table helpers. Processes, chaos upstreams, HTTP and polling come from the shared
`sluice_testsupport` package (tests/pysupport). No pytest here (see conftest.py).

Every process listens on 127.0.0.1 with port 0 and is found through the
`… on http://ADDR` line it logs; its output goes to a log file next to the test's
artifacts, and it dies with the test process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional, Union

import yaml

# The shared pieces, re-exported for the test modules and kubelet.py.
from sluice_testsupport.chaos import Chaos, start_chaos  # noqa: F401
from sluice_testsupport.net import http  # noqa: F401
from sluice_testsupport.paths import POSTGRES_URL, REPO, TARGET, binary  # noqa: F401
from sluice_testsupport.poll import wait_for  # noqa: F401
from sluice_testsupport.procs import LISTENING, Proc, spawn, start, stop_all  # noqa: F401
from sluice_testsupport.kubeapi import Kubectl
from sluice_testsupport.realkube import HARNESS_UA, RealKube  # noqa: F401

# HARNESS_UA: the User-Agent of the harness's own API calls (the mini-kubelet's and the
# tests'), so that kube-fake's request log tells them from kubectl's and the operator's
# (kube-rs sends none).


# ---------------------------------------------------------------- the fake API server


@dataclass
class KubeFake(Kubectl):
    """`kube-fake` as a process, `kubectl` against it, and raw API calls.

    Its counterpart on a real kube-apiserver is `sluice_testsupport.realkube.RealKube`,
    with the same interface: the scenarios and the mini-kubelet take either. Here the
    namespaces are the names the scenarios use (`ns("team-b")` is `team-b`), the Helm
    release is `sluice`, and every identity is the fake's one token (kube-fake
    authorizes nothing: what RBAC a run needed is read from its request log).
    """

    proc: Proc
    kubeconfig: Path
    request_log: Path
    cache: Path
    url: str
    token: str = "kube-fake-token"
    namespace: str = "default"
    release: str = "sluice"
    real: ClassVar[bool] = False

    @classmethod
    def start(cls, workdir: Path) -> "KubeFake":
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = workdir / "kubeconfig"
        request_log = workdir / "requests.json"
        proc = start("kube-fake", [str(binary("kube-fake")), "--kubeconfig-out", str(kubeconfig),
                                   "--request-log", str(request_log)], workdir)
        text = kubeconfig.read_text()
        token = re.search(r"token:\s*(\S+)", text)
        return cls(proc=proc, kubeconfig=kubeconfig, request_log=request_log, cache=workdir / "kubectl-cache",
                   url=proc.url, token=token.group(1) if token else "kube-fake-token")

    # -- names and identities (see RealKube)

    def ns(self, name: str) -> str:
        return name

    def in_scope(self, namespace: str) -> bool:
        return True

    def create_namespace(self, name: str) -> str:
        self.kubectl("create", "namespace", name)
        return name

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """kube-fake has one identity for everybody: its kubeconfig."""
        return self.kubeconfig

    # -- kubectl


    # -- raw API (the mini-kubelet and a few reads)

    def api(self, method: str, path: str, body: Any = None,
            content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {self.token}", "user-agent": HARNESS_UA, "accept": "application/json"}
        if body is not None:
            headers["content-type"] = content_type
        status, data = http(method, self.url + path, body, headers)
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data.decode(errors="replace")
        return status, parsed

    def close(self) -> None:
        """Stops kube-fake (again: a no-op)."""
        self.proc.stop()

    def stop(self) -> list[dict]:
        """SIGTERM: kube-fake writes `--request-log`; returns it."""
        code = self.proc.stop(timeout=15)
        assert code == 0, f"kube-fake exited with {code}:\n{self.proc.log_text()[-2000:]}"
        return json.loads(self.request_log.read_text())


#: The cluster of a scenario: kube-fake, or a scenario of a real control plane.
Kube = Union[KubeFake, RealKube]


def secret_value(obj: dict, key: str) -> str:
    return base64.b64decode(obj["data"][key]).decode()


# ---------------------------------------------------------------- ledger


@dataclass
class LedgerSchema:
    """A private schema in the test Postgres: every process of a test shares it."""

    base: str
    schema: str
    url: str = ""

    @classmethod
    def create(cls) -> "LedgerSchema":
        schema = f"sluice_operator_e2e_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        psql(POSTGRES_URL, f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in POSTGRES_URL else "?"
        return cls(base=POSTGRES_URL, schema=schema, url=f"{POSTGRES_URL}{sep}options=-c%20search_path%3D{schema}")

    def drop(self) -> None:
        psql(self.base, f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def admin(self, *args: str) -> str:
        """`sluice-gateway admin --ledger URL ARGS`; returns stdout."""
        cmd = [str(binary("sluice-gateway")), "admin", "--ledger", self.url, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, NO_COLOR="1"))
        assert done.returncode == 0, f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        return done.stdout


def psql(url: str, sql: str) -> str:
    done = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"psql {sql!r} failed: {done.stderr}"
    return done.stdout


def have_postgres() -> Optional[str]:
    """None when Postgres answers, else why not."""
    if not shutil.which("psql"):
        return "psql (the PostgreSQL client) is not installed"
    done = subprocess.run(["psql", POSTGRES_URL, "-qAtc", "SELECT 1"], capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"Postgres at {POSTGRES_URL} does not answer: {done.stderr.strip()}"


# ---------------------------------------------------------------- the operator


def start_operator(name: str, kubeconfig: Path, ledger_url: str, logdir: Path, *extra: str) -> Proc:
    """The real `sluice-operator` binary, as one would run it by hand (`KUBECONFIG`,
    flags; `HOSTNAME` = `name`, as in a pod); returns once `/healthz` is served."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), NO_COLOR="1", HOSTNAME=name,
               RUST_LOG=os.environ.get("SLUICE_E2E_RUST_LOG", "info,kube=warn"))
    env.pop("POD_NAME", None)
    argv = [str(binary("sluice-operator")), "--ledger-url", ledger_url, "--listen", "127.0.0.1:0", *extra]
    return start(name, argv, logdir, env)


@dataclass
class OperatorIdentity:
    """Whom the operator runs as: `kubeconfig` and, on a real server, the user name
    the apiserver knows it by (`system:serviceaccount:NS:NAME`)."""

    kubeconfig: Path
    user: str
    #: The chart's objects that made it (ServiceAccount, ClusterRole, bindings, Role).
    rbac: list[dict]


def operator_identity(kube: "Kube", workdir: Path, values: Optional[dict] = None) -> OperatorIdentity:
    """The chart's RBAC for the operator (its ServiceAccount, ClusterRole and
    ClusterRoleBinding; with `operator.leaderElection.enabled`, the Role and RoleBinding),
    rendered for the scenario's release into its `sluice-system` namespace, and a
    kubeconfig holding a TokenRequest token of that ServiceAccount: the operator runs
    with exactly the chart's rules, never as an admin. On kube-fake, which authorizes
    nothing, the objects are not applied and the kubeconfig is the fake's."""
    from sluice_testsupport.chart import objects as render

    namespace = kube.ns("sluice-system")
    objs = render(values or {}, name=kube.release, namespace=namespace)
    sa = next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"].endswith("-operator"))
    name = sa["metadata"]["name"]
    rbac = [sa] + [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
                   and o["metadata"]["name"].startswith(name)]
    if kube.real:
        kube.create_namespace("sluice-system")
        kube.kubectl("apply", "-f", "-", input="---\n".join(yaml.safe_dump(o) for o in rbac))
    kubeconfig = kube.service_account_kubeconfig(namespace, name, workdir / f"{name}.kubeconfig")
    return OperatorIdentity(kubeconfig, f"system:serviceaccount:{namespace}:{name}", rbac)


@dataclass
class Artifacts:
    """Text saved for the report (kubectl outputs, RBAC comparison)."""

    dir: Path
    written: list[Path] = field(default_factory=list)

    def save(self, name: str, text: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        path.write_text(text)
        self.written.append(path)
        print(f"--- {name}\n{text}")
        return path


# ---------------------------------------------------------------- the quickstart

QUICKSTART = REPO / "examples" / "quickstart"
#: The quickstart's Upstreams and the placeholder `scheme://host:port` their base URLs
#: (and the Vertex service-account key's token_uri) point at.
QUICKSTART_UPSTREAMS = {
    "anthropic": "http://127.0.0.1:9101",
    "vertex-us-east5": "http://127.0.0.1:9102",
    "openai": "http://127.0.0.1:9103",
    "azure-eastus": "http://127.0.0.1:9104",
    "gemini": "http://127.0.0.1:9105",
}
#: The Secret holding each Upstream's credentials (Vertex: a service-account key).
QUICKSTART_CREDENTIALS = {
    "anthropic": "anthropic-key/apiKey",
    "vertex-us-east5": "vertex-sa/key.json",
    "openai": "openai-key/apiKey",
    "azure-eastus": "azure-key/apiKey",
    "gemini": "gemini-key/apiKey",
}


def start_quickstart_chaos(logdir: Path, prefix: str = "") -> dict[str, Chaos]:
    """One chaos upstream per quickstart Upstream (process `chaos-PREFIXNAME`), each
    checking the credentials the quickstart's secrets hold, as its provider would: the
    API key, or Google tokens it issued for the service-account key (whose token_uri the
    gateway gets rewritten to this upstream's `/token`; the chaos upstream accepts it)."""
    chaos = {}
    for name, secret in QUICKSTART_CREDENTIALS.items():
        path = QUICKSTART / "secrets" / secret
        flags = ["--gcp-service-account", str(path)] if secret.endswith(".json") else ["--api-key", path.read_text()]
        chaos[name] = start_chaos(prefix + name, logdir, args=flags)
    return chaos


def _substitute(text: str, urls: dict[str, str]) -> str:
    for name, placeholder in QUICKSTART_UPSTREAMS.items():
        text = text.replace(placeholder, urls[name])
    return text


def quickstart_upstreams(urls: dict[str, str]) -> str:
    """examples/quickstart/upstreams.yaml with each Upstream's baseUrl pointed at `urls[name]`
    (`scheme://host:port`, the path stays)."""
    text = (QUICKSTART / "upstreams.yaml").read_text()
    for placeholder in QUICKSTART_UPSTREAMS.values():
        assert text.count(f"baseUrl: {placeholder}/") == 1, f"{placeholder} not found once in upstreams.yaml"
    return _substitute(text, urls)


def quickstart_routes() -> list[dict]:
    """examples/quickstart/routes.yaml without `spec.synthetic`: these tests count each
    upstream's requests and attempts, and a synthetic check (docs/design.md §10) is one
    they did not send, at a jittered time. The checks have scenarios of their own
    (tests/tests/scenarios/synthetic.rs)."""
    routes = [r for r in yaml.safe_load_all((QUICKSTART / "routes.yaml").read_text()) if r]
    assert any("synthetic" in r["spec"] for r in routes), "the quickstart no longer shows synthetic checks"
    for r in routes:
        r["spec"].pop("synthetic", None)
    return routes


def quickstart_routes_yaml() -> str:
    """[`quickstart_routes`] as one multi-document YAML text for `kubectl apply -f -`."""
    return yaml.safe_dump_all(quickstart_routes())


def quickstart_secrets(fake: "Kube", urls: dict[str, str], namespace: Optional[str] = None) -> dict[str, str]:
    """`kubectl create secret generic` for every Secret of the quickstart (from its
    files), the placeholders in them (the service-account key's token_uri) pointed at
    `urls`; returns `secret/key` → value."""
    values = {}
    for d in sorted(p for p in (QUICKSTART / "secrets").iterdir() if p.is_dir()):
        literals = []
        for f in sorted(d.iterdir()):
            values[f"{d.name}/{f.name}"] = _substitute(f.read_text(), urls)
            literals.append(f"--from-literal={f.name}={values[f'{d.name}/{f.name}']}")
        fake.kubectl("create", "secret", "generic", d.name, *literals, "-n", namespace or fake.namespace)
    assert set(QUICKSTART_CREDENTIALS.values()) <= set(values), values
    return values


def parse_table(text: str) -> list[dict[str, str]]:
    """`kubectl get` table output → rows (column name → cell), cut at the header's
    column offsets (kubectl pads columns, and cells may be empty)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[s:e].strip() for s, e in zip(starts, starts[1:] + [len(line) + 1])]
        rows.append(dict(zip(names, cells)))
    return rows


def table(fake: "Kube", resource: str, namespace: Optional[str] = None) -> dict[str, dict[str, str]]:
    """Printer columns of `kubectl get RESOURCE -n NS` (default: the scenario's
    namespace), by NAME."""
    out = fake.kubectl("get", resource, "-n", namespace or fake.namespace).stdout
    return {row["NAME"]: row for row in parse_table(out)}


def condition(obj: dict, kind: str) -> dict:
    """The status condition of type `kind` ({} when absent)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c
    return {}


def number(cell: str) -> float:
    """A printer-column cell as a number (an empty cell is NaN)."""
    try:
        return float(cell)
    except ValueError:
        return float("nan")
