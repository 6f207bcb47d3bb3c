"""The operator end to end: kube-fake + kubectl + the real `sluice-operator` binary +
the mini-kubelet running the gateway Deployment it renders + the OpenAI SDK, all on
one Postgres ledger schema. One scenario, run in file order (see README.md).

The same scenario runs on a real kube-apiserver (tests/kube/test_operator_e2e_real.py
imports these steps and gives them the `kube` fixture of a real control plane): there
the operator authenticates as the chart's ServiceAccount with exactly the chart's RBAC,
and the namespaces are the scenario's own (`kube.namespace` for "default",
`kube.ns("team-b")`). Where the two servers differ, the step says so (step 12: the
request log of kube-fake, the audit log of the real server).

Why one file of over 400 lines: the steps share the module-scoped `env` (one fake
cluster, operator, ledger and gateway pod) and each starts from the state the one
before left. Split over files, pytest would build that environment once per file and
the steps would no longer be one scenario.

The quickstart is the founding example: claude-opus-4 on Anthropic with Claude on
Vertex AI behind it, gpt-4o on OpenAI with Azure OpenAI behind it, and Gemini; each
chaos upstream speaks its provider's protocol and checks its credentials (the Vertex
service-account key reaches the gateway pod through the Secret the operator mounts).

Traffic is counted exactly, because the statuses are checked against it:
step 2 sends 22 good requests (claude-opus 10 + 1 stream, gpt-4o 10, gemini-pro 1),
step 3 sends 20 more to claude-opus (good: Anthropic is overloaded, Vertex answers)
and 3 to gpt-4o (bad: both its upstreams fail). The ErrorBudget `chat-burn` (claude-opus
and gpt-4o, objective 90%, alert `page` at burn rate 0.5) is then at 3/44 = 6.8% bad:
burn rate 0.68, Burning but not Exhausted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import openai
import pytest
import yaml

import chart
from harness import (Artifacts, Chaos, Kube, LedgerSchema, OperatorIdentity, Proc, binary, condition, http, number,
                     operator_identity, quickstart_routes, quickstart_routes_yaml, quickstart_secrets, quickstart_upstreams,
                     QUICKSTART, secret_value, start_chaos, start_operator, start_quickstart_chaos, table, wait_for)
from kubelet import MiniKubelet, Pod
from sluice_testsupport.realkube import refused_by_rbac
from sluice_testsupport.steps import DIAGNOSTICS

pytestmark = pytest.mark.step

STATUS_INTERVAL = "2s"
#: The gateway flushes rollups every 10 s; the operator reads them every 2 s.
STATUS_WAIT = 60.0
GATEWAY = "sluice-gateway-default"
ROUTES = ("claude-opus", "gpt-4o", "gemini-pro")

BURN_BUDGET = """\
apiVersion: sluice.dev/v1alpha1
kind: ErrorBudget
metadata:
  name: chat-burn
spec:
  routes: [claude-opus, gpt-4o]
  objective: "90"
  window: 1h
  alerts:
  - {name: page, longWindow: 1h, shortWindow: 5m, burnRate: "0.5"}
"""


@dataclass
class Answer:
    status: int
    upstream: Optional[str]
    failover: Optional[str]
    model: Optional[str]


@dataclass
class Env:
    fake: Kube
    ledger: LedgerSchema
    kubelet: MiniKubelet
    chaos: dict[str, Chaos]
    operator: Proc
    identity: OperatorIdentity
    key: str
    workdir: Path
    artifacts: Artifacts
    operators: int = 1

    @property
    def ns(self) -> str:
        """The scenario's "default" namespace."""
        return self.fake.namespace

    def gateway(self, namespace: Optional[str] = None, name: str = GATEWAY) -> Pod:
        return self.kubelet.wait_ready(namespace or self.ns, name)

    def client(self, pod: Pod) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{pod.url}/v1", api_key=self.key, max_retries=0, timeout=30.0,
                             http_client=openai.DefaultHttpxClient(trust_env=False))

    def restart_operator(self) -> None:
        code = self.operator.stop(timeout=15)
        assert code == 0, f"the operator exited with {code} on SIGTERM:\n{self.operator.log_text()[-3000:]}"
        self.operators += 1
        self.operator = start_operator(f"operator-{self.operators}", self.identity.kubeconfig, self.ledger.url,
                                       self.workdir, "--status-interval", STATUS_INTERVAL)

    def get(self, *args: str) -> dict:
        obj = self.fake.get_json(*args)
        assert obj is not None, f"kubectl get {' '.join(args)}: not found"
        return obj


#: Requests sent per model: every inference request of this module goes through `chat`.
SENT: dict[str, int] = {}
#: Of those, the answers that were client errors (4xx): no events of an error budget.
CLIENT_ERRORS: dict[str, int] = {}


