"""The Helm chart (charts/sluice) rendered offline by Helm's own Go SDK
(helm-python-sdk embeds it: no helm binary, no cluster)."""

from __future__ import annotations

from typing import Any, Optional

from .paths import REPO

CHART = REPO / "charts" / "sluice"
RELEASE = "sluice"
NAMESPACE = "sluice-system"


def render(values: Optional[dict[str, Any]] = None, *, name: str = RELEASE,
           namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path → rendered text, as `helm template` would print them."""
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)


def objects(values: Optional[dict[str, Any]] = None, **kw: Any) -> list[dict[str, Any]]:
    """Every rendered Kubernetes object (NOTES.txt and empty documents left out)."""
    import yaml

    out = []
    for path, text in sorted(render(values, **kw).items()):
        if path.endswith("NOTES.txt"):
            continue
        out.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return out
