"""A mini-kubelet: runs the Deployments stored in the API server (kube-fake, or a real
kube-apiserver: `KubeFake` or `RealKube`) as local processes, so that what the
operator (or the chart) renders is proven to work.

What it does, every `period` (0.3 s), for every Deployment in every namespace of the
scenario (`kube.in_scope`: on a real server shared by several scenarios, its own):

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
- **Volumes and the container**: see `pod.py` (files of `configMap`, `secret`,
  `projected` and `emptyDir` volumes; one container, its args and env resolved).
- **Readiness and status.** The container's `readinessProbe.httpGet` (a `startupProbe`
  is not modelled) is polled on the discovered address every period; without a probe
  a running process is ready. The Deployment's status (`observedGeneration`,
  `replicas`, `updatedReplicas`, `readyReplicas`, `availableReplicas`, an `Available`
  condition) is merge-patched through the status subresource whenever it changes,
  so that the operator's `Ready` conditions can become True.

The kubelet's API calls carry `User-Agent: sluice-e2e-harness/1`, so that the request
log tells them from the operator's. It plays the kubelet and the controllers, with the
admin's identity; the pods it runs get the identity of their ServiceAccount (see pod.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

from harness import LISTENING, Kube, http, spawn
from pod import Pod, PodError, container_env, rewrite, volume_files

PROBE_TIMEOUT = 1.0
# Most a stopped pod is given before SIGKILL, whatever its terminationGracePeriodSeconds.
STOP_GRACE_MAX = 20.0
RESTART_DELAY = 1.0


class MiniKubelet:
    """See the module docs. `images` maps an image's repository name to a binary."""

    def __init__(self, kube: Kube, root: Path, images: dict[str, Path], *, period: float = 0.3,
                 rust_log: str = "info,kube=warn"):
        self.kube = kube
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

    def serving(self, namespace: str, deployment: str) -> Optional[Pod]:
        """The newest pod of a Deployment that is ready and not being stopped: where a
        Service would send a request now (during a roll, the old pod until the new one
        is ready), if any."""
        with self.lock:
            pods = [p for p in self.pods.get((namespace, deployment), []) if p.ready and not p.stopped]
        return next((p for p in reversed(pods) if p.running()), None)

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
        status, body = self.kube.api("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path} -> {status}: {body}")
        return [o for o in body.get("items", []) if self.kube.in_scope(o["metadata"]["namespace"])]

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
            files = volume_files(pod.namespace, vol, configmaps, secrets)
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
            # The pod's ServiceAccount token, as a kubeconfig (TokenRequest on a real
            # server; kube-fake's one token there).
            sa = spec.get("serviceAccountName") or "default"
            try:
                kubeconfig = self.kube.service_account_kubeconfig(pod.namespace, sa, pod.dir / "serviceaccount.kubeconfig")
            except AssertionError as e:
                raise PodError(f"no token for ServiceAccount {pod.namespace}/{sa}: {e}") from e
            env["KUBECONFIG"] = str(kubeconfig)
        env.update(container_env(pod, secrets, configmaps))
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
        argv = [binary, *[rewrite(pod, a) for a in command[1:]], *[rewrite(pod, a) for a in c.get("args") or []]]
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
        code, body = self.kube.api("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/status",
                                   {"status": status}, content_type="application/merge-patch+json")
        if code == 200:
            self._status_sent[(ns, name)] = digest
            self.event(f"deployment {ns}/{name} status: ready {len(ready)}, running {len(running)}")
        else:
            self.event(f"deployment {ns}/{name} status patch -> {code}: {body}")
