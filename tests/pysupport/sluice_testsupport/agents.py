"""The real coding agents (Claude Code, Codex CLI), pinned in tests/agents and installed
from the npm registry by tests/agents/install into a cache outside the repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .paths import REPO


def bin_dir() -> Path:
    """The directory holding `claude` and `codex` (installed on first use)."""
    out = subprocess.run([str(REPO / "tests/agents/install")], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])
