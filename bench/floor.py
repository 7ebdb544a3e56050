"""The floors: the work item's HTTP exchanges written by hand, and nothing else.

A floor sends the bytes sansmcp sends (same request line or pseudo-headers, same
headers, same JSON-RPC bodies), reads each response with h11 (HTTP/1.1) or with a
hand-written HTTP/2 client (:class:`H2`: frames read by their 9-byte header, HPACK decoded by
``hpack``, prior knowledge or TLS), checks the status (200 for a request, 2xx for the
notification and the DELETE), ``json.loads`` each body (each ``data:`` payload of an SSE
body), and keeps what the next request needs: the legacy session id and the listing's
``nextCursor`` (the harness checks the tool count and the echo).  It validates nothing
else, bounds nothing and handles no error beyond noticing that the server closed the
socket, reset the stream or refused it.  Its cost is what any client must pay in
Python for these exchanges on that runtime.

The exchange logic is written once as a generator (:func:`work_item`) that yields
requests and is sent responses; three drivers run it on a blocking socket, on
asyncio streams and on trio streams, each over the same wire objects (:class:`H1`,
:class:`H2`, :class:`H1Llhttp`): bytes in, bytes out.

Two variants: ``llhttp=True`` reads HTTP/1.1 with llhttp (``httptools``, as uvicorn
does: the request head written by hand, the response parsed in C; issue 16, item 4)
instead of h11; ``ca=PATH`` speaks TLS to the server (trusting that CA, ALPN ``h2``
or ``http/1.1``), for the TLS h2 rows.

The HTTP/2 floor was the ``h2`` library's ``H2Connection`` until sansmcp's own h2 wire
became cheaper than it (sansmcp-asyncio ÷ that floor was 0.66-0.85 on h2c): it measured
h2's cost, not the least an HTTP/2 exchange costs.  On the 10-tool h2c server the
hand-written one costs about 0.5-0.6x what the h2 one did (blocking driver, interleaved
in one process); no row needs the h2 library's floor any more.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import h11
import hpack

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
    if response.status != 200:
        raise RuntimeError(f"a {response.status} response to a request")
    for message in _messages(response):
        if "result" in message:
            return message["result"]
    raise RuntimeError(f"no JSON-RPC result in a {response.status} response")


def _accepted(response: Response) -> None:
    if not 200 <= response.status < 300:
        raise RuntimeError(f"a {response.status} response to a notification or DELETE")


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
    _accepted((yield _post(version, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')))
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
    headers = [(b"accept", b"application/json, text/event-stream"), (b"user-agent", USER_AGENT)]
    _accepted((yield Request(b"DELETE", [*headers, *version], b"")))
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


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_DEFAULT_WINDOW = 65_535
STREAM_WINDOW = 256 << 10  # what sansmcp's h2 wire announces (SETTINGS_INITIAL_WINDOW_SIZE)
CONNECTION_WINDOW = 1 << 20  # and opens the connection window to
_OUR_SETTINGS = (  # sansmcp's, at default Limits
    (0x2, 0),  # SETTINGS_ENABLE_PUSH
    (0x3, 100),  # SETTINGS_MAX_CONCURRENT_STREAMS
    (0x4, STREAM_WINDOW),  # SETTINGS_INITIAL_WINDOW_SIZE
    (0x6, 64 << 10),  # SETTINGS_MAX_HEADER_LIST_SIZE
)


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


_VARYING = frozenset((b"content-length", b"mcp-session-id"))  # not memoised


def _hpack_string(text: bytes) -> bytes:
    """A string literal, no Huffman coding: its length as a 7-bit prefix integer (RFC 7541
    5.1, 5.2), then the bytes."""
    length = len(text)
    if length < 0x7F:
        return bytes((length,)) + text
    head = bytearray((0x7F,))
    length -= 0x7F
    while length >= 0x80:
        head.append(length & 0x7F | 0x80)
        length >>= 7
    head.append(length)
    return bytes(head) + text


def _unpad(flags: int, payload: bytes) -> bytes:
    if flags & _PADDED:
        return payload[1 : len(payload) - payload[0]]
    return payload


class H2:
    """One HTTP/2 connection (prior knowledge, or TLS with ALPN ``h2``) written by hand, one
    stream at a time: the preface and sansmcp's SETTINGS and connection WINDOW_UPDATE;
    a request is a HEADERS frame (each field an HPACK literal without indexing, no Huffman
    coding, memoised per field but for the varying ones: what sansmcp's encoder sends) and
    its body in DATA frames within the server's windows; frames are
    read by their 9-byte header, a header block (HEADERS + CONTINUATION) is decoded with
    ``hpack.Decoder``, DATA is collected and its windows reopened once half is taken (as
    sansmcp does), SETTINGS are acknowledged, PING answered, WINDOW_UPDATE counted; a
    RST_STREAM on our stream, or a GOAWAY that refuses it, fails the item.  Nothing else
    is checked: it is the least any HTTP/2 client written in Python does for these
    exchanges.  (It replaced the ``h2`` library's ``H2Connection``, which costs more than
    sansmcp's own wire does, so the h2 ratios compared unlike things.)"""

    def __init__(self, host: str, port: int, target: str, scheme: bytes = b"http") -> None:
        self._fields: dict[tuple[bytes, bytes], bytes] = {}  # encoded, by (name, value)
        self.decoder = hpack.Decoder()
        self.authority = f"{host}:{port}".encode()
        self.target = target.encode()
        self.scheme = scheme
        self.reusable = True
        self._stream = -1  # ours: 1, 3, 5, ...
        self._in = bytearray()
        self._block = bytearray()  # a header block being collected
        self._block_ends_stream = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._peer_window = _DEFAULT_WINDOW  # the server's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame_size = 16_384
        self._send_window = _DEFAULT_WINDOW  # connection
        self._stream_send_window = _DEFAULT_WINDOW
        self._taken = 0  # connection-window bytes received since the last WINDOW_UPDATE
        self._stream_taken = 0

    def preamble(self) -> bytes:
        settings = b"".join(
            code.to_bytes(2, "big") + value.to_bytes(4, "big") for code, value in _OUR_SETTINGS
        )
        update = (CONNECTION_WINDOW - _DEFAULT_WINDOW).to_bytes(4, "big")
        return _PREFACE + _frame(_SETTINGS, 0, 0, settings) + _frame(_WINDOW_UPDATE, 0, 0, update)

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
        block = b"".join([self._field(name, value) for name, value in headers])
        if len(block) > self._peer_frame_size:
            raise RuntimeError(f"a header block of {len(block)} bytes needs CONTINUATION frames")
        body = request.body
        window = self._peer_window  # the new stream's
        if len(body) > min(self._send_window, window):
            raise RuntimeError("the request body does not fit the server's windows")
        # nothing has moved until here: a refused request leaves the connection as it was
        self._stream += 2
        self._stream_send_window = window - len(body)
        self._stream_taken = 0
        self._send_window -= len(body)
        out = _frame(_HEADERS, _END_HEADERS | (0 if body else _END_STREAM), self._stream, block)
        for start in range(0, len(body), self._peer_frame_size):
            chunk = body[start : start + self._peer_frame_size]
            last = start + len(chunk) >= len(body)
            out += _frame(_DATA, _END_STREAM if last else 0, self._stream, chunk)
        return out

    def _field(self, name: bytes, value: bytes) -> bytes:
        """One field as an HPACK literal without indexing (RFC 7541 6.2.2), memoised but
        for the fields that vary per request or per session."""
        encoded = self._fields.get((name, value))
        if encoded is None:
            encoded = b"\x00" + _hpack_string(name) + _hpack_string(value)
            if name not in _VARYING:
                self._fields[name, value] = encoded
        return encoded

    def receive(self, data: bytes) -> tuple[Response | None, bytes]:
        """Feed bytes; the response once its stream ended, and the frames to send back."""
        buffer = self._in
        buffer += data
        out = bytearray()
        done = None
        start = 0
        while len(buffer) - start >= 9:
            length = int.from_bytes(buffer[start : start + 3], "big")
            end = start + 9 + length
            if len(buffer) < end:
                break
            kind, flags = buffer[start + 3], buffer[start + 4]
            stream = int.from_bytes(buffer[start + 5 : start + 9], "big") & 0x7FFF_FFFF
            payload = bytes(buffer[start + 9 : end])
            start = end
            if kind == _DATA:
                if self._on_data(flags, stream, payload, out):
                    done = self._response()
            elif kind in (_HEADERS, _CONTINUATION):
                if kind == _HEADERS:
                    payload = _unpad(flags, payload)
                    if flags & _PRIORITY:
                        payload = payload[5:]
                    self._block_ends_stream = bool(flags & _END_STREAM)
                self._block += payload
                if flags & _END_HEADERS and self._on_header_block(stream):
                    done = self._response()
            elif kind == _SETTINGS:
                if not flags & _ACK:
                    self._on_settings(payload)
                    out += _frame(_SETTINGS, _ACK, 0)
            elif kind == _PING:
                if not flags & _ACK:
                    out += _frame(_PING, _ACK, 0, payload)
            elif kind == _WINDOW_UPDATE:
                increment = int.from_bytes(payload, "big") & 0x7FFF_FFFF
                if stream == 0:
                    self._send_window += increment
                elif stream == self._stream:
                    self._stream_send_window += increment
            elif kind == _RST_STREAM and stream == self._stream and done is None:
                code = int.from_bytes(payload, "big")
                raise ConnectionResetError(f"the server reset stream {stream} (error {code})")
            elif kind == _GOAWAY:
                self.reusable = False
                last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
                if last < self._stream and done is None:
                    raise ConnectionResetError(f"GOAWAY refused stream {self._stream}")
            # PRIORITY, PUSH_PROMISE (push is off) and unknown types: nothing to do
        del buffer[:start]
        return done, bytes(out)

    def _on_data(self, flags: int, stream: int, payload: bytes, out: bytearray) -> bool:
        """Collect DATA on our stream; reopen the windows once half is taken.  True at the
        end of our stream."""
        self._taken += len(payload)
        if self._taken >= CONNECTION_WINDOW // 2:
            out += _frame(_WINDOW_UPDATE, 0, 0, self._taken.to_bytes(4, "big"))
            self._taken = 0
        if stream != self._stream:
            return False
        self._body.append(_unpad(flags, payload))
        if flags & _END_STREAM:
            return True
        self._stream_taken += len(payload)
        if self._stream_taken >= STREAM_WINDOW // 2:
            out += _frame(_WINDOW_UPDATE, 0, stream, self._stream_taken.to_bytes(4, "big"))
            self._stream_taken = 0
        return False

    def _on_header_block(self, stream: int) -> bool:
        """Decode a complete header block (every block: HPACK state is connection-wide).
        True when it ends our stream."""
        fields = self.decoder.decode(bytes(self._block), raw=True)
        self._block.clear()
        if stream != self._stream:
            return False
        headers: list[tuple[bytes, bytes]] = []
        status = 0
        for name, value in fields:
            if name == b":status":
                status = int(value)
            else:
                headers.append((bytes(name), bytes(value)))
        if status >= 200:  # a final head (a 1xx one is skipped; trailers carry no status)
            self._status, self._headers = status, headers
        return self._block_ends_stream

    def _on_settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - 5, 6):
            code = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if code == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE
                self._stream_send_window += value - self._peer_window
                self._peer_window = value
            elif code == 0x5:  # SETTINGS_MAX_FRAME_SIZE
                self._peer_frame_size = value

    def _response(self) -> Response:
        response = Response(self._status, self._headers, b"".join(self._body))
        self._status, self._headers, self._body = 0, [], []
        return response


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
