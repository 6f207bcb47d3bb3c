"""What the report records about the run besides numbers: the machine, tool versions,
and the warnings and errors in the gateways' logs."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

from .settings import BIN, OHA, ROOT
from .systems import psql


LOG_LINE = re.compile(r"\b(WARN|ERROR)\s+(\S+?):\s+(.*?)(?=\s+[a-z_]+=|$)")


def scan_logs(work: Path) -> dict:
    """Warnings and errors the gateways logged during the run, counted by message, so
    that a gateway failing in the background (a wedged ledger, say) shows in the report."""
    out: dict = {}
    for path in sorted(work.glob("sluice-*.log")):
        counts: dict = {}
        first: dict = {}
        for line in path.read_text(errors="replace").splitlines():
            m = LOG_LINE.search(line)
            if not m:
                continue
            level, target, message = m.group(1), m.group(2), m.group(3).strip()
            err = re.search(r"error=(.*)$", line)
            if err:
                message = f"{message}: {err.group(1)[:160]}"
            key = f"{level} {target}: {message}"
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, line[:27])
        if counts:
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
            out[path.stem] = [{"message": k, "count": v, "first": first[k]} for k, v in top]
    return out


def cmd_out(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (p.stdout or p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"


def machine() -> dict:
    model = ""
    for line in cmd_out(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {"cpu": model, "cores": os.cpu_count(), "memory": mem, "kernel": platform.release(),
            "os": cmd_out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"])}


def versions() -> dict:
    rev = cmd_out(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = cmd_out(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    try:
        from importlib.metadata import version  # noqa: PLC0415
        litellm = version("litellm")
    except Exception:  # noqa: BLE001
        litellm = "not installed"
    pg = ""
    try:
        pg = psql("SHOW server_version")
    except Exception as e:  # noqa: BLE001
        pg = f"unavailable ({e})"
    return {
        "sluice": f"{cmd_out([str(BIN), '--version'])} @ {rev}{' (uncommitted changes)' if dirty else ''}",
        "rustc": cmd_out(["rustc", "--version"]),
        "oha": cmd_out([OHA, "--version"]),
        "nginx": cmd_out(["nginx", "-v"]),
        "litellm": litellm,
        "python": platform.python_version(),
        "postgres": pg,
    }
