"""The operator's RBAC is least privilege and covers what the operator calls
(docs/design.md §7; the calls are listed in charts/sluice/templates/rbac.yaml)."""

from __future__ import annotations

import re
from typing import Any

from conftest import CHART, NAMESPACE, NON_DEFAULT, by_kind, one, render, yaml

# (apiGroup, resource, verb, resourceName or None) the operator needs. Kept exact: a
# grant missing here fails (the operator breaks) and so does one added here (it would
# not be least privilege any more).
CLUSTER_NEEDS = {
    *{("sluice.dev", r, v, None) for r in ("upstreams", "modelroutes", "errorbudgets", "accountlimits") for v in ("get", "list", "watch")},
    *{("sluice.dev", f"{r}/status", "patch", None) for r in ("upstreams", "modelroutes", "errorbudgets", "accountlimits")},
    # The ModelRoute finalizer sluice.dev/gateway-config (operator/src/reconcile/route.rs)
    # and the AccountLimit finalizer sluice.dev/limits (operator/src/reconcile/limits.rs).
    ("sluice.dev", "modelroutes", "patch", None),
    ("sluice.dev", "accountlimits", "patch", None),
    ("events.k8s.io", "events", "create", None),
    ("events.k8s.io", "events", "patch", None),
    *{("", "secrets", v, None) for v in ("get", "list", "watch")},
    *{("", "secrets", v, "sluice-ledger") for v in ("create", "patch", "delete")},
    # Rendered per gateway group: applied, deleted, and watched so that drift is
    # repaired (operator/src/controllers.rs).
    *{
        (g, r, v, None)
        for g, r in (("", "configmaps"), ("apps", "deployments"), ("", "services"), ("policy", "poddisruptionbudgets"))
        for v in ("get", "list", "watch", "create", "patch", "delete")
    },
}
LEASE_NEEDS = {
    ("coordination.k8s.io", "leases", "create", None),
    ("coordination.k8s.io", "leases", "get", "sluice-operator"),
    ("coordination.k8s.io", "leases", "patch", "sluice-operator"),
}
DANGEROUS_VERBS = {"*", "update", "deletecollection", "escalate", "bind", "impersonate", "approve", "sign"}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str, str | None]]:
    out = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                for v in rule["verbs"]:
                    for n in rule.get("resourceNames") or [None]:
                        out.add((g, r, v, n))
    return out


def rbac_objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(values)["sluice/templates/rbac.yaml"]) if d]


def test_no_wildcards_and_no_dangerous_verbs(default_objects, non_default_objects):
    for objs in (default_objects, non_default_objects):
        for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role"):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert not any("*" in x for x in rule.get(field, [])), (role["metadata"]["name"], rule)
                assert not DANGEROUS_VERBS & set(rule["verbs"]), rule


def test_cluster_role_grants_exactly_what_the_operator_calls(default_objects):
    assert grants(one(default_objects, "ClusterRole")) == CLUSTER_NEEDS


def test_secret_writes_are_limited_to_the_ledger_secret(default_objects):
    writes = {g for g in grants(one(default_objects, "ClusterRole")) if g[1] == "secrets" and g[2] not in ("get", "list", "watch")}
    assert writes == {("", "secrets", v, "sluice-ledger") for v in ("create", "patch", "delete")}


def test_the_only_writes_to_the_custom_resources_themselves_are_the_finalizers(default_objects):
    writes = {(r, v) for g, r, v, _ in grants(one(default_objects, "ClusterRole")) if g == "sluice.dev" and not r.endswith("/status") and v not in ("get", "list", "watch")}
    assert writes == {("modelroutes", "patch"), ("accountlimits", "patch")}


def test_lease_role_only_with_leader_election(default_objects, non_default_objects):
    assert not by_kind(default_objects, "Role") and not by_kind(default_objects, "RoleBinding")
    role = one(non_default_objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == LEASE_NEEDS
    # Leases are not granted cluster-wide.
    assert not any(g[0] == "coordination.k8s.io" for g in grants(one(non_default_objects, "ClusterRole")))
    binding = one(non_default_objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}


def test_bindings_name_the_operators_service_account(non_default_objects):
    sa = one(non_default_objects, "ServiceAccount")["metadata"]
    pod = one(non_default_objects, "Deployment", "sluice-operator")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["name"]
    for binding in by_kind(non_default_objects, "ClusterRoleBinding") + by_kind(non_default_objects, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": NAMESPACE}]
    crb = one(non_default_objects, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == one(non_default_objects, "ClusterRole")["metadata"]["name"]


def test_all_rules_live_in_one_template():
    for values in ({}, NON_DEFAULT):
        rendered = render(values)
        for path, text in rendered.items():
            kinds = {d["kind"] for d in yaml.safe_load_all(text) if d} if not path.endswith("NOTES.txt") else set()
            if kinds & {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}:
                assert path == "sluice/templates/rbac.yaml", path
        assert len(rbac_objects(values)) == (4 if values else 2)


def test_every_rule_says_which_operator_call_needs_it():
    lines = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if re.match(r"\s*- apiGroups:", line)]
    assert len(rules) >= 10
    for i in rules:
        assert lines[i - 1].strip().startswith("#"), f"rbac.yaml line {i + 1}: rule without a comment"
