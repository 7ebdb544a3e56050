"""A pure fake MCP server and a driver for the MCP machine (tests of the pure core only).

``Driver`` plays the adapter: it executes ``StartExchange`` outputs by asking a
handler for a scripted ``Response``, feeds the response back as exchange events
(optionally split into tiny chunks), advances a fake clock to the machine's next
deadline when nothing else can happen, and answers ``InputRequired`` with an
input handler.  ``FakeServer`` is a configurable, well-behaved MCP server that
tests bend with overrides.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed, McpError
from sansmcp.core.http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    ResponseEnded,
    ResponseReceived,
    header_value,
)
from sansmcp.core.mcp import (
    CancelExchange,
    ConnSettings,
    InputRequired,
    McpMachine,
    OperationFailed,
    Output,
    StartExchange,
    Terminal,
)
from sansmcp.core.url import parse_endpoint

MODERN = "2026-07-28"
URL = "https://mcp.example.com/mcp"


@dataclass
class Response:
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    end: bool = True  # False: the stream stays open forever
    fail: ConnectionFailed | None = None  # instead of ending
    raw_size: int = 100
    head: bool = True  # False: fail (``fail``) before any head, as a DNS or dial failure does


def json_response(message: Any, status: int = 200, headers: Any = ()) -> Response:
    return Response(
        status=status,
        headers=[(b"content-type", b"application/json"), *headers],
        chunks=[json.dumps(message).encode()],
    )


def sse_response(*events: Any, end: bool = True, headers: Any = ()) -> Response:
    chunks = []
    for event in events:
        if isinstance(event, bytes):
            chunks.append(event)
        else:
            chunks.append(b"data: " + json.dumps(event).encode() + b"\n\n")
    return Response(
        headers=[(b"content-type", b"text/event-stream"), *headers], chunks=chunks, end=end
    )


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str = "error", data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"the {name} tool",
        "inputSchema": {"type": "object"},
        **extra,
    }


class FakeServer:
    """A configurable MCP server: modern (2026-07-28) and/or legacy, JSON or SSE."""

    def __init__(
        self,
        *,
        modern: bool = True,
        legacy: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        page_size: int | None = None,
        sse: bool = False,
        session: str | None = "session-1",
    ) -> None:
        self.modern = modern
        self.legacy = legacy
        self.tools = tools if tools is not None else [tool("echo")]
        self.page_size = page_size
        self.sse = sse
        self.session = session
        self.sessions: set[str] = set()
        self.requests: list[HttpRequest] = []
        self.bodies: list[Any] = []
        self.answers: list[Any] = []
        self.overrides: dict[str, Callable[[HttpRequest, Any], Response | None]] = {}
        self.capabilities: dict[str, Any] = {"tools": {}}  # what a legacy initialize declares

    def __call__(self, request: HttpRequest) -> Response | None:
        self.requests.append(request)
        body = json.loads(request.body) if request.body else None
        self.bodies.append(body)
        method = body.get("method") if isinstance(body, dict) else request.method.decode()
        override = self.overrides.get(str(method))
        if override is not None:
            return override(request, body)
        return self.default(request, body)

    def wrap(self, message: Any, headers: Any = ()) -> Response:
        if self.sse:
            return sse_response(message, headers=headers)
        return json_response(message, headers=headers)

    def default(self, request: HttpRequest, body: Any) -> Response | None:
        if request.method == b"DELETE":
            return Response(status=200)
        if request.method == b"GET":
            return Response(status=405)
        method = body.get("method")
        rid = body.get("id")
        params = body.get("params") or {}
        meta = params.get("_meta") or {}
        modern_request = "io.modelcontextprotocol/protocolVersion" in meta
        if method == "server/discover":
            if not self.modern:
                return Response(status=400, chunks=[b"Bad Request: no session"])
            return self.wrap(
                result(
                    rid,
                    {
                        "resultType": "complete",
                        "supportedVersions": [MODERN],
                        "capabilities": {"tools": {}},
                        "ttlMs": 0,
                        "cacheScope": "public",
                    },
                )
            )
        if method == "initialize":
            if self.legacy is None:
                return json_response(
                    error(rid, -32022, "modern only", {"supported": [MODERN], "requested": "x"}),
                    400,
                )
            headers = []
            if self.session is not None:
                self.sessions.add(self.session)
                headers.append((b"mcp-session-id", self.session.encode()))
            return self.wrap(
                result(
                    rid,
                    {
                        "protocolVersion": self.legacy,
                        "capabilities": self.capabilities,
                        "serverInfo": {"name": "fake", "version": "1"},
                    },
                ),
                headers,
            )
        if method == "notifications/initialized":
            return Response(status=202)
        if method is None and isinstance(body, dict) and ("result" in body or "error" in body):
            self.answers.append(body)  # our client answering a server request
            return Response(status=202)
        if not modern_request:
            if self.legacy is None:
                return Response(status=400)
            session = header_value(request.headers, b"mcp-session-id")
            if self.session is not None and (
                session is None or session.decode() not in self.sessions
            ):
                return Response(status=404 if session is not None else 400)
        elif not self.modern:
            return Response(status=400)
        if method == "tools/list":
            cursor = params.get("cursor")
            start = int(cursor) if cursor else 0
            size = self.page_size or len(self.tools) or 1
            page = self.tools[start : start + size]
            value: dict[str, Any] = {"tools": page}
            if start + size < len(self.tools):
                value["nextCursor"] = str(start + size)
            if modern_request:
                value.update(resultType="complete", ttlMs=1000, cacheScope="private")
            return self.wrap(result(rid, value))
        if method == "tools/call":
            args = params.get("arguments", {})
            value = {"content": [{"type": "text", "text": json.dumps(args)}], "isError": False}
            if modern_request:
                value["resultType"] = "complete"
            return self.wrap(result(rid, value))
        if rid is None:
            return Response(status=202)
        return json_response(error(rid, -32601, "method not found"), 404)


class Driver:
    """Plays the adapter for one machine against a handler of requests."""

    def __init__(
        self,
        handler: Callable[[HttpRequest], Response | None],
        *,
        settings: ConnSettings | None = None,
        chunk: int | Callable[[bytes], list[bytes]] | None = None,
        input_handler: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
        **machine_kwargs: Any,
    ) -> None:
        self.handler = handler
        self.settings = settings or ConnSettings(endpoint=parse_endpoint(URL))
        self.machine = McpMachine(self.settings, **machine_kwargs)
        self.now = 0.0
        self.chunk = chunk
        self.input_handler = input_handler
        self.outputs: list[Output] = []
        self.cancelled: set[int] = set()
        self._pending: deque[Output] = deque()
        self.started: list[StartExchange] = []
        self.fed = 0  # response bytes fed to the machine (head blocks and bodies)

    def run(self, start: Callable[..., None], *args: Any) -> Output:
        start(*args, now=self.now)
        return self.pump()

    def connect(self) -> Output:
        return self.run(self.machine.connect)

    def list_tools(self) -> Output:
        return self.run(self.machine.list_tools)

    def call(self, name: str, arguments: bytes = b"") -> Output:
        return self.run(self.machine.call_tool, name, arguments)

    def close(self) -> Output:
        return self.run(self.machine.close)

    def ok(self, outcome: Output) -> Output:
        if isinstance(outcome, OperationFailed):
            raise outcome.error
        return outcome

    def failure(self, outcome: Output) -> McpError:
        assert isinstance(outcome, OperationFailed), outcome
        return outcome.error

    def pump(self) -> Output:
        machine = self.machine
        for _ in range(100_000):
            out = self._pending.popleft() if self._pending else machine.next_output()
            if out is None:
                deadline = machine.next_deadline()
                assert deadline is not None, "machine is stuck with nothing to wait for"
                self.now = max(self.now, deadline)
                machine.handle_timer(now=self.now)
                continue
            self.outputs.append(out)
            if isinstance(out, StartExchange):
                self.started.append(out)
                response = self.handler(out.request)
                if response is not None:
                    self.deliver(out.exchange_id, response)
            elif isinstance(out, CancelExchange):
                self.cancelled.add(out.exchange_id)
            elif isinstance(out, InputRequired):
                answer = self.input_handler(out.requests) if self.input_handler else None
                machine.answer_input(out.input_id, answer, now=self.now)
            elif isinstance(out, Terminal):
                return out
        raise AssertionError("no terminal event")

    def feed(self, event: ExchangeEvent) -> bool:
        """Feed one event, as an adapter would: never to a cancelled exchange.

        Cancellations the machine emits meanwhile take effect at once (an adapter
        stops reading that exchange); other outputs wait for :meth:`pump`.
        """
        if event.exchange_id in self.cancelled:
            return False
        if isinstance(event, DataReceived):
            self.fed += len(event.data) + event.overhead
        elif isinstance(event, ResponseReceived):
            self.fed += event.raw_size
        self.machine.receive(event, now=self.now)
        while (out := self.machine.next_output()) is not None:
            if isinstance(out, CancelExchange):
                self.outputs.append(out)
                self.cancelled.add(out.exchange_id)
            else:
                self._pending.append(out)
        return True

    def deliver(self, exchange_id: int, response: Response) -> None:
        head = ResponseReceived(
            exchange_id=exchange_id,
            status=response.status,
            headers=tuple(response.headers),
            raw_size=response.raw_size,
        )
        if response.head and not self.feed(head):
            return
        for data in response.chunks:
            if callable(self.chunk):
                pieces = self.chunk(data)
            elif self.chunk:
                pieces = [data[i : i + self.chunk] for i in range(0, len(data), self.chunk)]
            else:
                pieces = [data]
            for piece in pieces:
                if not self.feed(DataReceived(exchange_id=exchange_id, data=piece)):
                    return
        if response.fail is not None:
            self.feed(ExchangeFailed(exchange_id=exchange_id, error=response.fail))
        elif response.end:
            self.feed(ResponseEnded(exchange_id=exchange_id))

    def pump_side(self) -> None:
        """Run the exchanges an ended operation left behind (answers, cancellations)
        without advancing the clock."""
        while (out := self.pending()) is not None:
            self.outputs.append(out)
            if isinstance(out, StartExchange):
                self.started.append(out)
                response = self.handler(out.request)
                if response is not None:
                    self.deliver(out.exchange_id, response)
            elif isinstance(out, CancelExchange):
                self.cancelled.add(out.exchange_id)

    def pending(self) -> Output | None:
        """The next output not yet pumped (for tests that step by hand)."""
        return self._pending.popleft() if self._pending else self.machine.next_output()

    def methods(self) -> list[str]:
        names = []
        for start in self.started:
            request = start.request
            if request.body:
                names.append(str(json.loads(request.body).get("method", "<response>")))
            else:
                names.append(request.method.decode())
        return names


# Every shape an embedder's input handler could hand back: JSON values and what JSON cannot
# carry (bytes, sets, tuples as keys, objects, NaN and infinities, non-string keys), at the
# top and nested.
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=4)
    | st.binary(max_size=2)
    | st.builds(object)
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(st.text(max_size=3) | st.integers() | st.none(), inner, max_size=3)
    ),
    max_leaves=8,
)
HANDLER_RETURNS = _VALUES | st.dictionaries(st.text(max_size=6), _VALUES, max_size=3)


def sendable(value: Any) -> bool:
    """Whether ``value`` is None or a str-keyed mapping of values JSON can carry."""
    if value is None:
        return True
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return False
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
