"""Instructions per work item, counted by callgrind: ``python -m bench.instructions``.

CPU time on this shared 2-core machine moves by 10 % or more between two blocks of the
same contender; callgrind's count of executed instructions moves by about 1-2 %
between two runs.  So a change of a few per cent on one path (the blocking adapter's
``select``, say) is decided here.  For each contender and server, the 10-tool work item
(:mod:`bench.contenders`, warm pool and era cache) runs ``--small`` and ``--large``
times in a child under ``valgrind --tool=callgrind``; the figure is
``(Ir(large) - Ir(small)) / (large - small)``, start-up and warm-up cancelled.  With
the four issue-12 contenders, each place also gets ``sync ÷ asyncio`` and
``(sync ÷ floor-sync) ÷ (asyncio ÷ floor-asyncio)``.

What a count leaves out: the kernel's work (system calls, page faults) and the cost
of cache misses, both of which CPU time includes.  Counts decide between two Python
paths; the ratios ``make bench`` reports stay CPU time.

The blocking adapter's watcher thread wakes every ``GRACE`` (50 ms) of wall time.
Under valgrind's clock, about 50 times slower, that is 50 times as many wake-ups per
item as at full speed: about 10,000 instructions per item on the h1 json server,
against some 200 at full speed.  So ``sansmcp-sync`` runs with its watcher off
(``--watcher`` keeps it on); the sequential items never need it.

Usage: ``python -m bench.instructions [--servers h1/json,h1/sse] [--eras modern,legacy]
[--contenders ...] [--small 20] [--large 620] [--watcher]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .contenders import RUNTIME, make
from .procs import Server, make_tls

ISSUE_12 = ("sansmcp-sync", "sansmcp-asyncio", "floor-sync", "floor-asyncio")
SERVERS = {  # label: (http, body, tls)
    "h1/json": ("h1", "json", False),
    "h1/sse": ("h1", "sse", False),
    "h2/json": ("h2", "json", False),
    "h2/sse": ("h2", "sse", False),
    "h2tls/json": ("h2", "json", True),
}


def child(name: str, url: str, era: str, http: str, ca: str, n: int, watcher: bool) -> None:
    """Run ``n`` work items of contender ``name`` (the process valgrind counts)."""
    if name == "sansmcp-sync" and not watcher:
        from sansmcp.io_adapters.blocking._turns import Turns

        Turns._start_watching = lambda self: None  # type: ignore[method-assign]
    contender = make(name, url, era, http, ca or None)
    if RUNTIME[name] == "sync":
        asyncio.run(contender.open())
        for _ in range(n):
            contender.item_sync()  # type: ignore[attr-defined]
        asyncio.run(contender.close())
        return

    async def items() -> None:
        await contender.open()
        for _ in range(n):
            await contender.item()
        await contender.close()

    if RUNTIME[name] == "trio":
        import trio

        trio.run(items)
    else:
        asyncio.run(items())


def count(args: list[str], n: int) -> int:
    """Instructions valgrind counted in one child run of ``n`` items."""
    with tempfile.TemporaryDirectory() as scratch:
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out"]
        out = subprocess.run(
            [*valgrind, sys.executable, "-m", "bench.instructions", "--child", *args, str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
    for line in out.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split()[-1])
    raise RuntimeError(f"no instruction count from valgrind: {out.stderr[-500:]}")


def per_item(args: list[str], small: int, large: int) -> float:
    return (count(args, large) - count(args, small)) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--servers", default="h1/json,h1/sse")
    parser.add_argument("--eras", default="modern,legacy")
    parser.add_argument("--contenders", default=",".join(ISSUE_12))
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=620)
    parser.add_argument("--watcher", action="store_true")
    args = parser.parse_args()
    if args.child:
        name, url, era, http, ca, watcher, n = args.child
        return child(name, url, era, http, ca, int(n), watcher == "1")
    names = args.contenders.split(",")
    scratch = Path(tempfile.mkdtemp())
    tls = make_tls(scratch / "tls")
    with open(scratch / "server.log", "w") as log:
        for label in args.servers.split(","):
            http, body, secure = SERVERS[label]
            server = Server(
                http=http,
                body=body,
                tools=10,
                log=log,
                cpu=None,
                tls=(tls["cert"], tls["key"]) if secure else None,
            )
            ca = tls["ca"] if secure else ""
            try:
                for era in args.eras.split(","):
                    jobs = [
                        [name, server.url, era, http, ca, "1" if args.watcher else "0"]
                        for name in names
                    ]
                    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two cores
                        counted = pool.map(lambda job: per_item(job, args.small, args.large), jobs)
                        irs = dict(zip(names, counted, strict=True))
                    report(label, era, irs)
            finally:
                server.stop()


def report(label: str, era: str, irs: dict[str, Any]) -> None:
    row = "  ".join(f"{name} {ir:,.0f}" for name, ir in irs.items())
    print(f"{label:11} {era:7} instructions/item  {row}", flush=True)
    if all(name in irs for name in ISSUE_12):
        sync, asyncio_, floor_sync, floor_asyncio = (irs[name] for name in ISSUE_12)
        b = (sync / floor_sync) / (asyncio_ / floor_asyncio)
        print(f"{'':20} sync ÷ asyncio {sync / asyncio_:.3f}  (b) {b:.3f}", flush=True)


if __name__ == "__main__":
    main()
