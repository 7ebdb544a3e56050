"""The trio adapter: the pure driver's commands executed on trio.

Theory of operation
-------------------
Every decision is the driver's (:mod:`sansmcp.core.driver`); this module only
does I/O.  :meth:`Client._pump` is the one loop: after every call into the
driver it executes the commands waiting in its outbox and moves the deadline of
the one timer task's cancel scope to ``next_deadline()``.  Each resolve and each
socket runs as a system task inside a cancel scope that ``CloseSocket`` cancels;
a socket's task connects, then runs a reader (bytes and EOF in) and a writer
(drains what ``Write`` queued).  What the caller must see goes to the Conn's
mailbox; the caller's task runs its operation (``_common.ConnBase``).
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, assert_never

import trio

from ..core.config import Config
from ..core.driver import CloseSocket, Connect, ConnView, Deliver, Finished, Phase, Resolve, Write
from ._common import READ_SIZE, ClientBase, ConnBase, numeric_socket, resolve

__all__ = ["Client", "Conn", "connect"]

T = TypeVar("T")
_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Outgoing:
    __slots__ = ("data", "ready")

    def __init__(self) -> None:
        self.data = bytearray()
        self.ready = trio.Event()


class Client(ClientBase["Conn"]):
    __doc__ = ClientBase.__doc__

    def _setup(self) -> None:
        self._scopes: dict[int, trio.CancelScope] = {}  # resolves and sockets, by id
        self._outgoing: dict[int, _Outgoing] = {}
        self._timer = trio.CancelScope()
        self._deadline = math.inf
        self._ticking = False

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``."""
        self._driver.close(now=trio.current_time())
        self._pump()
        for scope in list(self._scopes.values()):
            scope.cancel()
        await trio.lowlevel.checkpoint()

    def _conn(self, view: ConnView) -> Conn:
        return Conn(self, view)

    def _now(self) -> float:
        return trio.current_time()

    def _pump(self) -> None:
        driver, outgoing = self._driver, self._outgoing
        while (command := driver.next_command()) is not None:
            match command:
                case Deliver() | Finished():
                    self._conns[command.conn_id]._post(command)
                case Write(socket_id=socket_id):
                    queued = outgoing[socket_id]
                    queued.data += command.data
                    queued.ready.set()
                case CloseSocket(socket_id=socket_id):
                    outgoing.pop(socket_id, None)
                    scope = self._scopes.pop(socket_id, None)
                    if scope is not None:
                        scope.cancel()
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
        """The one timer: sleeps until the driver's next deadline, moved by ``_pump``."""
        while True:
            self._timer = trio.CancelScope(deadline=self._deadline)
            with self._timer:
                await trio.sleep_forever()
            due = self._timer.deadline
            with contextlib.suppress(Exception):  # a timer task must not die of one
                self._driver.handle_timer(now=max(trio.current_time(), due))
                self._pump()

    async def _within(self, deadline: float, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
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
        queued = self._outgoing[command.socket_id] = _Outgoing()
        try:
            self._driver.connected(command.socket_id, alpn=alpn, now=trio.current_time())
            self._pump()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write, stream, queued)
                await self._read(command.socket_id, stream)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)

    def _failed(self, socket_id: int, phase: Phase, exc: BaseException) -> None:
        self._driver.connect_failed(socket_id, phase, exc, now=trio.current_time())
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
                    driver.eof(socket_id, now=trio.current_time())
                    break
                driver.received(socket_id, bytes(data), now=trio.current_time())
                self._pump()
        except Exception as exc:  # the reader must never die of one
            with contextlib.suppress(Exception):
                driver.reader_failed(socket_id, exc, now=trio.current_time())
        with contextlib.suppress(Exception):
            self._pump()


async def _write(stream: trio.abc.Stream, queued: _Outgoing) -> None:
    while True:
        await queued.ready.wait()
        queued.ready = trio.Event()
        data, queued.data = bytes(queued.data), bytearray()
        try:
            await stream.send_all(data)
        except _BROKEN:
            return  # the reader sees the socket end


class Conn(ConnBase):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: collections.deque[Deliver | Finished] = collections.deque()
        self._arrived = trio.Event()

    def _post(self, command: Deliver | Finished) -> None:
        self._mail.append(command)
        self._arrived.set()

    async def _next(self) -> Deliver | Finished:
        while not self._mail:
            await self._arrived.wait()
            self._arrived = trio.Event()
        return self._mail.popleft()


_default_client: trio.lowlevel.RunVar[Client] = trio.lowlevel.RunVar("sansmcp_default_client")


def connect(config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
    """``Client.connect`` on the default client of the current trio run."""
    try:
        client = _default_client.get()
    except LookupError:
        client = Client()
        _default_client.set(client)
    return client.connect(config)
