"""Faults of the control plane around the operator, on the real one: kube-apiserver
restarted mid-reconcile, etcd stopped for 10 s, the operator's watches cut by a proxy,
a second writer fighting the operator over the gateway Deployment, its ConfigMap and a
route's status (409 conflicts), and the operator killed during a rollout.

The module's scenario: the operator as the chart's ServiceAccount, connected to the
apiserver through a TCP proxy of the test's (`sluice_testsupport.tcpproxy`: TLS passes
through as bytes; its connections can be cut), the mini-kubelet running the gateway
Deployment it renders, one chaos upstream, and a route `chat` whose candidate model
(`chat-vN`) each test moves on: the model in the gateway's answers tells which
configuration it serves. Throughout each fault, a thread sends a request every 0.2 s to
the gateway pod a Service would pick (`MiniKubelet.serving`): a gateway keeps its last
configuration whatever happens to the control plane, so every answer must be a 200.

After each fault the operator, never restarted (but in the test that kills it), must
converge: the rendered objects as it renders them and nothing more, the routes' status
right (`observedGeneration`, `Ready=True`/`Serving`, `candidateCount`), and a route
change made after (or during) the fault served. Each test starts from that converged
state, so one failed fault does not fail the others.

The apiserver restart and the proxy cut found that a controller paused all its watches
after an error of any one of them (kube-runtime's trigger backoff), for minutes after a
restart: see `NoTriggerBackoff` in operator/src/controllers.rs.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml

from harness import (Artifacts, LedgerSchema, OperatorIdentity, Proc, binary, condition, http, operator_identity,
                     start_chaos, start_operator, wait_for)
from kubelet import MiniKubelet, Pod
from sluice_testsupport.chaos import Chaos
from sluice_testsupport.realkube import RealKube
from sluice_testsupport.tcpproxy import TcpProxy

GATEWAY = "sluice-gateway-default"
STATUS_INTERVAL = "2s"
#: How long the operator may take to converge after a fault, on 2 busy cores: its
#: watchers' backoff (up to 30 s), a failed reconcile's requeue (15 s), a gateway roll.
CONVERGE = 120.0
#: Seconds between two requests of the traffic thread.
TRAFFIC_INTERVAL = 0.2
#: Answers a fault's traffic must have at least (a fault over in a second runs on a bit).
MIN_ANSWERS = 10
#: The label of every object the operator renders.
MANAGED = "app.kubernetes.io/managed-by=sluice-operator"
#: The kinds the operator renders per gateway group (and the namespace's ledger Secret).
GROUP_KINDS = ("configmap", "deployment", "service", "poddisruptionbudget")

WORKLOAD = """\
apiVersion: v1
kind: Secret
metadata: {name: backup-key}
stringData: {apiKey: sk-backup}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: primary}
spec:
  protocol: openai
  baseUrl: %(url)s/v1
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: backup}
spec:
  protocol: openai
  baseUrl: %(url)s/v1
  auth: {secretRef: {name: backup-key, key: apiKey}}
