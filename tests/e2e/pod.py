"""A pod of the mini-kubelet (kubelet.py) and what its spec resolves to, without I/O:
the files of its volumes, its container's env, and the rewrites of args and env values.

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
  `automountServiceAccountToken: false`, KUBECONFIG: the stand-in for the mounted
  service-account token and KUBERNETES_SERVICE_HOST. On a real server it holds a
  TokenRequest token of the pod's `serviceAccountName` (so the chart's operator pod
  runs with exactly the chart's RBAC); on kube-fake, the fake's kubeconfig.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from harness import Proc

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


def volume_files(ns: str, vol: dict, configmaps: dict, secrets: dict) -> dict[str, bytes]:
    if "configMap" in vol:
        src = vol["configMap"]
        return source_files("ConfigMap", configmaps.get((ns, src["name"])), src, False)
    if "secret" in vol:
        src = vol["secret"]
        return source_files("Secret", secrets.get((ns, src["secretName"])), src, True)
    if "projected" in vol:
        files: dict[str, bytes] = {}
        for source in vol["projected"].get("sources") or []:
            if "secret" in source:
                s = source["secret"]
                files.update(source_files("Secret", secrets.get((ns, s["name"])), s, True))
            elif "configMap" in source:
                s = source["configMap"]
                files.update(source_files("ConfigMap", configmaps.get((ns, s["name"])), s, False))
            else:
                raise PodError(f"projected source {sorted(source)} is not modelled")
        return files
    if "emptyDir" in vol:
        return {}
    raise PodError(f"volume {vol['name']}: kind {sorted(k for k in vol if k != 'name')} is not modelled")


def rewrite(pod: Pod, value: str) -> str:
    if "=" in value and value.startswith("--"):
        flag, _, rest = value.partition("=")
        return f"{flag}={rewrite(pod, rest)}"
    for mount in sorted(pod.mounts, key=len, reverse=True):
        if value == mount or value.startswith(mount + "/"):
            return str(pod.mounts[mount]) + value[len(mount):]
    m = ANY_IP.match(value)
    ports = {p["containerPort"] for p in pod.container.get("ports") or []}
    if m and int(m.group(1)) in ports:
        return "127.0.0.1:0"
    return value


def source_files(kind: str, obj: Optional[dict], src: dict, secret: bool) -> dict[str, bytes]:
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


def container_env(pod: Pod, secrets: dict, configmaps: dict) -> dict[str, str]:
    """The container's `env`, resolved (values rewritten as args are)."""
    spec = pod.template["spec"]
    env: dict[str, str] = {}
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
            env[name] = rewrite(pod, var["value"])
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
            env[name] = rewrite(pod, base64.b64decode(raw).decode() if secret else raw)
        else:
            raise PodError(f"env {name}: valueFrom {sorted(src)} is not modelled")
    return env
