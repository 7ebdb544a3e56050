"""Where sansmcp's CPU goes in one work item: ``python -m bench.profile URL [options]``.

Runs the 10-tool work item (warm pool and era cache) under cProfile (timed by process
CPU time, so waiting on the server costs nothing) after a warm-up, and prints one JSON
line: the top functions by own time (``tottime``) and by cumulative time, plus how the
own time splits by area (:func:`area`): sansmcp's driver and pool, its MCP machine, its
wire, its adapter, h11, h2/hpack, llhttp, the runtime (asyncio / trio / selectors / ssl /
sockets), json and the rest.  A C builtin's own time (``isinstance``, ``len``, ``dict.get``)
is charged to the areas of its callers, in proportion to the time each call edge took;
socket and ssl calls to the runtime.  A missed target in the report carries this split.

Options: ``--backend asyncio|trio|sync`` (default asyncio), ``--era modern|legacy``,
``--http h1|h2`` (h2: prior knowledge, or ALPN over TLS), ``--ca PEM`` (TLS: trust
that CA), ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import re
import time
from typing import Any

from sansmcp import Config

ARGS = b'{"text": "hi"}'
LEGACY = "2025-11-25"

AREAS = (
    "sansmcp driver + pool",
    "sansmcp MCP machine (+ tools, JSON, SSE, cache)",
    "sansmcp wire",
    "sansmcp adapter",
    "h11",
    "h2 / hpack",
    "llhttp",
    "runtime (event loop, selectors, ssl, sockets)",
    "json (stdlib)",
    "builtins (C)",
    "other",
)
_RUNTIME_C = re.compile(r"socket|ssl|select|epoll|poll\b|recv|send|_thread|lock|Event")


def area(filename: str, function: str = "") -> str:
    """The area a profiled function's own time is charged to."""
    if "/sansmcp/core/" in filename:
        if "/core/driver.py" in filename or "/core/net/" in filename:
            return AREAS[0]
        if "/core/wire/" in filename or filename.endswith("/core/http.py"):
            return AREAS[2]
        return AREAS[1]
    if "/sansmcp/io_adapters/" in filename:
        return AREAS[3]
    if "/h11/" in filename:
        return AREAS[4]
    if "/h2/" in filename or "/hpack/" in filename or "/hyperframe/" in filename:
        return AREAS[5]
    if "/httptools/" in filename:
        return AREAS[6]
    if "/json/" in filename:
        return AREAS[8]
    runtime = ("/asyncio/", "/trio/", "/outcome/", "/sniffio/", "selectors.py", "ssl.py")
    if any(part in filename for part in runtime) or filename.endswith(
        ("socket.py", "threading.py")
    ):
        return AREAS[7]
    if filename == "~":
        if _RUNTIME_C.search(function):
            return AREAS[7]
        if "json" in function or "scanner" in function:
            return AREAS[8]
        return AREAS[9]
    return AREAS[10]


def summarise(stats: pstats.Stats, items: int, top: int = 15) -> dict[str, Any]:
    """Top functions and the own-time split by area, per item."""
    rows = []
    areas: dict[str, float] = {}
    total = 0.0
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{_short(filename)}:{line}({func})",
                "area": area(filename, func),
                "calls_per_item": nc / items,
                "tottime_us_per_item": 1e6 * tt / items,
                "cumtime_us_per_item": 1e6 * ct / items,
            }
        )
        total += tt
        key = area(filename, func)
        edges = [(caller, edge[2]) for caller, edge in _callers.items()] if _callers else []
        spread = sum(t for _, t in edges)
        if filename != "~" or key == AREAS[7] or spread <= 0:
            areas[key] = areas.get(key, 0.0) + tt
            continue
        for (caller_file, _line, caller_func), edge_time in edges:
            share = area(caller_file, caller_func)
            areas[share] = areas.get(share, 0.0) + tt * edge_time / spread
    return {
        "items": items,
        "profiled_us_per_item": 1e6 * total / items,
        "areas_us_per_item": {
            k: 1e6 * v / items for k, v in sorted(areas.items(), key=lambda x: -x[1])
        },
        "top_own": sorted(rows, key=lambda r: -r["tottime_us_per_item"])[:top],
        "top_cumulative": sorted(rows, key=lambda r: -r["cumtime_us_per_item"])[:top],
    }


def _client(backend: str, http: str, ca: str | None) -> Any:
    import ssl

    options: dict[str, Any] = {"allow_loopback": True}
    if ca is not None:
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2", "http/1.1"])  # (a caller's context: used as given)
        options["ssl_context"] = context
    elif http == "h2":
        options["http2_prior_knowledge"] = True
    if backend == "trio":
        from sansmcp.io_adapters.trio import Client as TrioClient

        return TrioClient(**options)
    if backend == "sync":
        from sansmcp.io_adapters.sync import Client as SyncClient

        return SyncClient(**options)
    from sansmcp.io_adapters.asyncio import Client as AsyncioClient

    return AsyncioClient(**options)


def profile(backend: str, url: str, era: str, http: str, ca: str | None, n: int) -> dict[str, Any]:
    client = _client(backend, http, ca)
    config = Config(url=url, protocol_versions=(LEGACY,) if era == "legacy" else None)
    # CPU time, not wall time: waiting for the server is not our cost.
    profiler = cProfile.Profile(time.process_time)
    if backend == "sync":

        def items_sync(count: int) -> None:
            for _ in range(count):
                with client.connect(config) as conn:
                    conn.list_tools()
                    conn.call_tool("echo", ARGS)

        items_sync(20)
        profiler.enable()
        items_sync(n)
        profiler.disable()
        client.close()
    else:

        async def items(count: int) -> None:
            for _ in range(count):
                async with client.connect(config) as conn:
                    await conn.list_tools()
                    await conn.call_tool("echo", ARGS)

        async def run() -> None:
            await items(20)
            profiler.enable()
            await items(n)
            profiler.disable()
            await client.aclose()

        if backend == "trio":
            import trio

            trio.run(run)
        else:
            asyncio.run(run())
    out = summarise(pstats.Stats(profiler), n)
    out.update(backend=backend, era=era, http=http, tls=ca is not None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio", "sync"))
    parser.add_argument("--era", default="modern", choices=("modern", "legacy"))
    parser.add_argument("--http", default="h1", choices=("h1", "h2"))
    parser.add_argument("--ca", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 100 if args.quick else 150
    print(json.dumps(profile(args.backend, args.url, args.era, args.http, args.ca, n)), flush=True)


def _short(filename: str) -> str:
    if "/sansmcp/" in filename:
        return "sansmcp/" + filename.rsplit("/sansmcp/", 1)[1]
    return re.sub(r"^.*/lib/python3\.\d+/(site-packages/)?", "", filename)


if __name__ == "__main__":
    main()
