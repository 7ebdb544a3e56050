"""A fast canned-response MCP server for the in-flight rows (``bench/inflight.py``).

No SDK in the loop: an asyncio ``Protocol`` reads HTTP/1.1 requests (keep-alive,
``Content-Length`` bodies only), finds the JSON-RPC ``method`` and ``id`` with two
byte searches, and answers with pre-built bytes in which only the id changes.  It
speaks the 2026-07-28 revision (``server/discover``, ``tools/list``, ``tools/call``)
and the 2025-11-25 one (``initialize`` with a session, notifications, ``DELETE``),
lists 10 tools of ~300-byte schemas as ``bench/server.py`` does, and echoes
``{"text": "hi"}``.  It validates nothing: it is there so that the server is not the
bottleneck when 1,000 work items are in flight.

``python -m bench.canned PORT`` serves on 127.0.0.1:PORT until killed and prints
``ready`` once listening.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
SESSION = b"canned-session-1"
_METHOD = re.compile(rb'"method"\s*:\s*"([^"]*)"')
_ID = re.compile(rb'"id"\s*:\s*(\d+)')


def _tool(index: int) -> dict[str, object]:
    properties = {
        f"field_{k}": {"type": "string", "description": f"parameter {k} of tool {index}"}
        for k in range(4)
    }
    return {
        "name": "echo" if index == 0 else f"tool_{index}",
        "description": f"canned tool number {index}",
        "inputSchema": {"type": "object", "properties": properties, "required": ["field_0"]},
    }


def _result(value: object) -> bytes:
    """The body with ``%d`` where the id goes."""
    text = json.dumps({"jsonrpc": "2.0", "id": 0, "result": value}, separators=(",", ":"))
    return text.replace('"id":0', '"id":%d', 1).encode()


_TOOLS = [_tool(i) for i in range(10)]
_BODIES = {
    (True, b"server/discover"): _result(
        {
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "canned", "version": "1"},
        }
    ),
    (True, b"tools/list"): _result({"resultType": "complete", "tools": _TOOLS}),
    (True, b"tools/call"): _result(
        {
            "resultType": "complete",
            "content": [{"type": "text", "text": "hi"}],
            "isError": False,
        }
    ),
    (False, b"initialize"): _result(
        {
            "protocolVersion": LEGACY,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "canned", "version": "1"},
        }
    ),
    (False, b"tools/list"): _result({"tools": _TOOLS}),
    (False, b"tools/call"): _result(
        {"content": [{"type": "text", "text": "hi"}], "isError": False}
    ),
}
_HEAD = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
_EMPTY = b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\n\r\n"


def answer(head: bytes, body: bytes) -> bytes:
    """The response bytes for one request (its head without the blank line, its body)."""
    if head.startswith(b"DELETE"):
        return _EMPTY % (200, b"OK")
    if head.startswith(b"GET"):
        return _EMPTY % (405, b"Method Not Allowed")
    found = _METHOD.search(body)
    method = found.group(1) if found else b""
    modern = b"mcp-session-id" not in head.lower() and method != b"initialize"
    if method == b"server/discover" and b"2025-" in head:
        modern = False
    template = _BODIES.get((modern, method))
    if template is None:
        if method.startswith(b"notifications/") or not method:
            return _EMPTY % (202, b"Accepted")
        template = b'{"jsonrpc":"2.0","id":%d,"error":{"code":-32601,"message":"no"}}'
        number = _ID.search(body)
        payload = template % int(number.group(1) if number else b"0")
        return _HEAD % (404, b"Not Found", len(payload), b"") + payload
    number = _ID.search(body)
    payload = template % int(number.group(1) if number else b"0")
    extra = b"mcp-session-id: " + SESSION + b"\r\n" if method == b"initialize" else b""
    return _HEAD % (200, b"OK", len(payload), extra) + payload


class _Http(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end]
            length = 0
            lower = head.lower()
            at = lower.find(b"content-length:")
            if at >= 0:
                stop = lower.find(b"\r\n", at)
                length = int(lower[at + 15 : stop if stop >= 0 else None])
            total = end + 4 + length
            if len(self.buffer) < total:
                break
            body = self.buffer[end + 4 : total]
            self.buffer = self.buffer[total:]
            out.append(answer(head, body))
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
