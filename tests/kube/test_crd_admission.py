"""The chart's CRDs on a real kube-apiserver: admitted by its CEL cost estimator and
Established; every CEL rule refusing a manifest with the field and message that
file mode reports (the fixtures of crds/testdata/cel, one table for both); every
valid fixture and every example manifest of the repository accepted."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from conftest import CRDS
from sluice_testsupport.controlplane import ControlPlane
from sluice_testsupport.paths import REPO

CEL = REPO / "crds" / "testdata" / "cel"
KINDS = ("upstream", "modelroute", "errorbudget", "accountlimit")
EXPECT = re.compile(r"^# expect: (\S+): (.*)$")
#: One problem in a refusal, after `… is invalid: ` or, when there are several, `* `:
#: `spec.x: Invalid value: "value": message` for a scalar, `spec.x: Invalid value:
#: message` for an object or list, or another reason (`Too long: …`).
PROBLEM = re.compile(r"^(?:.* is invalid: |\* )(\S+): (.+)$")
#: The refused scalar value that precedes the message (`"91d": `).
SCALAR = re.compile(r'^(?:"(?:[^"\\]|\\.)*"|-?[0-9.]+|null|true|false): ')


def fixtures(kind: str, which: str) -> list[Path]:
    return sorted((CEL / kind / which).glob("*.yaml"))


def expected(path: Path) -> set[tuple[str, str]]:
    out = set()
    for line in path.read_text().splitlines():
        m = EXPECT.match(line)
        if m:
            out.add((m.group(1), m.group(2)))
    return out


def refusal(result) -> set[tuple[str, str]]:
    """The (field, message) pairs of a refused `kubectl apply`."""
    out = set()
    for line in result.stderr.splitlines():
        m = PROBLEM.match(line.strip())
        if m:
            message = m.group(2).strip()
            if message.startswith("Invalid value: "):
                message = SCALAR.sub("", message.removeprefix("Invalid value: "))
            out.add((m.group(1), message))
    return out


def test_every_crd_is_established_with_its_names_accepted(crds: ControlPlane) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        crd = crds.kubectl_json("get", "crd", path.stem, "-o", "json")
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", (path.stem, crd["status"])
        assert conditions.get("NamesAccepted") == "True", (path.stem, crd["status"])
        assert crd["metadata"]["generation"] == crd["status"].get("observedGeneration", crd["metadata"]["generation"])


def _strip_max_length(node) -> None:
    if isinstance(node, dict):
        node.pop("maxLength", None)
        for v in node.values():
            _strip_max_length(v)
    elif isinstance(node, list):
        for v in node:
            _strip_max_length(v)


def test_the_cost_estimator_refuses_the_model_route_crd_without_its_string_bounds(crds: ControlPlane) -> None:
    """The server estimates the rules' cost, and the bounds are what keeps the
    ModelRoute CRD within it: without `maxLength` the five price rules under
    `candidates` (maxItems 8) are each refused, as they were before the bounds."""
    doc = yaml.safe_load((CRDS / "modelroutes.sluice.dev.yaml").read_text())
    unbounded = copy.deepcopy(doc)
    _strip_max_length(unbounded)
    apply = ("apply", "--server-side", "--field-manager=sluice-tests", "--dry-run=server", "-f", "-")
    result = crds.kubectl(*apply, input=yaml.safe_dump(unbounded), check=False)
    assert result.returncode != 0, "the unbounded CRD was admitted: is the CEL cost estimator on?"
    for field in ("input", "output", "cachedInput", "cacheWrite", "webSearch"):
        rule = (rf"properties\[candidates\]\.items\.properties\[price\]\.properties\[{field}\]"
                r"\.x-kubernetes-validations\[0\]\.rule: Forbidden: estimated rule cost exceeds budget")
        assert re.search(rule, result.stderr), result.stderr
    # The same document with its bounds is admitted by the same dry run.
    crds.kubectl(*apply, input=yaml.safe_dump(doc))


@pytest.mark.parametrize("path", [p for k in KINDS for p in fixtures(k, "invalid")],
                         ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_each_cel_rule_refuses_with_the_field_and_the_file_mode_message(
        crds: ControlPlane, namespace: str, path: Path) -> None:
    want = expected(path)
    assert want, f"{path} has no '# expect:' line"
    result = crds.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode != 0, f"{path.name} was admitted:\n{result.stdout}"
    assert refusal(result) == want, f"kubectl said:\n{result.stderr}"


@pytest.mark.parametrize("path", [p for k in KINDS for p in fixtures(k, "valid")],
                         ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_each_valid_fixture_is_admitted(crds: ControlPlane, namespace: str, path: Path) -> None:
    result = crds.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr


def doc_manifests() -> list[tuple[str, str]]:
    """The sluice manifests written out whole in the docs (```yaml blocks)."""
    out = []
    for md in sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")]):
        for i, m in enumerate(re.finditer(r"```ya?ml\n(.*?)```", md.read_text(), re.S)):
            block = m.group(1)
            if "apiVersion: sluice.dev/" in block and "\nkind: " in block:
                out.append((f"{md.name}#{i}", block))
    return out


def test_every_example_manifest_is_admitted(crds: ControlPlane, namespace: str) -> None:
    examples = sorted((REPO / "examples").rglob("*.yaml"))
    assert examples
    for path in examples:
        result = crds.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
        assert result.returncode == 0, f"{path.relative_to(REPO)}: {result.stderr}"
    kinds = {line.split(":", 1)[1].strip() for line in crds.kubectl(
        "get", "upstreams,modelroutes,errorbudgets,accountlimits", "-n", namespace,
        "-o", "jsonpath={range .items[*]}kind: {.kind}\n{end}"
    ).stdout.splitlines() if line}
    assert kinds == {"Upstream", "ModelRoute", "ErrorBudget", "AccountLimit"}, kinds


def test_every_manifest_in_the_docs_is_admitted(crds: ControlPlane, namespace: str) -> None:
    blocks = doc_manifests()
    assert len(blocks) >= 4
    for name, block in blocks:
        result = crds.kubectl("apply", "-n", namespace, "-f", "-", input=block, check=False)
        assert result.returncode == 0, f"{name}: {result.stderr}\n{block}"


ACCOUNT_LIMIT = """\
apiVersion: sluice.dev/v1alpha1
kind: AccountLimit
metadata: {name: subject}
spec: {account: %s%s, rpm: 600}
"""


def test_an_account_limits_subject_cannot_change_but_its_limits_can(crds: ControlPlane, namespace: str) -> None:
    """The AccountLimit's transition rules (which the fixtures cannot show: they judge an
    update): `account` and `keyId` stay as created, so that the operator never leaves a
    former subject's limits behind; the limits themselves change freely."""
    msg = {m.group(1): m.group(2) for m in re.finditer(r'pub const (\w+): &str =\s*"((?:[^"\\]|\\.)*)";',
                                                          (REPO / "crds/src/schema.rs").read_text())}

    def apply(account: str, key: str = "", check: bool = True):
        return crds.kubectl("apply", "-n", namespace, "-f", "-", input=ACCOUNT_LIMIT % (account, key), check=check)

    apply("team-a", ", keyId: 7")
    crds.kubectl("patch", "-n", namespace, "accountlimit", "subject", "--type=merge", "-p", '{"spec": {"rpm": 60, "tpm": 100}}')
    assert crds.kubectl_json("get", "accountlimit", "subject", "-n", namespace, "-o", "json")["spec"]["rpm"] == 60
    cases = [("team-b", ", keyId: 7", ("spec.account", msg["ACCOUNT_IMMUTABLE"])),
             ("team-a", ", keyId: 8", ("spec.keyId", msg["KEY_IMMUTABLE"])),
             ("team-a", "", ("spec.keyId", msg["KEY_IMMUTABLE"]))]
    for account, key, want in cases:
        result = apply(account, key, check=False)
        assert result.returncode != 0, f"{account}{key} was admitted"
        assert refusal(result) == {want}, result.stderr
