"""One scenario on a real control plane, with the interface of tests/e2e's `KubeFake`
(`kubectl()`, `get_json()`, `api()`, `kubeconfig`, `namespace`, `ns()`, `in_scope()`,
`service_account_kubeconfig()`, `close()`), so that the operator scenarios and the
mini-kubelet run unchanged against kube-fake or a real kube-apiserver.

A scenario owns the namespaces `PREFIX` (its "default": the context namespace of its
admin kubeconfig, so that kubectl without `-n` lands there) and `PREFIX-NAME` (what the
scenario calls `NAME`: `team-b`, `sluice-system`), and a Helm release name of its own
(`release`), so that scenarios sharing one control plane never see each other's
objects, cluster-scoped RBAC included. `close()` removes all of it.

What kube-fake's request log was for, the apiserver's audit log does here
(`audit_records()`): every request a ServiceAccount made, as the authorizer saw it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import yaml

from .controlplane import ControlPlane
from .kubeapi import KubeApi, Kubectl

#: User-Agent of the harness's raw API calls (as tests/e2e's HARNESS_UA).
HARNESS_UA = "sluice-e2e-harness/1"


@dataclass
class RealKube(Kubectl):
    cp: ControlPlane
    dir: Path
    prefix: str
    kubeconfig: Path
    cache: Path
    release: str
    client: KubeApi
    #: Byte offset of the audit log when the scenario started.
    audit_start: int = 0
    namespaces: list[str] = field(default_factory=list)
    closed: bool = False
    real: ClassVar[bool] = True

    @classmethod
    def create(cls, cp: ControlPlane, dir: Path, prefix: Optional[str] = None) -> "RealKube":
        """A scenario of its own on `cp`: its default namespace created, an admin
        kubeconfig pointing there."""
        dir.mkdir(parents=True, exist_ok=True)
        hexid = uuid.uuid4().hex[:6]
        prefix = prefix or f"e2e-{hexid}"
        view = json.loads(cp.kubectl("config", "view", "--minify", "--raw", "-o", "json").stdout)
        view["contexts"][0]["context"]["namespace"] = prefix
        kubeconfig = dir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(view))
        kubeconfig.chmod(0o600)
        kube = cls(cp=cp, dir=dir, prefix=prefix, kubeconfig=kubeconfig, cache=dir / "kubectl-cache",
                   release=f"sluice-{hexid}", client=KubeApi(kubeconfig, HARNESS_UA),
                   audit_start=cp.audit_offset())
        kube.create_namespace("default")
        return kube

    # -- names

    @property
    def namespace(self) -> str:
        """The scenario's "default" namespace."""
        return self.prefix

    @property
    def url(self) -> str:
        return self.client.server

    def ns(self, name: str) -> str:
        """The scenario's namespace standing for `name` (`default` → PREFIX)."""
        return self.prefix if name == "default" else f"{self.prefix}-{name}"

    def in_scope(self, namespace: str) -> bool:
        """Whether a namespace is this scenario's (the mini-kubelet runs only those)."""
        return namespace == self.prefix or namespace.startswith(self.prefix + "-")

    def create_namespace(self, name: str) -> str:
        """Creates `ns(name)` (once); returns its real name."""
        real = self.ns(name)
        if real not in self.namespaces:
            self.kubectl("create", "namespace", real)
            self.namespaces.append(real)
        return real

    # -- kubectl and the raw API (admin)


    def api(self, method: str, path: str, body: Any = None,
            content_type: str = "application/json") -> tuple[int, Any]:
        return self.client.request(method, path, body, content_type)

    # -- identities

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig with a TokenRequest token of ServiceAccount `namespace/name`
        (its context namespace `namespace`, as in a pod): RBAC applies to it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.cp.service_account_kubeconfig(namespace, name, path)

    def audit_records(self, user: str) -> list[dict]:
        """The requests `user` made during this scenario, from the audit log, as records
        of kube-fake's request log (`method`, `path`, `query`, `status`, `verb`,
        `api_group`, `resource`, `subresource`, `namespace`, `name`,
        `resource_request`, `user_agent`) plus `decision` (`allow`/`forbid`).
        Fails when the control plane has no audit log (a cluster of your own)."""
        events = self.cp.audit_events(self.audit_start)
        assert events is not None, "no audit log: a cluster of your own (SLUICE_TEST_KUBECONFIG) is not audited here"
        out = []
        for e in events:
            if (e.get("user") or {}).get("username") != user:
                continue
            ref = e.get("objectRef") or {}
            uri = _split_uri(e.get("requestURI", ""))
            verb = e.get("verb", "")
            out.append({
                "method": METHODS.get(verb, verb.upper()),
                "path": uri[0],
                "query": uri[1],
                "status": (e.get("responseStatus") or {}).get("code", 0),
                "verb": verb,
                "api_group": ref.get("apiGroup", ""),
                "resource": ref.get("resource", ""),
                "subresource": ref.get("subresource", ""),
                "namespace": ref.get("namespace", ""),
                # The authorizer sees no name for a create (it is in the body).
                "name": "" if verb == "create" else ref.get("name", ""),
                "resource_request": bool(ref),
                "user_agent": e.get("userAgent", ""),
                "decision": (e.get("annotations") or {}).get("authorization.k8s.io/decision", ""),
                "stage": e.get("stage", ""),
            })
        return out

    # -- teardown

    def close(self) -> None:
        """Removes the scenario (again: a no-op): the finalizers left on its ModelRoutes
        (nobody runs the operator any more), then every object of a kind the operator
        watches (so that the operator of a later scenario, which watches all namespaces,
        finds nothing of this one while its namespaces terminate), its namespaces
        (deleted in the background by the namespace controller) and its release's
        cluster-scoped RBAC."""
        if self.closed:
            return
        self.closed = True
        namespaces = [n for n in self._all_namespaces() if self.in_scope(n)]
        for ns in namespaces:
            # Finalized kinds: their finalizers would keep the namespace terminating.
            routes = self.kubectl("get", "modelroutes,accountlimits", "-n", ns, "-o", "name",
                                  check=False).stdout.split()
            for r in routes:
                self.kubectl("patch", r, "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                             check=False)
            self.kubectl("delete", WATCHED, "--all", "-n", ns, "--wait=false", "--ignore-not-found", check=False)
        if namespaces:
            self.kubectl("delete", "namespace", *namespaces, "--wait=false", "--ignore-not-found", check=False)
        self.kubectl("delete", "clusterrolebinding,clusterrole", "-l", f"app.kubernetes.io/instance={self.release}",
                     "--ignore-not-found", check=False)

    def _all_namespaces(self) -> list[str]:
        out = self.kubectl("get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}", check=False).stdout
        return out.split()


def wait_no_terminating_namespace(cp: ControlPlane, timeout: float = 120.0) -> None:
    """Waits until no namespace is being deleted: the operator of a scenario watches all
    namespaces, and would otherwise reconcile what an earlier test left to the namespace
    controller (tests/kube's CRD tests leave a namespace each: ~6 s for all of them)."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cp.kubectl("get", "namespaces", "-o", "json").stdout)["items"]
        terminating = sorted(n["metadata"]["name"] for n in items if n.get("status", {}).get("phase") == "Terminating")
        if not terminating:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"namespaces still terminating after {timeout:.0f}s: {terminating}")
        time.sleep(0.5)


def refused_by_rbac(records: list[dict]) -> list[str]:
    """The calls of `audit_records` the authorizer refused (decision `forbid`), as
    `verb resource[/sub] namespace/name`. Other 403s are admission's (a namespace being
    terminated refuses new objects), not RBAC's."""
    return sorted({f"{r['verb']} {r['resource']}{'/' + r['subresource'] if r['subresource'] else ''} "
                   f"{r['namespace']}/{r['name']}" for r in records if r["decision"] == "forbid"})


#: Every kind the operator watches (see operator/src/controllers.rs).
WATCHED = ("modelroutes,upstreams,errorbudgets,accountlimits,deployments,configmaps,services,poddisruptionbudgets,secrets,"
           "leases")

#: The HTTP method of each audited verb.
METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
           "delete": "DELETE", "deletecollection": "DELETE"}


def _split_uri(uri: str) -> tuple[str, str]:
    path, _, query = uri.partition("?")
    return path, query
