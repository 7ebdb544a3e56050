"""What a well-behaved MCP server answers, as plain values both hostile servers send.

Each hostile server (``server_h1``, ``server_h2``) parses the client's request into a
:class:`Request` and either misbehaves or falls back to :func:`well_behaved`, which
answers like a correct server of the 2026-07-28 revision (or, with ``legacy=True``,
a 2025-06-18 server with a session) would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MODERN = "2026-07-28"
LEGACY = "2025-06-18"
SESSION = "hostile-session-1"


@dataclass
class Request:
    """One HTTP request as the server received it."""

    method: str  # the HTTP method
    target: str
    headers: dict[str, str]  # lower-case names; the last value wins
    body: bytes
    rpc: Any = None  # the parsed JSON body, if it parsed

    @property
    def rpc_method(self) -> str | None:
        if isinstance(self.rpc, dict) and isinstance(self.rpc.get("method"), str):
            return str(self.rpc["method"])
        return None

    @property
    def rpc_id(self) -> Any:
        return self.rpc.get("id") if isinstance(self.rpc, dict) else None

    @property
    def params(self) -> dict[str, Any]:
        params = self.rpc.get("params") if isinstance(self.rpc, dict) else None
        return params if isinstance(params, dict) else {}

    @property
    def key(self) -> str:
        """What the request counts as: its JSON-RPC method, ``"response"`` for our
        client's answer to a server request, else the HTTP method."""
        if self.rpc_method is not None:
            return self.rpc_method
        if isinstance(self.rpc, dict) and ("result" in self.rpc or "error" in self.rpc):
            return "response"
        return self.method


@dataclass
class Answer:
    """A complete HTTP response: status, headers (name, value) and body."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def json_answer(
    message: Any, status: int = 200, headers: list[tuple[str, str]] | None = None
) -> Answer:
    body = message if isinstance(message, bytes) else dumps(message)
    return Answer(status, [("content-type", "application/json"), *(headers or [])], body)


def sse_answer(payload: bytes, status: int = 200) -> Answer:
    return Answer(status, [("content-type", "text/event-stream")], payload)


def sse_event(message: Any) -> bytes:
    return b"data: " + dumps(message) + b"\n\n"


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"the {name} tool",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        **extra,
    }


DISCOVER_RESULT = {
    "resultType": "complete",
    "supportedVersions": [MODERN],
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "hostile", "version": "1"},
}


def list_result(
    tools: list[Any], cursor: str | None = None, *, modern: bool = True
) -> dict[str, Any]:
    value: dict[str, Any] = {"tools": tools}
    if cursor is not None:
        value["nextCursor"] = cursor
    if modern:
        value["resultType"] = "complete"
    return value


def call_result(content: list[Any], *, modern: bool = True) -> dict[str, Any]:
    value: dict[str, Any] = {"content": content, "isError": False}
    if modern:
        value["resultType"] = "complete"
    return value


def well_behaved(request: Request, *, legacy: bool = False) -> Answer:
    """The answer of a correct server (modern, or legacy ``2025-06-18`` with a session)."""
    if request.method == "DELETE":
        return Answer(200)
    if request.method == "GET":
        return Answer(405)
    method, rid = request.rpc_method, request.rpc_id
    if method is None:
        return Answer(202)  # a response or notification from the client
    if method == "server/discover":
        if legacy:
            return Answer(400, [("content-type", "text/plain")], b"Bad Request: no session id")
        return json_answer(result(rid, DISCOVER_RESULT))
    if method == "initialize":
        if not legacy:
            return json_answer(
                error(rid, -32022, "unsupported", {"supported": [MODERN], "requested": "?"}), 400
            )
        value = {
            "protocolVersion": LEGACY,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"},
        }
        return json_answer(result(rid, value), headers=[("mcp-session-id", SESSION)])
    if method.startswith("notifications/"):
        return Answer(202)
    if method == "tools/list":
        return json_answer(result(rid, list_result([tool("echo")], modern=not legacy)))
    if method == "tools/call":
        text = json.dumps(request.params.get("arguments", {}))
        content = [{"type": "text", "text": text}]
        return json_answer(result(rid, call_result(content, modern=not legacy)))
    return json_answer(error(rid, -32601, f"method not found: {method}"), 404)


# ---- parsed size (issue 10 C): bodies that are small in bytes and large once parsed ----
# Each fills ``size`` bytes (under the suite's 1 MiB budget) with one shape.

PARSED_SIZE = (1 << 20) - (16 << 10)  # leaves room for the negotiation's bytes and heads


def listing_body(request_id: Any, entries: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"result":{"resultType":"complete","tools":[%s]}}' % (
        request_id,
        entries,
    )


def repeated_entries(unit: bytes, size: int = PARSED_SIZE) -> bytes:
    """``unit,unit,...`` filling ``size`` bytes of a listing."""
    return b",".join([unit] * ((size - 100) // (len(unit) + 1)))


def minimal_tools(count: int) -> bytes:
    return b",".join(b'{"name":"t%d","inputSchema":{"type":"object"}}' % i for i in range(count))


def astral_tool(size: int = PARSED_SIZE) -> bytes:
    text = "\U0001f600" * ((size - 200) // 4)
    return b'{"name":"astral","description":"' + text.encode() + b'","inputSchema":{}}'


def tiny_events(count: int) -> bytes:
    """``count`` SSE events, each one small notification."""
    return b'data: {"jsonrpc":"2.0","method":"notifications/message"}\n\n' * count
