"""A mini-kubelet: runs the Deployments stored in the fake API server as local
processes, so that what the operator (or the chart) renders is proven to work.

What it does, every `period` (0.3 s), for every Deployment in every namespace:

- **Pods.** One pod per Deployment whose `spec.replicas` > 0 (replicas are collapsed
  to one process: the tests talk to it directly, there is no Service proxy). A pod
  belongs to one pod template, identified by the SHA-256 of `spec.template`; when the
  template changes (e.g. the operator's `sluice.dev/secrets-hash` annotation), a new
  pod is started and the old one is stopped once the new one is ready (maxSurge 1,
  maxUnavailable 0). A deleted Deployment's pods are stopped as a kubelet stops them:
  in the background, SIGTERM, then SIGKILL after the pod's
  `terminationGracePeriodSeconds` (default 30, at most 20 here), so that a gateway's
  drain delay holds up neither the loop nor other pods. A process that exits on its own
  is restarted after 1 s (`restarts`).
- **Volumes**, laid out under `<root>/<namespace>/<pod>/volumes/<volume>/`:
  `configMap` (keys or `items` → files), `secret` (`secretName`, keys or `items`),
  `projected` (its `secret` and `configMap` sources, `items` key → path), `emptyDir`.
  A missing ConfigMap/Secret/key that is not `optional` keeps the pod from starting
  (retried every period), as on a real node. The files are re-synced every period
  (atomic rename), so ConfigMap and Secret edits reach the running process without a
  restart; a real kubelet does the same, only slower (its sync period is ~1 min).
- **Container.** Exactly one container per pod. Its image's repository name (the last
  path segment without tag, e.g. `ghcr.io/sluice-dev/sluice-gateway:0.1.0` →
  `sluice-gateway`) selects the local binary that stands for the image's ENTRYPOINT
  (`images`); `command`, if set, must name that entrypoint. The process gets exactly
  the container's `args` and `env`, resolved: `value`, `valueFrom.secretKeyRef`,
  `configMapKeyRef`, `fieldRef` (`metadata.name`, `metadata.namespace`,
  `spec.serviceAccountName`, `spec.nodeName`, `status.podIP`). Only two rewrites
  happen, in args and env values alike:
    * a path under a `volumeMounts[].mountPath` → the same path under that volume's
      directory (nothing may be written to /etc on the test machine);
    * `0.0.0.0:<containerPort>` → `127.0.0.1:0` (every pod shares the host's ports);
      the real address is read from the process's `… on http://ADDR` log line.
  Besides the container's env the process sees only PATH, HOME (the pod dir),
  HOSTNAME (the pod name), NO_COLOR, RUST_LOG and, unless the pod spec sets
  `automountServiceAccountToken: false`, KUBECONFIG pointing at the fake API server:
  the stand-in for the mounted service-account token and KUBERNETES_SERVICE_HOST.
- **Readiness and status.** The container's `readinessProbe.httpGet` (a `startupProbe`
  is not modelled) is polled on the discovered address every period; without a probe
  a running process is ready. The Deployment's status (`observedGeneration`,
  `replicas`, `updatedReplicas`, `readyReplicas`, `availableReplicas`, an `Available`
  condition) is merge-patched through the status subresource whenever it changes,
  so that the operator's `Ready` conditions can become True.

The kubelet's API calls carry `User-Agent: sluice-e2e-harness/1`, so that the request
log tells them from the operator's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from harness import LISTENING, KubeFake, Proc, http, spawn

PROBE_TIMEOUT = 1.0
# Most a stopped pod is given before SIGKILL, whatever its terminationGracePeriodSeconds.
STOP_GRACE_MAX = 20.0
RESTART_DELAY = 1.0
ANY_IP = re.compile(r"^0\.0\.0\.0:(\d+)$")


class PodError(Exception):
    """Why a pod cannot start yet (missing Secret, unknown image, …)."""


@dataclass
class Pod:
    namespace: str
    deployment: str
    name: str
    template_hash: str
    dir: Path
    template: dict
    binary: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, Path] = field(default_factory=dict)
    proc: Optional[Proc] = None
    addr: str = ""
    ready: bool = False
    restarts: int = 0
    exited_at: float = 0.0
    stopped: bool = False
    last_error: str = ""
    volume_files: dict[str, int] = field(default_factory=dict)

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    @property
    def container(self) -> dict:
        return self.template["spec"]["containers"][0]

    def running(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def log_text(self) -> str:
        return self.proc.log_text() if self.proc else ""


class MiniKubelet:
    """See the module docs. `images` maps an image's repository name to a binary."""

    def __init__(self, fake: KubeFake, root: Path, images: dict[str, Path], *, period: float = 0.3,
                 rust_log: str = "info,kube=warn"):
        self.fake = fake
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.images = images
        self.period = period
        self.rust_log = rust_log
        self.lock = threading.RLock()
        self.pods: dict[tuple[str, str], list[Pod]] = {}
        self.gone: list[Pod] = []
        self.stopping: list[tuple[threading.Thread, Pod]] = []
        self.events: list[str] = []
        self._status_sent: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._seq = 0

    # ------------------------------------------------------------ control

    def start(self) -> "MiniKubelet":
        self._thread = threading.Thread(target=self._run, name="mini-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops syncing and every pod (the thread that started them stops them)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=60)

    def event(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        with self.lock:
            self.events.append(line)
        try:
            with open(self.root / "kubelet-events.log", "a") as fh:
                fh.write(line + "\n")
        except OSError:
            pass

    # ------------------------------------------------------------ queries (tests)

    def current(self, namespace: str, deployment: str) -> Optional[Pod]:
        """The newest pod of a Deployment, if any."""
        with self.lock:
            pods = self.pods.get((namespace, deployment), [])
            return pods[-1] if pods else None

    def wait_ready(self, namespace: str, deployment: str, timeout: float = 60.0) -> Pod:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread and self._thread.is_alive():
            pod = self.current(namespace, deployment)
            if pod and pod.ready and pod.running():
                with self.lock:
                    if len(self.pods.get((namespace, deployment), [])) == 1:
                        return pod
            time.sleep(0.1)
        pod = self.current(namespace, deployment)
        detail = f"pod {pod.name}: error {pod.last_error!r}, log:\n{pod.log_text()[-3000:]}" if pod else "no pod"
        raise AssertionError(f"no ready pod for Deployment {namespace}/{deployment} within {timeout:.0f}s; "
                             f"{detail}\nkubelet events:\n" + "\n".join(self.events[-20:]))

    def wait_gone(self, namespace: str, deployment: str, timeout: float = 30.0) -> list[Pod]:
        """Waits until the Deployment has no pod left; returns the stopped pods."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if not self.pods.get((namespace, deployment)) and not any(
                        (p.namespace, p.deployment) == (namespace, deployment) for p in self._still_stopping()):
                    return [p for p in self.gone if (p.namespace, p.deployment) == (namespace, deployment)]
            time.sleep(0.1)
        raise AssertionError(f"pods of {namespace}/{deployment} still running after {timeout:.0f}s")

    # ------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.sync()
                except Exception:  # noqa: BLE001 - keep the node alive, log why
                    self.event("sync failed: " + traceback.format_exc(limit=3).replace("\n", " | "))
                self._stop.wait(self.period)
        finally:
            with self.lock:
                pods = [p for ps in self.pods.values() for p in ps]
                self.pods.clear()
            for p in pods:
                self._kill(p, "kubelet stopping")
            for t, _ in list(self.stopping):
                t.join(timeout=STOP_GRACE_MAX + 10)

    def _list(self, path: str) -> list[dict]:
        status, body = self.fake.api("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path} -> {status}: {body}")
        return body.get("items", [])

    def sync(self) -> None:
        deployments = self._list("/apis/apps/v1/deployments")
        configmaps = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self._list("/api/v1/configmaps")}
        secrets = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self._list("/api/v1/secrets")}
        seen = set()
        for d in deployments:
            key = (d["metadata"]["namespace"], d["metadata"]["name"])
            seen.add(key)
            self._sync_deployment(d, configmaps, secrets)
        with self.lock:
            orphaned = [k for k in self.pods if k not in seen]
        for key in orphaned:
            with self.lock:
                pods = list(self.pods.get(key, []))
            for p in pods:
                self._kill(p, "Deployment deleted")
            with self.lock:
                self.pods.pop(key, None)
            self._status_sent.pop(key, None)

    def _sync_deployment(self, d: dict, configmaps: dict, secrets: dict) -> None:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        key = (ns, name)
        template = d["spec"]["template"]
        thash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        want = int(d["spec"].get("replicas", 1)) > 0
        with self.lock:
            pods = self.pods.setdefault(key, [])
            new = next((p for p in pods if p.template_hash == thash), None)
        if want and new is None:
            self._seq += 1
            pod_name = f"{name}-{thash[:10]}-{self._seq:05d}"
            new = Pod(namespace=ns, deployment=name, name=pod_name, template_hash=thash,
                      dir=self.root / ns / pod_name, template=template)
            with self.lock:
                pods.append(new)
            self.event(f"pod {ns}/{pod_name} scheduled (template {thash})")
        with self.lock:
            pods = list(self.pods.get(key, []))
        for p in pods:
            self._sync_pod(p, configmaps, secrets)
        # Roll: old pods go once the new one is ready (maxUnavailable 0), or at once
        # when replicas is 0.
        for p in pods:
            if p is not new and (new is None or new.ready or not want):
                self._kill(p, "replaced by a new pod template" if new else "scaled to zero")
                with self.lock:
                    self.pods[key].remove(p)
        self._patch_status(d)

    # ------------------------------------------------------------ one pod

    def _sync_pod(self, pod: Pod, configmaps: dict, secrets: dict) -> None:
        try:
            self._layout(pod, configmaps, secrets)
            if pod.proc is None:
                self._start(pod, secrets, configmaps)
            elif not pod.running():
                pod.ready = False
                if pod.exited_at == 0.0:
                    pod.exited_at = time.monotonic()
                    self.event(f"pod {pod.namespace}/{pod.name} container exited with {pod.proc.popen.returncode}")
                elif time.monotonic() - pod.exited_at >= RESTART_DELAY:
                    pod.restarts += 1
                    pod.exited_at = 0.0
                    self._start(pod, secrets, configmaps)
                return
        except PodError as e:
            if str(e) != pod.last_error:
                self.event(f"pod {pod.namespace}/{pod.name} cannot start: {e}")
            pod.last_error = str(e)
            return
        if not pod.running():
            return
        if not pod.addr:
            m = LISTENING.search(pod.proc.log_text())
            if m:
                pod.addr = m.group(1)
        pod.ready = self._probe(pod)

    def _probe(self, pod: Pod) -> bool:
        probe = pod.container.get("readinessProbe")
        if not probe:
            return True
        get = probe.get("httpGet")
        if not get or not pod.addr:
            return False
        try:
            status, _ = http("GET", f"{pod.url}{get.get('path', '/')}", timeout=PROBE_TIMEOUT)
        except OSError:
            return False
        was, now = pod.ready, 200 <= status < 400
        if was != now:
            self.event(f"pod {pod.namespace}/{pod.name} ready={now} (GET {get.get('path')} -> {status})")
        return now

    # ------------------------------------------------------------ volumes

    def _layout(self, pod: Pod, configmaps: dict, secrets: dict) -> None:
        spec = pod.template["spec"]
        vol_root = pod.dir / "volumes"
        for vol in spec.get("volumes") or []:
            files = self._volume_files(pod.namespace, vol, configmaps, secrets)
            self._write_dir(pod, vol_root / vol["name"], files)
        if not pod.mounts:
            containers = spec.get("containers") or []
            if len(containers) != 1:
                raise PodError(f"the mini-kubelet runs exactly one container, not {len(containers)}")
            volumes = {v["name"] for v in spec.get("volumes") or []}
            for m in containers[0].get("volumeMounts") or []:
                if m["name"] not in volumes:
                    raise PodError(f"volumeMount {m['name']} names no volume")
                if m.get("subPath"):
                    raise PodError("subPath mounts are not modelled")
                pod.mounts[m["mountPath"].rstrip("/")] = vol_root / m["name"]

    def _volume_files(self, ns: str, vol: dict, configmaps: dict, secrets: dict) -> dict[str, bytes]:
        if "configMap" in vol:
            src = vol["configMap"]
            return self._source_files("ConfigMap", configmaps.get((ns, src["name"])), src, False)
        if "secret" in vol:
            src = vol["secret"]
            return self._source_files("Secret", secrets.get((ns, src["secretName"])), src, True)
        if "projected" in vol:
            files: dict[str, bytes] = {}
            for source in vol["projected"].get("sources") or []:
                if "secret" in source:
                    s = source["secret"]
                    files.update(self._source_files("Secret", secrets.get((ns, s["name"])), s, True))
                elif "configMap" in source:
                    s = source["configMap"]
                    files.update(self._source_files("ConfigMap", configmaps.get((ns, s["name"])), s, False))
                else:
                    raise PodError(f"projected source {sorted(source)} is not modelled")
            return files
        if "emptyDir" in vol:
            return {}
        raise PodError(f"volume {vol['name']}: kind {sorted(k for k in vol if k != 'name')} is not modelled")

    @staticmethod
    def _source_files(kind: str, obj: Optional[dict], src: dict, secret: bool) -> dict[str, bytes]:
        name = src.get("name") or src.get("secretName")
        optional = bool(src.get("optional"))
        if obj is None:
            if optional:
                return {}
            raise PodError(f"{kind} {name} not found")
        data: dict[str, bytes] = {}
        if secret:
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        items = src.get("items")
        if items is None:
            return data
        files = {}
        for item in items:
            if item["key"] in data:
                files[item["path"]] = data[item["key"]]
            elif not optional:
                raise PodError(f"{kind} {name} has no key {item['key']}")
        return files

    def _write_dir(self, pod: Pod, root: Path, files: dict[str, bytes]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        for rel, content in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                if path.read_bytes() == content:
                    continue
            except OSError:
                pass
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(content)
            os.replace(tmp, path)
            key = str(path)
            pod.volume_files[key] = pod.volume_files.get(key, 0) + 1
            if pod.volume_files[key] > 1:
                self.event(f"pod {pod.namespace}/{pod.name} volume file {path.relative_to(pod.dir)} updated")
        wanted = {root / rel for rel in files}
        for path in sorted(root.rglob("*"), reverse=True):
            if path.is_file() and path not in wanted:
                path.unlink()
                self.event(f"pod {pod.namespace}/{pod.name} volume file {path.relative_to(pod.dir)} removed")
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    # ------------------------------------------------------------ the process

    def _rewrite(self, pod: Pod, value: str) -> str:
        if "=" in value and value.startswith("--"):
            flag, _, rest = value.partition("=")
            return f"{flag}={self._rewrite(pod, rest)}"
        for mount in sorted(pod.mounts, key=len, reverse=True):
            if value == mount or value.startswith(mount + "/"):
                return str(pod.mounts[mount]) + value[len(mount):]
        m = ANY_IP.match(value)
        ports = {p["containerPort"] for p in pod.container.get("ports") or []}
        if m and int(m.group(1)) in ports:
            return "127.0.0.1:0"
        return value

    def _env(self, pod: Pod, secrets: dict, configmaps: dict) -> dict[str, str]:
        spec = pod.template["spec"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(pod.dir),
            "HOSTNAME": pod.name,
            "NO_COLOR": "1",
            "RUST_LOG": self.rust_log,
        }
        if spec.get("automountServiceAccountToken") is not False:
            env["KUBECONFIG"] = str(self.fake.kubeconfig)
        fields = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "spec.nodeName": "mini-kubelet",
            "status.podIP": "127.0.0.1",
        }
        for var in pod.container.get("env") or []:
            name = var["name"]
            if "value" in var:
                env[name] = self._rewrite(pod, var["value"])
                continue
            src = var.get("valueFrom") or {}
            if "fieldRef" in src:
                path = src["fieldRef"]["fieldPath"]
                if path not in fields:
                    raise PodError(f"env {name}: fieldRef {path} is not modelled")
                env[name] = fields[path]
            elif "secretKeyRef" in src or "configMapKeyRef" in src:
                secret = "secretKeyRef" in src
                ref = src["secretKeyRef" if secret else "configMapKeyRef"]
                obj = (secrets if secret else configmaps).get((pod.namespace, ref["name"]))
                data = (obj or {}).get("data") or {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        continue
                    what = "Secret" if secret else "ConfigMap"
                    raise PodError(f"env {name}: {what} {ref['name']} key {ref['key']} not found")
                raw = data[ref["key"]]
                env[name] = self._rewrite(pod, base64.b64decode(raw).decode() if secret else raw)
            else:
                raise PodError(f"env {name}: valueFrom {sorted(src)} is not modelled")
        return env

    def _start(self, pod: Pod, secrets: dict, configmaps: dict) -> None:
        c = pod.container
        image = c.get("image", "")
        repo = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
        if repo not in self.images:
            raise PodError(f"image {image!r} maps to no local binary (known: {sorted(self.images)})")
        binary = str(self.images[repo])
        command = list(c.get("command") or [])
        if command and Path(command[0]).name != repo:
            raise PodError(f"command {command[0]!r} is not the entrypoint of {image}")
        env = self._env(pod, secrets, configmaps)
        argv = [binary, *[self._rewrite(pod, a) for a in command[1:]], *[self._rewrite(pod, a) for a in c.get("args") or []]]
        pod.dir.mkdir(parents=True, exist_ok=True)
        pod.binary, pod.argv, pod.env = binary, argv, env
        pod.addr, pod.ready, pod.last_error = "", False, ""
        pod.proc = spawn(pod.name, argv, pod.dir, env=env, cwd=pod.dir)
        self.event(f"pod {pod.namespace}/{pod.name} started pid {pod.proc.pid}: {' '.join(argv)}")

    def _kill(self, pod: Pod, why: str) -> None:
        pod.stopped = True
        pod.ready = False
        grace = float(pod.template.get("spec", {}).get("terminationGracePeriodSeconds", 30))

        def stop() -> None:
            code = pod.proc.stop(timeout=min(grace, STOP_GRACE_MAX)) if pod.proc else None
            with self.lock:
                self.gone.append(pod)
            self.event(f"pod {pod.namespace}/{pod.name} stopped ({why}); exit code {code}")

        t = threading.Thread(target=stop, name=f"stop-{pod.name}", daemon=True)
        with self.lock:
            self.stopping.append((t, pod))
        t.start()

    def _still_stopping(self) -> list[Pod]:
        """Pods sent SIGTERM whose process has not exited yet."""
        with self.lock:
            self.stopping = [(t, p) for t, p in self.stopping if t.is_alive()]
            return [p for _, p in self.stopping]

    # ------------------------------------------------------------ status

    def _patch_status(self, d: dict) -> None:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        with self.lock:
            pods = list(self.pods.get((ns, name), []))
        template = d["spec"]["template"]
        thash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        running = [p for p in pods if p.running()]
        ready = [p for p in running if p.ready]
        status = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": len(running),
            "updatedReplicas": len([p for p in running if p.template_hash == thash]),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
            "unavailableReplicas": max(0, int(d["spec"].get("replicas", 1)) - len(ready)),
            "conditions": [{
                "type": "Available",
                "status": "True" if ready else "False",
                "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
                "message": f"{len(ready)} pod(s) of the mini-kubelet ready",
            }],
        }
        digest = json.dumps(status, sort_keys=True)
        if self._status_sent.get((ns, name)) == digest:
            return
        code, body = self.fake.api("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/status",
                                   {"status": status}, content_type="application/merge-patch+json")
        if code == 200:
            self._status_sent[(ns, name)] = digest
            self.event(f"deployment {ns}/{name} status: ready {len(ready)}, running {len(running)}")
        else:
            self.event(f"deployment {ns}/{name} status patch -> {code}: {body}")
