"""Fixtures of the tests against a real Kubernetes control plane (see README.md).

One control plane (etcd + kube-apiserver, from tests/kube/build) serves the whole
session; each test module works in namespaces of its own. `SLUICE_TEST_KUBECONFIG`
points the suite at a cluster of your own instead. Under `CI` a missing prerequisite
fails the run; elsewhere the suite is skipped with the reason.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from sluice_testsupport.ci import fail_or_skip
from sluice_testsupport.controlplane import ControlPlane
from sluice_testsupport.paths import REPO, TARGET

pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)

CRDS = REPO / "charts" / "sluice" / "crds"


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    if not shutil.which("kubectl"):
        fail_or_skip("kubectl is not on PATH (tests/kube/run puts the venv's pinned kubectl there)")
    if not shutil.which("go") and not (REPO / "tests/kube/build").exists():
        fail_or_skip("go is not installed: the control plane is built from source")
    cp = ControlPlane.start(logdir=TARGET / "kube" / "logs")
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
