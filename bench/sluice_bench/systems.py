"""The systems under test and their mocks: starting them, their configurations, the
billing key and the Postgres bench database."""

from __future__ import annotations

import http.client
import http.server
import json
import re
import subprocess
import threading
import time
from pathlib import Path

from .procs import Service
from .settings import (ANTHROPIC_MODEL, BIN, CACHE_MODEL, CACHE_TWIN_MODEL, MODEL, PG_ADMIN_URL, PG_DB, SUT_CPU,
                       UNPRICED_MODEL, log)


def wait_http(port: int, path: str, timeout: float = 90, method: str = "GET") -> None:
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request(method, path)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status < 500:
                return
            last = r.status
        except OSError as e:
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"127.0.0.1:{port}{path} not ready: {last}")


def post_json(port: int, path: str, obj, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, json.dumps(obj), h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def chaos(port: int, script: dict) -> None:
    status, _, body = post_json(port, "/_chaos", script)
    if status >= 300:
        raise RuntimeError(f"chaos script refused: {status} {body[:200]!r}")


def start_mock(name: str, workdir: Path) -> tuple[Service, int]:
    s = Service(name, [str(BIN), "chaos", "--listen", "127.0.0.1:0"], workdir, env={"RUST_LOG": "warn"})
    m = s.wait_log(r"listening on http://127\.0\.0\.1:(\d+)")
    return s, int(m.group(1))


# Billing runs hold balance grants (docs/design.md §5a): named here, at their defaults,
# so that the configuration BENCHMARKS.md records says what was measured.
GRANT_FLAGS = ["--grant-validity", "30s", "--grant-max", "10", "--settle-window", "2ms"]


def start_sluice(name: str, workdir: Path, manifests: Path, ledger: str, auth: str, extra: list[str] | None = None,
                 cpus: str = SUT_CPU) -> tuple[Service, int]:
    cmd = [str(BIN), "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0", "--ledger", ledger, "--auth", auth]
    if auth == "keys":
        cmd += GRANT_FLAGS
    s = Service(name, cmd + (extra or []), workdir, cpus=cpus, env={"NO_COLOR": "1"})
    m = s.wait_log(r"listening on http://127\.0\.0\.1:(\d+)")
    port = int(m.group(1))
    wait_http(port, "/readyz")
    return s, port


def admin(ledger: str, *args: str) -> str:
    out = subprocess.run([str(BIN), "admin", "--ledger", ledger, *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"admin {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


def billing_key(ledger: str) -> str:
    admin(ledger, "account", "create", "bench", "--balance", "1000000")
    return admin(ledger, "key", "create", "bench").splitlines()[-1].strip()


# The limited systems' key (docs/design.md §5b): requests, tokens and concurrency limits
# far above anything the bench offers, so every request is admitted from the gateway's
# leases and none is refused: the runs measure what holding a key to limits costs.
LIMIT_FLAGS = ["--rpm", "100000000", "--tpm", "100000000000", "--concurrency", "100000"]


def limited_key(ledger: str) -> str:
    """A second key on `billing_key`'s account, with LIMIT_FLAGS."""
    return admin(ledger, "key", "create", "bench", *LIMIT_FLAGS).splitlines()[-1].strip()


LEASE_TAKES = re.compile(r"^sluice_limit_lease_takes_total(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def lease_takes(port: int) -> int:
    """The gateway's `sluice_limit_lease_takes_total`, summed over its labels: one ledger
    transaction per take."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"127.0.0.1:{port}/metrics answered {r.status}")
    return round(sum(float(v) for v in LEASE_TAKES.findall(text)))


def sluice_manifests(mock_port: int) -> str:
    return f"""# The benchmark route: one zero-delay chaos upstream, priced so billing runs reserve
# and settle on every request.
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata:
  name: mock
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:{mock_port}/v1
  timeouts:
    connect: 2s
    firstByte: 5s
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench
spec:
  model: {MODEL}
  deadline: 30s
  candidates:
  - upstream: mock
    model: {MODEL}
    price: {{input: "1.00", output: "2.00"}}
---
# The same mock spoken to in the Anthropic Messages protocol: the request is translated
# to /v1/messages and the answer back to a chat.completion (docs/providers.md).
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata:
  name: mock-anthropic
spec:
  protocol: anthropic
  baseUrl: http://127.0.0.1:{mock_port}/v1
  timeouts:
    connect: 2s
    firstByte: 5s
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench-claude
spec:
  model: {ANTHROPIC_MODEL}
  deadline: 30s
  candidates:
  - upstream: mock-anthropic
    model: {ANTHROPIC_MODEL}
    price: {{input: "1.00", output: "2.00"}}
---
# The benchmark route again under another model name, caching deterministic completions
# whole (docs/design.md §13): a repeated request with `temperature: 0` is answered from
# the gateway's cache, without an upstream attempt.
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench-cached
spec:
  model: {CACHE_MODEL}
  deadline: 30s
  cache: {{completions: deterministic}}
  candidates:
  - upstream: mock
    model: {MODEL}
    price: {{input: "1.00", output: "2.00"}}
---
# The benchmark route without prices: what a limited key is compared on (a request
# reserves and settles no money, so its p50 is not its settlement batch's).
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench-unpriced
spec:
  model: {UNPRICED_MODEL}
  deadline: 30s
  candidates:
  - upstream: mock
    model: {MODEL}
---
# The cached route, caching nothing: what a cache miss is compared with.
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: bench-uncached
spec:
  model: {CACHE_TWIN_MODEL}
  deadline: 30s
  candidates:
  - upstream: mock
    model: {MODEL}
    price: {{input: "1.00", output: "2.00"}}
"""


def failover_manifests(backup: int, down: int, err503: int, hang: int) -> str:
    ups = {"fo-backup": backup, "fo-down": down, "fo-503": err503, "fo-hang": hang}
    docs = []
    for name, port in ups.items():
        docs.append(f"""apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata:
  name: {name}
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:{port}/v1
  timeouts:
    connect: 2s
    firstByte: 50ms
""")
    routes = {"fo-base": ["fo-backup"], "fo-refuse": ["fo-down", "fo-backup"], "fo-503": ["fo-503", "fo-backup"],
              "fo-hang": ["fo-hang", "fo-backup"]}
    for model, cands in routes.items():
        lines = "\n".join(f"  - upstream: {c}\n    model: {MODEL}" for c in cands)
        docs.append(f"""apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata:
  name: {model}
spec:
  model: {model}
  deadline: 10s
  candidates:
{lines}
""")
    return "# Failover routes: a failing primary, then a healthy zero-delay backup.\n" + "---\n".join(docs)


def nginx_conf(listen: int, mock_port: int) -> str:
    """nginx runs with `-p <run dir>`: its pid, error log and temp paths are relative to
    that prefix, so the configuration (kept in results.json) names no machine path."""
    return f"""# A plain reverse proxy: proxy_pass to the mock, upstream keep-alive (as any
# production nginx in front of an HTTP API), no caching, no access log.
worker_processes 1;
pid nginx.pid;
error_log nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path nginx-tmp/body;
    proxy_temp_path nginx-tmp/proxy;
    fastcgi_temp_path nginx-tmp/fastcgi;
    uwsgi_temp_path nginx-tmp/uwsgi;
    scgi_temp_path nginx-tmp/scgi;
    upstream mock {{
        server 127.0.0.1:{mock_port};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def litellm_conf(mock: int, backup: int, down: int, err503: int, hang: int) -> str:
    def dep(name: str, port: int, extra: str = "") -> str:
        return f"""  - model_name: {name}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{port}/v1
      api_key: sk-bench{extra}
"""
    return ("# LiteLLM proxy: the benchmark model on the mock, and failover groups whose\n"
            "# primary fails and falls back to a healthy zero-delay backup.\n"
            "model_list:\n"
            + dep(MODEL, mock)
            + dep("fo-base", backup)
            + dep("fo-refuse", down)
            + dep("fo-503", err503)
            + dep("fo-hang", hang, "\n      stream_timeout: 0.05\n      timeout: 0.05")
            + """litellm_settings:
  num_retries: 0
  request_timeout: 30
  telemetry: false
router_settings:
  num_retries: 0
  # Every request tries the primary first, as sluice's forced-failover run does.
  disable_cooldowns: true
  fallbacks:
    - {"fo-refuse": ["fo-base"]}
    - {"fo-503": ["fo-base"]}
    - {"fo-hang": ["fo-base"]}
""")


def psql(sql: str) -> str:
    out = subprocess.run(["psql", PG_ADMIN_URL, "-v", "ON_ERROR_STOP=1", "-Atc", sql], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return out.stdout.strip()


def create_pg_db() -> str:
    psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {PG_DB}")
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    # The ledger negotiates TLS when the server offers it (sslmode=prefer); on loopback
    # that measures the cipher, not the ledger, so it is turned off here.
    return f"{base}/{PG_DB}?sslmode=disable"


def drop_pg_db() -> None:
    try:
        psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    except Exception as e:  # noqa: BLE001
        log(f"could not drop {PG_DB}: {e}")


class OtlpSink:
    """An OTLP/HTTP receiver that takes every `POST /v1/traces` with 200 and counts the
    exports and their bytes (the traced sluice's spans go here; what it sends is not
    decoded: the bench measures the gateway, the Rust tests check the spans). A thread of
    this script, so it runs on the load generator's core, not the systems'."""

    def __init__(self) -> None:
        sink = self
        self.exports = 0
        self.bytes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                sink.exports += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

