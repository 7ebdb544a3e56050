"""Work items in flight: 1 / 100 / 500 / 1,000 at once in one process (issue 16, item 1).

Against the canned server (:mod:`bench.canned`, so the server is not the bottleneck),
each contender runs in its own process: ``open``, a warm-up wave of ``level`` items at
once, then ``rounds`` waves in which ``level`` workers each run ``per_worker`` items
one after another.  Reported per (contender, level): CPU per item (``process_time``
of the client process over the measured waves), p50 / p99 wall latency per item, and
peak RSS per in-flight item (``VmHWM`` after the run minus the RSS before the
warm-up, over ``level``; "marginal" subtracts the level-1 run's growth first, so the
one-time costs of a process's first item are not spread over the in-flight ones).
Level 1 is the sequential figure.

Contenders: ``sansmcp-asyncio`` / ``sansmcp-trio`` / ``sansmcp-sync`` (one ``Client``
per process, ``Limits()`` unless ``--limits`` says otherwise; the sync one runs
``level`` threads, at most 100) and the floors of the same runtime
(:mod:`bench.floor`: one socket per in-flight item, nothing bounded).  Runs alternate
contenders level by level, ``--repeat`` times; the median of each cell is reported.

``python -m bench.inflight [--quick] [--levels 1,100,500,1000] [--limits k=v,...]
[--contenders a,b] [--json FILE]`` prints a Markdown table.  ``bench.run`` calls
:func:`run` and :func:`profile` (one more child per contender at the top level, its
measured waves under cProfile: where the time goes when a target is missed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from .contenders import ECHO_BYTES, LEGACY
from .procs import cache_bytecode, peak_rss_kib

CONTENDERS = (
    "sansmcp-asyncio",
    "floor-asyncio",
    "sansmcp-trio",
    "floor-trio",
    "sansmcp-sync",
    "floor-sync",
)
FLOOR = {
    "sansmcp-asyncio": "floor-asyncio",
    "sansmcp-trio": "floor-trio",
    "sansmcp-sync": "floor-sync",
}
SYNC_MAX = 100  # threads: the blocking contenders stop at 100 in flight


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0  # pragma: no cover - not Linux


def _limits(text: str) -> Any:
    from sansmcp import Limits

    pairs = [item.split("=", 1) for item in text.split(",") if item]
    return Limits(**{key: int(value) for key, value in pairs})


class _Sansmcp:
    def __init__(self, runtime: str, url: str, era: str, limits: str) -> None:
        from sansmcp import Config

        if runtime == "asyncio":
            from sansmcp.io_adapters.asyncio import Client as AClient

            self.client: Any = AClient(allow_loopback=True, limits=_limits(limits))
        elif runtime == "trio":
            from sansmcp.io_adapters.trio import Client as TClient

            self.client = TClient(allow_loopback=True, limits=_limits(limits))
        else:
            from sansmcp.io_adapters.sync import Client as SClient

            self.client = SClient(allow_loopback=True, limits=_limits(limits))
        versions = (LEGACY,) if era == "legacy" else None
        self.config = Config(url=url, protocol_versions=versions)

    async def item(self) -> tuple[int, str]:
        async with self.client.connect(self.config) as conn:
            tools = await conn.list_tools()
            result = await conn.call_tool("echo", ECHO_BYTES)
        return len(tools), result.content[0].text or ""

    def item_sync(self) -> tuple[int, str]:
        with self.client.connect(self.config) as conn:
            tools = conn.list_tools()
            result = conn.call_tool("echo", ECHO_BYTES)
        return len(tools), result.content[0].text or ""

    def sockets(self) -> int:
        pool = self.client._driver.pool
        return int(pool.socket_count)


def _child(
    name: str,
    level: int,
    per_worker: int,
    rounds: int,
    url: str,
    limits: str,
    profiled: bool = False,
) -> None:
    from urllib.parse import urlsplit

    runtime = name.split("-")[1]
    parts = urlsplit(url)
    host, port, path = parts.hostname or "", parts.port or 0, parts.path
    dials = [0]
    if name.startswith("floor"):
        from . import floor

        kind = {"asyncio": floor.AsyncioFloor, "trio": floor.TrioFloor, "sync": floor.SyncFloor}
        target: Any = kind[runtime](host, port, path, "h1")
        item = (lambda: target.item("modern")) if runtime != "sync" else None
        item_sync = (lambda: target.item("modern")) if runtime == "sync" else None
    else:
        target = _Sansmcp(runtime, url, "modern", limits)
        item, item_sync = target.item, target.item_sync
    latencies: list[float] = []
    base_rss = _rss_kib()
    out: dict[str, Any] = {}
    profiler: Any = None
    if profiled:
        import cProfile

        profiler = cProfile.Profile(time.process_time)

    def record(started: float) -> None:
        latencies.append(time.perf_counter() - started)

    if runtime == "sync":
        assert item_sync is not None
        floors: list[Any] = []
        local = threading.local()

        def one() -> None:
            if name.startswith("floor"):  # a blocking floor is one socket: one per thread
                if not hasattr(local, "floor"):
                    from . import floor

                    local.floor = floor.SyncFloor(host, port, path, "h1")
                    floors.append(local.floor)
                local.floor.item("modern")
            else:
                item_sync()

        def wave(count: int, measure: bool) -> None:
            def worker() -> None:
                for _ in range(count):
                    started = time.perf_counter()
                    one()
                    if measure:
                        record(started)

            threads = [threading.Thread(target=worker) for _ in range(level)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        wave(1, False)
        cpu = time.process_time()
        for _ in range(rounds):
            wave(per_worker, True)
        cpu = time.process_time() - cpu
    else:
        assert item is not None

        async def worker(count: int, measure: bool) -> None:
            for _ in range(count):
                started = time.perf_counter()
                await item()
                if measure:
                    record(started)

        async def main_asyncio() -> float:
            await asyncio.gather(*(worker(1, False) for _ in range(level)))
            if profiler is not None:
                profiler.enable()
            cpu = time.process_time()
            for _ in range(rounds):
                await asyncio.gather(*(worker(per_worker, True) for _ in range(level)))
            cpu = time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
            return cpu

        async def main_trio() -> float:
            import trio

            async def wave(count: int, measure: bool) -> None:
                async with trio.open_nursery() as nursery:
                    for _ in range(level):
                        nursery.start_soon(worker, count, measure)

            await wave(1, False)
            if profiler is not None:
                profiler.enable()
            cpu = time.process_time()
            for _ in range(rounds):
                await wave(per_worker, True)
            cpu = time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
            return cpu

        if runtime == "asyncio":
            cpu = asyncio.run(main_asyncio())
        else:
            import trio

            cpu = trio.run(main_trio)
    if isinstance(target, _Sansmcp):
        out["sockets_open_after"] = target.sockets()
        dials[0] = target.client._driver.pool._next_id - 1
    peak = peak_rss_kib()  # not ru_maxrss: Linux carries it over from the parent
    latencies.sort()
    count = len(latencies)
    out.update(
        name=name,
        level=level,
        items=count,
        cpu_ms=cpu / count * 1e3,
        p50_ms=latencies[count // 2] * 1e3,
        p99_ms=latencies[min(count - 1, int(count * 0.99))] * 1e3,
        rss_kib_per_item=(peak - base_rss) / level,
        rss_kib=peak - base_rss,
        dials=dials[0],
    )
    if profiler is not None:
        import pstats

        from .profile import summarise

        out["profile"] = summarise(pstats.Stats(profiler), count)
    print(json.dumps(out), flush=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _canned() -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.canned", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "ready"
    return server, f"http://127.0.0.1:{port}/mcp"


def _one(name: str, level: int, items: int, url: str, limits: str, profiled: bool) -> Any:
    total = max(items, level * 2)
    per_worker = max(1, total // level)
    command = [sys.executable, "-m", "bench.inflight", "--child", name]
    command += [str(level), str(per_worker), "1", url, limits]
    if profiled:
        command.append("--profile")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{name} at {level} failed")
    return json.loads(done.stdout)


def profile(names: list[str], level: int, items: int, limits: str = "") -> dict[str, Any]:
    """cProfile of each (async) contender's measured waves at ``level`` in flight."""
    server, url = _canned()
    try:
        return {name: _one(name, level, items, url, limits, True)["profile"] for name in names}
    finally:
        server.kill()
        server.wait()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    server, url = _canned()
    levels = [int(x) for x in args.levels.split(",")]
    names = args.contenders.split(",")
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for _ in range(args.repeat):
            for level in levels:
                for name in names:
                    if name.endswith("sync") and level > SYNC_MAX:
                        continue
                    one = _one(name, level, args.items, url, args.limits, False)
                    cells.setdefault((name, level), []).append(one)
    finally:
        server.kill()
        server.wait()
    rows = []
    for (name, level), runs in cells.items():
        row = {
            key: statistics.median(run[key] for run in runs)
            for key in ("cpu_ms", "p50_ms", "p99_ms", "rss_kib_per_item", "rss_kib", "dials")
        }
        row.update(name=name, level=level, items=runs[0]["items"], runs=len(runs))
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], limits: str) -> str:
    by = {(row["name"], row["level"]): row for row in rows}
    lines = [
        f"limits: {limits or 'Limits()'}; load {os.getloadavg()[0]:.1f}",
        "",
        "| contender | in flight | CPU ms/item | x own sequential | p50 ms | p99 ms "
        "| p99 x floor | RSS KiB / in-flight | marginal | dials |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sorted(rows, key=lambda r: (CONTENDERS.index(r["name"]), r["level"])):
        seq = by.get((row["name"], 1))
        floor = by.get((FLOOR.get(row["name"], ""), row["level"]))
        ratio = f"{row['cpu_ms'] / seq['cpu_ms']:.2f}" if seq else "-"
        p99 = f"{row['p99_ms'] / floor['p99_ms']:.2f}" if floor else "-"
        rss = f"{row['rss_kib_per_item']:.1f}" if row["level"] > 1 else "-"
        marginal = "-"
        if seq and row["level"] > 1:  # what one more in-flight item costs, fixed costs apart
            marginal = f"{(row['rss_kib'] - seq['rss_kib']) / (row['level'] - 1):.1f}"
        lines.append(
            f"| {row['name']} | {row['level']} | {row['cpu_ms']:.3f} | {ratio} "
            f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {p99} | {rss} | {marginal} | {row['dials']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, level, per_worker, rounds, url = sys.argv[2:7]
        limits = sys.argv[7] if len(sys.argv) > 7 else ""
        profiled = "--profile" in sys.argv[8:]
        _child(name, int(level), int(per_worker), int(rounds), url, limits, profiled)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,100,500,1000")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--limits", default="")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", default="")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    cache_bytecode()
    if args.quick:
        args.items, args.levels = 400, "1,100,1000"
    rows = run(args)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    print(table(rows, args.limits))


if __name__ == "__main__":
    main()
