"""The cache values (cache.*, docs/install.md): the gateways' --cache-max-bytes and
--cache-redis, passed to the operator in SLUICE_GATEWAY_ENV, which puts them on every
gateway container (EnvVars with valueFrom included; it refuses only SLUICE_LEDGER_URL and
POD_NAME, operator/src/render.rs OWN_GATEWAY_ENV)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import CHART, REPO, env_of, helm, load_values, objects, one, render, require

kv = require("kubernetes_validate")

REDIS_URL = "redis://redis-master.cache.svc:6379/2"


def gateway_env(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The EnvVar list the operator is given for every gateway container."""
    operator = one(objects(values), "Deployment", "sluice-operator")["spec"]["template"]["spec"]["containers"][0]
    return json.loads(env_of(operator).get("SLUICE_GATEWAY_ENV", "[]"))


def cache_env(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in gateway_env(values) if e["name"].startswith("SLUICE_CACHE_")]


def test_default_values_pass_no_cache_flags():
    # The gateway's own defaults (128 MiB in process, no shared tier): a default install
    # leaves the gateway pods as they were before these values existed.
    assert cache_env({}) == []
    assert cache_env({"gateway": {"auth": "none"}}) == []
    assert load_values()["cache"] == {"maxBytes": 134217728, "redis": {"url": "", "existingSecret": "", "existingSecretKey": "url"}}


def test_the_default_max_bytes_is_the_gateways_own():
    # gateway/src/cache.rs: `pub const DEFAULT_MAX_BYTES: u64 = 128 * 1024 * 1024;`, and
    # the flags read the environment names the chart sets.
    source = (REPO / "gateway/src/cache.rs").read_text()
    m = re.search(r"pub const DEFAULT_MAX_BYTES: u64 = ([0-9_ *]+);", source)
    assert m, "DEFAULT_MAX_BYTES not found in gateway/src/cache.rs"
    product = 1
    for factor in m.group(1).split("*"):
        product *= int(factor.strip().replace("_", ""))
    assert load_values()["cache"]["maxBytes"] == product
    serve = (REPO / "gateway/src/cmd/serve.rs").read_text()
    assert 'env = "SLUICE_CACHE_MAX_BYTES"' in serve and 'env = "SLUICE_CACHE_REDIS_URL"' in serve


@pytest.mark.parametrize("max_bytes, rendered", [(0, "0"), (1, "1"), (10737418240, "10737418240")])
def test_max_bytes_passes_through_as_an_integer(max_bytes, rendered):
    # 0 turns the cache off; large values must not come out as 1.073741824e+10.
    assert cache_env({"cache": {"maxBytes": max_bytes}}) == [{"name": "SLUICE_CACHE_MAX_BYTES", "value": rendered}]


def test_redis_url_is_passed_as_a_value_after_the_grant_flags():
    env = gateway_env({"cache": {"redis": {"url": REDIS_URL}}})
    assert [e["name"] for e in env] == ["SLUICE_GRANT_VALIDITY", "SLUICE_GRANT_MAX", "SLUICE_SETTLE_WINDOW", "SLUICE_CACHE_REDIS_URL"]
    assert env[-1] == {"name": "SLUICE_CACHE_REDIS_URL", "value": REDIS_URL}


def test_redis_url_alone_makes_the_gateway_environment():
    # gateway.auth=none: no grant flags, so the cache is the whole list.
    assert gateway_env({"gateway": {"auth": "none"}, "cache": {"redis": {"url": "rediss://r.example.com:6380"}}}) == [
        {"name": "SLUICE_CACHE_REDIS_URL", "value": "rediss://r.example.com:6380"},
    ]