def chat(client: openai.OpenAI, model: str) -> Answer:
    """One chat completion through the SDK, counted in SENT."""
    SENT[model] = SENT.get(model, 0) + 1
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=16)
        c = raw.parse()
        return Answer(raw.status_code, raw.headers.get("x-sluice-upstream"), raw.headers.get("x-sluice-failover"), c.model)
    except openai.APIStatusError as e:
        if 400 <= e.status_code < 500:
            CLIENT_ERRORS[model] = CLIENT_ERRORS.get(model, 0) + 1
        return Answer(e.status_code, e.response.headers.get("x-sluice-upstream"), e.response.headers.get("x-sluice-failover"), None)


def reloads(pod: Pod) -> int:
    status, body = http("GET", f"{pod.url}/metrics")
    assert status == 200
    m = re.search(r'^sluice_config_reloads_total\{result="ok"\} (\d+)', body.decode(), re.M)
    return int(m.group(1)) if m else 0


@pytest.fixture(scope="module")
def env(workdir, artifacts, ledger, kube) -> Env:
    SENT.clear()
    CLIENT_ERRORS.clear()
    # The ledger first: this migrates the schema and makes the client key (auth keys
    # is the operator's default for gateways; wallets live in the shared ledger).
    ledger.admin("account", "create", "e2e", "--balance", "1000.00")
    key = ledger.admin("key", "create", "e2e").strip()
    assert re.fullmatch(r"sk-sluice-\S+", key), key
    chaos = start_quickstart_chaos(workdir)
    # A spare OpenAI-protocol upstream that checks no credentials, for Upstreams added later.
    chaos["spare"] = start_chaos("spare", workdir)
    identity = operator_identity(kube, workdir)
    operator = start_operator("operator-1", identity.kubeconfig, ledger.url, workdir, "--status-interval", STATUS_INTERVAL)
    kubelet = MiniKubelet(kube, workdir / "node", {
        "sluice-gateway": binary("sluice-gateway"),
        "sluice-operator": binary("sluice-operator"),
    }).start()
    e = Env(kube, ledger, kubelet, chaos, operator, identity, key, workdir, artifacts)

    def diagnostics():
        out = [("operator log", "\n".join(e.operator.log_text().splitlines()[-40:])),
               ("mini-kubelet events", "\n".join(kubelet.events[-30:]))]
        pod = kubelet.current(kube.namespace, GATEWAY)
        if pod:
            out.append((f"gateway {pod.name} log", "\n".join(pod.log_text().splitlines()[-30:])))
        return out

    DIAGNOSTICS.append(diagnostics)
    try:
        yield e
    finally:
        DIAGNOSTICS.remove(diagnostics)
        kubelet.stop()
        e.operator.stop()
        for c in chaos.values():
            c.proc.stop()


# ---------------------------------------------------------------- 1


