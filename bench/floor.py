"""The floors: the work item's HTTP exchanges written by hand, and nothing else.

A floor sends the bytes sansmcp sends (same request line or pseudo-headers, same
headers, same JSON-RPC bodies), reads each response with h11 (HTTP/1.1) or h2
(HTTP/2 with prior knowledge), ``json.loads`` each body (each ``data:`` payload
of an SSE body), and keeps what the next request needs: the legacy session id and
the listing's ``nextCursor``.  It validates nothing, bounds nothing and handles no
error beyond noticing that the server closed the socket.  Its cost is what any
client must pay in Python for these exchanges on that runtime.

The exchange logic is written once as a generator (:func:`work_item`) that yields
requests and is sent responses; three drivers run it on a blocking socket, on
asyncio streams and on trio streams, each over an h11 or an h2 connection object.

Two variants: ``llhttp=True`` reads HTTP/1.1 with llhttp (``httptools``, as uvicorn
does: the request head written by hand, the response parsed in C; issue 16, item 4)
instead of h11; ``ca=PATH`` speaks TLS to the server (trusting that CA, ALPN ``h2``
or ``http/1.1``), for the TLS h2 rows.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.events
import h11

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
USER_AGENT = b"sansmcp/0.1.0"
_META = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    b'"io.modelcontextprotocol/clientInfo":{"name":"sansmcp","version":"0.1.0"},'
    b'"io.modelcontextprotocol/clientCapabilities":{}}'
)
ECHO_ARGUMENTS = b'{"text": "hi"}'
_READ = 65536


@dataclass(slots=True)
class Request:
    method: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _post(headers: list[tuple[bytes, bytes]], body: bytes) -> Request:
    base = [
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"user-agent", USER_AGENT),
    ]
    return Request(b"POST", base + headers, body)


def _header(response: Response, name: bytes) -> bytes | None:
    for key, value in response.headers:
        if key == name:
            return value
    return None


def _messages(response: Response) -> list[Any]:
    """``json.loads`` the body: the whole body, or each SSE ``data:`` payload."""
    if not response.body:
        return []
    kind = _header(response, b"content-type") or b""
    if not kind.startswith(b"text/event-stream"):
        return [json.loads(response.body)]
    out = []
    for line in response.body.splitlines():
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload:
                out.append(json.loads(payload))
    return out


def _result(response: Response) -> Any:
    for message in _messages(response):
        if "result" in message:
            return message["result"]
    raise RuntimeError(f"no JSON-RPC result in a {response.status} response")


def work_item(era: str) -> Generator[Request, Response, tuple[int, str]]:
    """Connect, list tools (following nextCursor), call echo, close: one work item."""
    if era == "modern":
        version = [(b"mcp-protocol-version", MODERN.encode())]
        count = 0
        cursor: str | None = None
        request_id = 1
        while True:
            params = (
                _META if cursor is None else _META + b',"cursor":' + json.dumps(cursor).encode()
            )
            body = b'{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{%s}}' % (
                request_id,
                params,
            )
            request_id += 1
            result = _result((yield _post([*version, (b"mcp-method", b"tools/list")], body)))
            count += len(result["tools"])
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        body = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":"echo","arguments":%s}}'
            % (request_id, _META, ECHO_ARGUMENTS)
        )
        headers = [*version, (b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
        result = _result((yield _post(headers, body)))
        return count, result["content"][0]["text"]

    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
        b'"capabilities":{},"clientInfo":{"name":"sansmcp","version":"0.1.0"}}}'
    )
    response = yield _post([], body)
    _result(response)
    session = _header(response, b"mcp-session-id")
    assert session is not None
    version = [(b"mcp-protocol-version", LEGACY.encode()), (b"mcp-session-id", session)]
    yield _post(version, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    count = 0
    cursor = None
    request_id = 2
    while True:
        params = b"" if cursor is None else b'"cursor":' + json.dumps(cursor).encode()
        body = b'{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{%s}}' % (
            request_id,
            params,
        )
        request_id += 1
        result = _result((yield _post(version, body)))
        count += len(result["tools"])
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    body = (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":%s}}'
        % (request_id, ECHO_ARGUMENTS)
    )
    result = _result((yield _post(version, body)))
    text = result["content"][0]["text"]
    yield Request(
        b"DELETE",
        [
            (b"accept", b"application/json, text/event-stream"),
            (b"user-agent", USER_AGENT),
            *version,
        ],
        b"",
    )
    return count, text


# -- wire objects: bytes in, bytes out ------------------------------------------


class H1:
    """One HTTP/1.1 keep-alive connection as an h11 state machine."""

    def __init__(self, host: str, port: int, target: str) -> None:
        self.conn = h11.Connection(h11.CLIENT)
        self.authority = f"{host}:{port}".encode()
        self.target = target.encode()
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []

    def preamble(self) -> bytes:
        return b""

    @property
    def reusable(self) -> bool:
        return self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE

    def send(self, request: Request) -> bytes:
        headers = [(b"Host", self.authority), *request.headers]
        if request.method == b"POST":
            headers.append((b"Content-Length", b"%d" % len(request.body)))
        out = self.conn.send(
            h11.Request(method=request.method, target=self.target, headers=headers)
        )
        if request.body:
            out += self.conn.send(h11.Data(data=request.body))
        return out + self.conn.send(h11.EndOfMessage())

    def receive(self, data: bytes) -> tuple[Response | None, bytes]:
        """Feed bytes; the response once complete, and any bytes to send back (none)."""
        self.conn.receive_data(data)
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                return None, b""
            if isinstance(event, h11.Response):
                self._status = event.status_code
                self._headers = list(event.headers)
            elif isinstance(event, h11.Data):
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                response = Response(self._status, self._headers, b"".join(self._body))
                self._body = []
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                return response, b""
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("the server closed the connection")


class H2:
    """One HTTP/2 connection (prior knowledge) as an h2 state machine, one stream at a time."""

    def __init__(self, host: str, port: int, target: str, scheme: bytes = b"http") -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.conn = h2.connection.H2Connection(config=config)
        self.authority = f"{host}:{port}".encode()
        self.target = target.encode()
        self.scheme = scheme
        self._stream = 0
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self.reusable = True

    def preamble(self) -> bytes:
        self.conn.initiate_connection()
        return self.conn.data_to_send()

    def send(self, request: Request) -> bytes:
        headers = [
            (b":method", request.method),
            (b":scheme", self.scheme),
            (b":authority", self.authority),
            (b":path", self.target),
            *request.headers,
        ]
        if request.method == b"POST":
            headers.append((b"content-length", b"%d" % len(request.body)))
        self._stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(self._stream, headers, end_stream=not request.body)
        if request.body:
            self.conn.send_data(self._stream, request.body, end_stream=True)
        return self.conn.data_to_send()

    def receive(self, data: bytes) -> tuple[Response | None, bytes]:
        done = None
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self._headers = []
                for name, value in event.headers:
                    if name == b":status":
                        self._status = int(value)
                    else:
                        self._headers.append((name, value))
            elif isinstance(event, h2.events.DataReceived):
                self._body.append(event.data)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == self._stream:
                done = Response(self._status, self._headers, b"".join(self._body))
                self._body = []
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.reusable = False
        return done, self.conn.data_to_send()


class H1Llhttp:
    """One HTTP/1.1 keep-alive connection read by llhttp (``httptools``); the request
    head is written by hand, byte for byte what the h11 floor sends."""

    def __init__(self, host: str, port: int, target: str) -> None:
        import httptools

        self.head = b" " + target.encode() + b" HTTP/1.1\r\nHost: " + f"{host}:{port}".encode()
        self.parser = httptools.HttpResponseParser(self)
        self.reusable = True
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._done: Response | None = None

    def preamble(self) -> bytes:
        return b""

    def send(self, request: Request) -> bytes:
        lines = [request.method + self.head]
        lines += [name + b": " + value for name, value in request.headers]
        if request.method == b"POST":
            lines.append(b"Content-Length: %d" % len(request.body))
        return b"\r\n".join(lines) + b"\r\n\r\n" + request.body

    # llhttp's callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._done = Response(self.parser.get_status_code(), self._headers, b"".join(self._body))
        self.reusable = self.parser.should_keep_alive()  # only valid here
        self._headers, self._body = [], []

    def receive(self, data: bytes) -> tuple[Response | None, bytes]:
        self.parser.feed_data(data)
        done, self._done = self._done, None
        return done, b""


def _wire(
    http: str, host: str, port: int, target: str, *, llhttp: bool = False, tls: bool = False
) -> H1 | H2 | H1Llhttp:
    if http == "h2":
        return H2(host, port, target, scheme=b"https" if tls else b"http")
    return H1Llhttp(host, port, target) if llhttp else H1(host, port, target)


def tls_context(ca: str, http: str) -> ssl.SSLContext:
    """A client context trusting the bench's CA, offering the ALPN of ``http``."""
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"] if http == "h2" else ["http/1.1"])
    return context


