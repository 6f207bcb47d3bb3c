"""The processes of a run: started in their own process group, pinned, measured (CPU, RSS), stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from .settings import SUT_CPU, log


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK
        except OSError:
            pass
    return total


def rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def postgres_pids() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == "postgres":
                        out.append(int(d))
            except OSError:
                pass
    return out


class Service:
    """A process we started, in its own process group, logging to a file."""

    running: list["Service"] = []

    def __init__(self, name: str, cmd: list[str], workdir: Path, cpus: str | None = SUT_CPU, env: dict | None = None):
        self.name = name
        self.log_path = workdir / f"{name}.log"
        full = (["taskset", "-c", cpus] if cpus else []) + cmd
        self.cmd = full
        self.logf = open(self.log_path, "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(full, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=e, cwd=workdir)
        self.pid = self.proc.pid
        Service.running.append(self)

    def pids(self) -> list[int]:
        return tree(self.pid)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, pattern: str, timeout: float = 60) -> re.Match:
        end = time.time() + timeout
        rx = re.compile(pattern)
        while time.time() < end:
            m = rx.search(self.log_text())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not log /{pattern}/ (exit {self.proc.poll()}):\n{self.log_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(8)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        self.logf.close()
        if self in Service.running:
            Service.running.remove(self)

    @classmethod
    def stop_all(cls) -> None:
        for s in list(reversed(cls.running)):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - best effort at shutdown
                log(f"stopping {s.name}: {e}")
