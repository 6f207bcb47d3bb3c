"""The Helm chart rendered offline with Helm's Go SDK (`sluice_testsupport.chart`, as
in tests/helm), and the comparison of its RBAC rules with the API calls the operator
really made (the fake API server's request log, or a real apiserver's audit log in
the same record format: `RealKube.audit_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import yaml
from sluice_testsupport.chart import CHART, NAMESPACE, RELEASE  # noqa: F401
from sluice_testsupport.chart import objects as render  # noqa: F401 - every object `helm template` prints

from harness import HARNESS_UA


def to_yaml(objs: Iterable[dict]) -> str:
    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs)


# ---------------------------------------------------------------- RBAC


@dataclass(frozen=True, order=True)
class Need:
    """One authorisation check the API server makes for a request."""

    api_group: str
    resource: str  # `modelroutes` or `modelroutes/status`
    verb: str
    namespace: str
    name: str

    def __str__(self) -> str:
        g = self.api_group or '""'
        where = f" {self.namespace}/{self.name}" if self.name else (f" ns={self.namespace}" if self.namespace else "")
        return f"{g} {self.resource} {self.verb}{where}"


@dataclass(frozen=True, order=True)
class Grant:
    """One (group, resource, verb, resourceName) of a rule, with the role it is in."""

    role: str
    namespace: str  # a Role's namespace; "" for a ClusterRole
    api_group: str
    resource: str
    verb: str
    resource_name: str  # "" when the rule names none

    def allows(self, n: Need) -> bool:
        return (
            (not self.namespace or self.namespace == n.namespace)
            and self.api_group == n.api_group
            and self.resource == n.resource
            and self.verb == n.verb
            and (not self.resource_name or self.resource_name == n.name)
        )

    def __str__(self) -> str:
        g = self.api_group or '""'
        named = f" [{self.resource_name}]" if self.resource_name else ""
        scope = f"Role {self.namespace}/{self.role}" if self.namespace else f"ClusterRole {self.role}"
        return f"{scope}: {g} {self.resource} {self.verb}{named}"


def grants(objs: list[dict]) -> list[Grant]:
    out = []
    for role in objs:
        if role["kind"] not in ("ClusterRole", "Role"):
            continue
        ns = role["metadata"].get("namespace", "") if role["kind"] == "Role" else ""
        for rule in role.get("rules") or []:
            assert "nonResourceURLs" not in rule, rule
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        for n in rule.get("resourceNames") or [""]:
                            out.append(Grant(role["metadata"]["name"], ns, g, r, v, n))
    return out


def is_operator(record: dict) -> bool:
    """kube-rs sends no User-Agent; kubectl and this harness do."""
    return record["user_agent"] == ""


def operator_records(records: list[dict]) -> list[dict]:
    agents = {r["user_agent"] for r in records}
    unknown = {a for a in agents if a and not a.startswith(("kubectl", HARNESS_UA, "curl/"))}
    assert not unknown, f"requests from clients this test does not know: {unknown}"
    return [r for r in records if is_operator(r)]


def needs(records: list[dict]) -> dict[Need, dict]:
    """The checks the real API server's authorizer would make, with one example record
    each. A server-side apply PATCH that created its object (201) is authorised as
    `create` (with the object's name) as well as `patch`."""
    out: dict[Need, dict] = {}
    for r in records:
        if not r["resource_request"]:
            continue
        resource = r["resource"] + (f"/{r['subresource']}" if r["subresource"] else "")
        name = r["name"]  # "" for list, watch and POST (a create names no object in its path)
        checks = [r["verb"]]
        if r["verb"] == "patch" and r["status"] == 201:
            checks.append("create")
        for verb in checks:
            out.setdefault(Need(r["api_group"], resource, verb, r["namespace"], name), r)
    return out


@dataclass
class Comparison:
    needed: dict[Need, dict]
    grants: list[Grant]
    missing: list[Need]
    unused: list[Grant]
    non_resource: list[str]

    def report(self, title: str) -> str:
        lines = [f"# {title}", "", f"operator calls: {len(self.needed)} distinct authorisation checks", ""]
        lines.append("## checks and the grant that allows each")
        for n in sorted(self.needed):
            by = next((g for g in self.grants if g.allows(n)), None)
            r = self.needed[n]
            lines.append(f"- {n}   <- {by or 'NOT ALLOWED'}   (e.g. {r['method']} {r['path']}{'?' + r['query'] if r['query'] else ''} -> {r['status']})")
        lines.append("")
        lines.append("## needed but not granted")
        lines.extend(f"- {n}" for n in self.missing) if self.missing else lines.append("- none")
        lines.append("")
        lines.append("## granted but never used in this run (least-privilege candidates)")
        lines.extend(f"- {g}" for g in self.unused) if self.unused else lines.append("- none")
        lines.append("")
        lines.append("## non-resource requests (discovery; allowed by system:discovery, not by the chart)")
        lines.extend(f"- {p}" for p in self.non_resource) if self.non_resource else lines.append("- none")
        return "\n".join(lines) + "\n"


def compare(records: list[dict], objs: list[dict], *, users: bool = False) -> Comparison:
    """`records`: kube-fake's whole request log (the operator's calls are told by their
    User-Agent), or, with `users`, the operator's calls only (an audit log read by user)."""
    ops = records if users else operator_records(records)
    needed = needs(ops)
    gs = grants(objs)
    missing = sorted(n for n in needed if not any(g.allows(n) for g in gs))
    unused = sorted(g for g in gs if not any(g.allows(n) for n in needed))
    non_resource = sorted({f"{r['method']} {r['path']}" for r in ops if not r["resource_request"]})
    return Comparison(needed, gs, missing, unused, non_resource)