# -- drivers ------------------------------------------------------------------


class _Driver:
    def __init__(
        self,
        host: str,
        port: int,
        target: str,
        http: str,
        *,
        llhttp: bool = False,
        ca: str | None = None,
    ) -> None:
        self.address = (host, port, target, http)
        self.llhttp = llhttp
        self.tls = tls_context(ca, http) if ca else None

    def _new_wire(self) -> H1 | H2 | H1Llhttp:
        host, port, target, http = self.address
        return _wire(http, host, port, target, llhttp=self.llhttp, tls=self.tls is not None)


class SyncFloor(_Driver):
    """Blocking socket; one persistent connection, re-dialled if the server drops it."""

    def __init__(self, host: str, port: int, target: str, http: str, **kw: Any) -> None:
        super().__init__(host, port, target, http, **kw)
        self.sock: socket.socket | None = None
        self.wire: H1 | H2 | H1Llhttp | None = None

    def _exchange(self, request: Request) -> Response:
        if self.sock is None or self.wire is None or not self.wire.reusable:
            self.close()
            host, port, _, _ = self.address
            sock = socket.create_connection((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=host)
            self.sock = sock
            self.wire = self._new_wire()
            self.sock.sendall(self.wire.preamble())
        sock, wire = self.sock, self.wire
        sock.sendall(wire.send(request))
        while True:
            data = sock.recv(_READ)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            response, reply = wire.receive(data)
            if reply:
                sock.sendall(reply)
            if response is not None:
                return response

    def item(self, era: str) -> tuple[int, str]:
        steps = work_item(era)
        request = next(steps)
        while True:
            try:
                request = steps.send(self._exchange(request))
            except StopIteration as stop:
                result: tuple[int, str] = stop.value
                return result

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.wire = None


class _AsyncConn:
    __slots__ = ("stream", "wire")

    def __init__(self, stream: Any, wire: H1 | H2 | H1Llhttp) -> None:
        self.stream = stream
        self.wire = wire


class AsyncioFloor(_Driver):
    """asyncio streams; a pool of idle connections (one per concurrent work item)."""

    def __init__(self, host: str, port: int, target: str, http: str, **kw: Any) -> None:
        super().__init__(host, port, target, http, **kw)
        self.idle: list[_AsyncConn] = []

    async def _dial(self) -> _AsyncConn:
        import asyncio

        host, port, _, _ = self.address
        tls: Any = {"ssl": self.tls, "server_hostname": host} if self.tls else {}
        reader, writer = await asyncio.open_connection(host, port, **tls)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _AsyncConn((reader, writer), self._new_wire())
        writer.write(conn.wire.preamble())
        return conn

    async def _exchange(self, conn: _AsyncConn, request: Request) -> Response:
        reader, writer = conn.stream
        writer.write(conn.wire.send(request))
        while True:
            data = await reader.read(_READ)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            response, reply = conn.wire.receive(data)
            if reply:
                writer.write(reply)
            if response is not None:
                return response

    async def item(self, era: str) -> tuple[int, str]:
        conn = self.idle.pop() if self.idle else await self._dial()
        steps = work_item(era)
        request = next(steps)
        while True:
            if not conn.wire.reusable:
                conn.stream[1].close()
                conn = await self._dial()
            try:
                request = steps.send(await self._exchange(conn, request))
            except StopIteration as stop:
                self.idle.append(conn)
                result: tuple[int, str] = stop.value
                return result

    async def close(self) -> None:
        for conn in self.idle:
            conn.stream[1].close()
        self.idle = []


class TrioFloor(_Driver):
    """trio streams; a pool of idle connections (one per concurrent work item)."""

    def __init__(self, host: str, port: int, target: str, http: str, **kw: Any) -> None:
        super().__init__(host, port, target, http, **kw)
        self.idle: list[_AsyncConn] = []

    async def _dial(self) -> _AsyncConn:
        import trio

        host, port, _, _ = self.address
        stream: Any = await trio.open_tcp_stream(host, port)
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls, server_hostname=host)
            await stream.do_handshake()
        conn = _AsyncConn(stream, self._new_wire())
        preamble = conn.wire.preamble()
        if preamble:
            await stream.send_all(preamble)
        return conn

    async def _exchange(self, conn: _AsyncConn, request: Request) -> Response:
        stream = conn.stream
        await stream.send_all(conn.wire.send(request))
        while True:
            data = await stream.receive_some(_READ)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            response, reply = conn.wire.receive(data)
            if reply:
                await stream.send_all(reply)
            if response is not None:
                return response

    async def item(self, era: str) -> tuple[int, str]:
        conn = self.idle.pop() if self.idle else await self._dial()
        steps = work_item(era)
        request = next(steps)
        while True:
            if not conn.wire.reusable:
                await conn.stream.aclose()
                conn = await self._dial()
            try:
                request = steps.send(await self._exchange(conn, request))
            except StopIteration as stop:
                self.idle.append(conn)
                result: tuple[int, str] = stop.value
                return result

    async def close(self) -> None:
        for conn in self.idle:
            await conn.stream.aclose()
        self.idle = []
