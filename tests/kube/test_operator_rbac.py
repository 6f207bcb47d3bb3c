"""RBAC as a test, not a list: the operator on the real control plane with exactly the
chart's rules, then with each rule of the chart's ClusterRole and Role removed in turn.

Each case is a scenario of its own (namespaces, Helm release, ServiceAccount): the
chart's RBAC for the operator is rendered (`operator.leaderElection.enabled=true`, so
that the Role is there too) and applied, the case's rule is removed from it (and
`kubectl auth can-i` confirms the ServiceAccount lost it), a small workload is applied
(a Secret, an Upstream using it, a ModelRoute, an ErrorBudget whose route the ledger
shows failing, so that a `BudgetExhausted` event is due), and the real `sluice-operator`
runs with a TokenRequest token of the ServiceAccount, with the chart's settings that
matter for RBAC (leader election in the release namespace, the status page).

- `test_with_exactly_the_charts_rules_the_whole_reconcile_works`: the finalizer, the
  gateway group's ConfigMap, Deployment, Service and PodDisruptionBudget, the ledger
  Secret, the three kinds' statuses, the event, the Lease; the audit log shows no
  refused call, and every rule of the chart allowed at least one of them (so removing
  any rule must show).
- `test_a_removed_rule_is_reported_naming_verb_and_resource`, once per rule: the
  operator reports the refusal where an operator looks, naming a verb and a resource of
  exactly that rule, in `sluice_operator_forbidden_total{verb,resource}` and in an
  `ERROR … permission denied: …` log line with `verb=` and `resource=` fields; it keeps
  running (no crash loop: it retries, and stops cleanly on SIGTERM); nothing else is
  reported refused; and every call the apiserver's authorizer refused (its audit log) is
  one the operator reported: none was refused silently.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import yaml

import chart
from harness import OperatorIdentity, Proc, http, operator_identity, psql, start_operator, wait_for
from sluice_testsupport.realkube import RealKube, refused_by_rbac

VALUES = {"operator": {"leaderElection": {"enabled": True}}}

WORKLOAD = """\
apiVersion: v1
kind: Secret
metadata: {name: rbac-key}
stringData: {apiKey: sk-rbac}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: up}
spec:
  protocol: openai
  baseUrl: http://127.0.0.1:9/v1
  auth: {secretRef: {name: rbac-key, key: apiKey}}
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: chat}
spec:
  model: chat
  candidates: [{upstream: up}]
---
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata: {name: chat-budget}
spec:
  routes: [chat]
  objective: "99"
  window: 1h
"""

GROUP_OBJECTS = ("configmap", "deployment", "service", "poddisruptionbudget")
#: `sluice_operator_forbidden_total{verb="list",resource="configmaps"} 3`
FORBIDDEN_METRIC = re.compile(r'^sluice_operator_forbidden_total\{verb="([^"]*)",resource="([^"]*)"\} (\d+)', re.M)
#: `sluice_operator_reconciles_total{controller="Upstream"} 2`
RECONCILES = re.compile(r'^sluice_operator_reconciles_total\{controller="(\w+)"\} [1-9]', re.M)
#: How long a case waits for the report: every rule's calls are made at start-up.
REPORT_WAIT = 30.0


# ---------------------------------------------------------------- the chart's rules


@dataclass(frozen=True)
class Rule:
    kind: str  # ClusterRole or Role
    index: int
    rule: dict

    @property
    def id(self) -> str:
        r = self.rule
        names = f"[{','.join(r['resourceNames'])}]" if r.get("resourceNames") else ""
        groups = ",".join(g or "core" for g in r["apiGroups"])
        return f"{self.kind}{self.index}-{groups}-{','.join(r['resources'])}{names}-{','.join(r['verbs'])}"

    def pairs(self) -> set[tuple[str, str]]:
        """(verb, group-qualified resource) of every check the rule allows, as the
        operator's metric names them (`deployments.apps`, `modelroutes.sluice.dev/status`)."""
        out = set()
        for g, res, v in itertools.product(self.rule["apiGroups"], self.rule["resources"], self.rule["verbs"]):
            base, _, sub = res.partition("/")
            out.add((v, base + (f".{g}" if g else "") + (f"/{sub}" if sub else "")))
        return out


