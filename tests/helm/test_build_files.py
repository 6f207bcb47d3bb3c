"""The Tiltfile and the Dockerfiles, checked without Tilt or Docker: the Tiltfile is run
as Python (its Starlark is a subset) against recording stand-ins for Tilt's builtins, so
what it builds, applies and sets can be asserted; its inline manifests and its chart
overrides are validated like the chart's own objects."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from conftest import CHART, REPO, objects, render, require, yaml

#: The placeholder ports of the quickstart's five Upstreams, one chaos container each.
CHAOS_PORTS = (9101, 9102, 9103, 9104, 9105)

kv = require("kubernetes_validate")


class Tilt:
    """Records the Tiltfile's calls to the Tilt API."""

    def __init__(self, args: dict[str, str]):
        self.args = args
        self.builds: list[tuple[tuple, dict]] = []
        self.yaml: list[Any] = []
        self.helm: list[tuple[tuple, dict]] = []
        self.resources: dict[str, dict] = {}
        self.local: dict[str, dict] = {}

    def globals(self) -> dict[str, Any]:
        tilt = self

        class Config:
            def define_string(self, name, args=False, usage=""):
                pass

            def parse(self):
                return dict(tilt.args)

        def docker_build(*a, **kw):
            tilt.builds.append((a, kw))

        def helm(*a, **kw):
            tilt.helm.append((a, kw))
            return ("helm", a, kw)

        def k8s_resource(workload="", **kw):
            tilt.resources[kw.get("new_name") or workload] = kw

        def local_resource(name, **kw):
            tilt.local[name] = kw

        def fail(message):
            raise RuntimeError(message)

        return {
            "config": Config(),
            "docker_build": docker_build,
            "helm": helm,
            "k8s_yaml": tilt.yaml.append,
            "k8s_resource": k8s_resource,
            "local_resource": local_resource,
            "listdir": lambda d: sorted(str(p.relative_to(REPO)) for p in (REPO / d).iterdir()),
            "blob": lambda text: ("blob", text),
            "link": lambda url, name="": url,
            "fail": fail,
        }


def run_tiltfile(args: dict[str, str] | None = None) -> Tilt:
    tilt = Tilt(args or {})
    source = (REPO / "Tiltfile").read_text()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        exec(compile(source, "Tiltfile", "exec"), tilt.globals())
    finally:
        os.chdir(cwd)
    return tilt


def test_tiltfile_builds_both_images_from_their_dockerfiles():
    tilt = run_tiltfile()
    builds = {a[0]: kw for a, kw in tilt.builds}
    assert set(builds) == {"sluice-operator", "sluice-gateway"}
    assert builds["sluice-operator"]["dockerfile"] == "Dockerfile.operator"
    assert builds["sluice-gateway"]["dockerfile"] == "Dockerfile.gateway"
    # The gateway image only reaches the cluster through the operator's env var.
    assert builds["sluice-gateway"]["match_in_env_vars"] is True
    for kw in builds.values():
        for path in kw["only"]:
            assert (REPO / path).exists(), path


def test_tiltfile_applies_the_generated_crds_and_the_chart_without_them():
    tilt = run_tiltfile()
    assert tilt.yaml[0] == sorted(f"charts/sluice/crds/{p.name}" for p in (CHART / "crds").iterdir())
    ((args, kw),) = tilt.helm
    assert args == ("charts/sluice",) and kw["skip_crds"] is True
    assert tilt.resources["sluice-operator"]["resource_deps"] == ["sluice-crds", "sluice-postgres"]
    assert tilt.resources["sluice-operator"]["port_forwards"] == ["9090:8080"]


def test_tiltfile_object_selectors_name_objects_the_chart_renders():
    # Tilt fails on a selector that matches nothing: keep them in step with the chart.
    tilt = run_tiltfile()
    ((_, kw),) = tilt.helm
    from conftest import helm

    values = helm.parse_set_string(",".join(kw["set"]))
    rendered = objects(values, name=kw["name"], namespace=kw["namespace"])
    crds = [yaml.safe_load(p.read_text()) for p in (CHART / "crds").iterdir()]
    inline = [d for item in tilt.yaml if isinstance(item, tuple) and item[0] == "blob" for d in yaml.safe_load_all(item[1]) if d]
    known = {f"{d['metadata']['name']}:{d['kind'].lower()}" for d in rendered + crds + inline}
    for resource in tilt.resources.values():
        for selector in resource.get("objects", []):
            assert selector in known, selector
    workloads = {d["metadata"]["name"] for d in rendered + inline if d["kind"] in ("Deployment", "StatefulSet")}
    for name, resource in tilt.resources.items():
        assert resource.get("new_name") or name in workloads, name


