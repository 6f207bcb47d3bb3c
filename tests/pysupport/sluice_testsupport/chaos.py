"""A chaos upstream (`sluice-gateway chaos`, docs/design.md §6), scripted through
`POST /_chaos` and counted through `GET /_chaos`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .net import http_json
from .paths import binary
from .procs import Proc, start


@dataclass
class Chaos:
    """One chaos upstream process."""

    name: str
    proc: Proc

    @property
    def url(self) -> str:
        return self.proc.url

    def script(self, **fields: Any) -> dict:
        """Replaces the script of every request without `x-chaos-*` headers; checks that
        the upstream took it as given."""
        view = http_json("POST", f"{self.url}/_chaos", fields)
        assert view["script"] == fields, view
        return view

    def reset(self) -> None:
        """Back to a healthy, instant upstream."""
        self.script()

    def expire_tokens(self) -> None:
        """Every access token issued so far expires now (`POST /_chaos/expire-tokens`)."""
        http_json("POST", f"{self.url}/_chaos/expire-tokens")

    def counters(self) -> dict:
        return http_json("GET", f"{self.url}/_chaos")["counters"]

    def requests(self) -> int:
        return int(self.counters()["requests"])

    def status_count(self, status: int) -> int:
        return int(self.counters()["by_status"].get(str(status), 0))


def start_chaos(name: str, logdir: Path, gateway: Optional[Path] = None,
                env: Optional[dict[str, str]] = None, args: Sequence[str] = ()) -> Chaos:
    """Starts `sluice-gateway chaos` on 127.0.0.1 (process `chaos-NAME`); `args` are more
    flags, such as the credentials it checks (`--api-key K`, `--gcp-service-account FILE`)."""
    exe = gateway or binary("sluice-gateway")
    argv = [str(exe), "chaos", "--listen", "127.0.0.1:0", *args]
    return Chaos(name, start(f"chaos-{name}", argv, logdir, env))
