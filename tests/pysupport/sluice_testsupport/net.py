"""HTTP for the harnesses: 127.0.0.1 only, never through a proxy from the environment
(importing this module adds 127.0.0.1 and localhost to `NO_PROXY` for the SDKs too)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Optional

for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(x for x in (os.environ.get(_var, ""), "127.0.0.1,localhost") if x)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(method: str, url: str, body: Any = None, headers: Optional[dict[str, str]] = None,
         timeout: float = 10.0) -> tuple[int, bytes]:
    """One request without proxies; returns (status, body) for any status."""
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_json(method: str, url: str, body: Any = None) -> Any:
    """A JSON request whose answer must be 2xx; returns the decoded body."""
    status, data = http(method, url, body, {"content-type": "application/json"})
    assert 200 <= status < 300, f"{method} {url} -> {status}: {data.decode(errors='replace')}"
    return json.loads(data)