def test_quickstart_is_rendered_into_a_running_gateway(env: Env):
    fake = env.fake
    urls = {n: c.url for n, c in env.chaos.items()}
    secrets = quickstart_secrets(fake, urls)
    fake.kubectl("apply", "-f", "-", input=quickstart_upstreams(urls))
    fake.kubectl("apply", "-f", "-", input=quickstart_routes_yaml())
    fake.kubectl("apply", "-f", str(QUICKSTART / "budgets.yaml"))
    fake.kubectl("apply", "-f", "-", input=BURN_BUDGET)

    pod = env.kubelet.wait_ready(env.ns, GATEWAY, timeout=60)
    deploy = env.get("deployment", GATEWAY)
    c = deploy["spec"]["template"]["spec"]["containers"][0]

    # The process runs exactly the rendered container: args (two documented rewrites) and env.
    assert pod.argv[0] == str(binary("sluice-gateway"))
    assert len(pod.argv) - 1 == len(c["args"])
    for got, rendered in zip(pod.argv[1:], c["args"]):
        if rendered == "0.0.0.0:8080":
            assert got == "127.0.0.1:0"
        elif rendered.startswith("/etc/sluice/"):
            assert got.startswith(str(pod.dir / "volumes")) and got.endswith(rendered.rsplit("/", 1)[-1]), (got, rendered)
        else:
            assert got == rendered
    assert c["args"][:1] == ["serve"] and "--snapshot" in c["args"] and "--secrets-dir" in c["args"]
    assert c["args"][c["args"].index("--auth") + 1] == "keys", "the operator's default --gateway-auth"
    declared = {v["name"] for v in c["env"]}
    assert declared == {"SLUICE_LEDGER_URL", "POD_NAME"}
    assert set(pod.env) == declared | {"PATH", "HOME", "HOSTNAME", "NO_COLOR", "RUST_LOG"}, "no KUBECONFIG: automount is off"
    assert pod.env["SLUICE_LEDGER_URL"] == env.ledger.url
    assert pod.env["POD_NAME"] == pod.name

    # Volumes: the snapshot is the ConfigMap's, the secrets are the quickstart's keys and
    # the Vertex service-account key (its token_uri at the Vertex chaos upstream).
    cm = env.get("configmap", GATEWAY)
    snapshot_arg = pod.argv[pod.argv.index("--snapshot") + 1]
    assert Path(snapshot_arg).read_text() == cm["data"]["snapshot.json"]
    secrets_dir = Path(pod.argv[pod.argv.index("--secrets-dir") + 1])
    for rel, value in secrets.items():
        assert (secrets_dir / rel).read_text() == value
    assert json.loads((secrets_dir / "vertex-sa" / "key.json").read_text())["token_uri"] == env.chaos["vertex-us-east5"].url + "/token"
    snapshot = json.loads(cm["data"]["snapshot.json"])
    assert sorted(r["key"] for r in snapshot["routes"]) == [f"{env.ns}/{r}" for r in ("claude-opus", "gemini-pro", "gpt-4o")]
    assert snapshot["upstreams"][f"{env.ns}/vertex-us-east5"]["gcp"]["credentials"] == {"secret": "vertex-sa", "key": "key.json"}
    owners = sorted(o["name"] for o in cm["metadata"]["ownerReferences"])
    assert owners == sorted(ROUTES)

    # The operator's ledger Secret and the kubelet's status, then Ready routes.
    assert secret_value(env.get("secret", "sluice-ledger"), "url") == env.ledger.url
    wait_for("the Deployment's availableReplicas", lambda: (env.get("deployment", GATEWAY).get("status") or {}).get("availableReplicas") == 1)

    def routes_ready():
        rows = table(fake, "modelroutes")
        return all(rows.get(r, {}).get("READY") == "True" for r in ROUTES) and rows
    rows = wait_for("every route READY True", routes_ready, timeout=30)
    assert [rows[r]["CANDIDATES"] for r in ROUTES] == ["2", "2", "1"], rows
    for r in ROUTES:
        obj = env.get("modelroute", r)
        assert condition(obj, "Ready")["reason"] == "Serving"
        assert condition(obj, "ResolvedRefs")["status"] == "True"
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        assert obj["metadata"]["finalizers"] == ["sluice.dev/gateway-config"]
    assert http("GET", f"{pod.url}/readyz")[0] == 200
    env.artifacts.save("01-get-all.txt", fake.kubectl("get", "upstreams,modelroutes,errorbudgets,deployments,configmaps,services,secrets").stdout)


# ---------------------------------------------------------------- 2


def test_openai_sdk_traffic_through_the_rendered_gateway(env: Env):
    pod = env.gateway()
    client = env.client(pod)
    assert sorted(m.id for m in client.models.list().data) == ["claude-opus-4", "gemini-2.5-pro", "gpt-4o"]
    for _ in range(10):
        a = chat(client, "claude-opus-4")
        assert (a.status, a.upstream, a.failover, a.model) == (200, "anthropic", None, "claude-opus-4-20250514"), a
        b = chat(client, "gpt-4o")
        assert (b.status, b.upstream, b.model) == (200, "openai", "gpt-4o-2024-08-06"), b
    g = chat(client, "gemini-2.5-pro")
    assert (g.status, g.upstream, g.model) == (200, "gemini", "gemini-2.5-pro"), g
    SENT["claude-opus-4"] += 1
    stream = client.chat.completions.create(model="claude-opus-4", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=16, stream=True)
    text = "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)
    assert text, "the stream carried no content"
    # Billed on the shared Postgres ledger: the wallet moved, nothing is reserved but the
    # gateway's balance grant (docs/design.md §5a).
    account = json.loads(env.ledger.admin("account", "show", "e2e", "--json"))
    assert account["reserved_nanodollars"] == account["granted_nanodollars"], account
    assert account["balance_nanodollars"] < 1000 * 10**9, account
    assert [env.chaos[n].requests() for n in ("anthropic", "vertex-us-east5", "openai", "azure-eastus", "gemini")] == [11, 0, 10, 0, 1]


# ---------------------------------------------------------------- 3