def chart_rules() -> list[Rule]:
    objs = chart.render(VALUES)
    out = []
    for kind in ("ClusterRole", "Role"):
        role = next(o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(f"{chart.RELEASE}-operator"))
        out += [Rule(kind, i, r) for i, r in enumerate(role["rules"])]
    return out


RULES = chart_rules()


# ---------------------------------------------------------------- one case


@dataclass
class Case:
    kube: RealKube
    release_ns: str
    identity: OperatorIdentity
    operator: Proc
    dir: Path

    def wait(self, what: str, fn, timeout: float) -> object:
        """`wait_for`, failing with the tail of the operator's log."""
        try:
            return wait_for(what, fn, timeout=timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}\noperator log:\n{self.operator.log_text()[-4000:]}") from None

    def metrics(self) -> str:
        status, body = http("GET", f"{self.operator.url}/metrics")
        assert status == 200
        return body.decode()

    def forbidden(self) -> dict[tuple[str, str], int]:
        return {(v, r): int(n) for v, r, n in FORBIDDEN_METRIC.findall(self.metrics())}

    def settled(self) -> bool:
        """Start-up is over: the operator waits at a start-up step (CRD check, Lease),
        or its three controllers have each run a reconcile (their caches filled)."""
        if "controllers started" not in self.operator.log_text():
            return True
        ran = set(RECONCILES.findall(self.metrics()))
        return ran >= {"ModelRoute", "Upstream", "ErrorBudget"}


@pytest.fixture(scope="module")
def migrated(ledger):
    """The module's ledger schema, migrated (an account made through the gateway's admin CLI)."""
    ledger.admin("account", "create", "rbac", "--balance", "1.00")
    return ledger


