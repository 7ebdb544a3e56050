"""A fleet listing through a shared store (issue 28's figures): ``python -m bench.fleet``.

Against ``bench.server --cache-ttl 600000`` (``cacheScope: public``, 10 tools, JSON),
with a real ``redis-server`` on a Unix socket in a temporary directory
(:class:`tests.redis_server.RedisServer`), two sections, both in ``make bench``'s
report ("Fleet", from :func:`run`) and alone in ``make bench-fleet``:

* **fleet** -- ``--procs`` worker processes (8), all started at once, each running
  ``--items`` list-only work items (200: connect + ``list_tools()`` + close, one asyncio
  ``Client`` per process).  Arm ``local``: each worker's in-process cache only (today's
  default); arm ``redis``: every worker shares one ``RedisStore``.  The server counts
  the ``tools/list`` requests it served per arm (the target: 1 per TTL for the fleet
  with Redis, not one per process); each worker reports its CPU per item (the first,
  cold one apart) and its store counts.
* **cpu** -- in this process, one asyncio Client per arm, list-only work items in
  alternated rounds: ``none`` (no cache: ``Limits(max_cache_entries=0)``, every item
  lists from the server), ``local`` (an in-process hit) and ``redis`` (a shared-cache
  hit: the Client's own ``tools/list`` entries are dropped before each item, outside
  the measured time, so each item reads the listing from Redis; the bytes read are the
  same each time, so the codec reuses the listing it decoded, and counts it).  CPU
  (``time.process_time``) and wall time per item; the Redis round trip's cost is
  ``redis - local`` and the server round trip it saves ``none - local``.

Prints one JSON line (``--out FILE``: writes it there and the Markdown beside it).
Needs ``redis-server`` and the ``redis`` extra; without them :func:`run` says why.
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

from .procs import ROOT, LineProcess

SECRET = b"bench-fleet-secret-32-bytes-long"
QUICK = {"procs": 8, "items": 50, "rounds": 4, "per_round": 30}
FULL = {"procs": 8, "items": 200, "rounds": 8, "per_round": 60}


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


# ---------------------------------------------------------------- the fleet section


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
    workers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(procs)
    ]
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


def _fleet(server: LineProcess, url: str, redis_url: str, procs: int, items: int) -> Any:
    out: dict[str, Any] = {"procs": procs, "items_per_proc": items}
    for arm, store_url in (("local", None), ("redis", redis_url)):
        _stats(server, "reset")
        started = time.monotonic()
        reports = _arm(url, store_url, procs, items)
        wall = time.monotonic() - started
        by_rpc = _stats(server)["by_rpc"]
        out[arm] = {
            "tools_list_served": by_rpc.get("tools/list", 0),
            "requests": sum(by_rpc.values()),
            "requests_by_method": by_rpc,
            "wall_s": round(wall, 2),
            "cold_us_median": statistics.median(r["cold_us"] for r in reports),
            "warm_us_median": statistics.median(r["warm_us"] for r in reports),
            "store_counts": _summed([r["listings"] for r in reports]),
        }
    return out


# ---------------------------------------------------------------- the cpu section


def _forget_listings(client: Any) -> None:
    """Drop the Client's own ``tools/list`` entries (its discovery results stay)."""
    from sansmcp.core.cache import LIST_METHOD

    cache = client._driver.cache
    for url, version, method, owner in [g for g in cache._groups if g[2] == LIST_METHOD]:
        cache.invalidate(url, version, method, owner)


