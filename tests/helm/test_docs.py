"""The operator docs keep up with the chart and the CRDs: every values key is in
docs/install.md, every CRD field in docs/configure.md, and relative links resolve."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from conftest import CHART, REPO, leaf_keys, load_values, yaml

DOCS = REPO / "docs"


def field_paths(schema: dict[str, Any], prefix: str) -> list[str]:
    paths = []
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        paths.append(path)
        if sub.get("type") == "array" and "items" in sub:
            paths += field_paths(sub["items"], f"{path}[]")
        else:
            paths += field_paths(sub, path)
    return paths


def crd_schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CHART / "crds" / f"{plural}.sluice.dev.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]


def test_install_md_documents_every_values_key():
    text = (DOCS / "install.md").read_text()
    missing = [k for k in sorted(leaf_keys(load_values())) if f"`{k}`" not in text]
    assert not missing, f"docs/install.md does not document {missing}"


@pytest.mark.parametrize("plural", ["upstreams", "modelroutes", "errorbudgets"])
def test_configure_md_documents_every_spec_field(plural):
    text = (DOCS / "configure.md").read_text()
    spec = crd_schema(plural)["spec"]
    missing = [p for p in field_paths(spec, "spec") if not any(f"`{p}{end}" in text for end in ("`", ".", "["))]
    assert not missing, f"docs/configure.md does not document {missing}"


@pytest.mark.parametrize("plural", ["upstreams", "modelroutes", "errorbudgets"])
def test_configure_md_documents_every_status_field(plural):
    text = (DOCS / "configure.md").read_text()
    status = crd_schema(plural)["status"]["properties"]
    missing = [f for f in status if f"`{f}" not in text]
    assert not missing, f"docs/configure.md does not document status {missing}"


def test_relative_links_in_docs_resolve():
    broken = []
    for doc in sorted(DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target:
                continue
            if not (doc.parent / target).resolve().exists():
                broken.append(f"{doc.name}: {target}")
    assert not broken, broken


def test_docs_anchors_used_by_the_chart_exist():
    # The PrometheusRule annotations point at runbooks by anchor.
    operate = (DOCS / "operate.md").read_text()
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", operate, re.M)}
    for template in (CHART / "templates").iterdir():
        for anchor in re.findall(r"docs/operate\.md#([a-z0-9-]+)", template.read_text()):
            assert anchor in headings, f"{template.name} links to a missing runbook #{anchor}"


def test_runbook_anchors_of_the_status_page_and_the_operator_exist():
    # The status page links runbooks as "{runbooks}#anchor"; operator messages as
    # "docs/operate.md#anchor" (both must name a heading of operate.md).
    operate = (DOCS / "operate.md").read_text()
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", operate, re.M)}
    sources = [REPO / "status" / "src" / "html.rs", *sorted((REPO / "operator" / "src").rglob("*.rs"))]
    found = 0
    for source in sources:
        text = source.read_text()
        for anchor in re.findall(r"(?:\{r\}|\{}|docs/operate\.md)#([a-z0-9-]+)", text):
            assert anchor in headings, f"{source.relative_to(REPO)} links to a missing runbook #{anchor}"
            found += 1
    assert found >= 6
