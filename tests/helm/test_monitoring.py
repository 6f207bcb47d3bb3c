"""ServiceMonitor and PrometheusRule are prometheus-operator CRD kinds, which
kubernetes-validate has no schema for: their structure is checked here, and the alert
rules are run through promtool (check + unit tests on synthetic series)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import NON_DEFAULT, by_kind, one, objects, yaml


def rule_groups(values: dict[str, Any]) -> list[dict[str, Any]]:
    return one(objects(values), "PrometheusRule")["spec"]["groups"]


def test_service_monitors_select_the_operator_and_every_gateway(non_default_objects):
    op = one(non_default_objects, "ServiceMonitor", "sluice-operator")
    assert op["apiVersion"] == "monitoring.coreos.com/v1"
    svc = one(non_default_objects, "Service", "sluice-operator")
    assert op["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert op["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    gw = one(non_default_objects, "ServiceMonitor", "sluice-gateways")
    assert gw["spec"]["namespaceSelector"] == {"any": True}
    # The labels the operator puts on every gateway object (docs/design.md §7).
    assert gw["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sluice-gateway",
        "app.kubernetes.io/managed-by": "sluice-operator",
    }
    # The gateway Service's port is named `http` (80 → the pods' 8080, which serves /metrics).
    assert gw["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]


def test_monitoring_objects_only_when_enabled(default_objects):
    assert not by_kind(default_objects, "ServiceMonitor")
    assert not by_kind(default_objects, "PrometheusRule")


def test_prometheus_rule_structure():
    rule = one(objects(NON_DEFAULT), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == ["sluice-slo.rules", "sluice-slo.alerts", "sluice-gateway.alerts", "sluice-operator.alerts"]
    for g in groups:
        assert set(g) == {"name", "rules"}
        for r in g["rules"]:
            assert ("record" in r) != ("alert" in r), r
            assert isinstance(r["expr"], str) and r["expr"].strip()
            assert set(r) <= {"record", "alert", "expr", "for", "labels", "annotations"}
            for k, v in {**r.get("labels", {}), **r.get("annotations", {})}.items():
                assert isinstance(v, str), (k, v)
            if "alert" in r:
                assert r["labels"]["severity"] in ("page", "ticket")
                # Every alert links its runbook in docs/operate.md (test_docs checks the anchors).
                url = r["annotations"]["runbook_url"]
                assert url.startswith("https://github.com/sluice-dev/sluice/blob/main/docs/operate.md#"), (r["alert"], url)
                assert url.split("#")[1] in r["annotations"]["description"], (r["alert"], url)


def test_burn_rate_alerts_use_the_sre_workbook_tiers_and_the_objective():
    alerts = {r["alert"]: r for r in rule_groups(NON_DEFAULT)[1]["rules"]}
    # objective 99.95 → budget 0.0005
    tiers = {"SluiceErrorBudgetBurn1h": ("1h", "5m", "14.4", "page"), "SluiceErrorBudgetBurn6h": ("6h", "30m", "6", "page"), "SluiceErrorBudgetBurn3d": ("3d", "6h", "1", "ticket")}
    assert set(alerts) == set(tiers)
    for name, (long, short, rate, severity) in tiers.items():
        expr = " ".join(alerts[name]["expr"].split())
        assert expr == (
            f"sluice_route:error_ratio:rate{long} > ({rate} * 0.0005) and sluice_route:error_ratio:rate{short} > ({rate} * 0.0005)"
        )
        assert alerts[name]["labels"] == {"severity": severity, "long_window": long, "short_window": short}


def test_the_operator_forbidden_alert_waits_out_an_apiserver_restart():
    alerts = {r["alert"]: r for r in rule_groups(NON_DEFAULT)[3]["rules"]}
    assert set(alerts) == {"SluiceOperatorForbidden"}
    alert = alerts["SluiceOperatorForbidden"]
    assert " ".join(alert["expr"].split()) == (
        "sum by (namespace, verb, resource) (increase(sluice_operator_forbidden_total[5m])) > 0"
    )
    # `for` twice the window: one burst of refusals holds the expression for about one window.
    assert alert["for"] == "10m"
    assert alert["labels"] == {"severity": "ticket"}


def test_error_ratio_counts_5xx_and_429_and_leaves_client_errors_out():
    records = {r["record"]: " ".join(r["expr"].split()) for r in rule_groups(NON_DEFAULT)[0]["rules"]}
    assert set(records) == {f"sluice_route:error_ratio:rate{w}" for w in ("5m", "30m", "1h", "6h", "3d")}
    assert records["sluice_route:error_ratio:rate1h"] == (
        'sum by (namespace, route) (rate(sluice_requests_total{code=~"5..|429"}[1h]))'
        " / "
        'sum by (namespace, route) (rate(sluice_requests_total{code=~"[1-35]..|429"}[1h]))'
    )


# ---------------------------------------------------------------- promtool

PROMTOOL = shutil.which("promtool")


def needs_promtool() -> str:
    if PROMTOOL:
        return PROMTOOL
    message = "promtool is not installed (Debian package prometheus; tests/helm/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message + " and CI is set")
    pytest.skip(message)


def write_rules(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups(values)}, sort_keys=False))
    return path


def test_promtool_accepts_the_rules(tmp_path):
    promtool = needs_promtool()
    rules = write_rules(tmp_path, NON_DEFAULT)
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# Per minute, for 2 hours, on route chat in namespace team-a (objective 99.9%, budget 0.1%):
#   - `burning`: 1000 OK + 30 × 503 + 10 × 429 → 3.9% bad, 39× the budget: both page
#     tiers fire once their long windows fill (the 6h one needs > 0.6%, reached already);
#   - `clients`: 1000 OK + 500 × 400/401/404 + 1 × 500 → 0.1% bad: client errors must not
#     count, so nothing fires (counting them would make it 33%).
PROMTOOL_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'sluice_requests_total{namespace="team-a", route="chat", code="200"}'
        values: '0+1000x120'
      - series: 'sluice_requests_total{namespace="team-a", route="chat", code="503"}'
        values: '0+30x120'
      - series: 'sluice_requests_total{namespace="team-a", route="chat", code="429"}'
        values: '0+10x120'
      - series: 'sluice_requests_total{namespace="team-b", route="clients", code="200"}'
        values: '0+1000x120'
      - series: 'sluice_requests_total{namespace="team-b", route="clients", code="400"}'
        values: '0+300x120'
      - series: 'sluice_requests_total{namespace="team-b", route="clients", code="401"}'
        values: '0+100x120'
      - series: 'sluice_requests_total{namespace="team-b", route="clients", code="404"}'
        values: '0+100x120'
      - series: 'sluice_requests_total{namespace="team-b", route="clients", code="500"}'
        values: '0+1x120'
    promql_expr_test:
      - expr: round(sluice_route:error_ratio:rate1h, 0.0001)
        eval_time: 90m
        exp_samples:
          - labels: '{namespace="team-a", route="chat"}'
            value: 0.0385
          - labels: '{namespace="team-b", route="clients"}'
            value: 0.001
    alert_rule_test:
      - eval_time: 90m
        alertname: SluiceErrorBudgetBurn1h
        exp_alerts:
          - exp_labels: {severity: page, long_window: 1h, short_window: 5m, namespace: team-a, route: chat}
            exp_annotations:
              summary: "Route team-a/chat burns its error budget 14.4× too fast"
              description: "Over the last 1h and 5m more than 14.4 × 0.001 of the route's requests were answered with 5xx or 429 (objective 99.9%). Runbook: docs/operate.md#budget-burning"
              runbook_url: "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md#budget-burning"
      - eval_time: 90m
        alertname: SluiceErrorBudgetBurn6h
        exp_alerts:
          - exp_labels: {severity: page, long_window: 6h, short_window: 30m, namespace: team-a, route: chat}
            exp_annotations:
              summary: "Route team-a/chat burns its error budget 6× too fast"
              description: "Over the last 6h and 30m more than 6 × 0.001 of the route's requests were answered with 5xx or 429 (objective 99.9%). Runbook: docs/operate.md#budget-burning"
              runbook_url: "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md#budget-burning"
      - eval_time: 90m
        alertname: SluiceConfigRejected
        exp_alerts: []
"""