def test_primary_outage_shows_in_status_and_burns_the_budget(env: Env):
    pod = env.gateway()
    client = env.client(pod)
    env.chaos["anthropic"].script(status=529)  # overloaded_error
    env.chaos["openai"].script(status=503)
    env.chaos["azure-eastus"].script(status=503)
    answers = [chat(client, "claude-opus-4") for _ in range(20)]
    assert all(a.status == 200 and a.upstream == "vertex-us-east5" and a.model == "claude-opus-4@20250514"
               for a in answers), answers
    assert any(a.failover for a in answers), "no answer reported a failover"
    assert env.chaos["anthropic"].status_count(529) > 0
    bad = [chat(client, "gpt-4o") for _ in range(3)]
    assert [a.status for a in bad] == [503, 503, 503], bad

    fake = env.fake

    def settled():
        routes = {r: env.get("modelroute", r)["status"] for r in ROUTES}
        burn = env.get("errorbudget", "chat-burn")["status"]
        assert (routes["claude-opus"].get("requests5m") == 31 and routes["gpt-4o"].get("requests5m") == 13
                and burn.get("totalEvents") == 44 and burn.get("state") == "Burning"), (routes, burn)
        return routes, burn
    wait_for("the statuses to count every request (31 + 13) and chat-burn to burn", settled, timeout=STATUS_WAIT)

    def upstreams_seen():
        ups = table(fake, "upstreams")
        assert number(ups["anthropic"]["SUCCESS"]) < 100 and number(ups["openai"]["SUCCESS"]) < 100, ups
        return ups
    ups = wait_for("Upstream success rates to show the outage", upstreams_seen, timeout=STATUS_WAIT)
    assert number(ups["vertex-us-east5"]["SUCCESS"]) == 100, ups
    assert ups["vertex-us-east5"]["TTFB-P99"], ups

    mr = table(fake, "modelroutes")
    assert number(mr["claude-opus"]["FAILOVERS"]) > 0, mr
    assert number(mr["claude-opus"]["AVAILABILITY"]) == 100, mr
    assert 76 < number(mr["gpt-4o"]["AVAILABILITY"]) < 77, mr  # 10 of 13

    eb = table(fake, "errorbudgets")
    assert eb["chat-burn"]["STATE"] == "Burning", eb
    assert 0.5 < number(eb["chat-burn"]["BURN-1H"]) < 1, eb
    assert eb["chat-availability"]["STATE"] == "Exhausted", eb
    assert number(eb["chat-availability"]["BURN-1H"]) > 14.4, eb
    assert eb["opus-timeslices"]["STATE"] == "Healthy", eb

    burn = yaml.safe_load(fake.kubectl("get", "errorbudget", "chat-burn", "-o", "yaml").stdout)
    st = burn["status"]
    assert {"5m", "1h"} <= set(st["burnRates"]), st
    assert 0.5 < float(st["burnRates"]["1h"]) < 1 and 0.5 < float(st["burnRates"]["5m"]) < 1, st
    assert st["firingAlerts"] == ["page"], st
    assert (st["goodEvents"], st["totalEvents"]) == (41, 44), st
    assert condition(burn, "Burning")["status"] == "True" and condition(burn, "Burning")["reason"] == "AlertsFiring"
    assert condition(burn, "Exhausted")["status"] == "False"
    assert 60 < float(st["consumedPercent"]) < 75, st
    quick = yaml.safe_load(fake.kubectl("get", "errorbudget", "chat-availability", "-o", "yaml").stdout)
    assert condition(quick, "Burning")["status"] == "True" and condition(quick, "Exhausted")["status"] == "True"

    reasons = {(e.get("regarding", {}).get("name"), e["reason"])
               for e in env.get("events.events.k8s.io")["items"]}
    assert ("chat-burn", "BudgetBurning") in reasons and ("chat-availability", "BudgetExhausted") in reasons, reasons

    env.artifacts.save("03-get-status.txt", fake.kubectl("get", "upstreams,modelroutes,errorbudgets").stdout)
    env.artifacts.save("03-errorbudget-chat-burn.yaml", fake.kubectl("get", "errorbudget", "chat-burn", "-o", "yaml").stdout)
    env.artifacts.save("03-modelroute-claude-opus.yaml", fake.kubectl("get", "modelroute", "claude-opus", "-o", "yaml").stdout)
    env.artifacts.save("03-upstream-anthropic.yaml", fake.kubectl("get", "upstream", "anthropic", "-o", "yaml").stdout)


# ---------------------------------------------------------------- 4


INVALID = {
    "spec.candidates[0].weight": """\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: bad-weight}
spec:
  model: bad
  candidates: [{upstream: openai, weight: 0}]
""",
    "spec.failover.retryOn": """\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: bad-retry}
spec:
  model: bad
  candidates: [{upstream: openai}]
  failover: {retryOn: [404]}
""",
}


def test_an_invalid_route_is_refused_naming_the_field(env: Env):
    for field, manifest in INVALID.items():
        done = env.fake.kubectl("apply", "-f", "-", input=manifest, check=False)
        assert done.returncode != 0, done.stdout
        assert field in done.stderr and "is invalid" in done.stderr, done.stderr
        name = re.search(r"name: (\S+)\}", manifest).group(1)
        assert env.fake.get_json("modelroute", name) is None
    env.artifacts.save("04-invalid-route.txt", done.stderr)


# ---------------------------------------------------------------- 5


