"""The Grafana dashboard ConfigMap (grafanaDashboard.*) and the tracing values (tracing.*).

Every PromQL expression of the dashboard is parsed by promtool (as a recording rule) and
may only name metrics that sluice exports: the gateway's are scraped from a real
`sluice-gateway serve` after one request through it, the operator's are read from the
names it registers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import NON_DEFAULT, REPO, by_kind, objects, one, yaml
from sluice_testsupport.chaos import start_chaos
from sluice_testsupport.paths import binary
from sluice_testsupport.procs import start

from test_monitoring import needs_promtool

DASHBOARD = REPO / "charts/sluice/dashboards/sluice.json"

# Grafana's variables, replaced by what they stand for before promtool sees an expression.
VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "$objective": "99.9",
    "$namespace": ".*",
    "$route": ".*",
    "$upstream": ".*",
}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def expressions() -> list[str]:
    """Every PromQL expression: panel targets (rows' nested panels too) and the queries
    of the template variables (`label_values(EXPR, label)` contributes its EXPR)."""
    found: list[str] = []

    def panels(ps: list[dict[str, Any]]) -> None:
        for p in ps:
            found.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            panels(p.get("panels", []))

    panels(dashboard()["panels"])
    for v in dashboard()["templating"]["list"]:
        if v.get("type") == "query":
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", query.strip())
            assert m, f"variable {v['name']}: {query!r} is not label_values(EXPR, label)"
            found.append(m.group(1))
    return found


def substituted(expr: str) -> str:
    for var, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return expr


KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers left once string literals,
    label matchers, ranges, grouping clauses, function calls and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[m.end():].lstrip().startswith("(") or m.group(0) in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


# ---------------------------------------------------------------- the ConfigMap


def test_dashboard_configmap_only_when_enabled(default_objects):
    assert not [o for o in by_kind(default_objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


def test_dashboard_configmap_carries_the_json_and_the_sidecar_label(non_default_objects):
    cm = one(non_default_objects, "ConfigMap", "sluice-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "sluice"}
    assert json.loads(cm["data"]["sluice.json"]) == dashboard()


def test_dashboard_namespace_can_be_where_the_sidecar_looks():
    cm = one(objects({"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}), "ConfigMap", "sluice-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert "annotations" not in cm["metadata"]


def test_dashboard_shows_what_operators_ask_first():
    titles = {p["title"] for p in dashboard()["panels"]}
    for want in ("Availability per route", "Error budget remaining (30 days)", "Failovers by reason", "Attempts by outcome per upstream",
                 "Time to first byte", "Circuit state", "Tokens", "Spend", "Reservations open"):
        assert want in titles
    assert dashboard()["uid"] == "sluice-gateway"


GRANT_ENV = [
    {"name": "SLUICE_GRANT_VALIDITY", "value": "30s"},
    {"name": "SLUICE_GRANT_MAX", "value": "10"},
    {"name": "SLUICE_SETTLE_WINDOW", "value": "2ms"},
]


def test_tracing_is_off_by_default_and_sets_no_environment(default_objects):
    env = {e["name"]: e.get("value") for e in one(default_objects, "Deployment", "sluice-operator")["spec"]["template"]["spec"]["containers"][0]["env"]}
    # Only gateway.billing's grant flags (gateway.auth=keys by default), no OTEL_*.
    assert json.loads(env["SLUICE_GATEWAY_ENV"]) == GRANT_ENV


def test_tracing_alone_makes_the_gateway_environment():
    d = one(objects({"tracing": {"otlpEndpoint": "http://otel:4318"}}), "Deployment", "sluice-operator")
    env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["SLUICE_GATEWAY_ENV"]) == GRANT_ENV + [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4318"},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1.0"},
        {"name": "OTEL_SERVICE_NAME", "value": "sluice-gateway"},
    ]


# ---------------------------------------------------------------- PromQL


def test_metric_names_are_read_out_of_expressions():
    expr = 'histogram_quantile(0.95, sum by (le, route) (rate(sluice_x_bucket{route=~"a|b"}[5m]))) / on (route) group_left sluice_y * 1e9'
    assert metric_names(expr) == {"sluice_x_bucket", "sluice_y"}


def test_every_dashboard_expression_parses(tmp_path):
    promtool = needs_promtool()
    exprs = expressions()
    assert len(exprs) >= 15
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:expr_{i}", "expr": substituted(e)} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def scraped_gateway_names(tmp_path: Path) -> set[str]:
    """Metric names of a real gateway's /metrics after one request through it that
    failed over (so that the failover and attempt families have samples too)."""
    exe = binary("sluice-gateway")
    if not exe.exists():
        message = f"{exe} is not built (cargo build -p sluice-gateway)"
        if os.environ.get("CI"):
            pytest.fail(message + " and CI is set")
        pytest.skip(message)
    primary = start_chaos("dashboard-primary", tmp_path, exe)
    backup = start_chaos("dashboard-backup", tmp_path, exe)
    primary.script(status=503)
    upstream = lambda name, c: {  # noqa: E731
        "apiVersion": "sluice.dev/v1alpha1", "kind": "Upstream", "metadata": {"name": name},
        "spec": {"protocol": "openai", "baseUrl": f"{c.url}/v1"},
    }
    candidates = [{"upstream": "primary", "weight": 100}, {"upstream": "backup", "weight": 50}]
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all([
        upstream("primary", primary),
        upstream("backup", backup),
        {"apiVersion": "sluice.dev/v1alpha1", "kind": "ModelRoute", "metadata": {"name": "chat"}, "spec": {"model": "chat-model", "candidates": candidates}},
    ]))
    gw = start("gateway-dashboard", [str(exe), "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0", "--auth", "none",
                                     "--ledger", f"sqlite://{tmp_path / 'ledger.db'}"], tmp_path)
    try:
        body = json.dumps({"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
        req = urllib.request.Request(f"{gw.url}/v1/chat/completions", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
            assert r.headers["x-sluice-failover"] == "http_5xx"
        with urllib.request.urlopen(f"{gw.url}/metrics", timeout=30) as r:
            text = r.read().decode()
    finally:
        gw.stop()
        primary.proc.stop()
        backup.proc.stop()
    names: set[str] = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = m.groups()
        names |= {"counter": {f"{name}_total"}, "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count"}}.get(kind, {name})
    names |= {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}
    assert "sluice_requests_total" in names, text[:2000]
    return names


def operator_names() -> set[str]:
    """What the operator registers (prefix sluice_operator), with each kind's suffixes."""
    source = (REPO / "operator/src/metrics.rs").read_text()
    base = {f"sluice_operator_{n}" for n in re.findall(r'registry\.register\(\s*"(\w+)"', source)}
    assert base, "no registrations found in operator/src/metrics.rs"
    return {b + s for b in base for s in ("", "_total", "_bucket", "_sum", "_count")}


def test_every_dashboard_metric_is_exported(tmp_path):
    exported = scraped_gateway_names(tmp_path) | operator_names()
    used = set().union(*(metric_names(substituted(e)) for e in expressions()))
    assert used, "no metric found in the dashboard"
    assert used <= exported, f"not exported by the gateway or the operator: {sorted(used - exported)}"