# A short outage must not page on its own: 10 minutes of 50% errors after an hour of
# clean traffic is 8% over 1h (> 1.44% → page) but the 5m window has recovered by 30m.
PROMTOOL_RECOVERY = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'sluice_requests_total{namespace="n", route="r", code="200"}'
        values: '0+1000x60 60500+500x9 66000+1000x29'
      - series: 'sluice_requests_total{namespace="n", route="r", code="503"}'
        values: '0+0x60 500+500x9 5000+0x29'
    alert_rule_test:
      - eval_time: 65m
        alertname: SluiceErrorBudgetBurn1h
        exp_alerts:
          - exp_labels: {severity: page, long_window: 1h, short_window: 5m, namespace: n, route: r}
            exp_annotations:
              summary: "Route n/r burns its error budget 14.4× too fast"
              description: "Over the last 1h and 5m more than 14.4 × 0.001 of the route's requests were answered with 5xx or 429 (objective 99.9%). Runbook: docs/operate.md#budget-burning"
              runbook_url: "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md#budget-burning"
      - eval_time: 90m
        alertname: SluiceErrorBudgetBurn1h
        exp_alerts: []
"""


# The operator's refusals, scraped every 30 s as its ServiceMonitor does, for 40 minutes:
#   - `get leases`: a missing rule, refused at every retry on both replicas: one alert
#     (summed over the pods), firing once the 5-minute increase has been above 0 for 10m;
#   - `patch modelroutes/status`: refused twice before, then 3 times within a second by a
#     kube-apiserver restarted at 10m: it never fires;
#   - `list configmaps`: first refused by that restart (a new series): it never fires.
FORBIDDEN_ALERT = """
          - exp_labels: {severity: ticket, namespace: sluice-system, verb: get, resource: leases.coordination.k8s.io}
            exp_annotations:
              summary: "The sluice operator in sluice-system may not get leases.coordination.k8s.io"
              description: "The API server has refused this call of the operator at least once in every 5 minutes for 10 minutes: its ClusterRole (or Role) lacks the rule, so what the call would read or write is left undone. A short burst of refusals, as a restarted kube-apiserver gives for about a second while its authorization caches fill, does not fire. Runbook: docs/operate.md#operator-permission-denied"
              runbook_url: "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md#operator-permission-denied"
