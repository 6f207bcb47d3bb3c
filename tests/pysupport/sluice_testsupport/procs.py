"""Processes of a test run: output to a log file, found through the `… on http://ADDR`
line they log (gateway, chaos upstream, kube-fake, operator), and dead with the test
process (Linux: PR_SET_PDEATHSIG) even if teardown never runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: `listening on http://ADDR` (gateway, chaos, kube-fake) and `serving /metrics and
#: /healthz on http://ADDR` (operator).
LISTENING = re.compile(r" on http://(\d+\.\d+\.\d+\.\d+:\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def die_with_parent() -> None:
    """Linux: SIGKILL the child when the thread that started it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux
        pass


@dataclass
class Proc:
    """A started process whose stdout and stderr go to `log`."""

    name: str
    argv: list[str]
    popen: subprocess.Popen
    log: Path
    addr: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return ANSI.sub("", self.log.read_text(errors="replace"))
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        return self.popen.returncode


#: Every process started, so that a session can stop what its fixtures left.
ALL_PROCS: list[Proc] = []


def spawn(name: str, argv: list[str], logdir: Path, env: Optional[dict[str, str]] = None,
          cwd: Optional[Path] = None) -> Proc:
    """Starts `argv` with output to `logdir/NAME.log` (appended)."""
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{name}.log"
    with open(log, "ab") as fh:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env if env is not None else dict(os.environ, NO_COLOR="1"),
            cwd=str(cwd or logdir),
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
    proc = Proc(name=name, argv=argv, popen=popen, log=log)
    ALL_PROCS.append(proc)
    return proc


def start(name: str, argv: list[str], logdir: Path, env: Optional[dict[str, str]] = None,
          timeout: float = 60.0) -> Proc:
    """`spawn`, then waits for the `… on http://ADDR` line (127.0.0.1 only);
    AssertionError with the process's output if it does not come."""
    proc = spawn(name, argv, logdir, env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = LISTENING.search(proc.log_text())
        if m:
            proc.addr = m.group(1)
            assert proc.addr.startswith("127.0.0.1:"), f"{name} bound {proc.addr}, not 127.0.0.1"
            return proc
        if proc.popen.poll() is not None:
            break
        time.sleep(0.02)
    proc.stop()
    raise AssertionError(f"{name} (`{' '.join(argv)}`) did not log '… on http://ADDR' "
                         f"(exit code {proc.popen.poll()}); its output:\n{proc.log_text()[-4000:]}")


def stop_all() -> None:
    """Stops every process still running, the last started first."""
    for p in reversed(ALL_PROCS):
        try:
            p.stop(timeout=5)
        except Exception:
            pass
