"""Hand-written clients for what oha does not measure: streams (time to first event,
gaps) and sequential failover requests."""

from __future__ import annotations

import http.client
import json
import statistics
import time

from .settings import BODY


def stream_once(port: int, path: str, body: dict, headers: dict | None = None, timeout: float = 30) -> dict:
    """One SSE request; times the first content event and the gaps between them."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json", "accept": "text/event-stream"}
    h.update(headers or {})
    data = json.dumps(body)
    t0 = time.perf_counter()
    c.request("POST", path, data, h)
    r = c.getresponse()
    times, done, error = [], False, None
    if r.status != 200:
        r.read()
        c.close()
        return {"status": r.status, "ttfb_ms": None, "gaps_ms": [], "events": 0, "done": False, "headers": dict(r.getheaders())}
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        now = time.perf_counter()
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        if "error" in ev:
            error = ev["error"]
            continue
        choices = ev.get("choices") or []
        content = choices and ((choices[0].get("delta") or {}).get("content") or choices[0].get("text"))
        if content:
            times.append(now)
    c.close()
    gaps = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    return {"status": 200, "ttfb_ms": (times[0] - t0) * 1000 if times else None, "gaps_ms": gaps, "events": len(times),
            "done": done, "error": error, "headers": dict(r.getheaders())}


class Client:
    """Sequential keep-alive requests, timed from send to the last byte."""

    def __init__(self, port: int, headers: dict | None = None):
        self.port = port
        self.headers = {"content-type": "application/json", **(headers or {})}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, path: str, body: str) -> tuple[int, float, dict]:
        for attempt in range(2):
            try:
                t0 = time.perf_counter()
                self.conn.request("POST", path, body, self.headers)
                r = self.conn.getresponse()
                r.read()
                return r.status, (time.perf_counter() - t0) * 1000, dict(r.getheaders())
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def failover_series(port: int, model: str, n: int, stream: bool, pace_s: float = 0.05) -> dict:
    """n sequential requests at about 1/pace_s per second; latency (or TTFB for streams)."""
    lat, statuses, failed_over, known = [], [], 0, False
    client = Client(port)
    body = json.loads(BODY)
    body["model"] = model
    if stream:
        body["stream"] = True
        body["max_tokens"] = 8
    raw = json.dumps(body)
    if model == "fo-base":
        # warm the gateway's connection pool to the backup, untimed
        for _ in range(3):
            stream_once(port, "/v1/chat/completions", body) if stream else client.post("/v1/chat/completions", raw)
    for _ in range(n):
        t = time.perf_counter()
        if stream:
            r = stream_once(port, "/v1/chat/completions", body)
            statuses.append(r["status"])
            ok = r["status"] == 200 and r["done"] and r["ttfb_ms"] is not None
            if ok:
                lat.append(r["ttfb_ms"])
            hdr = {k.lower(): v for k, v in r["headers"].items()}
        else:
            status, ms, hdr = client.post("/v1/chat/completions", raw)
            hdr = {k.lower(): v for k, v in hdr.items()}
            statuses.append(status)
            if status == 200:
                lat.append(ms)
        if "x-sluice-attempts" in hdr or "x-litellm-attempted-fallbacks" in hdr:
            known = True
        if hdr.get("x-sluice-attempts", "1") not in ("1", "") or hdr.get("x-litellm-attempted-fallbacks", "0") not in ("0", ""):
            failed_over += 1
        rest = pace_s - (time.perf_counter() - t)
        if rest > 0:
            time.sleep(rest)
    client.close()
    return {
        "n": n,
        "ok": sum(1 for s in statuses if s == 200),
        "failed_over": failed_over if known else None,
        "p50": pct(lat, 50),
        "p90": pct(lat, 90),
        "mean": statistics.fmean(lat) if lat else None,
        "statuses": sorted(set(statuses)),
    }
