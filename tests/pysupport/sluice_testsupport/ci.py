"""CI rules for every suite: under `CI` (any non-empty value) nothing is skipped.
The pytest side is the plugin `sluice_testsupport.no_skips_in_ci`."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """Whether `CI` is set: missing prerequisites are failures, never skips."""
    return bool(os.environ.get("CI"))


def fail_or_skip(reason: str, *, module: bool = False) -> None:
    """A missing prerequisite: fails under CI, skips (with `reason`) elsewhere."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=module)
