"""Fixtures of the operator end-to-end tests on kube-fake (see README.md).

Prerequisites: the workspace binaries (`cargo build --workspace --bins --profile test`: kube-fake,
sluice-operator, sluice-gateway), `kubectl`, `psql` and the test Postgres
(`$SLUICE_TEST_POSTGRES_URL`, default postgres://postgres@127.0.0.1:5432/test), and
the Python packages of requirements.txt. A missing one fails every test when `CI` is
set (and any skip is turned into a failure there, by `sluice_testsupport.no_skips_in_ci`);
elsewhere the tests are skipped with the reason.

The scenario fixtures (`workdir`, `artifacts`, `ledger`) are scenario_fixtures.py's,
shared with tests/kube, which runs the same scenarios on a real kube-apiserver; the
step machinery (a failed step fails the later ones) is `sluice_testsupport.steps`.
This file provides the cluster: kube-fake.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from harness import KubeFake  # noqa: E402
from sluice_testsupport.chart import CHART  # noqa: E402

pytest_plugins = ("sluice_testsupport.no_skips_in_ci", "sluice_testsupport.steps", "scenario_fixtures")


@pytest.fixture(scope="session", autouse=True)
def prerequisites():
    from scenario_fixtures import check_prerequisites

    check_prerequisites()
    yield
    harness.stop_all()


@pytest.fixture(scope="module")
def new_kube(workdir) -> Iterator[Callable[[str], KubeFake]]:
    """`new_kube(name)`: a kube-fake of its own (under `workdir/name`), with the chart's
    CRDs applied by kubectl as a user would; all stopped with the module."""
    started: list[KubeFake] = []

    def new(name: str) -> KubeFake:
        kf = KubeFake.start(workdir / name)
        started.append(kf)
        out = kf.kubectl("apply", "-f", str(CHART / "crds")).stdout
        assert out.count("created") == len(list((CHART / "crds").glob("*.yaml"))), out
        return kf

    try:
        yield new
    finally:
        for kf in started:
            kf.close()


@pytest.fixture(scope="module")
def kube(new_kube) -> KubeFake:
    """The module's kube-fake."""
    return new_kube("kube")
