"""The test side: the client host subprocess, and running one case on every backend.

:class:`ClientHost` starts ``tests.hostile.client_host`` (``-X dev -W error``) and sends
it batches of scenario specs; :func:`run_case` starts one hostile server per backend,
runs the clients (batches of them concurrently) against their servers, stops the servers
and returns each backend's (report, server stats); ``BACKENDS`` are asyncio, trio and
sync (the blocking adapter behind ``tests/e2e/sync_shim.py``).
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import subprocess
import sys
import time
from typing import Any

from .cases import BACKENDS, Case, client_spec
from .serving import ServerThread, Stats

ROOT = pathlib.Path(__file__).resolve().parents[2]
# How long the host may take to answer a batch beyond its children's hard timeout (a safety
# net: generous for a loaded machine).
HOST_SLACK = 30.0


class ClientHost:
    """The forking client host (see ``client_host.py``); one per test session."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "dev", "-W", "error", "-m", "tests.hostile.client_host"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._buffer = b""
        line = self._read_line(120.0)
        if line != "READY":
            self.close()
            raise RuntimeError(f"client host did not start: {line!r}")

    def run(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(specs) + "\n").encode())
        self.proc.stdin.flush()
        timeout = max(float(s["hard_timeout"]) for s in specs) + HOST_SLACK
        reports: list[dict[str, Any]] = json.loads(self._read_line(timeout))
        return reports

    def _read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(remaining, 0))
            if not ready:
                raise TimeoutError(f"client host gave no answer within {timeout:g} s")
            data = os.read(fd, 1 << 20)
            if not data:
                raise RuntimeError(f"client host exited: {self._stderr()}")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def _stderr(self) -> str:
        self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        return err.decode("utf-8", "replace")[-2000:]

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


# Backends run concurrently within a batch.  The blocking adapter runs in a batch of its
# own: three concurrent clients (plus their servers) on a 2-core machine miss the CPU-bound
# cases' 1 s deadlines on every backend, and the cases were calibrated for two.
BATCHES = (("asyncio", "trio"), ("sync",))
assert sorted(b for batch in BATCHES for b in batch) == sorted(BACKENDS)


def run_case(host: ClientHost, case: Case) -> dict[str, tuple[dict[str, Any], Stats, int]]:
    """Run ``case`` on every backend (concurrently within each of ``BATCHES``): backend ->
    (report, server stats, port)."""
    out: dict[str, tuple[dict[str, Any], Stats, int]] = {}
    for batch in BATCHES:
        servers = {backend: ServerThread(case.make_server()) for backend in batch}
        started: list[ServerThread] = []
        try:
            for server in servers.values():
                started.append(server.__enter__())
            specs = [client_spec(case, backend, servers[backend].port) for backend in batch]
            reports = host.run(specs)
        finally:
            for server in started:
                server.stop()
        for backend, report in zip(batch, reports, strict=True):
            out[backend] = (report, servers[backend].stats, servers[backend].port)
    return {backend: out[backend] for backend in BACKENDS}


def measurement(
    case: Case, backend: str, report: dict[str, Any], stats: Stats, baseline_kib: int
) -> dict[str, Any]:
    """One row of ``SANSMCP_HOSTILE_REPORT``: a run's outcome, times, peak RSS, requests."""
    error = report.get("error", {})
    lag = report.get("loop_lag_max")
    return {
        "case": case.name,
        "backend": backend,
        "outcome": error.get("class", "ok" if report.get("ok") else "escaped"),
        "bound": error.get("bound") or error.get("reason") or error.get("cause"),
        "elapsed": report.get("elapsed"),
        "total": report.get("total"),
        "maxrss_kib": report.get("maxrss_kib"),
        "baseline_kib": baseline_kib,
        "loop_lag_ms": None if lag is None else 1000 * lag,
        "requests": stats.count(),
    }
