"""An HTTP/2 (h2c, prior knowledge) server built on the ``h2`` library, for floods and bombs.

The ``h2`` server connection parses the client's frames and keeps the well-behaved part
of the conversation correct (SETTINGS, flow control, HPACK); each complete request goes
to a *handler* as an :class:`~tests.hostile.answers.Request` with an :class:`H2Reply`,
which can answer properly through ``h2`` or write raw frames (:func:`frame`) that no
correct ``h2`` would produce -- a PING flood, an HPACK bomb, an endless CONTINUATION
chain.  Once a handler wrote raw frames, the server's ``h2`` state no longer matches
the client's; that connection is done for anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from .answers import Answer, Request, parse_body, well_behaved
from .serving import MAX_SERVER_BYTES, HostileServer, Stats

DATA, HEADERS, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One raw HTTP/2 frame."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream_id.to_bytes(4, "big")
        + payload
    )


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter, stats: Stats) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.writer = writer
        self.stats = stats
        self.window = asyncio.Event()  # set when the client opened a flow-control window
        self.raw = False  # a handler went raw: the client's bytes are read but not parsed

    async def write(self, data: bytes) -> None:
        if not data:
            return
        if self.stats.bytes_sent + len(data) > MAX_SERVER_BYTES:
            raise ConnectionError("hostile server reached its own byte ceiling")
        self.stats.bytes_sent += len(data)
        self.writer.write(data)
        await self.writer.drain()

    async def flush(self) -> None:
        await self.write(self.h2.data_to_send())


class H2Reply:
    """The write side of one stream's answer."""

    def __init__(self, connection: _Connection, stream_id: int) -> None:
        self.connection = connection
        self.stream_id = stream_id

    @property
    def h2(self) -> h2.connection.H2Connection:
        return self.connection.h2

    async def headers(
        self, status: int, headers: list[tuple[str, str]], *, end: bool = False
    ) -> None:
        fields = [(b":status", str(status).encode())]
        fields += [(name.encode(), value.encode()) for name, value in headers]
        self.h2.send_headers(self.stream_id, fields, end_stream=end)
        await self.connection.flush()

    async def data(self, payload: bytes, *, end: bool = False) -> None:
        """Send ``payload`` as the client's flow-control windows allow."""
        view = memoryview(payload)
        while True:
            size = min(
                self.h2.local_flow_control_window(self.stream_id), self.h2.max_outbound_frame_size
            )
            if size <= 0 and view:
                self.connection.window.clear()
                await self.connection.window.wait()
                continue
            chunk, view = view[:size], view[size:]
            self.h2.send_data(self.stream_id, bytes(chunk), end_stream=end and not view)
            await self.connection.flush()
            if not view:
                return

    async def answer(self, answer: Answer) -> None:
        headers = [*answer.headers, ("content-length", str(len(answer.body)))]
        await self.headers(answer.status, headers, end=not answer.body)
        if answer.body:
            await self.data(answer.body, end=True)

    async def raw(self, data: bytes) -> None:
        """Write raw frames.  From now on the server's ``h2`` no longer parses the
        client's bytes (its state no longer matches the client's); EOF still ends it."""
        self.connection.raw = True
        await self.connection.write(data)

    async def hang(self) -> None:
        await asyncio.Event().wait()


H2Handler = Callable[[Request, H2Reply], Awaitable[None]]


async def default_handler(request: Request, reply: H2Reply) -> None:
    await reply.answer(well_behaved(request))


class H2Server(HostileServer):
    """Hands every complete request (HEADERS + DATA + END_STREAM) to ``handler``."""

    def __init__(
        self, handler: H2Handler = default_handler, *, max_streams: int | None = None
    ) -> None:
        super().__init__()
        self.handler = handler
        self.max_streams = max_streams  # our SETTINGS_MAX_CONCURRENT_STREAMS, if any

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer, self.stats)
        conn.h2.initiate_connection()
        await conn.flush()
        if self.max_streams is not None:
            # Announced raw: our own h2 keeps accepting, so the request the client sent
            # before it saw this SETTINGS still gets its answer.
            limit = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
            await conn.write(
                frame(
                    SETTINGS, 0, 0, limit.to_bytes(2, "big") + self.max_streams.to_bytes(4, "big")
                )
            )
        pending: dict[int, tuple[dict[str, str], bytearray]] = {}
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                if conn.raw:
                    continue
                try:
                    events = conn.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    return  # the client objected to our raw frames: this connection is over
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        fields = {bytes(k).decode(): bytes(v).decode() for k, v in event.headers}
                        pending[event.stream_id] = (fields, bytearray())
                    elif isinstance(event, h2.events.DataReceived):
                        if event.stream_id in pending:
                            pending[event.stream_id][1].extend(event.data)
                        conn.h2.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id in pending:
                        fields, body = pending.pop(event.stream_id)
                        request = Request(
                            fields.get(":method", ""),
                            fields.get(":path", ""),
                            {k: v for k, v in fields.items() if not k.startswith(":")},
                            bytes(body),
                            parse_body(bytes(body)),
                        )
                        self.stats.requests.append(request)
                        task = asyncio.create_task(
                            self.handler(request, H2Reply(conn, event.stream_id))
                        )
                        tasks.add(task)
                        task.add_done_callback(self._reap)
                    elif isinstance(
                        event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged
                    ):
                        conn.window.set()
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        return
                await conn.flush()
                tasks = {task for task in tasks if not task.done()}
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(list(tasks), timeout=2)

    def _reap(self, task: asyncio.Task[None]) -> None:
        """A handler ended: a client that left is not a failure, anything else is a bug
        in this server (recorded, so the test fails on it)."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, ConnectionError | h2.exceptions.ProtocolError):
            self.stats.errors.append(repr(exc))