GHOST = """\
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: ghost}
spec:
  model: ghost-model
  candidates: [{upstream: no-such-upstream}]
"""


def test_a_route_with_a_missing_upstream_reports_resolvedrefs_false_and_the_others_keep_serving(env: Env):
    pod = env.gateway()
    env.fake.kubectl("apply", "-f", "-", input=GHOST)

    def reported():
        obj = env.get("modelroute", "ghost")
        c = condition(obj, "ResolvedRefs")
        return c.get("status") == "False" and obj
    ghost = wait_for("ghost's ResolvedRefs=False", reported, timeout=30)
    c = condition(ghost, "ResolvedRefs")
    assert c["reason"] == "NoCandidateResolved" and "no-such-upstream" in c["message"], c
    assert condition(ghost, "Ready")["status"] == "False"
    for r in ROUTES:
        assert condition(env.get("modelroute", r), "Ready")["status"] == "True"
    snapshot = json.loads(env.get("configmap", GATEWAY)["data"]["snapshot.json"])
    assert sorted(r["key"] for r in snapshot["routes"]) == [f"{env.ns}/{r}" for r in ("claude-opus", "gemini-pro", "gpt-4o")]

    client = env.client(pod)
    assert chat(client, "claude-opus-4").status == 200
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="ghost-model", messages=[{"role": "user", "content": "x"}], max_tokens=4)
    assert env.kubelet.current(env.ns, GATEWAY) is pod and pod.running() and pod.restarts == 0
    env.artifacts.save("05-modelroute-ghost.yaml", env.fake.kubectl("get", "modelroute", "ghost", "-o", "yaml").stdout)


# ---------------------------------------------------------------- 6


def test_editing_a_route_changes_traffic_without_restarting_the_gateway(env: Env):
    pod = env.gateway()
    pid, generation = pod.pid, env.get("deployment", GATEWAY)["metadata"]["generation"]
    before = reloads(pod)
    client = env.client(pod)
    assert chat(client, "gpt-4o").status == 503, "both of gpt-4o's upstreams are still failing"

    routes = quickstart_routes()
    gpt = next(r for r in routes if r["metadata"]["name"] == "gpt-4o")
    # Another provider's model as the last resort: Gemini, in its own protocol.
    gpt["spec"]["candidates"].append({"upstream": "gemini", "model": "gemini-2.5-flash", "weight": 100})
    env.fake.kubectl("apply", "-f", "-", input=yaml.safe_dump(gpt))

    def served():
        a = chat(client, "gpt-4o")
        return a.status == 200 and a
    first = wait_for("gpt-4o to be served by the added candidate", served, timeout=30, interval=0.5)
    assert (first.upstream, first.model) == ("gemini", "gemini-2.5-flash"), first
    for _ in range(5):
        a = chat(client, "gpt-4o")
        assert (a.status, a.upstream, a.model) == (200, "gemini", "gemini-2.5-flash"), a

    assert pod.pid == pid and pod.running() and pod.restarts == 0, "the gateway process was restarted"
    assert env.kubelet.current(env.ns, GATEWAY) is pod
    assert env.get("deployment", GATEWAY)["metadata"]["generation"] == generation, "the Deployment changed"
    assert reloads(pod) > before, "the gateway did not reload its configuration"
    wait_for("gpt-4o CANDIDATES 3", lambda: table(env.fake, "modelroutes")["gpt-4o"]["CANDIDATES"] == "3", timeout=15)


# ---------------------------------------------------------------- 7


def test_a_rotated_secret_value_reaches_the_running_gateway_without_a_roll(env: Env):
    pod = env.gateway()
    pid, generation = pod.pid, env.get("deployment", GATEWAY)["metadata"]["generation"]
    secrets_dir = Path(pod.argv[pod.argv.index("--secrets-dir") + 1])
    original = (QUICKSTART / "secrets" / "gemini-key" / "apiKey").read_text()
    client = env.client(pod)

    def rotate(value: str) -> None:
        rotated = env.fake.kubectl("create", "secret", "generic", "gemini-key", f"--from-literal=apiKey={value}",
                                   "--dry-run=client", "-o", "yaml").stdout
        env.fake.kubectl("apply", "-f", "-", input=rotated)
        wait_for(f"the key {value} in the pod's secret volume",
                 lambda: (secrets_dir / "gemini-key" / "apiKey").read_text() == value, timeout=15)

    # The gateway sends the new value at once: Gemini, which does not know it, refuses it
    # (its only upstream, so nothing to fail over to) and the refusal is passed through.
    # (The gateway rereads mounted secrets on its reload tick, so poll.)
    refused = env.chaos["gemini"].status_count(400)
    rotate("sk-rotated")
    a = wait_for("the rotated key to be sent", lambda: (a := chat(client, "gemini-2.5-pro")).status != 200 and a,
                 timeout=15, interval=0.5)
    assert a.status == 400 and env.chaos["gemini"].status_count(400) == refused + 1, a
    # Rotated to the key Gemini knows: served again.
    rotate(original)
    wait_for("Gemini to serve again", lambda: chat(client, "gemini-2.5-pro").status == 200, timeout=15, interval=0.5)
    assert pod.pid == pid and pod.running() and pod.restarts == 0
    assert env.get("deployment", GATEWAY)["metadata"]["generation"] == generation, "a value change must not roll"


