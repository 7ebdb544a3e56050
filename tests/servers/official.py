"""A real MCP server built with the official ``mcp`` package, for tests and the demo.

Run: ``python tests/servers/official.py PORT [--stateless] [--json] [--tools N] [--h2c | --tls CERT KEY]``.
Prints ``READY`` once listening.  Tools: ``echo`` (returns its ``text``), ``add``,
``fail`` (a tool error), and ``N`` filler tools of about 300 bytes of schema each
(``build(N, description_bytes)`` pads each description to that length).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from mcp.server.mcpserver import MCPServer


def build(extra_tools: int, description_bytes: int = 0) -> MCPServer:
    server = MCPServer("sansmcp-test-server", version="1.0")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails.")
    def fail() -> str:
        raise ValueError("this tool always fails")

    for index in range(extra_tools):

        def filler(city: str, days: int = 1, units: str = "metric") -> str:
            return f"{city}:{days}:{units}"

        server.add_tool(
            filler,
            name=f"forecast_{index}",
            description=f"Weather forecast number {index} for a city, for a number of days.".ljust(
                description_bytes, "."
            ),
        )
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--h2c", action="store_true")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    args = parser.parse_args()
    app = build(args.tools).streamable_http_app(
        stateless_http=args.stateless, json_response=args.json
    )
    if args.h2c or args.tls:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{args.port}"]
        config.loglevel = "WARNING"
        if args.tls:
            config.certfile, config.keyfile = args.tls
            config.alpn_protocols = ["h2", "http/1.1"]
        print("READY", flush=True)
        asyncio.run(serve(app, config))  # type: ignore[arg-type]
        return
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    server = uvicorn.Server(config)
    print("READY", flush=True)
    server.run()


if __name__ == "__main__":
    sys.exit(main())
