"""Fixtures of the tests against a real Kubernetes control plane (see README.md).

One control plane (etcd + kube-apiserver + kube-controller-manager, from
tests/kube/build) serves the whole session; each test module works in namespaces of its
own. `SLUICE_TEST_KUBECONFIG` points the suite at a cluster of your own instead. Under
`CI` a missing prerequisite fails the run; elsewhere the suite is skipped with the
reason.

The operator scenarios of tests/e2e run here too (test_*_real.py): their fixtures
(`workdir`, `artifacts`, `ledger`, the step machinery) are shared with tests/e2e
(tests/e2e/scenario_fixtures.py, `sluice_testsupport.steps`); this file gives them
the cluster, `kube` / `new_kube`: a scenario of the real control plane
(`sluice_testsupport.realkube.RealKube`) instead of a kube-fake.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sluice_testsupport.ci import fail_or_skip
from sluice_testsupport.controlplane import ControlPlane
from sluice_testsupport.paths import REPO, TARGET
from sluice_testsupport.realkube import RealKube, wait_no_terminating_namespace

# The operator scenarios' harness (harness, kubelet, chart, scenario_fixtures and the
# scenario modules whose steps test_*_real.py import).
sys.path.insert(0, str(REPO / "tests" / "e2e"))

pytest_plugins = ("sluice_testsupport.no_skips_in_ci", "sluice_testsupport.steps", "scenario_fixtures")

CRDS = REPO / "charts" / "sluice" / "crds"


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    if not shutil.which("kubectl"):
        fail_or_skip("kubectl is not on PATH (tests/kube/run puts the venv's pinned kubectl there)")
    if not shutil.which("go") and not (REPO / "tests/kube/build").exists():
        fail_or_skip("go is not installed: the control plane is built from source")
    # The controller manager: garbage collection of owned objects, namespace deletion,
    # every namespace's `default` ServiceAccount and `kube-root-ca.crt`.
    cp = ControlPlane.start(controller_manager=True, logdir=TARGET / "kube" / "logs")
    print(f"\ncontrol plane at {cp.server}: ready in {cp.start_seconds:.1f} s")
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def crds(cluster: ControlPlane) -> ControlPlane:
    """The chart's CRDs applied with kubectl and Established."""
    applied = cluster.kubectl("apply", "--server-side", "--field-manager=sluice-tests", "-f", str(CRDS))
    # A warning here is printed to every user at `helm install` (an unknown format, a
    # deprecated field): none is expected.
    assert "Warning" not in applied.stderr, applied.stderr
    names = [p.stem for p in sorted(CRDS.glob("*.yaml"))]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    return cluster


@pytest.fixture
def namespace(cluster: ControlPlane) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def manifest_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.yaml"))


# ---------------------------------------------------------------- the operator scenarios


@pytest.fixture(scope="module")
def new_kube(crds: ControlPlane, workdir: Path) -> Iterator[Callable[[str], RealKube]]:
    """`new_kube(name)`: a scenario of its own on the session's control plane (its
    namespaces, its release name; the CRDs are the session's); each removed with the
    module at the latest (`close()`). The module starts once no namespace is being
    deleted any more (what earlier modules left is gone)."""
    if crds.audit_log is None:
        # A cluster of your own has kubelets and a deployment controller: they would run
        # (or fail to pull) the pods the mini-kubelet runs here, and fight over their status.
        fail_or_skip("the operator scenarios need the suite's own control plane (SLUICE_TEST_KUBECONFIG is set)")
    wait_no_terminating_namespace(crds)
    made: list[RealKube] = []

    def new(name: str) -> RealKube:
        kube = RealKube.create(crds, workdir / name)
        made.append(kube)
        return kube

    try:
        yield new
    finally:
        for kube in made:
            kube.close()


@pytest.fixture(scope="module")
def kube(new_kube) -> RealKube:
    """The module's scenario."""
    return new_kube("kube")