# ---------------------------------------------------------------- 8


EXTRA_UPSTREAM = """\
apiVersion: v1
kind: Secret
metadata: {name: openai-eu-key}
stringData: {apiKey: sk-openai-eu}
---
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: openai-eu}
spec:
  protocol: openai
  baseUrl: %s/v1
  auth: {secretRef: {name: openai-eu-key, key: apiKey}}
"""


def test_a_new_secret_in_the_set_rolls_the_gateway(env: Env):
    old = env.gateway()
    deploy = env.get("deployment", GATEWAY)
    annotation = deploy["spec"]["template"]["metadata"]["annotations"]["sluice.dev/secrets-hash"]
    env.fake.kubectl("apply", "-f", "-", input=EXTRA_UPSTREAM % env.chaos["spare"].url)
    routes = quickstart_routes()
    gpt = next(r for r in routes if r["metadata"]["name"] == "gpt-4o")
    gpt["spec"]["candidates"] += [{"upstream": "gemini", "model": "gemini-2.5-flash", "weight": 100},
                                  {"upstream": "openai-eu", "model": "gpt-4o-eu", "weight": 1}]
    env.fake.kubectl("apply", "-f", "-", input=yaml.safe_dump(gpt))

    def rolled():
        d = env.get("deployment", GATEWAY)
        return d["metadata"]["generation"] > deploy["metadata"]["generation"] and d
    d = wait_for("the Deployment to roll", rolled, timeout=30)
    assert d["spec"]["template"]["metadata"]["annotations"]["sluice.dev/secrets-hash"] != annotation
    new = wait_for("a new gateway pod", lambda: (p := env.kubelet.current(env.ns, GATEWAY)) is not old and p,
                   timeout=30)
    new = env.kubelet.wait_ready(env.ns, GATEWAY, timeout=60)  # and the old one stopped (surge first)
    assert new.name != old.name and new.pid != old.pid
    # The old pod drains (--shutdown-delay) before it exits.
    wait_for("the old pod to exit", lambda: not old.running(), timeout=30)
    assert old.proc.popen.returncode == 0, "the old pod did not stop cleanly"
    secrets_dir = Path(new.argv[new.argv.index("--secrets-dir") + 1])
    assert (secrets_dir / "openai-eu-key" / "apiKey").read_text() == "sk-openai-eu"
    key = json.loads((secrets_dir / "vertex-sa" / "key.json").read_text())
    assert key["token_uri"] == env.chaos["vertex-us-east5"].url + "/token", "the service-account key moved with the roll"
    assert chat(env.client(new), "gpt-4o").status == 200
    wait_for("gpt-4o to count 4 candidates", lambda: table(env.fake, "modelroutes")["gpt-4o"]["CANDIDATES"] == "4",
             timeout=15)


# ---------------------------------------------------------------- 9


TEAM_B = """\
apiVersion: sluice.dev/v1alpha1
kind: Upstream
metadata: {name: local, namespace: %(ns)s}
spec:
  protocol: openai
  baseUrl: %(url)s/v1
---
apiVersion: sluice.dev/v1alpha1
kind: ModelRoute
metadata: {name: batch, namespace: %(ns)s}
spec:
  model: batch-model
  gateway: batch
  candidates: [{upstream: local, model: batch-v1}]
"""


def test_deleting_every_route_of_a_group_removes_its_deployment_and_stops_the_pod(env: Env):
    default_pod = env.gateway()
    team_b = env.fake.create_namespace("team-b")
    env.fake.kubectl("apply", "-f", "-", input=TEAM_B % {"ns": team_b, "url": env.chaos["spare"].url})
    pod = env.kubelet.wait_ready(team_b, "sluice-gateway-batch", timeout=60)
    a = chat(env.client(pod), "batch-model")
    assert (a.status, a.upstream, a.model) == (200, "local", "batch-v1"), a
    assert env.fake.get_json("secret", "sluice-ledger", "-n", team_b) is not None

    env.fake.kubectl("delete", "modelroute", "batch", "-n", team_b, "--wait=false")
    stopped = env.kubelet.wait_gone(team_b, "sluice-gateway-batch", timeout=30)
    assert [p.name for p in stopped] == [pod.name]
    assert pod.proc.popen.returncode == 0, f"the gateway did not stop cleanly: {pod.proc.popen.returncode}"

    def all_gone():
        left = env.fake.kubectl("get", "deployments,configmaps,services,poddisruptionbudgets,secrets,modelroutes",
                                "-n", team_b, "-o", "name").stdout.split()
        # A real cluster publishes its CA into every namespace (root-ca-certificate-publisher).
        left = [o for o in left if o != "configmap/kube-root-ca.crt"]
        assert not left, left
        return True
    wait_for("team-b to be empty but for its Upstream", all_gone, timeout=30)
    assert env.fake.get_json("upstream", "local", "-n", team_b) is not None
    # The default group is untouched.
    assert env.kubelet.current(env.ns, GATEWAY) is default_pod and default_pod.running() and default_pod.restarts == 0
    assert chat(env.client(default_pod), "claude-opus-4").status == 200


