"""values.yaml keeps the §7a contract, values.schema.json refuses unknown keys at every
level, and `helm lint` is clean."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import CHART, NON_DEFAULT, OPAQUE, helm, leaf_keys, load_values, render

# docs/design.md §7a, plus the keys this chart adds (docs/install.md marks them "added").
CONTRACT_KEYS = {
    "ledger.url",
    "ledger.existingSecret",
    "ledger.postgres.enabled",
    "operator.leaderElection.enabled",
    "operator.replicas",
    "gateway.replicas",
    "gateway.resources",
    "gateway.auth",
    "image.registry",
    "image.tag",
    "serviceMonitor.enabled",
    "prometheusRule.enabled",
    "networkPolicy.enabled",
}
ADDED_KEYS = {
    "ledger.postgres.image",
    "ledger.postgres.storage",
    "ledger.postgres.storageClassName",
    "ledger.postgres.resources",
    "operator.resources",
    "image.pullPolicy",
    "prometheusRule.objective",
    "gateway.env",
    "gateway.billing.grantValidity",
    "gateway.billing.grantMax",
    "gateway.billing.settleWindow",
    "cache.maxBytes",
    "cache.redis.url",
    "cache.redis.existingSecret",
    "cache.redis.existingSecretKey",
    "grafanaDashboard.enabled",
    "grafanaDashboard.namespace",
    "grafanaDashboard.folder",
    "tracing.otlpEndpoint",
    "tracing.protocol",
    "tracing.sampler",
    "tracing.samplerArg",
    "tracing.serviceName",
    "tracing.captureContent",
    "statusPage.enabled",
    "statusPage.ingress.enabled",
    "statusPage.ingress.host",
    "statusPage.ingress.className",
    "statusPage.ingress.annotations",
    "statusPage.ingress.tls",
    "runbooksUrl",
}
def load_schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def test_values_yaml_has_exactly_the_contract_keys_and_the_documented_additions():
    assert leaf_keys(load_values()) == CONTRACT_KEYS | ADDED_KEYS


def test_contract_defaults():
    v = load_values()
    assert v["ledger"]["postgres"]["enabled"] is True
    assert v["ledger"]["url"] == "" and v["ledger"]["existingSecret"] == ""
    assert v["operator"]["leaderElection"]["enabled"] is False
    assert v["operator"]["replicas"] == 1
    assert v["gateway"]["auth"] == "keys"
    assert v["gateway"]["replicas"] == 2
    assert v["serviceMonitor"]["enabled"] is False
    assert v["prometheusRule"]["enabled"] is False
    assert v["networkPolicy"]["enabled"] is False


def schema_objects(node: Any, schema: dict[str, Any], path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    """Every object schema reachable from `node`, with $refs followed."""
    if isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"].removeprefix("#/").split("/")
        target: Any = schema
        for part in ref:
            target = target[part]
        return schema_objects(target, schema, path)
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append((path, node))
        for key in ("properties",):
            for name, sub in node.get(key, {}).items():
                found += schema_objects(sub, schema, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            found += schema_objects(node["additionalProperties"], schema, f"{path}.*")
        for key in ("anyOf", "oneOf", "allOf"):
            for i, sub in enumerate(node.get(key, [])):
                found += schema_objects(sub, schema, f"{path}<{key}{i}>")
    return found


def test_schema_refuses_unknown_keys_at_every_object_level():
    schema = load_schema()
    objs = schema_objects(schema, schema)
    assert len(objs) >= 10
    for path, node in objs:
        if "properties" in node:
            # A key object: anything not listed is a typo.
            assert node.get("additionalProperties") is False, f"{path} accepts unknown keys"
        else:
            # The only open maps are resource names → quantities (limits, requests).
            assert isinstance(node.get("additionalProperties"), dict) and "propertyNames" in node, f"{path} is an unconstrained object"


def test_every_value_key_is_described_by_the_schema():
    schema = load_schema()

    def walk(values: dict[str, Any], node: dict[str, Any], path: str) -> None:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].split("/")[-1]]
        for k, v in values.items():
            assert k in node.get("properties", {}), f"{path}{k} is not in values.schema.json"
            if isinstance(v, dict) and f"{path}{k}" not in OPAQUE:
                walk(v, node["properties"][k], f"{path}{k}.")

    walk(load_values(), schema, "")


@pytest.mark.parametrize(
    "values, where",
    [
        ({"gatway": {"replicas": 3}}, "'gatway' not allowed"),
        ({"gateway": {"replica": 3}}, "'replica' not allowed"),
        ({"ledger": {"postgres": {"enable": False}}}, "'enable' not allowed"),
        ({"operator": {"leaderElection": {"enable": True}}}, "'enable' not allowed"),
        ({"serviceMonitor": {"enabled": True, "interval": "10s"}}, "'interval' not allowed"),
        ({"gateway": {"resources": {"limit": {"cpu": "1"}}}}, "'limit' not allowed"),
        ({"image": {"repository": "x"}}, "'repository' not allowed"),
        ({"tracing": {"endpoint": "http://c:4318"}}, "'endpoint' not allowed"),
        ({"grafanaDashboard": {"enabled": True, "label": "x"}}, "'label' not allowed"),
        ({"statusPage": {"ingress": {"hosts": ["a"]}}}, "'hosts' not allowed"),
    ],
)
def test_schema_refuses_an_unknown_values_key(values, where):
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError, match=where):
            chart.validate_schema(values)
        # `helm install/template` run the same check before rendering anything.
        with pytest.raises(helm.HelmValuesError, match=where):
            chart.render(values, name="sluice", namespace="sluice-system")


@pytest.mark.parametrize(
    "values, where",
    [
        ({"gateway": {"auth": "basic"}}, "/gateway/auth"),
        ({"gateway": {"replicas": 0}}, "/gateway/replicas"),
        ({"gateway": {"replicas": "2"}}, "/gateway/replicas"),
        ({"operator": {"replicas": 0}}, "/operator/replicas"),
        ({"ledger": {"url": "sqlite:///var/lib/sluice.db", "postgres": {"enabled": False}}}, "/ledger/url"),
        ({"ledger": {"existingSecret": "Not_A_Name"}}, "/ledger/existingSecret"),
        ({"image": {"registry": "ghcr.io/sluice-dev/"}}, "/image/registry"),
        ({"image": {"tag": 1.2}}, "/image/tag"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"gateway": {"resources": {"limits": {"memory": "lots"}}}}, "/gateway/resources/limits/memory"),
        ({"prometheusRule": {"objective": "100"}}, "/prometheusRule/objective"),
        ({"prometheusRule": {"objective": 99.9}}, "/prometheusRule/objective"),
        ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
        ({"gateway": {"env": [{"value": "x"}]}}, "/gateway/env/0"),
        ({"gateway": {"env": [{"name": "POD_NAME", "value": "x"}]}}, "/gateway/env/0/name"),
        ({"gateway": {"env": {"HTTPS_PROXY": "x"}}}, "/gateway/env"),
        ({"tracing": {"otlpEndpoint": "otel-collector:4317"}}, "/tracing/otlpEndpoint"),
        ({"tracing": {"protocol": "http/json"}}, "/tracing/protocol"),
        ({"tracing": {"sampler": "jaeger_remote"}}, "/tracing/sampler"),
        ({"tracing": {"samplerArg": "2"}}, "/tracing/samplerArg"),
        ({"tracing": {"samplerArg": 0.5}}, "/tracing/samplerArg"),
        ({"grafanaDashboard": {"enabled": "yes"}}, "/grafanaDashboard/enabled"),
    ],
)
def test_schema_refuses_invalid_values(values, where):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.validate_schema(values)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"ledger": {"url": "postgres://a@b/c", "existingSecret": "x", "postgres": {"enabled": False}}}, "both set"),
        ({"ledger": {"existingSecret": "ledger-rds"}}, "ledger.postgres.enabled=false"),
        ({"ledger": {"url": "postgres://a@b/c"}}, "ledger.postgres.enabled=false"),
        ({"ledger": {"postgres": {"enabled": False}}}, "no ledger"),
        ({"ledger": {"existingSecret": "sluice-ledger", "postgres": {"enabled": False}}}, "must not be named sluice-ledger"),
        ({"operator": {"replicas": 3}}, "leaderElection.enabled=true"),
        ({"statusPage": {"enabled": False, "ingress": {"enabled": True}}}, "statusPage.enabled=true"),
    ],
)
def test_contradictory_values_fail_with_a_message_naming_the_fix(values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["default", "non-default"])
def test_helm_lint_is_clean(values):
    report = helm.lint(CHART, values, strict=True, namespace="sluice-system", kube_version="v1.33.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


def test_helm_lint_reports_an_unknown_key():
    report = helm.lint(CHART, {"gateway": {"replica": 3}})
    assert any("'replica' not allowed" in e for e in report["errors"]), report
