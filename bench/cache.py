"""The Client-wide listing cache: requests, CPU and memory (``python -m bench.cache``).

Against ``bench.server --cache-ttl 600000`` (the official SDK server sending ``ttlMs`` /
``cacheScope: public`` on ``tools/list`` and ``server/discover``), one asyncio Client
per arm runs list-only work items (connect + ``list_tools()`` + close):

* **hit** -- the default Client: after its first item every listing is a fresh hit;
* **miss** -- the same Client with ``Limits(max_cache_entries=0)`` (the cache off), so
  every item lists.

Rounds alternate between the arms (CPU by ``time.process_time``, ratios read within
the run: the machine is shared).  The server counts what each arm sent.  Memory: what
a Client keeps after a 1,000-tool listing, cache on minus cache off (``tracemalloc``),
per cached tool, beside the cache's own byte estimate.  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
import tracemalloc
from typing import Any

from sansmcp import Config, Limits
from sansmcp.io_adapters.asyncio import Client

from .procs import LineProcess


def _server(tools: int) -> tuple[LineProcess, str]:
    args = ["-m", "bench.server", "--tools", str(tools), "--json", "--cache-ttl", "600000"]
    proc = LineProcess(args, log=sys.stderr)
    ready = proc.readline(timeout=60)
    if not ready.startswith("READY "):
        raise RuntimeError(f"the bench server said {ready!r}")
    _, port, path = ready.split()
    return proc, f"http://127.0.0.1:{port}{path}"


def _stats(proc: LineProcess, action: str = "stats") -> dict[str, Any]:
    proc.send(action)
    return proc.read_json(timeout=30)


async def _items(client: Client, config: Config, n: int) -> None:
    for _ in range(n):
        async with client.connect(config) as conn:
            await conn.list_tools()


async def _cpu(url: str, proc: LineProcess, rounds: int, per_round: int) -> dict[str, Any]:
    config = Config(url=url)
    arms = {
        "hit": Client(allow_loopback=True),
        "miss": Client(allow_loopback=True, limits=Limits(max_cache_entries=0)),
    }
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    sent: dict[str, dict[str, int]] = {name: {} for name in arms}
    for client in arms.values():
        await _items(client, config, 20)  # warm: pool, era hint, cache
    for _ in range(rounds):
        for name, client in arms.items():
            _stats(proc, "reset")
            start = time.process_time()
            await _items(client, config, per_round)
            cpu[name].append((time.process_time() - start) / per_round)
            for method, count in _stats(proc)["by_rpc"].items():
                sent[name][method] = sent[name].get(method, 0) + count
    for client in arms.values():
        await client.aclose()
    hit, miss = statistics.median(cpu["hit"]), statistics.median(cpu["miss"])
    items = rounds * per_round
    return {
        "items_per_arm": items,
        "cpu_per_item_us": {"hit": round(hit * 1e6, 1), "miss": round(miss * 1e6, 1)},
        "hit_over_miss": round(hit / miss, 3),
        "requests": {name: sum(methods.values()) for name, methods in sent.items()},
        "requests_by_method": sent,
    }


async def _retained(url: str, cache_on: bool) -> tuple[int, int]:
    """Bytes a Client still holds after one listing (and the cache's own estimate)."""
    limits = Limits() if cache_on else Limits(max_cache_entries=0)
    client = Client(allow_loopback=True, limits=limits)
    config = Config(url=url)
    async with client.connect(config) as conn:  # warm: a pooled socket, the era
        await conn.list_tools()
    client._driver.cache = type(client._driver.cache)(
        max_entries=limits.max_cache_entries, max_bytes=limits.max_cache_bytes
    )
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with client.connect(config) as conn:
        tools = await conn.list_tools()
    count = len(tools)
    del tools, conn
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    estimate = client._driver.cache.bytes
    await client.aclose()
    return (after - before) // max(1, count), estimate // max(1, count)


async def _memory(url: str) -> dict[str, Any]:
    on, estimate = await _retained(url, cache_on=True)
    off, _ = await _retained(url, cache_on=False)
    return {
        "retained_per_tool_bytes": {"cache_on": on, "cache_off": off},
        "cache_per_tool_bytes": on - off,
        "cache_estimate_per_tool_bytes": estimate,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--tools", type=int, default=10)
    args = parser.parse_args()
    report: dict[str, Any] = {"tools": args.tools}
    proc, url = _server(args.tools)
    try:
        report["cpu"] = asyncio.run(_cpu(url, proc, args.rounds, args.per_round))
    finally:
        proc.stop()
    proc, url = _server(1000)
    try:
        report["memory_1000_tools"] = asyncio.run(_memory(url))
    finally:
        proc.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
