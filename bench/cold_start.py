"""The CLI's cold start per backend: ``python -m bench.cold_start [--runs N]``.

Starts the bench server (the official ``mcp`` package, HTTP/1.1, 10 tools, JSON
responses), then runs ``sansmcp tools URL --allow-loopback --backend B`` ``N`` times
(20 by default) per backend, interleaved (asyncio, trio, sync, asyncio, ...) so the
machine's load falls on all alike, and prints the median wall time and the median CPU
(user + system of the child, ``os.wait4``) per backend.  A whole process each time:
interpreter start, imports, the TLS-free connect, the listing, the exit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .procs import ROOT, Server

BACKENDS = ("asyncio", "trio", "sync")
SANSMCP = Path(sys.executable).parent / "sansmcp"


def one(url: str, backend: str) -> tuple[float, float]:
    """(wall s, CPU s) of one ``sansmcp tools`` run; fails unless it exits 0."""
    command = [str(SANSMCP), "tools", url, "--allow-loopback", "--backend", backend]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    err = process.stderr.read()
    process.stderr.close()
    if process.returncode != 0:
        raise RuntimeError(f"{backend}: exit {process.returncode}: {err.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with open(os.devnull, "w") as log:
        server = Server(http="h1", body="json", tools=10, log=log, cpu=None)
        try:
            figures: dict[str, list[tuple[float, float]]] = {b: [] for b in BACKENDS}
            for backend in BACKENDS:  # a first run each, unmeasured: the page cache
                one(server.url, backend)
            for _ in range(args.runs):
                for backend in BACKENDS:
                    figures[backend].append(one(server.url, backend))
        finally:
            server.stop()
    print(f"sansmcp tools, {args.runs} runs per backend (load {os.getloadavg()[0]:.2f}):")
    print("| backend | wall median ms | CPU median ms |")
    print("|---|--:|--:|")
    for backend, runs in figures.items():
        wall = statistics.median(w for w, _ in runs) * 1000
        cpu = statistics.median(c for _, c in runs) * 1000
        print(f"| {backend} | {wall:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