@pytest.fixture
def case(new_kube, workdir, migrated):
    """`case(drop)`: a scenario with the chart's RBAC minus `drop` (a Rule, or None),
    the workload, the ledger showing its route failing, and the operator running as the
    chart's ServiceAccount."""
    made: list[Case] = []

    def make(drop: Optional[Rule]) -> Case:
        name = f"rbac-{drop.kind.lower()}{drop.index}" if drop else "rbac-all"
        kube = new_kube(name)
        d = workdir / name
        identity = operator_identity(kube, d, VALUES)
        release_ns = kube.ns("sluice-system")
        if drop:
            role = next(o for o in identity.rbac if o["kind"] == drop.kind)
            assert role["rules"][drop.index] == drop.rule
            del role["rules"][drop.index]
            kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
            # RBAC is enforced at once; confirm the ServiceAccount lost exactly this rule.
            r = drop.rule
            resource = r["resources"][0] + (f".{r['apiGroups'][0]}" if r["apiGroups"][0] else "")
            where = ["-n", release_ns if drop.kind == "Role" else kube.namespace]
            target = f"{resource}/{r['resourceNames'][0]}" if r.get("resourceNames") else resource
            wait_for(f"{identity.user} to lose {drop.id}", lambda: kube.kubectl(
                "auth", "can-i", r["verbs"][0], target, *where, f"--as={identity.user}", check=False).stdout.strip() == "no",
                timeout=10)
        kube.kubectl("apply", "-f", "-", input=WORKLOAD)
        # The route failing: 100 requests, all bad, this minute (the gateway's rollup table).
        minute = int(time.time() // 60)
        psql(migrated.url, f"INSERT INTO route_minutes (route, api, minute, total, bad) VALUES ('{kube.namespace}/chat', 'chat', {minute}, 100, 100)")
        operator = start_operator(f"{name}-operator", identity.kubeconfig, migrated.url, d, "--status-interval", "2s",
                                  "--leader-election=true", "--lease-namespace", release_ns, "--status-page=true")
        c = Case(kube, release_ns, identity, operator, d)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.operator.stop()
            c.kube.close()


def qualified(record: dict) -> str:
    """An audit record's resource as the operator's metric names it."""
    g, sub = record["api_group"], record["subresource"]
    return record["resource"] + (f".{g}" if g else "") + (f"/{sub}" if sub else "")


# ---------------------------------------------------------------- the tests


def test_with_exactly_the_charts_rules_the_whole_reconcile_works(case):
    c = case(None)
    kube = c.kube

    def reconciled():
        route = kube.get_json("modelroute", "chat")
        assert route["metadata"].get("finalizers") == ["sluice.dev/gateway-config"], route["metadata"]
        for kind in GROUP_OBJECTS:
            assert kube.get_json(kind, "sluice-gateway-default") is not None, kind
        assert kube.get_json("secret", "sluice-ledger") is not None
        assert (route.get("status") or {}).get("conditions"), route.get("status")
        up = kube.get_json("upstream", "up")
        assert (up.get("status") or {}).get("conditions"), up.get("status")
        budget = kube.get_json("errorbudget", "chat-budget")
        assert (budget.get("status") or {}).get("state") == "Exhausted", budget.get("status")
        reasons = {e["reason"] for e in kube.get_json("events.events.k8s.io")["items"]}
        assert "BudgetExhausted" in reasons, reasons
        lease = kube.get_json("lease", "sluice-operator", "-n", c.release_ns)
        assert lease and lease["spec"].get("holderIdentity"), lease
        return True
    c.wait("the whole reconcile as the chart's ServiceAccount", reconciled, timeout=60)
    assert c.forbidden() == {}, c.metrics()
    assert "permission denied" not in c.operator.log_text()

    code = c.operator.stop(timeout=15)
    assert code == 0, c.operator.log_text()[-3000:]
    records = kube.audit_records(c.identity.user)
    refused = refused_by_rbac(records)
    assert not refused, refused
    # Every rule of the chart allowed a call of this run: removing any of them must show.
    cmp = chart.compare(records, c.identity.rbac, users=True)
    (c.dir / "rbac.md").write_text(cmp.report("the operator's calls with exactly the chart's rules"))
    assert not cmp.missing, cmp.missing
    used = [g for g in cmp.grants if g not in cmp.unused]
    for rule in RULES:
        kind = "Role" if rule.kind == "Role" else "ClusterRole"
        allowed = set(itertools.product(rule.rule["apiGroups"], rule.rule["resources"], rule.rule["verbs"],
                                        rule.rule.get("resourceNames") or [""]))
        assert any(bool(g.namespace) == (kind == "Role") and (g.api_group, g.resource, g.verb, g.resource_name) in allowed
                   for g in used), f"no call of the run needed {rule.id}"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_a_removed_rule_is_reported_naming_verb_and_resource(case, rule: Rule):
    c = case(rule)
    expected = rule.pairs()

    def reported():
        seen = c.forbidden()
        assert seen, "no refusal reported yet"
        assert c.settled(), "the controllers are still starting"
        return seen
    seen = c.wait(f"sluice_operator_forbidden_total to report one of {sorted(expected)}", reported, timeout=REPORT_WAIT)
    assert set(seen) <= expected, f"refusals reported outside the removed rule {rule.id}: {sorted(set(seen) - expected)}"
    # Nothing refused silently: every call the apiserver's authorizer refused (the audit
    # log) is one the operator reported.
    def all_reported():
        refused = {(r["verb"], qualified(r)) for r in c.kube.audit_records(c.identity.user) if r["decision"] == "forbid"}
        assert refused, "the audit log shows no refusal"
        assert refused <= set(c.forbidden()), f"refused but not reported: {sorted(refused - set(c.forbidden()))}"
        return True
    c.wait("every refusal in the audit log to be reported", all_reported, timeout=10)
    log = c.operator.log_text()
    lines = [line for line in log.splitlines() if "permission denied" in line and " ERROR " in line]
    assert any(f"verb={v}" in line and f"resource={r}" in line for line in lines for v, r in seen), \
        f"no ERROR line naming the verb and resource:\n{log[-3000:]}"
    # No crash loop: the process runs on (retrying) and stops cleanly.
    assert c.operator.alive(), f"the operator exited ({c.operator.popen.returncode}):\n{log[-3000:]}"
    code = c.operator.stop(timeout=15)
    assert code == 0, f"the operator exited with {code} on SIGTERM:\n{c.operator.log_text()[-3000:]}"
