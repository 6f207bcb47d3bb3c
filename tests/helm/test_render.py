"""The chart renders the objects docs/design.md §7/§7a promise, with default and non-default
values, and every built-in object is valid for the Kubernetes versions we support."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import NAMESPACE, NON_DEFAULT, by_kind, env_of, objects, one, render, require

kv = require("kubernetes_validate")

# The oldest version the operator's client (kube 5) supports, and the newest schemas
# kubernetes-validate ships.
KUBE_VERSIONS = ["1.33.0", "1.37.0"]

# prometheus-operator kinds: not in the Kubernetes OpenAPI, so kubernetes-validate has
# no schema for them; test_monitoring.py checks their structure instead.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The status page with every Ingress option (docs/install.md, statusPage.*).
STATUS_PAGE: dict[str, Any] = {
    "statusPage": {
        "enabled": True,
        "ingress": {
            "enabled": True,
            "host": "status.example.com",
            "className": "nginx",
            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
            "tls": [{"hosts": ["status.example.com"], "secretName": "status-tls"}],
        },
    },
    "runbooksUrl": "https://docs.example.com/sluice/operate.html",
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "status-page": STATUS_PAGE,
    "non-default": NON_DEFAULT,
    "ledger-url": {"ledger": {"url": "postgres://sluice:pw@db.example.com:5432/sluice?sslmode=require", "postgres": {"enabled": False}}},
    "bundled-postgres-with-policies": {"networkPolicy": {"enabled": True}, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    # null removes a default (here: the operator's own default for gateway resources).
    "bare-images": {"image": {"registry": "", "tag": "dev"}, "gateway": {"resources": None}, "operator": {"resources": None}},
}


def names(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_default_values_render_operator_rbac_and_bundled_postgres(default_objects):
    assert names(default_objects) == {
        ("Deployment", "sluice-operator"),
        ("ServiceAccount", "sluice-operator"),
        ("ClusterRole", "sluice-operator"),
        ("ClusterRoleBinding", "sluice-operator"),
        ("Service", "sluice-operator"),
        ("Service", "sluice-operator-status"),
        ("Secret", "sluice-postgres"),
        ("Service", "sluice-postgres"),
        ("StatefulSet", "sluice-postgres"),
    }


def test_non_default_values_render_election_monitoring_and_policies(non_default_objects):
    assert names(non_default_objects) == {
        ("Deployment", "sluice-operator"),
        ("ServiceAccount", "sluice-operator"),
        ("ClusterRole", "sluice-operator"),
        ("ClusterRoleBinding", "sluice-operator"),
        ("Role", "sluice-operator-leader-election"),
        ("RoleBinding", "sluice-operator-leader-election"),
        ("Service", "sluice-operator"),
        ("Service", "sluice-operator-status"),
        ("ServiceMonitor", "sluice-operator"),
        ("ServiceMonitor", "sluice-gateways"),
        ("PrometheusRule", "sluice"),
        ("NetworkPolicy", "sluice-operator"),
        ("NetworkPolicy", "sluice-gateways"),
        ("ConfigMap", "sluice-dashboard"),
    }


def test_namespaced_objects_are_in_the_release_namespace(non_default_objects, default_objects):
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    for o in non_default_objects + default_objects:
        if o["kind"] in cluster_scoped:
            assert "namespace" not in o["metadata"]
        else:
            assert o["metadata"]["namespace"] == NAMESPACE, (o["kind"], o["metadata"]["name"])


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", sorted(VALUE_SETS))
def test_every_builtin_object_validates_against_the_kubernetes_schema(case, version):
    validated = 0
    for o in objects(VALUE_SETS[case]):
        if o["kind"] in CRD_KINDS:
            continue
        try:
            # strict: the schemas refuse unknown fields, so a misspelt field fails here.
            kv.validate(o, version, strict=True)
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{o['kind']}/{o['metadata']['name']} is invalid for Kubernetes {version}: {path}: {e.message}")
        validated += 1
    assert validated >= 6


def operator(objs: list[dict[str, Any]], name: str = "sluice-operator") -> dict[str, Any]:
    return one(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


def test_operator_env_follows_the_cli_contract_with_defaults(default_objects):
    env = env_of(operator(default_objects))
    assert env["SLUICE_LEDGER_URL"] == {"secretKeyRef": {"name": "sluice-postgres", "key": "url"}}
    assert env["SLUICE_GATEWAY_IMAGE"] == "ghcr.io/sluice-dev/sluice-gateway:0.1.0"
    assert env["SLUICE_GATEWAY_REPLICAS"] == "2"
    assert env["SLUICE_GATEWAY_AUTH"] == "keys"
    assert json.loads(env["SLUICE_GATEWAY_RESOURCES"]) == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert env["SLUICE_LEADER_ELECTION"] == "false"
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SLUICE_OPERATOR_LISTEN"] == "0.0.0.0:8080"
    # Only the operator's own variables: a typo'd name would be silently ignored by clap.
    assert set(env) == {
        "SLUICE_LEDGER_URL", "SLUICE_GATEWAY_IMAGE", "SLUICE_GATEWAY_REPLICAS", "SLUICE_GATEWAY_AUTH",
        "SLUICE_GATEWAY_RESOURCES", "SLUICE_LEADER_ELECTION", "POD_NAMESPACE", "POD_NAME", "SLUICE_OPERATOR_LISTEN",
        "SLUICE_STATUS_PAGE", "SLUICE_RUNBOOKS_URL", "SLUICE_GATEWAY_ENV",
    }
    # gateway.billing's grant flags, for every gateway (auth is keys by default).
    assert [e["name"] for e in json.loads(env["SLUICE_GATEWAY_ENV"])] == [
        "SLUICE_GRANT_VALIDITY", "SLUICE_GRANT_MAX", "SLUICE_SETTLE_WINDOW",
    ]
    assert env["SLUICE_STATUS_PAGE"] == "true"
    assert env["SLUICE_RUNBOOKS_URL"] == "https://github.com/sluice-dev/sluice/blob/main/docs/operate.md"
    assert operator(default_objects)["image"] == "ghcr.io/sluice-dev/sluice-operator:0.1.0"


def test_operator_env_follows_non_default_values(non_default_objects):
    c = operator(non_default_objects)
    env = env_of(c)
    assert env["SLUICE_LEDGER_URL"] == {"secretKeyRef": {"name": "ledger-rds", "key": "url"}}
    assert env["SLUICE_GATEWAY_IMAGE"] == "registry.example.com/platform/sluice-gateway:1.2.3"
    assert env["SLUICE_GATEWAY_REPLICAS"] == "4"
    assert env["SLUICE_GATEWAY_AUTH"] == "none"
    assert json.loads(env["SLUICE_GATEWAY_RESOURCES"]) == NON_DEFAULT["gateway"]["resources"]
    # gateway.env, the cache flags of cache.*, then the OTEL_* environment that tracing.*
    # turns into (no grant flags: auth is none there).
    assert json.loads(env["SLUICE_GATEWAY_ENV"]) == NON_DEFAULT["gateway"]["env"] + [
        {"name": "SLUICE_CACHE_MAX_BYTES", "value": "268435456"},
        {"name": "SLUICE_CACHE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "redis-cache", "key": "uri"}}},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
        {"name": "OTEL_SERVICE_NAME", "value": "sluice-prod"},
        {"name": "SLUICE_TRACE_CONTENT", "value": "true"},
    ]
    assert env["SLUICE_LEADER_ELECTION"] == "true"
    assert c["image"] == "registry.example.com/platform/sluice-operator:1.2.3"
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == NON_DEFAULT["operator"]["resources"]
    d = one(non_default_objects, "Deployment", "sluice-operator")
    assert d["spec"]["replicas"] == 2
    # With election a rolling update is safe: the new pod waits for the Lease.
    assert "strategy" not in d["spec"]


def test_operator_without_election_is_replaced_not_rolled(default_objects):
    d = one(default_objects, "Deployment", "sluice-operator")
    assert d["spec"]["replicas"] == 1
    assert d["spec"]["strategy"] == {"type": "Recreate"}


def test_empty_gateway_resources_leave_the_operator_default():
    env = env_of(operator(objects(VALUE_SETS["bare-images"])))
    assert "SLUICE_GATEWAY_RESOURCES" not in env
    assert env["SLUICE_GATEWAY_IMAGE"] == "sluice-gateway:dev"


def test_ledger_url_is_written_into_the_charts_own_secret():
    objs = objects(VALUE_SETS["ledger-url"])
    secret = one(objs, "Secret")
    # Not `sluice-ledger`: that name belongs to the operator in every gateway namespace.
    assert secret["metadata"]["name"] == "sluice-operator-ledger"
    assert secret["stringData"] == {"url": VALUE_SETS["ledger-url"]["ledger"]["url"]}
    env = env_of(operator(objs))
    assert env["SLUICE_LEDGER_URL"] == {"secretKeyRef": {"name": "sluice-operator-ledger", "key": "url"}}
    assert not by_kind(objs, "StatefulSet")


def test_existing_secret_is_referenced_not_created(non_default_objects):
    assert not by_kind(non_default_objects, "Secret")
    assert not by_kind(non_default_objects, "StatefulSet")


def test_bundled_postgres_has_a_volume_a_service_and_a_generated_password(default_objects):
    sts = one(default_objects, "StatefulSet", "sluice-postgres")
    assert sts["spec"]["replicas"] == 1
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "data", "mountPath": "/var/lib/postgresql/data"} in container["volumeMounts"]
    secret = one(default_objects, "Secret", "sluice-postgres")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    import base64

    password = base64.b64decode(secret["data"]["password"]).decode()
    url = base64.b64decode(secret["data"]["url"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)
    # Namespace-qualified, so gateways in other namespaces reach it.
    assert url == f"postgres://sluice:{password}@sluice-postgres.{NAMESPACE}.svc:5432/sluice"
    env = env_of(container)
    assert env["POSTGRES_PASSWORD"] == {"secretKeyRef": {"name": "sluice-postgres", "key": "password"}}
    svc = one(default_objects, "Service", "sluice-postgres")
    assert svc["spec"]["ports"] == [{"name": "postgres", "port": 5432, "targetPort": "postgres", "protocol": "TCP"}]


def test_postgres_size_and_class_follow_values():
    objs = objects({"ledger": {"postgres": {"storage": "50Gi", "storageClassName": "fast-ssd"}}})
    claim = one(objs, "StatefulSet")["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast-ssd"
    assert claim["resources"]["requests"]["storage"] == "50Gi"


def all_pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in objs if o["kind"] in ("Deployment", "StatefulSet")]


@pytest.mark.parametrize("case", ["default", "non-default"])
def test_every_container_meets_the_restricted_pod_security_standard(case):
    specs = all_pod_specs(objects(VALUE_SETS[case]))
    assert specs
    for name, spec in specs:
        pod = spec.get("securityContext", {})
        assert pod.get("runAsNonRoot") is True, name
        assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["runAsNonRoot"] is True, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert "privileged" not in sc and "add" not in sc["capabilities"], name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name


def test_operator_runs_as_the_images_nonroot_user_and_probes_healthz(default_objects):
    spec = one(default_objects, "Deployment", "sluice-operator")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 65532
    assert spec["serviceAccountName"] == "sluice-operator"
    c = spec["containers"][0]
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe


def test_operator_metrics_service_targets_the_operator(default_objects):
    svc = one(default_objects, "Service", "sluice-operator")
    pod_labels = one(default_objects, "Deployment", "sluice-operator")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "http", "protocol": "TCP"}]


def test_status_page_service_and_ingress_route_status_to_the_operator():
    objs = objects(STATUS_PAGE)
    env = env_of(operator(objs))
    assert env["SLUICE_STATUS_PAGE"] == "true"
    assert env["SLUICE_RUNBOOKS_URL"] == "https://docs.example.com/sluice/operate.html"
    svc = one(objs, "Service", "sluice-operator-status")
    pod_labels = one(objs, "Deployment", "sluice-operator")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    ing = one(objs, "Ingress", "sluice-operator-status")
    assert ing["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["tls"] == [{"hosts": ["status.example.com"], "secretName": "status-tls"}]
    [rule] = ing["spec"]["rules"]
    assert rule["host"] == "status.example.com"
    # Only /status: the operator's /metrics is not published.
    assert rule["http"]["paths"] == [
        {"path": "/status", "pathType": "Prefix", "backend": {"service": {"name": "sluice-operator-status", "port": {"name": "http"}}}}
    ]


def test_status_page_objects_only_when_enabled(default_objects):
    # On by default (a ClusterIP Service); the Ingress only when asked for.
    assert one(default_objects, "Service", "sluice-operator-status")
    assert not [o for o in default_objects if o["kind"] == "Ingress"]
    off = objects({"statusPage": {"enabled": False}})
    assert not [o for o in off if o["metadata"]["name"] == "sluice-operator-status"]
    bare = one(objects({"statusPage": {"enabled": True, "ingress": {"enabled": True}}}), "Ingress", "sluice-operator-status")
    assert "ingressClassName" not in bare["spec"] and "tls" not in bare["spec"] and "annotations" not in bare["metadata"]
    assert "host" not in bare["spec"]["rules"][0]


def test_network_policies_open_gateways_in_cluster_and_pin_the_operator(non_default_objects):
    gw = one(non_default_objects, "NetworkPolicy", "sluice-gateways")
    assert gw["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sluice-gateway",
        "app.kubernetes.io/managed-by": "sluice-operator",
    }
    # Egress stays open for the upstream providers: only Ingress is restricted.
    assert gw["spec"]["policyTypes"] == ["Ingress"]
    assert gw["spec"]["ingress"] == [{"from": [{"namespaceSelector": {}}], "ports": [{"port": 8080, "protocol": "TCP"}]}]
    op = one(non_default_objects, "NetworkPolicy", "sluice-operator")
    assert op["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = {p["port"] for rule in op["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 443, 6443, 5432}


def test_network_policy_limits_bundled_postgres_to_operator_and_gateways():
    objs = objects(VALUE_SETS["bundled-postgres-with-policies"])
    pg = one(objs, "NetworkPolicy", "sluice-postgres")
    peers = pg["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "sluice", "app.kubernetes.io/instance": "sluice", "app.kubernetes.io/component": "operator"}}} in peers
    assert {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sluice-gateway", "app.kubernetes.io/managed-by": "sluice-operator"}}} in peers
    assert pg["spec"]["egress"] == []
    op = one(objs, "NetworkPolicy", "sluice-operator")
    ledger_rule = [r for r in op["spec"]["egress"] if r["ports"] == [{"port": 5432, "protocol": "TCP"}]]
    assert ledger_rule[0]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "postgres"


def test_notes_tell_what_to_apply_next():
    notes = render()["sluice/templates/NOTES.txt"]
    assert "examples/quickstart/routes.yaml" in notes
    assert "kubectl get upstreams,modelroutes,errorbudgets" in notes
    assert "kubectl port-forward service/sluice-gateway-default 8080:80" in notes
    assert "account create" in notes  # gateway.auth=keys needs a key
    assert "account create" not in render(NON_DEFAULT)["sluice/templates/NOTES.txt"]


def test_release_names_without_sluice_are_prefixed():
    objs = objects({}, name="prod")
    assert ("Deployment", "prod-sluice-operator") in names(objs)
    env = env_of(operator(objs, "prod-sluice-operator"))
    assert env["SLUICE_LEDGER_URL"]["secretKeyRef"]["name"] == "prod-sluice-postgres"
