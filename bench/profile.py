"""Where sansmcp's CPU goes in one work item: ``python -m bench.profile URL [--quick]``.

Runs the 10-tool modern work item (asyncio adapter, warm pool and era cache) under
cProfile (timed by process CPU time, so waiting on the server costs nothing) after a
warm-up, and prints one JSON line: the top functions by own time
(``tottime``) and by cumulative time, plus how the own time splits between
sansmcp's core, its adapter, the event loop, h11/h2, json and the rest.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import pstats
import re
import sys
import time
from typing import Any

from sansmcp import Config
from sansmcp.io_adapters.asyncio import Client

ARGS = b'{"text": "hi"}'


async def _items(client: Client, config: Config, n: int) -> None:
    for _ in range(n):
        async with client.connect(config) as conn:
            await conn.list_tools()
            await conn.call_tool("echo", ARGS)


def _area(filename: str) -> str:
    if "/sansmcp/core/" in filename:
        return "sansmcp core"
    if "/sansmcp/io_adapters/" in filename:
        return "sansmcp adapter"
    if "/asyncio/" in filename or filename.startswith("<frozen"):
        return "asyncio / stdlib runtime"
    if "/h11/" in filename or "/h2/" in filename or "/hpack/" in filename:
        return "h11 / h2"
    if "/json/" in filename:
        return "json"
    if filename == "~":
        return "builtins (C)"
    return "other"


def main() -> None:
    url = sys.argv[1]
    n = 100 if "--quick" in sys.argv else 400

    async def run() -> pstats.Stats:
        async with Client(allow_loopback=True) as client:
            config = Config(url=url)
            await _items(client, config, 20)
            # CPU time, not wall time: waiting for the server is not our cost.
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            await _items(client, config, n)
            profiler.disable()
        return pstats.Stats(profiler)

    stats = asyncio.run(run())
    rows = []
    areas: dict[str, float] = {}
    total = 0.0
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{_short(filename)}:{line}({func})",
                "calls_per_item": nc / n,
                "tottime_us_per_item": 1e6 * tt / n,
                "cumtime_us_per_item": 1e6 * ct / n,
            }
        )
        area = _area(filename)
        areas[area] = areas.get(area, 0.0) + tt
        total += tt
    by_own = sorted(rows, key=lambda r: -r["tottime_us_per_item"])[:15]
    by_cum = sorted(rows, key=lambda r: -r["cumtime_us_per_item"])[:15]
    out: dict[str, Any] = {
        "items": n,
        "profiled_us_per_item": 1e6 * total / n,
        "areas_us_per_item": {
            k: 1e6 * v / n for k, v in sorted(areas.items(), key=lambda x: -x[1])
        },
        "top_own": by_own,
        "top_cumulative": by_cum,
    }
    print(json.dumps(out), flush=True)


def _short(filename: str) -> str:
    if "/sansmcp/" in filename:
        return "sansmcp/" + filename.rsplit("/sansmcp/", 1)[1]
    return re.sub(r"^.*/lib/python3\.\d+/(site-packages/)?", "", filename)


if __name__ == "__main__":
    main()
