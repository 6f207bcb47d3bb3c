"""The chart's operator Deployment, run as rendered: `helm template` (Helm's Go SDK)
→ `kubectl apply` into kube-fake → the mini-kubelet runs the operator pod with
exactly its args and env (image `…/sluice-operator:<appVersion>` → the local
binary) → it reconciles the quickstart → the gateway Deployment it renders is run
too and serves the OpenAI SDK. Then the chart's RBAC is checked against every call
that operator made. Once with the default values (no leader election), once with
`operator.leaderElection.enabled=true` (the Lease Role is exercised too).

The same steps run on a real kube-apiserver (tests/kube/test_chart_operator_real.py):
there the chart's RBAC is enforced (the mini-kubelet gives the operator pod a token of
the chart's ServiceAccount) and its calls are read from the audit log; the release and
its namespaces are the scenario's own (`kube.release`, `kube.ns("sluice-system")`).
"""

from __future__ import annotations

import json
import re

import openai
import pytest
import yaml

import chart
from harness import (QUICKSTART, LedgerSchema, binary, condition, quickstart_routes_yaml, quickstart_secrets,
                     quickstart_upstreams, start_quickstart_chaos, table, wait_for)
from kubelet import MiniKubelet
from sluice_testsupport.realkube import refused_by_rbac
from sluice_testsupport.steps import DIAGNOSTICS

pytestmark = pytest.mark.step

GATEWAY = "sluice-gateway-default"


@pytest.fixture(scope="module", params=["default-values", "leader-election"])
def install(request, workdir, artifacts, new_kube, scenario_prerequisites):
    """Per parameter: a ledger schema, a cluster with the CRDs (`new_kube`), the chart
    rendered for that ledger, chaos upstreams and a mini-kubelet; the chart is not
    applied yet."""
    ledger = LedgerSchema.create()
    fake = new_kube(f"kube-{request.param}")
    election = request.param == "leader-election"
    values = {"ledger": {"url": ledger.url, "postgres": {"enabled": False}}}
    if election:
        values["operator"] = {"leaderElection": {"enabled": True}}
    release_ns = fake.ns(chart.NAMESPACE)
    objs = chart.render(values, name=fake.release, namespace=release_ns)
    operator = next(o["metadata"]["name"] for o in objs if o["kind"] == "Deployment")
    artifacts.save(f"{request.param}-rendered.yaml", chart.to_yaml(objs))
    chaos = start_quickstart_chaos(workdir, prefix=f"{request.param}-")
    kubelet = MiniKubelet(fake, workdir / f"node-{request.param}", {
        "sluice-gateway": binary("sluice-gateway"),
        "sluice-operator": binary("sluice-operator"),
    }).start()

    def diagnostics():
        out = [("mini-kubelet events", "\n".join(kubelet.events[-30:]))]
        for ns, name in ((release_ns, operator), (fake.namespace, GATEWAY)):
            pod = kubelet.current(ns, name)
            if pod:
                out.append((f"{pod.name} log", "\n".join(pod.log_text().splitlines()[-30:])))
        return out

    DIAGNOSTICS.append(diagnostics)
    state = {"param": request.param, "election": election, "values": values, "objs": objs, "chaos": chaos,
             "kubelet": kubelet, "fake": fake, "ledger": ledger, "artifacts": artifacts, "ns": release_ns,
             "operator": operator}
    try:
        yield state
    finally:
        DIAGNOSTICS.remove(diagnostics)
        kubelet.stop()
        for c in chaos.values():
            c.proc.stop()
        fake.close()
        ledger.drop()


def test_the_chart_operator_pod_runs_with_exactly_the_rendered_args_and_env(install):
    fake, kubelet, objs, ns, operator = install["fake"], install["kubelet"], install["objs"], install["ns"], install["operator"]
    fake.create_namespace(chart.NAMESPACE)
    fake.kubectl("apply", "-f", "-", input=chart.to_yaml(objs))
    pod = kubelet.wait_ready(ns, operator, timeout=60)

    rendered = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == operator)
    c = rendered["spec"]["template"]["spec"]["containers"][0]
    app_version = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())["appVersion"]
    assert c["image"] == f"ghcr.io/sluice-dev/sluice-operator:{app_version}"
    assert not c.get("command") and not c.get("args"), "the chart passes everything through env"
    assert pod.argv == [str(binary("sluice-operator"))]
    names = [e["name"] for e in c["env"]]
    assert set(pod.env) == set(names) | {"PATH", "HOME", "HOSTNAME", "NO_COLOR", "RUST_LOG", "KUBECONFIG"}
    literal = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    for name, value in literal.items():
        expected = "127.0.0.1:0" if value == "0.0.0.0:8080" else value
        assert pod.env[name] == expected, name
    assert pod.env["SLUICE_LEDGER_URL"] == install["ledger"].url  # secretKeyRef to the chart's Secret
    assert (pod.env["POD_NAME"], pod.env["POD_NAMESPACE"]) == (pod.name, ns)  # fieldRefs
    assert pod.env["SLUICE_LEADER_ELECTION"] == ("true" if install["election"] else "false")
    chart_values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert json.loads(pod.env["SLUICE_GATEWAY_RESOURCES"]) == chart_values["gateway"]["resources"]
    if install["election"]:
        def leading():
            lease = fake.get_json("lease", "sluice-operator", "-n", ns)
            return lease and lease["spec"].get("holderIdentity") == pod.name and lease
        wait_for("the operator pod to hold the Lease", leading, timeout=30)
    # The pod is ready (its /healthz answers) before its controllers start: after the
    # ledger's migrations and, with election on, the Lease. Wait for the line.
    try:
        wait_for("the operator to log that its controllers started",
                 lambda: re.search(r"controllers started", pod.log_text()), timeout=30)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{pod.log_text()[-2000:]}") from None


