"""What every part shares: paths, the request body, the cores, the two modes, logging."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
# SLUICE_BENCH_BIN benches another build (e.g. a branch built elsewhere).
BIN = Path(os.environ.get("SLUICE_BENCH_BIN", ROOT / "target" / "release" / "sluice-gateway"))
OHA = shutil.which("oha") or str(Path.home() / ".cargo" / "bin" / "oha")
PG_ADMIN_URL = os.environ.get("SLUICE_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test")
PG_DB = "sluice_bench"

# The same small, non-streaming chat completion for every system.
MODEL = "bench-model"
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 16,
    },
    separators=(",", ":"),
)
# The same request streamed (`stream: true`): the mock sends its default 5 content
# events, the finish and usage events, and `[DONE]`.
STREAM_BODY = BODY[:-1] + ',"stream":true}'
# The same request for the route whose upstream speaks the Anthropic protocol: the
# gateway translates it to a Messages request and the answer back.
ANTHROPIC_MODEL = "bench-claude"
ANTHROPIC_BODY = BODY.replace(f'"model":"{MODEL}"', f'"model":"{ANTHROPIC_MODEL}"')
# The same request in the Messages protocol, sent straight to the mock: the baseline of
# the translated route (the mock's Anthropic path is not its OpenAI path).
ANTHROPIC_DIRECT_BODY = json.dumps(
    {
        "model": ANTHROPIC_MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
    },
    separators=(",", ":"),
)
# The Messages request the gateway serves at `/v1/messages` (`sluice-messages`): the
# same bytes as the direct baseline's, for the route `bench-claude`, whose one candidate
# speaks `anthropic`, so the gateway sends the client's body on natively with the
# candidate's model spliced in (the same name here) and passes the answer back as it came.
MESSAGES_BODY = ANTHROPIC_DIRECT_BODY
MESSAGES_PATH = "/v1/messages"
MESSAGES_HEADERS = {"anthropic-version": "2023-06-01"}
# The same request on the route that caches deterministic completions
# (`cache: {completions: deterministic}`, docs/design.md §13), with `temperature: 0` so
# that it is one: every repeat of it is answered from the gateway's cache.
CACHE_MODEL = "bench-cached"
CACHE_BODY = json.dumps(
    {
        "model": CACHE_MODEL,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 16,
        "temperature": 0,
    },
    separators=(",", ":"),
)
# The cache miss's twin (the runs at once, bench/sluice_bench/phases.py): the same request
# and headers to a route that is the cached one without `cache`, under a model name of
# the same length, so that the two differ by the cache alone.
CACHE_TWIN_MODEL = "bench-uncach"
CACHE_TWIN_BODY = CACHE_BODY.replace(f'"model":"{CACHE_MODEL}"', f'"model":"{CACHE_TWIN_MODEL}"')
# The limits' runs at once (bench/sluice_bench/phases.py): the same request to a route
# without prices. A priced request's answer waits for its settlement's batch commit
# (`--settle-window`), and where it falls in its batch moves a half's p50 by tens of µs
# per round; unpriced, neither key reserves or settles money, and what differs between
# the two halves is the limits alone (admitted from leases, settled with the real usage,
# the `x-ratelimit-*` headers written).
UNPRICED_MODEL = "bench-unpriced"
UNPRICED_BODY = BODY.replace(f'"model":"{MODEL}"', f'"model":"{UNPRICED_MODEL}"')
P99_BOUND_MS = 5.0
# Connections of the one-vs-two-gateways runs. With billing on, every answer waits for
# its settlement's batch commit (a few ms), so 64 connections would cap any system at
# 64 / latency whatever it could serve; these runs measure the gateways, not oha.
SCALING_CONNS = 512
PERCENTILES = ["p50", "p90", "p99", "p99.9"]
# Cores: the load generator (and this script) on one, the systems under test and the
# mock upstream share the other.
LOAD_CPU = "0"
SUT_CPU = "1"


@dataclass
class Mode:
    name: str
    rates: list[int]
    rounds: int
    duration: int
    ceiling_rates: list[int]
    ceiling_duration: int
    # One gateway against two on one Postgres account (SCALING_CONNS connections).
    scaling_rates: list[int]
    litellm_rates: list[int]
    litellm_duration: int
    warmup: int
    streams: int
    failovers: int
    retry_budget: float
    callgrind_requests: int


FULL = Mode(
    name="full",
    rates=[1000, 2000, 5000],
    rounds=3,
    duration=8,
    ceiling_rates=[7500, 10000, 15000, 20000],
    ceiling_duration=5,
    scaling_rates=[7500, 10000, 12500, 15000, 17500, 20000],
    litellm_rates=[10, 25, 50, 100, 200, 500, 1000],
    litellm_duration=8,
    warmup=2,
    streams=60,
    failovers=40,
    retry_budget=150,
    callgrind_requests=2000,
)
QUICK = Mode(
    name="quick",
    rates=[1000, 5000],
    rounds=1,
    duration=4,
    ceiling_rates=[10000],
    ceiling_duration=3,
    scaling_rates=[10000, 15000, 20000],
    litellm_rates=[25, 100, 500],
    litellm_duration=4,
    warmup=1,
    streams=16,
    failovers=12,
    retry_budget=30,
    callgrind_requests=500,
)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
