"""Where things are: the repository, cargo's target dir and the workspace binaries."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
BIN_DIR = Path(os.environ.get("SLUICE_BIN_DIR", TARGET / "debug"))
POSTGRES_URL = os.environ.get("SLUICE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")


def binary(name: str) -> Path:
    """A workspace binary (`cargo build --workspace --bins --profile test` puts them in target/debug)."""
    return BIN_DIR / name