"""


def route(name: str, model: str, candidates: list[dict], gateway: Optional[str] = None) -> str:
    spec: dict = {"model": model, "candidates": candidates}
    if gateway:
        spec["gateway"] = gateway
    return yaml.safe_dump({"apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute",
                           "metadata": {"name": name}, "spec": spec})


# ---------------------------------------------------------------- traffic


@dataclass
class Answer:
    at: float
    pod: str
    status: int
    model: str
    error: str = ""


class Traffic:
    """A request every TRAFFIC_INTERVAL, from a thread, to the pod of a gateway
    Deployment that a Service would pick; every answer is kept."""

    def __init__(self, env: "Env", namespace: str, deployment: str, model: str):
        self.env, self.namespace, self.deployment, self.model = env, namespace, deployment, model
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"traffic-{deployment}", daemon=True)

    def __enter__(self) -> "Traffic":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        deadline = time.monotonic() + 30
        while len(self.answers) < MIN_ANSWERS and time.monotonic() < deadline and exc[0] is None:
            time.sleep(TRAFFIC_INTERVAL)
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.answers.append(self.env.ask(self.namespace, self.deployment, self.model))
            self._stop.wait(TRAFFIC_INTERVAL)

    def failures(self) -> list[Answer]:
        return [a for a in self.answers if a.status != 200]

    def served_since(self, t: float) -> set[str]:
        """The models answered from monotonic time `t` on."""
        return {a.model for a in self.answers if a.at >= t and a.status == 200}

    def last(self, n: int) -> list[str]:
        """The models of the last `n` answers ("" for a failure)."""
        return [a.model if a.status == 200 else "" for a in self.answers[-n:]]

    def assert_served_throughout(self, what: str) -> None:
        """Every answer a 200, and enough of them to cover the fault."""
        failed = self.failures()
        assert len(self.answers) >= MIN_ANSWERS, f"{what}: only {len(self.answers)} requests were sent"
        assert not failed, (f"{what}: {len(failed)} of {len(self.answers)} requests to {self.deployment} failed; "
                            f"first: {failed[:5]}")


# ---------------------------------------------------------------- the scenario


@dataclass
class Env:
    kube: RealKube
    ledger: LedgerSchema
    kubelet: MiniKubelet
    chaos: Chaos
    proxy: TcpProxy
    identity: OperatorIdentity
    #: The operator's kubeconfig: its ServiceAccount's token, the apiserver through the proxy.
    kubeconfig: Path
    operator: Proc
    key: str
    workdir: Path
    artifacts: Artifacts
    operators: int = 1
    #: `chat`'s candidate model is `chat-v{revision}`.
    revision: int = 1
    #: `chat`'s candidates besides `primary` (the operator-kill test adds `backup`).
    extra: list[dict] = field(default_factory=list)
    #: The gateway groups of the namespace (the apiserver test adds two for a while).
    groups: list[str] = field(default_factory=lambda: ["default"])
    #: Where the audit log was when the module started (diagnostics).
    audit_from: int = 0

    @property
    def ns(self) -> str:
        return self.kube.namespace

    @property
    def model(self) -> str:
        return f"chat-v{self.revision}"

    def restart_operator(self) -> Proc:
        """A new operator process (the old one is gone)."""
        assert not self.operator.alive()
        self.operators += 1
        self.operator = run_operator(self.operators, self.kubeconfig, self.ledger.url, self.workdir)
        return self.operator

    # -- waiting, with what went wrong

    def diagnostics(self) -> str:
        pod = self.kubelet.current(self.ns, GATEWAY)
        return "\n".join([
            "--- operator log", *self.operator.log_text().splitlines()[-40:],
            "--- mini-kubelet events", *self.kubelet.events[-20:],
            *([f"--- gateway {pod.name} log", *pod.log_text().splitlines()[-15:]] if pod else []),
            "--- the operator's last calls (audit log)", *self.last_calls(),
            "--- control plane", self.kube.cp.logs()[-3000:],
        ])

    def last_calls(self, n: int = 30) -> list[str]:
        calls = [e for e in self.operator_calls(self.audit_from) if e.get("stage") == "ResponseComplete"]
        return [f"{e['stageTimestamp']} {e['verb']} {(e.get('responseStatus') or {}).get('code')} "
                f"{(e.get('annotations') or {}).get('authorization.k8s.io/decision', '')} {e['requestURI'][:150]}"
                for e in calls[-n:]]

    def wait(self, what: str, fn: Callable, timeout: float = CONVERGE, interval: float = 0.5):
        try:
            return wait_for(what, fn, timeout=timeout, interval=interval)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    # -- the gateway

    def ask(self, namespace: str, deployment: str, model: str) -> Answer:
        """One chat completion to the pod a Service would pick now."""
        now = time.monotonic()
        pod = self.kubelet.serving(namespace, deployment)
        if pod is None:
            return Answer(now, "", 0, "", "no ready pod")
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        try:
            status, data = http("POST", f"{pod.url}/v1/chat/completions", body,
                                {"authorization": f"Bearer {self.key}", "content-type": "application/json"})
        except OSError as e:
            return Answer(now, pod.name, 0, "", repr(e))
        try:
            answered = json.loads(data).get("model", "")
        except ValueError:
            answered = ""
        return Answer(now, pod.name, status, answered, "" if status == 200 else data.decode(errors="replace")[:300])

    def traffic(self) -> Traffic:
        return Traffic(self, self.ns, GATEWAY, "chat")

    # -- the route the tests change

    def apply_chat(self, revision: Optional[int] = None) -> None:
        """`chat` with candidate model `chat-v{revision}` (default: the next one)."""
        self.revision = revision or self.revision + 1
        candidates = [{"upstream": "primary", "model": self.model}, *self.extra]
        self.kube.kubectl("apply", "-f", "-", input=route("chat", "chat", candidates))

    def served(self, traffic: Traffic, since: float, timeout: float = CONVERGE) -> None:
        """Waits until the gateway answers with the current model (it reloaded the
        configuration the operator rendered after the change)."""
        self.wait(f"the gateway to serve {self.model}", lambda: self.model in traffic.served_since(since), timeout)

    # -- convergence

    def route_ok(self, name: str, namespace: Optional[str] = None) -> dict:
        """The route's status is right for its current spec (an AssertionError says why not)."""
        obj = self.kube.get_json("modelroute", name, "-n", namespace or self.ns)
        status = obj.get("status") or {}
        assert status.get("observedGeneration") == obj["metadata"]["generation"], (name, status)
        ready = condition(obj, "Ready")
        assert (ready.get("status"), ready.get("reason")) == ("True", "Serving"), (name, ready)
        assert condition(obj, "ResolvedRefs").get("status") == "True", (name, status)
        assert status.get("candidateCount") == len(obj["spec"]["candidates"]), (name, status)
        assert obj["metadata"]["finalizers"] == ["sluice.dev/gateway-config"], obj["metadata"]
        return obj

    def managed(self, namespace: Optional[str] = None) -> list[str]:
        """Every object the operator rendered in the namespace, as `kind/name`."""
        out = self.kube.kubectl("get", ",".join(GROUP_KINDS) + ",secret", "-l", MANAGED, "-n",
                                namespace or self.ns, "-o", "name").stdout.split()
        # `deployment.apps/NAME` → `deployment/NAME`
        return sorted(kind.split(".")[0] + "/" + name for kind, name in (o.split("/", 1) for o in out))

    def snapshot(self) -> dict:
        return json.loads(self.kube.get_json("configmap", GATEWAY)["data"]["snapshot.json"])

    def converged(self) -> bool:
        """The default group as the operator renders it: its objects (each once), the
        snapshot with `chat`'s current candidates, one gateway pod of the current
        template, the route's status right."""
        assert self.managed() == expected_objects(self.groups), self.managed()
        chat = next(r for r in self.snapshot()["routes"] if r["key"] == f"{self.ns}/chat")
        assert [c["model"] for c in chat["candidates"]][:1] == [self.model], chat
        assert len(chat["candidates"]) == 1 + len(self.extra), chat
        deploy = self.kube.get_json("deployment", GATEWAY)
        st = deploy.get("status") or {}
        assert st.get("observedGeneration") == deploy["metadata"]["generation"], st
        assert (st.get("updatedReplicas"), st.get("availableReplicas")) == (1, 1), st
        with self.kubelet.lock:
            pods = list(self.kubelet.pods.get((self.ns, GATEWAY), []))
        assert len(pods) == 1 and pods[0].ready, [(p.name, p.ready) for p in pods]
        self.route_ok("chat")
        return True

    def operator_whole(self, pid: int, log_from: int) -> None:
        """The operator ran through the fault: same process, no panic."""
        log = self.operator.log_text()[log_from:]
        assert self.operator.alive() and self.operator.pid == pid, \
            f"the operator exited ({self.operator.popen.returncode}):\n{log[-4000:]}"
        assert "panicked" not in log, log[-4000:]

    # -- the audit log (the operator's calls, as the apiserver saw them)

    def operator_calls(self, offset: int) -> list[dict]:
        return [e for e in self.kube.cp.audit_events(offset) or []
                if (e.get("user") or {}).get("username") == self.identity.user]

    def wait_for_call(self, offset: int, verb: str, resource: str, names: set[str], after: float = 0.0,
                      timeout: float = 60.0) -> dict:
        """Follows the audit log from byte `offset` (every 5 ms) until the operator has
        made a `verb` call on `resource` named one of `names`, received at epoch time
        `after` or later; returns its event. Fast, so that a fault can be timed right
        after that call (the apiserver writes the event when it answers)."""
        path = self.kube.cp.audit_log
        assert path is not None
        deadline = time.monotonic() + timeout
        pending = b""
        with open(path, "rb") as fh:
            fh.seek(offset)
            while time.monotonic() < deadline:
                pending += fh.read()
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if self.identity.user.encode() not in line or resource.encode() not in line:
                        continue
                    e = json.loads(line)
                    ref = e.get("objectRef") or {}
                    if (e.get("verb") == verb and ref.get("resource") == resource and ref.get("name") in names
                            and (e.get("user") or {}).get("username") == self.identity.user
                            and stamp(e, "requestReceivedTimestamp") >= after):
                        return e
                time.sleep(0.005)
        raise AssertionError(f"the operator made no {verb} of {resource} {sorted(names)} within {timeout:.0f}s\n"
                             f"{self.diagnostics()}")


