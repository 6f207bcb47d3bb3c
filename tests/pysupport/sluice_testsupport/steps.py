"""The pytest plugin of scenario suites (tests/e2e, tests/kube):
`pytest_plugins = ("sluice_testsupport.steps",)` in a conftest.py.

The tests of a module marked `step` are one scenario, run in file order: once a step
fails, the later steps of that scenario (of that module, or of that parameter of a
parametrized module fixture) fail at once instead of running on a broken cluster.
A failed step's report gets the sections of every callback in `DIAGNOSTICS` (the
operator's log, the mini-kubelet's events, …) that the scenario's fixtures registered.
"""

from __future__ import annotations

from typing import Callable

import pytest

#: Callbacks that return (title, text) sections to attach to a failed step's report.
DIAGNOSTICS: list[Callable[[], list[tuple[str, str]]]] = []


def pytest_configure(config):
    config.addinivalue_line("markers", "step: one step of a module's scenario; later steps fail at once after a failed one")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("step"):
        failed = item.parent.__dict__.setdefault("_failed_steps", {})
        failed.setdefault(_scenario(item), item.name)
        for diag in list(DIAGNOSTICS):
            try:
                for title, text in diag():
                    report.sections.append((title, text))
            except Exception as e:  # noqa: BLE001
                report.sections.append(("diagnostics", f"failed: {e!r}"))


def _scenario(item) -> str:
    """A module's scenario: one per module, or per parameter of a parametrized module fixture."""
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec else ""


def pytest_runtest_setup(item):
    if item.get_closest_marker("step"):
        failed = item.parent.__dict__.get("_failed_steps", {}).get(_scenario(item))
        if failed:
            pytest.fail(f"an earlier step of this scenario failed ({failed}); not running on a broken cluster",
                        pytrace=False)
