"""The docs keep up with the chart, the CRDs and the tree: every values key is in
docs/install.md, every CRD field in docs/configure.md, relative links and repository
paths written in backticks resolve, and every workspace crate is in the layouts."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import CHART, REPO, leaf_keys, load_values, yaml

DOCS = REPO / "docs"
# Build output and local state, never named as a path that must exist.
NOT_SOURCE = {".git", "target"}


def prose_docs() -> list[Path]:
    """README.md, docs/*.md, bench/*.md and the components' READMEs; not BENCHMARKS.md,
    which bench/run generates."""
    components = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in NOT_SOURCE and not d.startswith(".") and d not in ("node_modules", "__pycache__"))
        components += [Path(root) / f for f in sorted(files) if re.fullmatch(r"README.*\.md", f)]
    found = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((REPO / "bench").glob("*.md")), *components]
    return list(dict.fromkeys(found))


def stale_backticked_paths(text: str) -> list[str]:
    """The paths written in backticks in `text` that start at the repository's top level
    (`ledger/src/budget.rs`, `scripts/test`, `charts/sluice/values.yaml`) and do not
    exist. A command's first word is its path; an `#anchor`, `:line` or `::item` suffix
    is dropped; placeholders and globs (`<name>`, `*`, `{a,b}`, `$VAR`) and build output
    (`target/`) are not checked."""
    top_level = {p.name for p in REPO.iterdir()} - NOT_SOURCE
    text = re.sub(r"^ *(```|~~~).*?^ *\1", "", text, flags=re.M | re.S)  # fenced blocks
    stale = []
    for span in re.findall(r"`([^`\n]+)`", text):
        words = span.split()
        if not words:
            continue
        path = re.sub(r"(#.*|::.*|(:\d+(-\d+)?)+)$", "", words[0]).rstrip(".,;:)")
        if "/" not in path or "://" in path or re.search(r"[<>*?{}\[\]$…]", path):
            continue
        if path.split("/")[0] in top_level and not (REPO / path).exists():
            stale.append(span)
    return stale


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


@pytest.mark.parametrize("plural", ["upstreams", "modelroutes", "errorbudgets", "accountlimits"])
def test_configure_md_documents_every_spec_field(plural):
    text = (DOCS / "configure.md").read_text()
    spec = crd_schema(plural)["spec"]
    missing = [p for p in field_paths(spec, "spec") if not any(f"`{p}{end}" in text for end in ("`", ".", "["))]
    assert not missing, f"docs/configure.md does not document {missing}"


@pytest.mark.parametrize("plural", ["upstreams", "modelroutes", "errorbudgets", "accountlimits"])
def test_configure_md_documents_every_status_field(plural):
    text = (DOCS / "configure.md").read_text()
    status = crd_schema(plural)["status"]["properties"]
    missing = [f for f in status if f"`{f}" not in text]
    assert not missing, f"docs/configure.md does not document status {missing}"


def test_relative_links_in_docs_resolve():
    broken = []
    for doc in prose_docs():
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).resolve().exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_paths_in_backticks_in_docs_exist():
    stale = [f"{doc.relative_to(REPO)}: `{span}`" for doc in prose_docs() for span in stale_backticked_paths(doc.read_text())]
    assert not stale, f"paths in the docs that do not exist (moved? see git log --follow): {stale}"


def test_the_backticked_path_check_catches_a_moved_file():
    # crds/tests/drift.rs moved to crds/tests/crds/drift.rs.
    text = "See `crds/tests/drift.rs`, `crds/tests/crds/drift.rs:12`, `scripts/test --help`, `<crate>/src/lib.rs`, `target/debug/x`."
    assert stale_backticked_paths(text) == ["crds/tests/drift.rs"]


def workspace_members() -> list[str]:
    members = re.search(r"^members\s*=\s*\[([^\]]*)\]", (REPO / "Cargo.toml").read_text(), re.M)
    assert members, "Cargo.toml has no workspace members"
    return re.findall(r'"([^"]+)"', members.group(1))


def section(doc: Path, heading: str) -> str:
    """The text under `heading` (a whole `## ` line) up to the next `## ` heading."""
    text = doc.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.parametrize(
    "doc, heading",
    [("README.md", "## Layout"), ("docs/architecture.md", "## Where the code starts"), ("docs/design.md", "## 1. Layout")],
)
def test_layouts_name_every_workspace_crate(doc, heading):
    # As a directory: `status/`, or a member that is a path itself (`tests/kube-fake`).
    text = section(REPO / doc, heading)
    missing = [
        m
        for m in workspace_members()
        if not re.search(rf"(?<![\w./-]){re.escape(m)}{'/?' if '/' in m else '/'}(?![\w.-])", text)
    ]
    assert not missing, f"{doc} ({heading}) does not name the workspace crates {missing}"


def test_design_layout_lists_the_workspace_members():
    listed = re.search(r"^Cargo\.toml +workspace: (.+)$", section(DOCS / "design.md", "## 1. Layout"), re.M)
    assert listed, "docs/design.md §1 has no `Cargo.toml  workspace: …` line"
    assert [m.strip() for m in listed.group(1).split(",")] == workspace_members()


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
