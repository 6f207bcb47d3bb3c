"""Waiting for state: poll until it holds, never sleep a fixed time."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.25) -> Any:
    """Calls `fn` until it returns something truthy (returned) or `timeout` passes
    (AssertionError naming `what` and the last value or error `fn` raised)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - report whatever kept it from passing
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)