def run_operator(n: int, kubeconfig: Path, ledger_url: str, workdir: Path) -> Proc:
    return start_operator(f"operator-{n}", kubeconfig, ledger_url, workdir, "--status-interval", STATUS_INTERVAL)


def expected_objects(groups: list[str]) -> list[str]:
    """What the operator renders in a namespace for these gateway groups, each once."""
    return sorted([f"{kind}/sluice-gateway-{g}" for g in groups for kind in GROUP_KINDS] + ["secret/sluice-ledger"])


def writes(calls: list[dict]) -> set[tuple[str, str]]:
    """(resource, name) of every apply (patch) among audit events that succeeded."""
    return {((e.get("objectRef") or {}).get("resource", ""), (e.get("objectRef") or {}).get("name", ""))
            for e in calls if e.get("verb") == "patch" and (e.get("responseStatus") or {}).get("code") in (200, 201)}


def stamp(event: dict, key: str = "stageTimestamp") -> float:
    """A timestamp of an audit event, as seconds since the epoch."""
    return datetime.fromisoformat(event[key].replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def env(workdir, artifacts, ledger, kube) -> Env:
    ledger.admin("account", "create", "faults", "--balance", "1000.00")
    key = ledger.admin("key", "create", "faults").strip()
    chaos = start_chaos("upstream", workdir)
    identity = operator_identity(kube, workdir)
    # The operator's only way to the apiserver is the proxy (kubectl, the tests and the
    # mini-kubelet go straight to it): cutting the proxy cuts the operator's watches.
    apiserver = kube.cp.server.rsplit(":", 1)
    proxy = TcpProxy(("127.0.0.1", int(apiserver[1]))).start()
    doc = yaml.safe_load(identity.kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://{proxy.address}"
    kubeconfig = workdir / "operator-via-proxy.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    kubeconfig.chmod(0o600)
    kubelet = MiniKubelet(kube, workdir / "node", {"sluice-gateway": binary("sluice-gateway")}).start()
    operator = run_operator(1, kubeconfig, ledger.url, workdir)
    e = Env(kube, ledger, kubelet, chaos, proxy, identity, kubeconfig, operator, key, workdir, artifacts,
            audit_from=kube.cp.audit_offset())
    try:
        kube.kubectl("apply", "-f", "-", input=WORKLOAD % {"url": chaos.url})
        e.apply_chat(1)
        kubelet.wait_ready(e.ns, GATEWAY, timeout=CONVERGE)
        e.wait("the first convergence", e.converged)
        assert proxy.open_connections() > 0, "the operator does not go through the proxy"
        yield e
    finally:
        kubelet.stop()
        e.operator.stop()
        proxy.close()
        chaos.proc.stop()


@pytest.fixture
def fault(env: Env, request):
    """Each test starts converged; its timings go to `faults.txt` in the artifacts."""
    env.wait("the converged state before the fault", env.converged)
    notes: list[str] = []
    t0 = time.monotonic()
    yield notes
    line = f"{request.node.name}: {time.monotonic() - t0:.1f} s; " + "; ".join(notes)
    env.artifacts.dir.mkdir(parents=True, exist_ok=True)
    with open(env.artifacts.dir / "faults.txt", "a") as fh:
        fh.write(line + "\n")
    print(line)


def control_plane_whole(env: Env) -> None:
    dead = [p.name for p in env.kube.cp.procs if not p.alive()]
    assert not dead, f"control plane processes not running: {dead}\n{env.kube.cp.logs()}"


# ---------------------------------------------------------------- 1. kube-apiserver restarted


def test_kube_apiserver_restarted_mid_reconcile(env: Env, fault: list[str]):
    """Two new gateway groups: the apiserver is killed (SIGKILL) right after the
    operator's first apply of their objects, and started again; the operator's
    reconcile fails half-way, and it must finish it (requeue) and pick up a change
    made after the restart (its watches relist or resume)."""
    pid, log_from = env.operator.pid, len(env.operator.log_text())
    groups = ["batch-a", "batch-b"]
    offset = env.kube.cp.audit_offset()
    env.groups = ["default", *groups]
    try:
        with env.traffic() as traffic:
            restart_mid_reconcile(env, fault, groups, offset, traffic)
        traffic.assert_served_throughout("the default gateway during the apiserver restart")
        env.operator_whole(pid, log_from)
        control_plane_whole(env)
    finally:
        env.groups = ["default"]
        env.kube.kubectl("delete", "modelroute", *groups, "--wait=false", "--ignore-not-found")
    for g in groups:
        env.kubelet.wait_gone(env.ns, f"sluice-gateway-{g}", timeout=CONVERGE)
    env.wait("the batch groups' objects gone", lambda: env.managed() == expected_objects(env.groups))


def restart_mid_reconcile(env: Env, fault: list[str], groups: list[str], offset: int, traffic: Traffic) -> None:
    """New gateway groups, the apiserver killed at the operator's first apply of their
    objects and started again, then the operator's convergence (with `traffic` running)."""
    env.kube.kubectl("apply", "-f", "-", input="---\n".join(
        route(g, f"{g}-model", [{"upstream": "primary", "model": f"{g}-v1"}], gateway=g) for g in groups))
    first = env.wait_for_call(offset, "patch", "configmaps", {f"sluice-gateway-{g}" for g in groups})
    killed_at = time.time()
    away = env.kube.cp.restart_apiserver(kill=True)
    fault.append(f"apiserver killed after the operator's apply of configmap {first['objectRef']['name']}, "
                 f"ready again in {away:.1f} s")
    # Mid-reconcile: some of the new groups' objects were not applied yet.
    before = {w for w in writes([e for e in env.operator_calls(offset)
                                 if stamp(e) <= killed_at]) if w[1].startswith("sluice-gateway-batch")}
    wanted = {(f"{k}s", f"sluice-gateway-{g}") for g in groups for k in GROUP_KINDS}
    fault.append(f"{len(before)} of the {len(wanted)} applies done before the kill")
    assert before < wanted, f"the apiserver was killed after the whole reconcile: {sorted(before)}"

    for g in groups:
        env.kubelet.wait_ready(env.ns, f"sluice-gateway-{g}", timeout=CONVERGE)
        env.wait(f"route {g} Ready with its status right", lambda g=g: env.route_ok(g))
    for g in groups:
        a = env.ask(env.ns, f"sluice-gateway-{g}", f"{g}-model")
        assert (a.status, a.model) == (200, f"{g}-v1"), a
    # A change after the restart: the operator's watches are back.
    since = time.monotonic()
    env.apply_chat()
    env.served(traffic, since)
    env.wait("the converged state after the restart", env.converged)


# ---------------------------------------------------------------- 2. etcd stopped


ETCD_DOWN = 10.0


def test_etcd_stopped_for_10_seconds(env: Env, fault: list[str]):
    """A route change, then etcd stopped for exactly ETCD_DOWN seconds right away (the
    reconcile of the change runs into it, or just made it); then a change after."""
    pid, log_from = env.operator.pid, len(env.operator.log_text())
    with env.traffic() as traffic:
        since = time.monotonic()
        env.apply_chat()
        env.kube.cp.stop_etcd()
        t0 = time.monotonic()
        try:
            time.sleep(ETCD_DOWN)  # the fault is a duration
        finally:
            env.kube.cp.start_etcd()
        fault.append(f"etcd down {time.monotonic() - t0:.1f} s")
        env.served(traffic, since)
        env.wait("the converged state after etcd's outage", env.converged)
        fault.append(f"change before the outage served {time.monotonic() - t0:.1f} s after etcd stopped")
        since = time.monotonic()
        env.apply_chat()
        env.served(traffic, since)
        env.wait("the converged state after a change after the outage", env.converged)
    traffic.assert_served_throughout("the gateway while etcd was down")
    env.operator_whole(pid, log_from)
    control_plane_whole(env)


# ---------------------------------------------------------------- 3. watches cut by a proxy


PROXY_DOWN = 5.0
#: How long after the proxy is up again the change may take to be served: each watch
#: retries within its own backoff (at most 30 s), then the reconcile and the reload.
RESUMED = 60.0


def test_watches_cut_by_a_proxy(env: Env, fault: list[str]):
    """Every connection of the operator is reset by the proxy, which then resets every
    new one for PROXY_DOWN seconds; a route change made meanwhile must be seen: the
    operator resumes its watches from their resourceVersion (or relists after a 410)."""
    pid, log_from = env.operator.pid, len(env.operator.log_text())
    offset = env.kube.cp.audit_offset()
    with env.traffic() as traffic:
        cut = env.proxy.down()
        t0 = time.monotonic()
        fault.append(f"{cut} connections cut")
        since = time.monotonic()
        try:
            env.apply_chat()
            time.sleep(PROXY_DOWN)  # the fault is a duration
        finally:
            env.proxy.up()
        env.served(traffic, since, RESUMED)
        fault.append(f"the change made after the cut served {time.monotonic() - t0:.1f} s after it")
        env.wait("the converged state after the cut", env.converged)
    traffic.assert_served_throughout("the gateway while the operator's watches were cut")
    env.operator_whole(pid, log_from)

    # How the ModelRoute watches came back: a watch from the resourceVersion they had
    # reached (resume), or a list first (relist, after a 410).
    calls = [e for e in env.operator_calls(offset) if (e.get("objectRef") or {}).get("resource") == "modelroutes"
             and e.get("verb") in ("list", "watch")]
    env.artifacts.save("proxy-cut-modelroute-calls.txt", "\n".join(f"{e['verb']} {e['requestURI']}" for e in calls))
    assert calls, "the operator never watched ModelRoutes again after the cut"
    for e in calls:
        if e["verb"] == "watch":
            query = e["requestURI"].partition("?")[2]
            rv = dict(p.partition("=")[::2] for p in query.split("&")).get("resourceVersion", "")
            assert rv not in ("", "0") or any(c["verb"] == "list" for c in calls), \
                f"a watch without a resourceVersion and no relist: {e['requestURI']}"
    fault.append("resumed" if all(e["verb"] == "watch" for e in calls) else "relisted")


# ---------------------------------------------------------------- 4. a second writer


WRITER_SECONDS = 20.0


class SecondWriter:
    """Another client (the admin, as `kubectl edit` would) that keeps changing what the
    operator owns: the gateway Deployment's replicas and strategy and the ConfigMap's
    snapshot (update with a fresh resourceVersion, which wins until the operator applies
    again, and with a stale one: 409), server-side applies them without force (409: a
    conflict with the operator's field manager), and sets `chat`'s Ready condition to
    False (fresh and stale: 409). Counts every answer by target and status."""

    def __init__(self, env: Env):
        self.env = env
        self.client = env.kube.client
        self.answers: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="second-writer", daemon=True)
        ns = env.ns
        self.deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/{GATEWAY}"
        self.configmap = f"/api/v1/namespaces/{ns}/configmaps/{GATEWAY}"
        self.status = f"/apis/sluice.dev/v1alpha1/namespaces/{ns}/modelroutes/chat/status"
        self.stale = {path: self._get(path) for path in (self.deployment, self.configmap, self.status)}

    def __enter__(self) -> "SecondWriter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _get(self, path: str) -> dict:
        code, obj = self.client.request("GET", path)
        assert code == 200, (path, code, obj)
        obj["metadata"].pop("managedFields", None)
        return obj

    def _put(self, what: str, path: str, obj: dict) -> None:
        code, _ = self.client.request("PUT", path, obj)
        self.answers[(what, code)] += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except Exception as e:  # noqa: BLE001 - a failed round is counted, the writer goes on
                self.answers[("error", repr(e)[:80])] += 1
            self._stop.wait(0.3)

    def _round(self) -> None:
        d = self._get(self.deployment)
        d["spec"]["replicas"] = 2
        d["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = 3
        self._put("deployment", self.deployment, d)
        self._put("deployment-stale", self.deployment, self.stale[self.deployment])
        code, _ = self.client.request(
            "PATCH", f"{self.deployment}?fieldManager=second-writer",
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": GATEWAY}, "spec": {"replicas": 3}},
            content_type="application/apply-patch+yaml")
        self.answers[("deployment-apply", code)] += 1

        cm = self._get(self.configmap)
        snap = json.loads(cm["data"]["snapshot.json"])
        for r in snap["routes"]:
            for c in r["candidates"]:
                c["model"] = "chat-foreign"
        cm["data"]["snapshot.json"] = json.dumps(snap)
        self._put("configmap", self.configmap, cm)
        self._put("configmap-stale", self.configmap, self.stale[self.configmap])

        r = self._get(self.status)
        for c in r["status"]["conditions"]:
            if c["type"] == "Ready":
                c.update(status="False", reason="SecondWriter", message="written by a second writer")
        self._put("status", self.status, r)
        self._put("status-stale", self.status, self.stale[self.status])


def test_409_conflicts_from_a_second_writer(env: Env, fault: list[str]):
    """For WRITER_SECONDS a second writer fights the operator over the gateway
    Deployment, its ConfigMap and `chat`'s status; its stale writes get 409s (and its
    server-side applies conflict with the operator's). The operator, whose applies are
    forced, must not fail a reconcile over it, and must leave everything as it renders
    it once the writer stops."""
    pid, log_from = env.operator.pid, len(env.operator.log_text())
    deploy = env.kube.get_json("deployment", GATEWAY)
    cm = env.kube.get_json("configmap", GATEWAY)
    with env.traffic() as traffic:
        with SecondWriter(env) as writer:
            time.sleep(WRITER_SECONDS)  # the fault is a duration
        answers = dict(writer.answers)
        env.artifacts.save("second-writer-answers.txt", "\n".join(f"{k}: {n}" for k, n in sorted(answers.items(), key=str)))
        fault.append(f"second writer's answers: {answers}")
        for what in ("deployment-stale", "configmap-stale", "status-stale", "deployment-apply"):
            assert answers.get((what, 409)), f"no 409 for the second writer's {what} writes: {answers}"
        for what in ("deployment", "configmap", "status"):
            assert answers.get((what, 200)), f"no {what} write of the second writer got through: {answers}"

        def restored():
            d = env.kube.get_json("deployment", GATEWAY)
            assert d["spec"] == deploy["spec"], "the Deployment's spec is not the operator's"
            c = env.kube.get_json("configmap", GATEWAY)
            assert c["data"] == cm["data"], "the ConfigMap's data is not the operator's"
            return env.converged()
        env.wait("everything as the operator renders it", restored)
        # The gateway ends on the operator's snapshot.
        env.wait(f"only {env.model} served", lambda: traffic.last(5) == [env.model] * 5, timeout=30)
    traffic.assert_served_throughout("the gateway while a second writer fought the operator")
    env.operator_whole(pid, log_from)
    log = env.operator.log_text()[log_from:]
    failed = [line for line in log.splitlines() if "reconcile failed" in line or "status patch failed" in line]
    assert not failed, "the operator failed reconciles over the second writer:\n" + "\n".join(failed[:10])


# ---------------------------------------------------------------- 5. the operator killed


def test_operator_killed_during_a_rollout(env: Env, fault: list[str]):
    """`chat` gets the `backup` candidate, whose Secret is new to the group: the
    Deployment's pod template changes (`sluice.dev/secrets-hash`) and the gateway rolls.
    The operator is SIGKILLed right after it applied the Deployment (its Service, PDB and
    statuses not written yet, the new pod not ready yet) and started again: the rollout
    completes, the status shows the new configuration, nothing is made twice."""
    old = env.kubelet.serving(env.ns, GATEWAY)
    assert old is not None
    generation = env.kube.get_json("deployment", GATEWAY)["metadata"]["generation"]
    offset = env.kube.cp.audit_offset()
    with env.traffic() as traffic:
        env.extra = [{"upstream": "backup", "model": "chat-backup"}]
        changed = time.time()
        env.apply_chat()
        env.wait_for_call(offset, "patch", "deployments", {GATEWAY}, after=changed)
        os.kill(env.operator.pid, signal.SIGKILL)
        env.operator.popen.wait(timeout=10)
        t0 = time.monotonic()
        rolled = env.kube.get_json("deployment", GATEWAY)
        assert rolled["metadata"]["generation"] > generation, "the operator was killed before the Deployment changed"
        serving = env.kubelet.serving(env.ns, GATEWAY)
        fault.append(f"operator killed at the Deployment's generation {rolled['metadata']['generation']}; "
                     f"pod {serving.name if serving else None} serving")
        env.restart_operator()

        new = env.wait("a new gateway pod, ready", lambda: (p := env.kubelet.serving(env.ns, GATEWAY)) is not None
                       and p is not old and p)
        env.wait("the converged state after the restart", env.converged)
        fault.append(f"rollout complete and status right {time.monotonic() - t0:.1f} s after the kill")
    traffic.assert_served_throughout("the gateway while its operator was killed during a rollout")
    env.wait("the old pod to stop", lambda: not old.running(), timeout=30)
    assert old.proc.popen.returncode == 0, "the old pod did not stop cleanly"
    # The new pod runs the new template, with the backup's Secret mounted.
    pod: Pod = new
    secrets_dir = Path(pod.argv[pod.argv.index("--secrets-dir") + 1])
    assert (secrets_dir / "backup-key" / "apiKey").read_text() == "sk-backup"
    deploy = env.kube.get_json("deployment", GATEWAY)
    assert deploy["metadata"]["generation"] == rolled["metadata"]["generation"], "the restarted operator rolled again"
    assert deploy["spec"]["template"] == rolled["spec"]["template"]
    # Nothing twice: the route's finalizer, the ConfigMap's owner reference, the objects.
    owners = [o["name"] for o in env.kube.get_json("configmap", GATEWAY)["metadata"]["ownerReferences"]]
    assert owners == ["chat"], owners
    assert env.managed() == expected_objects(["default"]), env.managed()
    chat = env.route_ok("chat")
    assert chat["status"]["candidateCount"] == 2, chat["status"]
