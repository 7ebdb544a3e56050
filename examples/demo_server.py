"""A small MCP server for ``make demo``, built on the official ``mcp`` package's low-level API.

Run: ``python examples/demo_server.py [PORT] [--page-size N] [--stateless] [--json]``.
PORT 0 (the default) lets the kernel pick a free loopback port.  Prints
``READY http://127.0.0.1:PORT/mcp`` once the socket listens.

The high-level ``MCPServer`` always answers ``tools/list`` in one page, so this server
registers its own ``tools/list`` and ``tools/call`` handlers on the low-level ``Server``
(the one ``MCPServer`` wraps) and serves the tools ``--page-size`` at a time, with an
opaque ``nextCursor``.  The SDK answers both protocol eras: 2026-07-28 (stateless,
``server/discover``) and the legacy revisions (``initialize``, sessions).

Tools: ``echo`` (its ``text``), ``add`` (two integers; text and structured content),
``weather`` (``city`` is mirrored into an ``Mcp-Param-City`` header by 2026-07-28
clients), ``pixel`` (a 1x1 PNG image block) and ``fail`` (always reports ``isError``).
An unknown tool is a JSON-RPC error (-32602), not a tool result.
"""

from __future__ import annotations

import argparse
import base64
import socket
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

# A 1x1 transparent PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg=="
)

TOOLS = [
    types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "what to say"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    types.Tool(
        name="weather",
        description="A (made-up) forecast for a city.",
        input_schema={
            "type": "object",
            "properties": {
                "city": {"type": "string", "x-mcp-header": "City"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    ),
    types.Tool(
        name="pixel",
        description="Return a 1x1 PNG image.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="fail",
        description="Always fails (the tool reports an error).",
        input_schema={"type": "object", "properties": {}},
    ),
]


def _bad_params(message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message)


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _int(arguments: dict[str, Any], key: str) -> int:
    value = arguments.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad_params(f"argument {key!r} must be an integer")
    return value


def _str(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise _bad_params(f"argument {key!r} must be a string")
    return value


def build(page_size: int) -> Server[Any]:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        cursor = params.cursor if params is not None else None
        start = 0
        if cursor is not None:
            if not cursor.startswith("page:") or not cursor[5:].isdigit():
                raise _bad_params(f"invalid cursor {cursor[:40]!r}")
            start = int(cursor[5:])
            if start >= len(TOOLS):
                raise _bad_params(f"invalid cursor {cursor[:40]!r}")
        end = start + page_size
        return types.ListToolsResult(
            tools=TOOLS[start:end],
            next_cursor=f"page:{end}" if end < len(TOOLS) else None,
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if params.name == "echo":
            return types.CallToolResult(content=[_text(_str(arguments, "text"))])
        if params.name == "add":
            total = _int(arguments, "a") + _int(arguments, "b")
            return types.CallToolResult(
                content=[_text(str(total))], structured_content={"sum": total}
            )
        if params.name == "weather":
            city = _str(arguments, "city")
            days = _int(arguments, "days") if "days" in arguments else 1
            lines = [f"{city}, day {n + 1}: sunny, 21 °C" for n in range(days)]
            return types.CallToolResult(content=[_text("\n".join(lines))])
        if params.name == "pixel":
            image = types.ImageContent(
                type="image", data=base64.b64encode(PIXEL_PNG).decode(), mime_type="image/png"
            )
            return types.CallToolResult(content=[_text("a 1x1 transparent pixel"), image])
        if params.name == "fail":
            return types.CallToolResult(content=[_text("this tool always fails")], is_error=True)
        raise _bad_params(f"Unknown tool: {params.name[:80]}")

    return Server(
        "sansmcp-demo-server",
        version="1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("port", type=int, nargs="?", default=0)
    parser.add_argument("--page-size", type=int, default=2)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.page_size < 1:
        parser.error("--page-size must be at least 1")
    app = build(args.page_size).streamable_http_app(
        stateless_http=args.stateless, json_response=args.json
    )
    import uvicorn

    # Bind and listen before announcing: a client may connect as soon as READY is out
    # (the kernel queues it until uvicorn accepts), and port 0 cannot race another user.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)
    print(f"READY http://127.0.0.1:{port}/mcp", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