def test_redis_secret_is_passed_as_value_from():
    assert cache_env({"cache": {"redis": {"existingSecret": "redis-cache"}}}) == [
        {"name": "SLUICE_CACHE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "redis-cache", "key": "url"}}},
    ]
    assert cache_env({"cache": {"maxBytes": 0, "redis": {"existingSecret": "redis-cache", "existingSecretKey": "redis-url"}}}) == [
        {"name": "SLUICE_CACHE_MAX_BYTES", "value": "0"},
        {"name": "SLUICE_CACHE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "redis-cache", "key": "redis-url"}}},
    ]


def test_cache_env_sits_between_gateway_env_billing_and_tracing():
    env = gateway_env({
        "gateway": {"env": [{"name": "RUST_LOG", "value": "debug"}]},
        "cache": {"maxBytes": 268435456, "redis": {"url": REDIS_URL}},
        "tracing": {"otlpEndpoint": "http://otel:4318"},
    })
    names = [e["name"] for e in env]
    assert names[:6] == ["RUST_LOG", "SLUICE_GRANT_VALIDITY", "SLUICE_GRANT_MAX", "SLUICE_SETTLE_WINDOW",
                         "SLUICE_CACHE_MAX_BYTES", "SLUICE_CACHE_REDIS_URL"]
    assert names[6] == "OTEL_EXPORTER_OTLP_ENDPOINT"


@pytest.mark.parametrize("version", ["1.33.0", "1.37.0"])
def test_the_gateway_env_is_a_valid_core_v1_env_list(version):
    # What the operator copies into every gateway container, checked as a Pod's env.
    env = gateway_env({"cache": {"maxBytes": 0, "redis": {"existingSecret": "redis-cache", "existingSecretKey": "uri"}}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gateway"},
        "spec": {"containers": [{"name": "gateway", "image": "sluice-gateway:dev", "env": env}]},
    }
    kv.validate(pod, version, strict=True)


def test_gateway_env_may_still_set_max_bytes_while_cache_max_bytes_is_the_default():
    env = gateway_env({"gateway": {"env": [{"name": "SLUICE_CACHE_MAX_BYTES", "value": "1000"}]}})
    assert [e for e in env if e["name"] == "SLUICE_CACHE_MAX_BYTES"] == [{"name": "SLUICE_CACHE_MAX_BYTES", "value": "1000"}]


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"cache": {"redis": {"url": REDIS_URL, "existingSecret": "redis-cache"}}},
            "cache.redis.url and cache.redis.existingSecret are both set: choose one",
        ),
        (
            {"cache": {"redis": {"url": REDIS_URL}}, "gateway": {"env": [{"name": "SLUICE_CACHE_REDIS_URL", "value": REDIS_URL}]}},
            "gateway.env sets SLUICE_CACHE_REDIS_URL while cache.redis.url or cache.redis.existingSecret sets it too",
        ),
        (
            {"cache": {"maxBytes": 0}, "gateway": {"env": [{"name": "SLUICE_CACHE_MAX_BYTES", "value": "0"}]}},
            "gateway.env sets SLUICE_CACHE_MAX_BYTES while cache.maxBytes sets it too",
        ),
    ],
    ids=["url-and-secret", "redis-twice", "max-bytes-twice"],
)
def test_contradictory_cache_values_fail_with_a_message_naming_them(values, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(values)


@pytest.mark.parametrize(
    "values, where",
    [
        ({"cache": {"maxBytes": -1}}, "/cache/maxBytes"),
        ({"cache": {"maxBytes": "128Mi"}}, "/cache/maxBytes"),
        ({"cache": {"maxBytes": 1.5}}, "/cache/maxBytes"),
        ({"cache": {"redis": {"url": "redis-master:6379"}}}, "/cache/redis/url"),
        ({"cache": {"redis": {"url": "http://redis:6379"}}}, "/cache/redis/url"),
        ({"cache": {"redis": {"existingSecret": "Redis_Cache"}}}, "/cache/redis/existingSecret"),
        ({"cache": {"redis": {"existingSecretKey": ""}}}, "/cache/redis/existingSecretKey"),
        ({"cache": {"redisUrl": REDIS_URL}}, "'redisUrl' not allowed"),
        ({"cache": {"redis": {"password": "x"}}}, "'password' not allowed"),
    ],
)
def test_schema_refuses_invalid_cache_values(values, where):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.validate_schema(values)


def test_helm_lint_is_clean_with_a_shared_tier():
    values = {"cache": {"maxBytes": 0, "redis": {"existingSecret": "redis-cache", "existingSecretKey": "uri"}}}
    report = helm.lint(CHART, values, strict=True, namespace="sluice-system", kube_version="v1.33.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report