# ---------------------------------------------------------------- 10


def test_restarting_the_operator_loses_nothing(env: Env):
    pod = env.gateway()
    client = env.client(pod)
    for name in ("anthropic", "openai", "azure-eastus"):
        env.chaos[name].script()
    deploy = env.get("deployment", GATEWAY)
    cm = env.get("configmap", GATEWAY)
    before = {r: env.get("modelroute", r) for r in ROUTES}
    burn = env.get("errorbudget", "chat-availability")

    code = env.operator.stop(timeout=15)
    assert code == 0, f"the operator exited with {code} on SIGTERM"
    for _ in range(10):
        for model in ("claude-opus-4", "gpt-4o", "gemini-2.5-pro"):
            assert chat(client, model).status == 200
    env.restart_operator()

    # Every request this module sent to the budget's three routes, the 10 + 10 + 10 sent
    # while no operator ran included, is counted: the figures come from the ledger, not memory.
    # Client errors (the refused rotated key of step 7) are no events.
    models = ("claude-opus-4", "gpt-4o", "gemini-2.5-pro")
    total = sum(SENT[m] - CLIENT_ERRORS.get(m, 0) for m in models)

    def resumed():
        now = {r: env.get("modelroute", r)["status"] for r in ROUTES}
        b = env.get("errorbudget", "chat-availability")["status"]
        counts = {r: (before[r]["status"]["requests5m"], now[r]["requests5m"]) for r in ROUTES}
        assert b["totalEvents"] == total and b["lastEvaluated"] > burn["status"]["lastEvaluated"], (b, counts)
        assert all(n >= was + 10 for was, n in counts.values()), counts
        return now, b
    now, b = wait_for(f"chat-availability to count all {total} requests", resumed, timeout=STATUS_WAIT)
    assert int(b["consumed"]) >= int(burn["status"]["consumed"]) > 0, "bad events were lost"
    assert b["state"] == "Exhausted", b

    # Nothing was recreated or rolled, and the conditions did not flap.
    d2 = env.get("deployment", GATEWAY)
    assert (d2["metadata"]["uid"], d2["metadata"]["generation"]) == (deploy["metadata"]["uid"], deploy["metadata"]["generation"])
    cm2 = env.get("configmap", GATEWAY)
    if cm2["metadata"]["resourceVersion"] != cm["metadata"]["resourceVersion"]:
        env.artifacts.save("10-configmap-before.json", json.dumps(cm, indent=1, sort_keys=True))
        env.artifacts.save("10-configmap-after.json", json.dumps(cm2, indent=1, sort_keys=True))
    assert cm2["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"], "the restart rewrote the ConfigMap"
    for r in ROUTES:
        after = env.get("modelroute", r)
        for kind in ("Ready", "ResolvedRefs"):
            assert condition(after, kind)["status"] == "True", (r, kind)
            assert condition(after, kind)["lastTransitionTime"] == condition(before[r], kind)["lastTransitionTime"], (r, kind)
    assert env.kubelet.current(env.ns, GATEWAY) is pod and pod.running() and pod.restarts == 0
    env.artifacts.save("10-after-restart.txt", env.fake.kubectl("get", "upstreams,modelroutes,errorbudgets").stdout)


# ---------------------------------------------------------------- 11

ACCOUNT_LIMIT = """\
apiVersion: sluice.dev/v1alpha1
kind: AccountLimit
metadata:
  name: e2e-limits
spec:
  account: e2e
  rpm: 600
  dailySpend: "25.00"
"""
NO_LIMITS = {"rpm": None, "tpm": None, "tpd": None, "concurrency": None, "daily_spend_nanos": None,
             "monthly_spend_nanos": None}


def ledger_limits(env: Env) -> dict:
    """The account `e2e`'s limits, as `admin account show --json` prints them."""
    return json.loads(env.ledger.admin("account", "show", "e2e", "--json"))["limits"]


