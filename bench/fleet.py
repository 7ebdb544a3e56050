"""A fleet listing through a shared store: what the server serves (``python -m bench.fleet``).

Issue 28's figure: a fleet of ``--procs`` worker processes (8) each runs ``--items``
list-only work items (connect + ``list_tools()`` + close, one asyncio ``Client`` per
process) against ``bench.server --cache-ttl 600000`` (``cacheScope: public``), all
started at once.  Two arms:

* **local** -- each worker's in-process cache only (today's default);
* **redis** -- every worker shares one ``RedisStore`` on a real ``redis-server`` (a
  Unix socket in a temporary directory, flushed before the arm).

The server counts the ``tools/list`` requests it served per arm (the target: 1 for the
fleet with Redis, one per process without).  Each worker also reports its CPU per work
item (``time.process_time``, the first item -- the cold one -- apart).  Prints one
JSON object.  Needs ``redis-server`` (``tests.redis_server.RedisServer.find``) and the
``redis`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from .procs import LineProcess

SECRET = b"bench-fleet-secret-32-bytes-long"


def _server() -> tuple[LineProcess, str]:
    args = ["-m", "bench.server", "--tools", "10", "--json", "--cache-ttl", "600000"]
    proc = LineProcess(args, log=sys.stderr)
    ready = proc.readline(timeout=60)
    if not ready.startswith("READY "):
        raise RuntimeError(f"the bench server said {ready!r}")
    _, port, path = ready.split()
    return proc, f"http://127.0.0.1:{port}{path}"


def _stats(proc: LineProcess, action: str = "stats") -> dict[str, Any]:
    proc.send(action)
    return proc.read_json(timeout=30)


async def _work(url: str, redis_url: str | None, items: int) -> dict[str, Any]:
    from sansmcp import Config
    from sansmcp.io_adapters.asyncio import Client

    store = None
    if redis_url is not None:
        from sansmcp.stores import RedisStore

        store = RedisStore(redis_url, secret=SECRET)
    config = Config(url=url)
    cpu: list[float] = []
    async with Client(allow_loopback=True, store=store) as client:
        for _ in range(items):
            start = time.process_time()
            async with client.connect(config) as conn:
                await conn.list_tools()
            cpu.append(time.process_time() - start)
        fleet = client._driver.fleet
        counts = None if fleet is None or fleet.listings is None else fleet.listings.counts
    if store is not None:
        await store.aclose()
    rest = cpu[1:] or cpu
    return {
        "cold_us": round(cpu[0] * 1e6, 1),
        "warm_us": round(statistics.median(rest) * 1e6, 1),
        "listings": counts,
    }


def _arm(url: str, redis_url: str | None, procs: int, items: int) -> list[dict[str, Any]]:
    """``procs`` workers started at once; what each reported."""
    command = [sys.executable, "-m", "bench.fleet", "--worker", url, "--items", str(items)]
    if redis_url is not None:
        command += ["--redis", redis_url]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    reports = []
    for worker in workers:
        out, _ = worker.communicate(timeout=600)
        if worker.returncode != 0:
            raise RuntimeError(f"a fleet worker failed ({worker.returncode})")
        reports.append(json.loads(out))
    return reports


def _summed(counts: list[dict[str, int] | None]) -> dict[str, int] | None:
    """The workers' listing counts, summed (None: no store)."""
    present = [c for c in counts if c is not None]
    if not present:
        return None
    return {name: sum(c[name] for c in present) for name in present[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--redis", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(asyncio.run(_work(args.worker, args.redis, args.items))))
        return
    sys.path.insert(0, os.getcwd())
    from tests.redis_server import RedisServer

    binary = RedisServer.find()
    if binary is None:
        raise SystemExit("bench.fleet needs redis-server (PATH, /usr/bin, $SANSMCP_REDIS_SERVER)")
    proc, url = _server()
    report: dict[str, Any] = {"procs": args.procs, "items_per_proc": args.items}
    with tempfile.TemporaryDirectory() as directory:
        redis = RedisServer(binary, pathlib.Path(directory))
        redis.start()
        try:
            for arm, redis_url in (("local", None), ("redis", redis.url)):
                _stats(proc, "reset")
                started = time.monotonic()
                reports = _arm(url, redis_url, args.procs, args.items)
                wall = time.monotonic() - started
                by_rpc = _stats(proc)["by_rpc"]
                report[arm] = {
                    "tools_list_served": by_rpc.get("tools/list", 0),
                    "requests": sum(by_rpc.values()),
                    "wall_s": round(wall, 2),
                    "cold_us_median": statistics.median(r["cold_us"] for r in reports),
                    "warm_us_median": statistics.median(r["warm_us"] for r in reports),
                    "store_counts": _summed([r["listings"] for r in reports]),
                }
        finally:
            redis.stop()
            proc.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
