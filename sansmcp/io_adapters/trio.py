"""The trio adapter: the pure driver's commands executed on trio.

Theory of operation
-------------------
Every decision is the driver's (:mod:`sansmcp.core.driver`); this module does
I/O.  :meth:`Client._pump`, the one loop, executes the driver's commands and
moves the deadline of the one timer task's cancel scope to ``next_deadline()``.
Each resolve and each socket is a system task in a cancel scope ``CloseSocket``
cancels; a socket's task connects, then runs a reader (bytes and EOF in) and a
writer (what ``Write`` queued).  The caller's task runs its operation and takes
what it must see from its mailbox (``_common.ConnBase``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

import trio

from ..core.config import Config
from ..core.driver import CloseSocket, Connect, ConnView, Deliver, Finished, Phase, Resolve, Write
from ._common import READ_SIZE, ClientBase, ConnBase, numeric_socket, resolve

__all__ = ["Client", "Conn", "connect"]

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Conn(ConnBase):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._send, self._mail = trio.open_memory_channel[Deliver | Finished](math.inf)

    def _post(self, command: Deliver | Finished) -> None:
        self._send.send_nowait(command)

    async def _next(self) -> Deliver | Finished:
        try:  # what is there already is taken without a checkpoint (a trip through the
            return self._mail.receive_nowait()  # scheduler), as asyncio's Queue.get does
        except trio.WouldBlock:
            return await self._mail.receive()


class Client(ClientBase["Conn"]):
    __doc__ = ClientBase.__doc__
    _conn_type = Conn
    _now = staticmethod(trio.current_time)

    def _setup(self) -> None:
        self._scopes: dict[int, trio.CancelScope] = {}  # resolves and sockets, by id
        self._outgoing: dict[int, trio.MemorySendChannel[bytes]] = {}
        self._timer = trio.CancelScope()
        self._deadline = math.inf
        self._ticking = False

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``."""
        self._shut()
        for scope in [*self._scopes.values(), self._timer]:
            scope.cancel()
        await trio.lowlevel.checkpoint()

    def _pump(self) -> None:
        driver, outgoing = self._driver, self._outgoing
        while (command := driver.next_command()) is not None:
            match command:
                case Deliver() | Finished():
                    self._conns[command.conn_id]._post(command)
                case Write(socket_id=socket_id):
                    outgoing[socket_id].send_nowait(command.data)
                case CloseSocket(socket_id=socket_id):
                    outgoing.pop(socket_id, None)
                    self._scopes.pop(socket_id, trio.CancelScope()).cancel()
                case Resolve():
                    self._spawn(command.dial_id, resolve, self, command, trio.socket.getaddrinfo)
                case Connect():
                    self._spawn(command.socket_id, self._socket, command)
                case _:
                    assert_never(command)
        deadline = driver.next_deadline()
        self._deadline = math.inf if deadline is None else deadline
        if self._timer.deadline != self._deadline:
            self._timer.deadline = self._deadline
        if not self._ticking:
            self._ticking = True
            trio.lowlevel.spawn_system_task(self._tick)

    async def _tick(self) -> None:
        """The one timer: sleeps until the driver's next deadline, moved by ``_pump``; ends
        once the Client is closed and nothing is timed."""
        while not (self._driver.closed and self._deadline == math.inf):
            self._timer = trio.CancelScope(deadline=self._deadline)
            with self._timer:
                await trio.sleep_forever()
            with contextlib.suppress(Exception):  # a timer task must not die of one
                self._driver.handle_timer(now=self._now())
                self._pump()
        self._ticking = False

    async def _within(self, deadline: float, awaitable: Awaitable[Any]) -> tuple[bool, Any]:
        with trio.move_on_at(deadline):
            return True, await awaitable
        return False, None

    def _spawn(self, io_id: int, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        scope = self._scopes[io_id] = trio.CancelScope()

        async def scoped() -> None:
            with scope:
                await fn(*args)
            if self._scopes.get(io_id) is scope:
                del self._scopes[io_id]

        trio.lowlevel.spawn_system_task(scoped)

    async def _socket(self, command: Connect) -> None:
        """Connect (one address; the phase of a failure reported), then read and write."""
        phase: Phase = "tcp"
        try:
            raw, sockaddr = numeric_socket(command.address, command.port)
            sock = trio.socket.from_stdlib_socket(raw)
        except OSError as exc:
            return self._failed(command.socket_id, phase, exc)
        try:
            await sock.connect(sockaddr)
            phase = "tls"
            stream: trio.abc.Stream = trio.SocketStream(sock)
            alpn = None
            if command.tls is not None:
                host, offer = command.tls
                tls = trio.SSLStream(
                    stream, self.tls_context(offer), server_hostname=host, https_compatible=True
                )
                await tls.do_handshake()
                stream, alpn = tls, tls.selected_alpn_protocol()
        except _BROKEN as exc:
            sock.close()
            return self._failed(command.socket_id, phase, exc)
        except BaseException:  # cancelled (CloseSocket, the dial deadline): no socket left
            sock.close()
            raise
        self._outgoing[command.socket_id], queued = trio.open_memory_channel[bytes](math.inf)
        try:
            self._driver.connected(command.socket_id, alpn=alpn, now=self._now())
            self._pump()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write, stream, queued)
                await self._read(command.socket_id, stream)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)

    def _failed(self, socket_id: int, phase: Phase, exc: BaseException) -> None:
        self._driver.connect_failed(socket_id, phase, exc, now=self._now())
        self._pump()

    async def _read(self, socket_id: int, stream: trio.abc.Stream) -> None:
        driver = self._driver
        try:
            while True:
                try:
                    data = await stream.receive_some(READ_SIZE)
                except _BROKEN:
                    data = b""
                if not data:
                    driver.eof(socket_id, now=self._now())
                    break
                driver.received(socket_id, bytes(data), now=self._now())
                self._pump()
        except Exception as exc:  # the reader must never die of one
            with contextlib.suppress(Exception):
                driver.reader_failed(socket_id, exc, now=self._now())
        with contextlib.suppress(Exception):
            self._pump()


async def _write(stream: trio.abc.Stream, queued: trio.MemoryReceiveChannel[bytes]) -> None:
    with contextlib.suppress(*_BROKEN):  # the reader sees the socket end
        async for data in queued:
            await stream.send_all(data)


_default_client: trio.lowlevel.RunVar[Client | None] = trio.lowlevel.RunVar(
    "sansmcp_default_client"
)


def connect(config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
    """``Client.connect`` on the default client of the current trio run."""
    client = _default_client.get(None) or Client()
    _default_client.set(client)
    return client.connect(config)
