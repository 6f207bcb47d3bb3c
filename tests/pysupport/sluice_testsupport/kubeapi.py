"""Raw Kubernetes API calls for the harnesses (the mini-kubelet's polls and status
patches, a few reads of the tests): one kept-alive connection per thread to the server
of a kubeconfig, over HTTPS with its CA and its bearer token or client certificate
(or plain HTTP, as kube-fake serves). Never through a proxy from the environment.

Only the credentials a test kubeconfig holds are understood: `token`, `token-file`,
`client-certificate(-data)` + `client-key(-data)`. An `exec` or `auth-provider` user
(a cloud cluster of your own) is refused with the reason.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import ssl
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Optional

import yaml


class KubeApi:
    """`request(method, path, body)` against the current context of a kubeconfig."""

    def __init__(self, kubeconfig: Path, user_agent: str, timeout: float = 30.0):
        doc = yaml.safe_load(Path(kubeconfig).read_text())
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next((u.get("user") or {} for u in doc.get("users") or [] if u["name"] == ctx.get("user")), {})
        url = urllib.parse.urlsplit(cluster["server"])
        self.server = cluster["server"].rstrip("/")
        self.host, self.port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
        self.base = url.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"user-agent": user_agent, "accept": "application/json"}
        self._files = tempfile.TemporaryDirectory(prefix="kubeapi-")
        if "exec" in user or "auth-provider" in user:
            raise AssertionError(f"kubeconfig {kubeconfig}: an exec/auth-provider user is not supported by the "
                                 "harness's raw API client; use a token or a client certificate")
        token = user.get("token") or (Path(user["token-file"]).read_text().strip() if user.get("token-file") else None)
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.ssl: Optional[ssl.SSLContext] = None
        if url.scheme == "https":
            ctx_ssl = ssl.create_default_context(cafile=self._file(cluster, "certificate-authority"))
            if cluster.get("insecure-skip-tls-verify"):
                ctx_ssl.check_hostname = False
                ctx_ssl.verify_mode = ssl.CERT_NONE
            cert, key = self._file(user, "client-certificate"), self._file(user, "client-key")
            if cert and key:
                ctx_ssl.load_cert_chain(cert, key)
            self.ssl = ctx_ssl
        self._local = threading.local()

    def _file(self, section: dict, field: str) -> Optional[str]:
        """A kubeconfig file field, or its `-data` twin written to a private temp file."""
        if section.get(field):
            return section[field]
        data = section.get(f"{field}-data")
        if not data:
            return None
        path = Path(self._files.name) / field
        path.write_bytes(base64.b64decode(data))
        path.chmod(0o600)
        return str(path)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.ssl is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One call; returns (status, decoded JSON or text) for any status. A dropped
        kept-alive connection is reopened once."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["content-type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, self.base + path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return resp.status, parsed


class Kubectl:
    """`kubectl` with a harness's kubeconfig and a cache directory of its own, for the
    harnesses of kube-fake and of the real control plane alike (`kubeconfig` and `cache`
    are the harness's attributes)."""

    kubeconfig: Path
    cache: Path

    def kubectl_env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.cache))

    def kubectl(self, *args: str, input: Optional[str] = None, check: bool = True,
                timeout: float = 120.0) -> subprocess.CompletedProcess:
        cmd = ["kubectl", *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                              env=self.kubectl_env())
        if check and done.returncode != 0:
            raise AssertionError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done

    def get_json(self, *args: str) -> Any:
        """`kubectl get ARGS -o json`, parsed; None when not found."""
        done = self.kubectl("get", *args, "-o", "json", "--ignore-not-found", check=True)
        return json.loads(done.stdout) if done.stdout.strip() else None
