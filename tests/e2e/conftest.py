"""Fixtures of the operator end-to-end tests (see README.md).

Prerequisites: the workspace binaries (`cargo build --workspace --bins`: kube-fake,
sluice-operator, sluice-gateway), `kubectl`, `psql` and the test Postgres
(`$SLUICE_TEST_POSTGRES_URL`, default postgres://postgres@127.0.0.1:5432/test), and
the Python packages of requirements.txt. A missing one fails every test when `CI` is
set (and any skip is turned into a failure there, by `sluice_testsupport.no_skips_in_ci`);
elsewhere the tests are skipped with the reason.

The tests of a module marked `step` are one scenario, run in file order: once a step
fails, the later steps of that module fail at once instead of running on a broken
cluster.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from harness import TARGET, Artifacts, KubeFake, LedgerSchema, binary, have_postgres  # noqa: E402
from sluice_testsupport.chart import CHART  # noqa: E402
from sluice_testsupport.ci import fail_or_skip  # noqa: E402

pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)

RUN_DIR = TARGET / "e2e" / time.strftime("run-%Y%m%d-%H%M%S")
BINARIES = ("kube-fake", "sluice-operator", "sluice-gateway")

#: Callbacks that return (title, text) sections to attach to a failed test's report.
DIAGNOSTICS: list[Callable[[], list[tuple[str, str]]]] = []


def missing_prerequisites() -> list[str]:
    missing = []
    for name in BINARIES:
        path = binary(name)
        if not (path.is_file() and os.access(path, os.X_OK)):
            missing.append(f"{path} (build it: cargo build --workspace --bins)")
    if not shutil.which("kubectl"):
        missing.append("kubectl on PATH")
    why = have_postgres()
    if why:
        missing.append(why)
    for module in ("openai", "yaml", "helm_python"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"Python package {module} (tests/e2e/run installs tests/requirements.txt)")
    return missing


@pytest.fixture(scope="session", autouse=True)
def prerequisites():
    missing = missing_prerequisites()
    if missing:
        fail_or_skip("missing prerequisites: " + "; ".join(missing))
    yield
    harness.stop_all()


def pytest_report_header(config):
    lines = []
    for name in BINARIES:
        path = binary(name)
        built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime)) if path.is_file() else "MISSING"
        lines.append(f"{name}: {path} ({built})")
    lines.append(f"artifacts: {RUN_DIR}")
    return lines


# ---------------------------------------------------------------- steps (CI: no skips, by the plugin)


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


# ---------------------------------------------------------------- shared fixtures


@pytest.fixture(scope="module")
def workdir(request) -> Path:
    d = RUN_DIR / request.module.__name__
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def artifacts(workdir) -> Artifacts:
    return Artifacts(workdir / "artifacts")


@pytest.fixture(scope="module")
def ledger():
    schema = LedgerSchema.create()
    try:
        yield schema
    finally:
        if not os.environ.get("SLUICE_E2E_KEEP_SCHEMA"):
            schema.drop()


@pytest.fixture(scope="module")
def fake(workdir) -> KubeFake:
    """kube-fake (no CRDs), with the chart's CRDs applied by kubectl as a user would."""
    kf = KubeFake.start(workdir / "kube")
    try:
        out = kf.kubectl("apply", "-f", str(CHART / "crds")).stdout
        assert out.count("created") == 3, out
        yield kf
    finally:
        kf.proc.stop()