@pytest.mark.parametrize("auth", ["none", "keys"])
def test_tiltfile_chart_overrides_pass_the_schema_and_give_bare_image_names(auth):
    from conftest import helm

    ((_, kw),) = run_tiltfile({"auth": auth}).helm
    # The same parser as `helm --set a=1,b=2`.
    values = helm.parse_set_string(",".join(kw["set"]))
    assert values["image"]["registry"] == ""
    text = render(values, name=kw["name"], namespace=kw["namespace"])["sluice/templates/operator-deployment.yaml"]
    deployment = yaml.safe_load(text)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    # docker_build('sluice-operator') / ('sluice-gateway') match these references.
    assert container["image"] == "sluice-operator:dev"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SLUICE_GATEWAY_IMAGE"] == "sluice-gateway:dev"
    assert env["SLUICE_GATEWAY_AUTH"] == auth


def test_tiltfile_rejects_an_unknown_auth_mode():
    with pytest.raises(RuntimeError, match="--auth"):
        run_tiltfile({"auth": "basic"})


def test_tiltfile_inline_manifests_are_valid():
    docs = [d for item in run_tiltfile().yaml if isinstance(item, tuple) and item[0] == "blob" for d in yaml.safe_load_all(item[1]) if d]
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        ("Namespace", "sluice-system"),
        ("Deployment", "sluice-chaos"),
        ("Service", "sluice-chaos"),
    }
    for d in docs:
        kv.validate(d, "1.33.0", strict=True)
    chaos = next(d for d in docs if d["kind"] == "Deployment")
    ports = [c["args"] for c in chaos["spec"]["template"]["spec"]["containers"]]
    assert ports == [["chaos", "--listen", f"0.0.0.0:{p}"] for p in CHAOS_PORTS]


def test_tiltfile_quickstart_runs_after_the_operator_and_points_at_the_chaos_upstreams():
    tilt = run_tiltfile()
    quickstart = tilt.local["quickstart"]
    assert quickstart["resource_deps"] == ["sluice-operator", "sluice-chaos"]
    assert "examples/quickstart/routes.yaml" in quickstart["cmd"]
    # Every baseUrl of the quickstart is rewritten to the chaos Service.
    upstreams = (REPO / "examples/quickstart/upstreams.yaml").read_text()
    ports = [int(p) for p in re.findall(r"baseUrl: http://127\.0\.0\.1:(\d+)/", upstreams)]
    assert sorted(ports) == list(CHAOS_PORTS), ports
    assert "sed 's#http://127.0.0.1:#http://sluice-chaos.default.svc:#'" in quickstart["cmd"]
    # Every Secret the quickstart references is created, the service-account key (whose
    # token_uri names a placeholder too) through the same rewrite.
    secrets = sorted(d.name for d in (REPO / "examples/quickstart/secrets").iterdir() if d.is_dir())
    for s in secrets:
        assert s in quickstart["cmd"], s
    assert "examples/quickstart/secrets/vertex-sa/key.json" in quickstart["cmd"]
    assert "service/sluice-gateway-default 8080:80" in tilt.local["gateway-port-forward"]["serve_cmd"]


@pytest.mark.parametrize("binary", ["sluice-operator", "sluice-gateway"])
def test_dockerfiles_are_multi_stage_non_root_and_run_the_binary(binary):
    text = (REPO / f"Dockerfile.{binary.removeprefix('sluice-')}").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) == 2 and froms[0].startswith("rust:1.95"), froms
    assert froms[1] in ("gcr.io/distroless/cc-debian12:nonroot", "cgr.dev/chainguard/static")
    assert f"cargo build --release --locked -p {binary}" in text
    assert re.search(r"^USER 65532(:65532)?$", text, re.M)
    assert f'ENTRYPOINT ["/usr/local/bin/{binary}"]' in text


def test_dockerignore_keeps_build_outputs_and_git_out_of_the_context():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert "target/" in lines and ".git" in lines
    # `sluice-gateway demo` embeds the quickstart manifests and secrets at compile time.
    assert not any(line.startswith("examples") for line in lines)