def test_an_account_limit_is_written_into_the_ledger_and_removed_on_delete(env: Env):
    fake = env.fake
    fake.kubectl("apply", "-f", "-", input=ACCOUNT_LIMIT)
    # The full set of six: what the spec leaves out is no limit.
    want = {**NO_LIMITS, "rpm": 600, "daily_spend_nanos": 25_000_000_000}
    wait_for("the AccountLimit's limits in the ledger", lambda: ledger_limits(env) == want, timeout=STATUS_WAIT)

    def applied():
        al = env.get("accountlimit", "e2e-limits")
        ready = condition(al, "Ready")
        assert (ready.get("status"), ready.get("reason")) == ("True", "Applied"), al.get("status")
        assert al["metadata"].get("finalizers") == ["sluice.dev/limits"], al["metadata"]
        assert al["status"]["applied"] is True and al["status"]["observedGeneration"] == al["metadata"]["generation"]
        assert [u["limit"] for u in al["status"]["use"]] == ["rpm", "daily_spend"], al["status"]
        return al
    al = wait_for("e2e-limits Ready=True (Applied) with its use", applied, timeout=STATUS_WAIT)
    assert {u["limit"]: u["value"] for u in al["status"]["use"]} == {"rpm": "600", "daily_spend": "25.00"}
    row = table(fake, "accountlimits")["e2e-limits"]
    assert (row["ACCOUNT"], row["RPM"], row["DAILY-SPEND"], row["APPLIED"]) == ("e2e", "600", "25.00", "true"), row

    # An edit is written (a limit set meanwhile with `admin` is overwritten).
    env.ledger.admin("account", "update", "e2e", "--tpm", "5")
    fake.kubectl("patch", "accountlimit", "e2e-limits", "--type=merge", "-p", '{"spec": {"rpm": 60}}')
    want = {**NO_LIMITS, "rpm": 60, "daily_spend_nanos": 25_000_000_000}
    wait_for("the edited limits in the ledger", lambda: ledger_limits(env) == want, timeout=STATUS_WAIT)

    # Deleted: the finalizer removes the limits first.
    fake.kubectl("delete", "accountlimit", "e2e-limits", "--timeout=60s")
    assert fake.get_json("accountlimit", "e2e-limits") is None
    assert ledger_limits(env) == NO_LIMITS
    reasons = {e["reason"] for e in fake.get_json("events.events.k8s.io")["items"]}
    assert "LimitsApplied" in reasons, reasons


# ---------------------------------------------------------------- 12


def test_the_chart_rbac_allows_every_call_the_operator_made(env: Env):
    code = env.operator.stop(timeout=15)
    assert code == 0
    if env.fake.real:
        # The real server enforced the chart's rules all along (the operator ran as the
        # chart's ServiceAccount): its audit log has every call, and none was forbidden.
        records = env.fake.audit_records(env.identity.user)
        forbidden = refused_by_rbac(records)
        assert not forbidden, f"the real API server's RBAC refused the operator: {forbidden}"
        cmp = chart.compare(records, env.identity.rbac, users=True)
    else:
        # The fake's own permission summary agrees with the split by User-Agent used below:
        # everything but kubectl = the operator's calls + the harness's (mini-kubelet) calls.
        _, not_kubectl = env.fake.api("GET", "/_fake/permissions?excludeUserAgent=kubectl")
        _, harness_only = env.fake.api("GET", "/_fake/permissions?userAgent=sluice-e2e-harness")
        records = env.fake.stop()  # SIGTERM: kube-fake writes --request-log
        # Permission strings as the fake prints them: `"" configmaps list`, `apps deployments/status patch`.
        operator_perms = {f'{r["api_group"] or chr(34) * 2} {r["resource"]}{"/" + r["subresource"] if r["subresource"] else ""} {r["verb"]}'
                          for r in chart.operator_records(records) if r["resource_request"]}
        assert set(not_kubectl) == operator_perms | set(harness_only), set(not_kubectl) ^ (operator_perms | set(harness_only))
        cmp = chart.compare(records, chart.render({}))
    env.artifacts.save("11-rbac.md", cmp.report("operator calls of the e2e run vs the chart's default RBAC"))
    assert not cmp.missing, "the chart does not allow: " + ", ".join(map(str, cmp.missing))
    # The scenario exercises every write path: each kind of write must have been seen.
    seen = {(n.api_group, n.resource, n.verb) for n in cmp.needed}
    for must in [("apps", "deployments", "patch"), ("apps", "deployments", "delete"), ("", "secrets", "delete"),
                 ("sluice.dev", "modelroutes/status", "patch"), ("sluice.dev", "modelroutes", "patch"),
                 ("events.k8s.io", "events", "create"), ("sluice.dev", "accountlimits", "patch"),
                 ("sluice.dev", "accountlimits/status", "patch")]:
        assert must in seen, f"the run never made a {must} call"
