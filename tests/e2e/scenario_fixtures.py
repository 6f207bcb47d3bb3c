"""The fixtures of the operator scenarios, as a pytest plugin shared by the two suites
that run them: tests/e2e (on kube-fake) and tests/kube (on a real kube-apiserver),
each conftest.py listing it in `pytest_plugins`. The conftest of each suite provides
the cluster itself: `new_kube` (a factory: one fake API server, or one scenario of the
real control plane, per call) and `kube` (the module's one).

- `scenario_prerequisites`: the workspace binaries, kubectl, Postgres and the Python
  packages the scenarios need; missing ones fail under `CI`, skip elsewhere;
- `workdir`, `artifacts`: the module's directory under
  `target/<suite>/run-<time>/<module>/` (logs of every process, kubectl outputs);
- `ledger`: a private schema in the test Postgres, shared by every process of a module.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from harness import TARGET, Artifacts, LedgerSchema, binary, have_postgres
from sluice_testsupport.ci import fail_or_skip

BINARIES = ("kube-fake", "sluice-operator", "sluice-gateway")
_RUN_DIRS: dict[str, Path] = {}


def run_dir(config) -> Path:
    """`target/<suite>/run-<time>`: one per pytest run (suite: tests/e2e → e2e)."""
    suite = config.rootpath.name
    if suite not in _RUN_DIRS:
        _RUN_DIRS[suite] = TARGET / suite / time.strftime("run-%Y%m%d-%H%M%S")
    return _RUN_DIRS[suite]


def missing_prerequisites(binaries=BINARIES) -> list[str]:
    missing = []
    for name in binaries:
        path = binary(name)
        if not (path.is_file() and os.access(path, os.X_OK)):
            missing.append(f"{path} (build it: cargo build --workspace --bins --profile test)")
    if not shutil.which("kubectl"):
        missing.append("kubectl on PATH")
    why = have_postgres()
    if why:
        missing.append(why)
    for module in ("openai", "yaml", "helm_python"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"Python package {module} (tests/pysupport/venv installs tests/requirements.txt)")
    return missing


def check_prerequisites(binaries=BINARIES) -> None:
    missing = missing_prerequisites(binaries)
    if missing:
        fail_or_skip("missing prerequisites: " + "; ".join(missing))


@pytest.fixture(scope="module")
def scenario_prerequisites():
    """The scenario's prerequisites (kube-fake's binary aside: on the real server it is
    not needed)."""
    check_prerequisites(("sluice-operator", "sluice-gateway"))


def pytest_report_header(config):
    lines = []
    for name in BINARIES:
        path = binary(name)
        built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime)) if path.is_file() else "MISSING"
        lines.append(f"{name}: {path} ({built})")
    lines.append(f"artifacts: {run_dir(config)}")
    return lines


@pytest.fixture(scope="module")
def workdir(request) -> Path:
    d = run_dir(request.config) / request.module.__name__
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def artifacts(workdir) -> Artifacts:
    return Artifacts(workdir / "artifacts")


@pytest.fixture(scope="module")
def ledger(scenario_prerequisites):
    schema = LedgerSchema.create()
    try:
        yield schema
    finally:
        if not os.environ.get("SLUICE_E2E_KEEP_SCHEMA"):
            schema.drop()
