"""The benchmark's MCP server: the official ``mcp`` package, counting what it is sent.

Run: ``python -m bench.server [--tools N] [--json] [--h2c] [--cache-ttl MS [--cache-scope S]]``
(``--cache-ttl`` sets the SDK's ``ttlMs`` / ``cacheScope`` hints on ``tools/list`` and
``server/discover``).  Binds 127.0.0.1 on a
free port, serves MCP at a random path (``/mcp-<hex>``: a stray client of another
process that reaches the port gets a 404 and is not counted) and prints
``READY <port> <path>`` once listening.

* ``N`` tools in total: ``echo`` (returns its ``text``) and ``N - 1`` filler tools whose
  input schema is about 300 bytes of JSON each.
* ``--json`` answers POSTs with ``application/json``; without it, with SSE streams.
* HTTP/1.1 is served by uvicorn; ``--h2c`` serves hypercorn, which speaks HTTP/2 with
  prior knowledge (and HTTP/1.1) on the same plain port; ``--tls CERT KEY`` serves
  hypercorn over TLS, offering ``h2`` and ``http/1.1`` by ALPN (the TLS h2 rows).

Counting happens inside this process, so no proxy sits between client and server:
the ASGI app is wrapped to count HTTP requests by method, by HTTP version and by
JSON-RPC method (peeked from the first body chunk; the HTTP method when none), and the
TCP connections that carried them (distinct client address and port; the kernel does
not hand one ephemeral port to two live connections, and a run is far shorter than a
port-range cycle).  Control lines on stdin: ``reset`` zeroes the counters, ``stats``
prints them as one JSON line, ``quit`` exits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import secrets
import socket
import sys
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

Scope = dict[str, Any]
_RPC_METHOD = re.compile(rb'"method"\s*:\s*"([^"]{1,64})"')


def build(total_tools: int) -> MCPServer:
    server = MCPServer("sansmcp-bench-server", version="1.0", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    def forecast(
        city: str = Field(description="City name, e.g. Lisbon"),
        days: int = Field(default=1, description="How many days ahead, 1 to 14"),
        units: str = Field(default="metric", description="metric or imperial"),
    ) -> str:
        return f"{city}:{days}:{units}"

    for index in range(max(0, total_tools - 1)):
        server.add_tool(
            forecast,
            name=f"forecast_{index}",
            description=f"Weather forecast number {index} for a city, for a number of days.",
            structured_output=False,
        )
    return server


class Counter:
    """Counts requests and connections; touched only on the event loop's thread."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.by_method: collections.Counter[str] = collections.Counter()
        self.by_version: collections.Counter[str] = collections.Counter()
        self.peers: set[tuple[str, int]] = set()
        self.statuses: collections.Counter[int] = collections.Counter()
        self.by_rpc: collections.Counter[str] = collections.Counter()
        self.strays = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "connections": len(self.peers),
            "by_method": dict(self.by_method),
            "by_version": dict(self.by_version),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "by_rpc": dict(self.by_rpc),
            "strays": self.strays,
        }

    def wrap(self, app: Any, path: str) -> Any:
        async def counted(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != path:
                if scope["type"] == "http":
                    self.strays += 1  # another process's client that found our port
                await app(scope, receive, send)
                return
            self.requests += 1
            self.by_method[scope["method"]] += 1
            self.by_version[scope.get("http_version", "?")] += 1
            client = scope.get("client")
            if client is not None:
                self.peers.add((str(client[0]), int(client[1])))

            first = [scope["method"] == "POST"]
            if not first[0]:
                self.by_rpc[scope["method"]] += 1

            async def peeking_receive() -> dict[str, Any]:
                message: dict[str, Any] = await receive()
                if first[0] and message["type"] == "http.request":
                    first[0] = False
                    found = _RPC_METHOD.search(message.get("body", b"")[:200])
                    self.by_rpc[found.group(1).decode() if found else "POST ?"] += 1
                return message

            async def counting_send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    self.statuses[int(message["status"])] += 1
                await send(message)

            await app(scope, peeking_receive, counting_send)

        return counted


def _control(loop: asyncio.AbstractEventLoop, counter: Counter, stop: asyncio.Event) -> None:
    """Reads control lines on stdin (a thread); counters are touched on the loop."""

    async def on_loop(action: str) -> dict[str, Any]:
        if action == "reset":
            counter.reset()
        return counter.snapshot()

    for line in sys.stdin:
        action = line.strip()
        if action not in ("reset", "stats"):
            break
        future = asyncio.run_coroutine_threadsafe(on_loop(action), loop)
        print(json.dumps(future.result(timeout=30)), flush=True)
    loop.call_soon_threadsafe(stop.set)  # "quit", or the harness went away


def _listener() -> socket.socket:
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say TCP, and
    # without it a response head and body written apart wait out a delayed ACK (40 ms).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited on accept
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    return listener


async def _serve(
    app: Any,
    listener: socket.socket,
    counter: Counter,
    h2c: bool,
    path: str,
    tls: list[str] | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    threading.Thread(target=_control, args=(loop, counter, stop), daemon=True).start()
    if h2c:
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config as HypercornConfig

        config = HypercornConfig()
        config.bind = [f"fd://{listener.fileno()}"]
        config.loglevel = "WARNING"
        config.keep_alive_timeout = 60.0
        # hypercorn's default sends GOAWAY after 1,000 requests on a connection; a
        # multiplexed run crosses that in seconds and the in-flight streams fail (a
        # finding in itself, see the notes), which is not what the figures measure.
        config.keep_alive_max_requests = 1_000_000_000
        if tls:
            config.certfile, config.keyfile = tls
            config.alpn_protocols = ["h2", "http/1.1"]
        serving = hypercorn_serve(app, config, shutdown_trigger=stop.wait)
    else:
        import uvicorn

        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", timeout_keep_alive=60, lifespan="on")
        )

        async def stop_uvicorn() -> None:
            await stop.wait()
            server.should_exit = True

        stopper = loop.create_task(stop_uvicorn())
        serving = server.serve(sockets=[listener])
    # The socket already listens: connections wait in its backlog until served.
    print(f"READY {listener.getsockname()[1]} {path}", flush=True)
    try:
        await serving
    finally:
        if not h2c:
            stopper.cancel()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--h2c", action="store_true")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), default=None)
    parser.add_argument("--cache-ttl", type=int, default=None)  # ttlMs on tools/list, discover
    parser.add_argument("--cache-scope", default="public")
    args = parser.parse_args()
    counter = Counter()
    # A path of our own: other processes on this shared machine that dial a port they
    # once knew may reach ours; they get a 404 and are not counted.
    path = f"/mcp-{secrets.token_hex(6)}"
    server = build(args.tools)
    if args.cache_ttl is not None:
        from mcp.server.caching import CacheHint, validate_cache_hints

        hint = CacheHint(ttl_ms=args.cache_ttl, scope=args.cache_scope)
        server._lowlevel_server.cache_hints = validate_cache_hints(
            {"tools/list": hint, "server/discover": hint}
        )
    mcp_app = server.streamable_http_app(json_response=args.json, streamable_http_path=path)
    h2 = args.h2c or args.tls is not None
    asyncio.run(_serve(counter.wrap(mcp_app, path), _listener(), counter, h2, path, args.tls))


if __name__ == "__main__":
    main()