""".strip("\n")
PROMTOOL_FORBIDDEN = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 30s
    input_series:
      - series: 'sluice_operator_forbidden_total{namespace="sluice-system", pod="op-a", verb="get", resource="leases.coordination.k8s.io"}'
        values: '1+1x80'
      - series: 'sluice_operator_forbidden_total{namespace="sluice-system", pod="op-b", verb="get", resource="leases.coordination.k8s.io"}'
        values: '1+1x80'
      - series: 'sluice_operator_forbidden_total{namespace="sluice-system", pod="op-a", verb="patch", resource="modelroutes.sluice.dev/status"}'
        values: '2x19 5x60'
      - series: 'sluice_operator_forbidden_total{namespace="sluice-system", pod="op-a", verb="list", resource="configmaps"}'
        values: '_x20 3x60'
    alert_rule_test:
      - eval_time: 10m
        alertname: SluiceOperatorForbidden
        exp_alerts: []
      - eval_time: 12m
        alertname: SluiceOperatorForbidden
        exp_alerts:
ALERT
      - eval_time: 21m
        alertname: SluiceOperatorForbidden
        exp_alerts:
ALERT
      - eval_time: 40m
        alertname: SluiceOperatorForbidden
        exp_alerts:
ALERT
""".replace("ALERT", FORBIDDEN_ALERT)


@pytest.mark.parametrize(
    "tests",
    [PROMTOOL_TESTS, PROMTOOL_RECOVERY, PROMTOOL_FORBIDDEN],
    ids=["burning-vs-client-errors", "recovery", "operator-forbidden"],
)
def test_promtool_unit_tests_of_the_alerts(tmp_path, tests):
    promtool = needs_promtool()
    values = {**NON_DEFAULT, "prometheusRule": {"enabled": True, "objective": "99.9"}}
    write_rules(tmp_path, values)
    (tmp_path / "tests.yaml").write_text(textwrap.dedent(tests))
    result = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