def test_the_chart_operator_reconciles_the_quickstart_into_a_serving_gateway(install):
    fake, kubelet = install["fake"], install["kubelet"]
    urls = {n: c.url for n, c in install["chaos"].items()}
    quickstart_secrets(fake, urls)
    fake.kubectl("apply", "-f", "-", input=quickstart_upstreams(urls))
    fake.kubectl("apply", "-f", "-", input=quickstart_routes_yaml())
    fake.kubectl("apply", "-f", str(QUICKSTART / "budgets.yaml"))

    gw = kubelet.wait_ready(fake.namespace, GATEWAY, timeout=60)
    deploy = fake.get_json("deployment", GATEWAY)
    operator_pod = kubelet.current(install["ns"], install["operator"])
    chart_values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert deploy["spec"]["replicas"] == chart_values["gateway"]["replicas"]
    assert c["image"] == operator_pod.env["SLUICE_GATEWAY_IMAGE"]
    assert c["resources"] == chart_values["gateway"]["resources"]
    assert c["args"][c["args"].index("--auth") + 1] == chart_values["gateway"]["auth"] == "keys"
    assert gw.env["SLUICE_LEDGER_URL"] == install["ledger"].url

    def ready():
        rows = table(fake, "modelroutes")
        assert all(rows[r]["READY"] == "True" for r in ("claude-opus", "gpt-4o")), rows
        return rows
    wait_for("the routes to be Ready", ready, timeout=30)
    route = fake.get_json("modelroute", "claude-opus")
    assert "1/2 replicas available" in condition(route, "Ready")["message"], condition(route, "Ready")

    ledger = install["ledger"]
    account = f"chart-{install['param']}"
    ledger.admin("account", "create", account, "--balance", "10.00")
    key = ledger.admin("key", "create", account).strip()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0, timeout=30.0,
                           http_client=openai.DefaultHttpxClient(trust_env=False))
    raw = client.chat.completions.with_raw_response.create(
        model="claude-opus-4", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert raw.status_code == 200 and raw.headers["x-sluice-upstream"] == "anthropic"
    # The backup authenticates with the service-account key the operator mounted.
    install["chaos"]["anthropic"].script(status=529)
    raw = client.chat.completions.with_raw_response.create(
        model="claude-opus-4", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert raw.status_code == 200 and raw.headers["x-sluice-upstream"] == "vertex-us-east5", raw.headers
    install["chaos"]["anthropic"].reset()
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-sluice-wrong", max_retries=0,
                      http_client=openai.DefaultHttpxClient(trust_env=False)).chat.completions.create(
            model="claude-opus-4", messages=[{"role": "user", "content": "hi"}], max_tokens=8)


def test_the_chart_rbac_allows_every_call_its_operator_made(install):
    fake, kubelet, ns, operator = install["fake"], install["kubelet"], install["ns"], install["operator"]
    # Uninstall the operator the way a user would; the kubelet stops the pod (SIGTERM),
    # which releases the Lease when elected.
    fake.kubectl("delete", "deployment", operator, "-n", ns)
    stopped = kubelet.wait_gone(ns, operator, timeout=30)
    assert [p.proc.popen.returncode for p in stopped] == [0], [p.log_text()[-2000:] for p in stopped]
    if fake.real:
        # The chart's rules were enforced: the audit log has the calls of its ServiceAccount.
        records = fake.audit_records(f"system:serviceaccount:{ns}:{operator}")
        forbidden = refused_by_rbac(records)
        assert not forbidden, f"the real API server's RBAC refused the chart's operator: {forbidden}"
        cmp = chart.compare(records, install["objs"], users=True)
    else:
        records = fake.stop()
        cmp = chart.compare(records, install["objs"])
    install["artifacts"].save(f"{install['param']}-rbac.md",
                              cmp.report(f"chart operator ({install['param']}) calls vs the chart's RBAC"))
    assert not cmp.missing, "the chart does not allow: " + ", ".join(map(str, cmp.missing))
    leases = {(n.resource, n.verb) for n in cmp.needed if n.api_group == "coordination.k8s.io"}
    if install["election"]:
        assert {("leases", "get"), ("leases", "patch")} <= leases, leases
    else:
        assert not leases, leases
