"""Fixtures for the chart tests: the chart rendered offline by Helm's own Go SDK
(helm-python-sdk embeds it, so no helm binary or cluster is needed).

Run with `tests/helm/run`. A missing package or tool fails the run when `CI` is set
(and every skip becomes a failure there); elsewhere it skips with the install hint.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sluice"
INSTALL_HINT = "run tests/helm/run (it installs tests/helm/requirements.txt into target/helm-venv)"


MISSING: list[str] = []


def _import(module: str) -> Any:
    """Imports `module`; without it, fails under CI, and elsewhere records it so that
    every test is skipped with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("CI"):
            raise ImportError(f"{module} is not installed and CI is set: {INSTALL_HINT}") from e
        MISSING.append(module)
        return None


def require(module: str) -> Any:
    """For test modules: imports `module`, or fails (CI) / skips the module."""
    found = _import(module)
    if found is None:
        pytest.skip(f"{module} is not installed: {INSTALL_HINT}", allow_module_level=True)
    return found


helm = _import("helm_python")
yaml = _import("yaml")


def pytest_collection_modifyitems(config, items):
    if MISSING:
        skip = pytest.mark.skip(reason=f"{', '.join(MISSING)} not installed: {INSTALL_HINT}")
        for item in items:
            item.add_marker(skip)


# ---------------------------------------------------------------- CI: no skips


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while CI is set (skips are failures in CI): {report.longrepr}"


def pytest_report_header(config):
    version = helm.helm_sdk_version() if helm else "MISSING"
    return f"chart: {CHART}; helm SDK {version}"


# ---------------------------------------------------------------- rendering

RELEASE = "sluice"
NAMESPACE = "sluice-system"

# Every non-default value at once: external ledger through an existing Secret, election
# on with two replicas, the optional monitoring and network objects, other sizes.
NON_DEFAULT: dict[str, Any] = {
    "ledger": {"existingSecret": "ledger-rds", "postgres": {"enabled": False}},
    "operator": {
        "replicas": 2,
        "leaderElection": {"enabled": True},
        "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    },
    "gateway": {
        "replicas": 4,
        "auth": "none",
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}},
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}, {"name": "NO_PROXY", "value": ".svc"}],
    },
    "image": {"registry": "registry.example.com/platform", "tag": "1.2.3", "pullPolicy": "Always"},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True, "objective": "99.95"},
    "networkPolicy": {"enabled": True},
}


# Values whose content is an open structure (a ResourceRequirements), not more keys.
OPAQUE = {"gateway.resources", "operator.resources", "ledger.postgres.resources"}


def load_values() -> dict[str, Any]:
    """The chart's values.yaml."""
    return yaml.safe_load((CHART / "values.yaml").read_text())


def leaf_keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the values' keys (resource maps count as one key)."""
    keys = set()
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and path not in OPAQUE:
            keys |= leaf_keys(v, path + ".")
        else:
            keys.add(path)
    return keys


def render(values: dict[str, Any] | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path → rendered text, as `helm template` would print them."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)


def objects(values: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Every rendered Kubernetes object (NOTES.txt and empty documents left out)."""
    out = []
    for path, text in sorted(render(values, **kw).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(doc)
    return out


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name → value (a string) or valueFrom (a dict)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.fixture(scope="session")
def default_objects() -> list[dict[str, Any]]:
    return objects()


@pytest.fixture(scope="session")
def non_default_objects() -> list[dict[str, Any]]:
    return objects(NON_DEFAULT)