async def _cpu(server: LineProcess, url: str, redis_url: str, rounds: int, per_round: int) -> Any:
    from sansmcp import Config, Limits
    from sansmcp.io_adapters.asyncio import Client
    from sansmcp.stores import RedisStore

    store = RedisStore(redis_url, secret=SECRET)
    config = Config(url=url)
    arms = {
        "none": Client(allow_loopback=True, limits=Limits(max_cache_entries=0)),
        "local": Client(allow_loopback=True),
        "redis": Client(allow_loopback=True, store=store),
    }
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    wall: dict[str, list[float]] = {name: [] for name in arms}
    sent: dict[str, dict[str, int]] = {name: {} for name in arms}

    async def block(name: str, client: Any, n: int, record: bool) -> None:
        spent = 0.0
        for _ in range(n):
            if name == "redis":
                _forget_listings(client)
            start, started = time.process_time(), time.perf_counter()
            async with client.connect(config) as conn:
                await conn.list_tools()
            ended = time.perf_counter()
            spent += time.process_time() - start
            if record:
                wall[name].append(ended - started)
        if record:
            cpu[name].append(spent / n)

    inside = [0.0]  # CPU inside the store's calls, in the measured redis blocks
    original = store.aexecute

    async def timed(command: Any) -> Any:
        start = time.process_time()
        try:
            return await original(command)
        finally:
            inside[0] += time.process_time() - start

    store.aexecute = timed  # type: ignore[method-assign]
    for name, client in arms.items():
        await block(name, client, 20, record=False)  # warm: pool, era hint, cache, Redis
    inside[0] = 0.0
    fleet = arms["redis"]._driver.fleet
    assert fleet is not None and fleet.listings is not None
    before = dict(fleet.listings.counts)
    reused_before = fleet.listings.codec.reused
    for index in range(rounds):
        order = list(arms.items())
        order = order[index % 3 :] + order[: index % 3]  # each arm first in turn
        for name, client in order:
            _stats(server, "reset")
            await block(name, client, per_round, record=True)
            for method, count in _stats(server)["by_rpc"].items():
                sent[name][method] = sent[name].get(method, 0) + count
    counts = {k: v - before.get(k, 0) for k, v in fleet.listings.counts.items()}
    reused = fleet.listings.codec.reused - reused_before
    for client in arms.values():
        await client.aclose()
    await store.aclose()
    items = rounds * per_round
    floor = await _redis_floor(redis_url, items)
    us = {name: statistics.median(values) * 1e6 for name, values in cpu.items()}
    wall_us = {name: statistics.median(values) * 1e6 for name, values in wall.items()}
    return {
        "items_per_arm": items,
        "rounds": rounds,
        "cpu_per_item_us": {name: round(v, 1) for name, v in us.items()},
        "cpu_spread_us": {
            name: [round(min(v) * 1e6, 1), round(max(v) * 1e6, 1)] for name, v in cpu.items()
        },
        "wall_per_item_us": {name: round(v, 1) for name, v in wall_us.items()},
        "requests_per_item": {
            name: round(sum(methods.values()) / items, 3) for name, methods in sent.items()
        },
        "requests_by_method": sent,
        "redis_store_counts": counts,
        "redis_listings_reused": reused,
        "redis_store_call_cpu_us": round(inside[0] / items * 1e6, 1),
        "redis_get_floor": floor,
        "redis_trip_cpu_us": round(us["redis"] - us["local"], 1),
        "server_trip_cpu_us": round(us["none"] - us["local"], 1),
        "redis_trip_wall_us": round(wall_us["redis"] - wall_us["local"], 1),
        "server_trip_wall_us": round(wall_us["none"] - wall_us["local"], 1),
    }


