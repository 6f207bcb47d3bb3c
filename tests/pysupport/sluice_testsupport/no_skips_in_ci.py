"""The pytest plugin of every suite (`pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)`
in its conftest.py): when `CI` is set, a skipped test is reported as a failure."""

from __future__ import annotations

import pytest

from .ci import in_ci


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while CI is set (skips are failures in CI): {report.longrepr}"
