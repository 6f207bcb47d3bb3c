"""Fixtures for the chart tests: the chart rendered offline by Helm's own Go SDK
(`sluice_testsupport.chart`: helm-python-sdk embeds it, so no helm binary or cluster
is needed).

Run with `tests/helm/run`. A missing package or tool fails the run when `CI` is set
(and every skip becomes a failure there, by `sluice_testsupport.no_skips_in_ci`); elsewhere it
skips with the install hint.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from sluice_testsupport import chart
from sluice_testsupport.chart import CHART, NAMESPACE, RELEASE  # noqa: F401 - for the test modules
from sluice_testsupport.ci import in_ci
from sluice_testsupport.paths import REPO  # noqa: F401 - for the test modules

pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)

INSTALL_HINT = "run tests/helm/run (it installs tests/requirements.txt into target/pyenv)"


MISSING: list[str] = []


def _import(module: str) -> Any:
    """Imports `module`; without it, fails under CI, and elsewhere records it so that
    every test is skipped with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if in_ci():
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


def pytest_report_header(config):
    version = helm.helm_sdk_version() if helm else "MISSING"
    return f"chart: {CHART}; helm SDK {version}"


# ---------------------------------------------------------------- rendering

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
    "cache": {"maxBytes": 268435456, "redis": {"existingSecret": "redis-cache", "existingSecretKey": "uri"}},
    "image": {"registry": "registry.example.com/platform", "tag": "1.2.3", "pullPolicy": "Always"},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True, "objective": "99.95"},
    "networkPolicy": {"enabled": True},
    "grafanaDashboard": {"enabled": True, "folder": "sluice"},
    "tracing": {
        "otlpEndpoint": "http://otel-collector.observability:4317",
        "protocol": "grpc",
        "sampler": "traceidratio",
        "samplerArg": "0.25",
        "serviceName": "sluice-prod",
        "captureContent": True,
    },
}


# Values whose content is an open structure (a ResourceRequirements), not more keys.
OPAQUE = {"gateway.resources", "operator.resources", "ledger.postgres.resources", "statusPage.ingress.annotations"}


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


render = chart.render
objects = chart.objects


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