async def _redis_floor(redis_url: str, n: int) -> dict[str, Any]:
    """redis-py's asyncio ``GET`` of the largest stored string (the listing), alone:
    the least a Redis round trip costs this client."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        sizes = {}
        for key in await client.keys("*"):
            if await client.type(key) == b"string":
                sizes[key] = await client.strlen(key)
        key = max(sizes, key=lambda k: sizes[k])
        for _ in range(20):
            await client.get(key)
        start = time.process_time()
        for _ in range(n):
            await client.get(key)
        spent = time.process_time() - start
    finally:
        await client.aclose()
    return {"value_bytes": sizes[key], "cpu_us": round(spent / n * 1e6, 1)}


# ---------------------------------------------------------------- the run


def run(*, procs: int, items: int, rounds: int, per_round: int) -> dict[str, Any]:
    """Both sections against one server and one ``redis-server``; ``{"failed": why}``
    when a part is missing."""
    sys.path.insert(0, str(ROOT))
    from tests.redis_server import RedisServer

    binary = RedisServer.find()
    if binary is None:
        return {"failed": "no redis-server (PATH, /usr/bin, $SANSMCP_REDIS_SERVER)"}
    try:
        import redis  # noqa: F401
    except ImportError:
        return {"failed": "redis-py is not installed (the redis extra)"}
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    report["load_before"] = os.getloadavg()[0]
    server, url = _server()
    with tempfile.TemporaryDirectory() as directory:
        redis_server = RedisServer(binary, pathlib.Path(directory))
        redis_server.start()
        try:
            report["fleet"] = _fleet(server, url, redis_server.url, procs, items)
            report["cpu"] = asyncio.run(_cpu(server, url, redis_server.url, rounds, per_round))
        finally:
            redis_server.stop()
            server.stop()
    report["load_after"] = os.getloadavg()[0]
    return report


def markdown(report: dict[str, Any] | None) -> list[str]:
    """The report's "Fleet" section (issue 28)."""
    if not report or "fleet" not in report:
        return [f"(not measured: {report.get('failed') if report else 'absent'})"]
    fleet, cpu = report["fleet"], report["cpu"]
    local, redis = fleet["local"], fleet["redis"]
    counts = redis["store_counts"] or {}
    lines = [
        f"`bench/fleet.py`: {fleet['procs']} worker processes started at once, each "
        f"{fleet['items_per_proc']} list-only work items (connect + `list_tools()` + close, "
        "asyncio) against a 10-tool `public` listing with `ttlMs` 600,000; a real "
        f"`redis-server` on a Unix socket. Load {report['load_before']:.1f} before, "
        f"{report['load_after']:.1f} after.",
        "",
        "| store | `tools/list` served | all requests | cold item CPU µs | warm item CPU µs "
        "| wall s |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, arm in (("in-process (each worker)", local), ("RedisStore (shared)", redis)):
        lines.append(
            f"| {name} | {arm['tools_list_served']} | {arm['requests']} "
            f"| {arm['cold_us_median']:,.0f} | {arm['warm_us_median']:,.0f} | {arm['wall_s']} |"
        )
    lines += [
        "",
        f"Target: 1 listing per TTL for the fleet, not {fleet['procs']}: "
        f"**{'met' if redis['tools_list_served'] == 1 else 'missed'}** "
        f"({redis['tools_list_served']} with Redis, {local['tools_list_served']} without). "
        "The fleet's store counts: "
        + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        + ". Other requests: "
        + ", ".join(
            f"`{k}` {v}" for k, v in redis["requests_by_method"].items() if k != "tools/list"
        )
        + " (with Redis).",
        "",
        f"CPU per list-only work item, one process, {cpu['rounds']} alternated rounds of "
        f"{cpu['items_per_arm'] // cpu['rounds']} items per arm (median of the rounds' "
        "means, [min-max]); wall: median per item:",
        "",
        "| cache | CPU µs/item | ÷ in-process hit | wall µs/item | requests/item |",
        "|---|--:|--:|--:|--:|",
    ]
    us, spread = cpu["cpu_per_item_us"], cpu["cpu_spread_us"]
    for name, label in (
        ("local", "in-process hit"),
        ("redis", "shared-cache (Redis) hit"),
        ("none", "no cache (lists from the server)"),
    ):
        lines.append(
            f"| {label} | {us[name]:,.0f} [{spread[name][0]:,.0f}-{spread[name][1]:,.0f}] "
            f"| {us[name] / us['local']:.2f} | {cpu['wall_per_item_us'][name]:,.0f} "
            f"| {cpu['requests_per_item'][name]} |"
        )
    redis_cpu, server_cpu = cpu["redis_trip_cpu_us"], cpu["server_trip_cpu_us"]
    lines += [
        "",
        f"The Redis round trip costs the client {redis_cpu:,.0f} µs of CPU "
        f"({cpu['redis_trip_wall_us']:,.0f} µs of wall) over an in-process hit; the server "
        f"round trip it saves costs {server_cpu:,.0f} µs of CPU "
        f"({cpu['server_trip_wall_us']:,.0f} µs of wall). Target (a Redis round trip costs "
        f"no more than the server round trip it saves): "
        f"**{'met' if redis_cpu <= server_cpu else 'missed'}** "
        f"({redis_cpu / server_cpu:.2f}x in CPU). Redis arm store counts: "
        + ", ".join(f"{k} {v}" for k, v in cpu["redis_store_counts"].items() if v)
        + (
            f"; listings reused undecoded (the same bytes read again) "
            f"{cpu['redis_listings_reused']}."
            if "redis_listings_reused" in cpu
            else "."
        ),
    ]
    floor = cpu.get("redis_get_floor") or {}
    if "cpu_us" in floor:
        lines += [
            "",
            f"Where a Redis hit's {us['redis']:,.0f} µs go: {cpu['redis_store_call_cpu_us']:,.0f} "
            "µs inside `RedisStore.aexecute` (redis-py's asyncio client, the command's plan and "
            f"answer); redis-py's bare asyncio `GET` of the same {floor['value_bytes']:,}-byte "
            f"value costs {floor['cpu_us']:,.0f} µs; the rest is the work item itself (connect, "
            "the driver parking the Conn, opening the stored listing into the local cache, "
            "serving it).",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer items and rounds")
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--items", type=int, default=None)
    parser.add_argument("--out", default=None, help="write the JSON here and the .md beside it")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--redis", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(asyncio.run(_work(args.worker, args.redis, args.items))))
        return
    sizes = dict(QUICK if args.quick else FULL)
    if args.procs is not None:
        sizes["procs"] = args.procs
    if args.items is not None:
        sizes["items"] = args.items
    report = run(**sizes)
    if args.out is None:
        print(json.dumps(report))
        return
    out = pathlib.Path(args.out)
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text("# Fleet (issue 28)\n\n" + "\n".join(markdown(report)) + "\n")
    print("\n".join(markdown(report)))


if __name__ == "__main__":
    main()
