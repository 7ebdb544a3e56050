"""The asyncio adapter: the pure driver's commands executed on asyncio.

Theory of operation
-------------------
Every decision is the driver's (:mod:`sansmcp.core.driver`); this module only
does I/O.  :meth:`Client._pump` is the one loop: after every call into the
driver it executes the commands waiting in its outbox -- a task per resolve, a
task per dial (connect, then TLS), writes on the socket's transport, aborts --
hands what the caller must see to the Conn's mailbox, and keeps the one timer
(``loop.call_at``) at or before ``next_deadline()``.  The caller's task runs its
operation (``_common.ConnBase``).

A connected socket has no task: its :class:`_Reader` protocol is called by the
event loop itself, once per read the loop made (at most ``READ_SIZE`` bytes, into one
buffer the Client shares: a callback copies what it got before it returns), and
feeds bytes and EOF to the driver and pumps, with one clock reading per callback.
A sequential work item so costs the loop what a hand-written client costs it: per
response one wake-up for the readable socket and one for the caller's task.  A
server that floods a socket gets one read per loop iteration, like every other
ready socket, so it cannot starve other tasks; nothing a callback meets escapes it
(a fault is the driver's ``reader_failed``).

The timer is moved only earlier: a deadline that moves later (each request arms
its own) leaves the armed one, which then fires early, finds nothing due and
re-arms at the driver's next deadline -- one timer per deadline that passes, not
one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
import weakref
from collections import deque
from collections.abc import Awaitable
from typing import Any, TypeVar, assert_never

from ..core.config import Config
from ..core.driver import CloseSocket, Connect, Deliver, Finished, Resolve, StoreOp, Write
from ..core.driver import DialPhase as Phase
from ..core.view import ConnView
from ._common import (
    READ_SIZE,
    ClientBase,
    ConnBase,
    ack_at_once,
    numeric_socket,
    perform_store,
    resolve,
)
from ._tasks import TaskHandle

__all__ = ["Client", "Conn", "TaskHandle", "connect"]

T = TypeVar("T")


class Client(ClientBase["Conn"]):
    __doc__ = ClientBase.__doc__
    _conn_type: type[Conn]

    def _setup(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}  # resolves and dials, by id
        self._readers: dict[int, _Reader] = {}  # connected sockets, by id
        self._closing: set[_Reader] = set()  # aborted, their connection_lost still to come
        self._lost: asyncio.Future[None] | None = None  # aclose waits for the last of them
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf  # when the timer fires (inf: not armed)
        self._view = memoryview(bytearray(READ_SIZE))  # every socket's reads, copied out

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``; waits (bounded)
        for the dials to end and the sockets to close
        (``Limits.client_close_timeout``)."""
        self._shut()
        waits: list[asyncio.Future[Any]] = list(self._tasks.values())
        for io_id, task in self._tasks.items():
            if io_id >= 0:  # a store op (negative id) ends by itself, in store_timeout
                task.cancel()
        if self._closing:
            self._lost = asyncio.get_running_loop().create_future()
            waits.append(self._lost)
        if waits:
            await asyncio.wait(waits, timeout=self.limits.client_close_timeout)
        if self._timer is not None:  # (its handle holds _tick: a cycle through the loop)
            self._timer.cancel()
            self._timer, self._armed = None, math.inf

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _pump(self) -> None:
        driver = self._driver
        while (command := driver.next_command()) is not None:
            match command:
                case Write(socket_id=socket_id, data=data):
                    reader = self._readers.get(socket_id)
                    if reader is not None and not reader.transport.is_closing():
                        reader.transport.write(data)
                case Deliver() | Finished():
                    self._conns[command.conn_id]._post(command)
                case Connect(socket_id=socket_id):
                    self._spawn(socket_id, self._dial(command))
                case Resolve(dial_id=dial_id):
                    loop = asyncio.get_running_loop()
                    self._spawn(
                        dial_id, resolve(self, command, loop.getaddrinfo, asyncio.CancelledError)
                    )
                case CloseSocket(socket_id=socket_id):
                    self._abort(socket_id)
                case StoreOp(op_id=op_id):  # (negative: apart from socket and dial ids)
                    self._spawn(-op_id, perform_store(self, command))
                case _:
                    assert_never(command)
        deadline = driver.next_deadline()
        if deadline is not None and deadline < self._armed:  # (later: the armed one stays)
            if self._timer is not None:
                self._timer.cancel()
            self._armed = deadline
            self._timer = asyncio.get_running_loop().call_at(deadline, self._tick)

    def _tick(self) -> None:
        armed, self._timer, self._armed = self._armed, None, math.inf
        deadline = self._driver.next_deadline()
        if deadline is not None and deadline <= armed:
            # due (the loop may run a timer a clock tick early: the deadline is what is due)
            self._driver.handle_timer(now=max(self._now(), deadline))
        self._pump()  # re-arms at the next deadline

    async def _within(self, deadline: float, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        try:
            async with asyncio.timeout_at(None if deadline == math.inf else deadline):
                return True, await awaitable
        except TimeoutError:
            return False, None

    def _spawn(self, io_id: int, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks[io_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(io_id, None))

    def _abort(self, io_id: int) -> None:
        reader = self._readers.pop(io_id, None)
        if reader is not None:
            reader.closed = True
            self._closing.add(reader)
            reader.transport.abort()
        task = self._tasks.pop(io_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _dial(self, command: Connect) -> None:
        """Connect (one address; the phase of a failure reported); the socket's reader
        reports it connected."""
        socket_id = command.socket_id
        phase: Phase = "tcp"
        try:
            sock, sockaddr = numeric_socket(command.address, command.port)
        except OSError as exc:
            return self._failed(socket_id, phase, exc)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(sock, sockaddr)
            if command.proxy_tls is not None:  # an https:// proxy: TLS to it first
                return await self._via_tls_proxy(command, sock)
            if command.tunnel is not None:  # an egress proxy's CONNECT, read for the driver
                phase = "proxy"
                await loop.sock_sendall(sock, command.tunnel)
                verdict = None
                while verdict is None:
                    data = await loop.sock_recv(sock, READ_SIZE)
                    ack_at_once(sock)
                    verdict = self._driver.tunnel_received(socket_id, data, now=self._now())
                    self._pump()
                if not verdict:
                    sock.close()
                    return None
            phase = "tls"
            tls: dict[str, Any] = {}
            if command.tls is not None:
                host, alpn = command.tls
                tls = {"ssl": self.tls_context(alpn), "server_hostname": host}
            quickack = sock if command.tunnel is not None else None
            await loop.create_connection(
                lambda: _Reader(self, socket_id, quickack=quickack), sock=sock, **tls
            )
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            return self._failed(socket_id, phase, exc)
        except BaseException:  # cancelled (CloseSocket, the dial deadline): no socket left
            sock.close()
            raise

    async def _via_tls_proxy(self, command: Connect, sock: Any) -> None:
        """TLS with the proxy, the ``CONNECT`` inside it, then the target's TLS (if any)
        inside that, on the connected ``sock``."""
        assert command.tunnel is not None and command.proxy_tls is not None
        loop = asyncio.get_running_loop()
        socket_id = command.socket_id
        phase: Phase = "proxy-tls"
        tunnel = _Tunnel()
        transport: asyncio.Transport | None = None
        try:
            transport, _ = await loop.create_connection(
                lambda: tunnel,
                sock=sock,
                ssl=self.tls_context(("http/1.1",)),
                server_hostname=command.proxy_tls,
            )
            assert transport is not None
            phase = "proxy"
            transport.write(command.tunnel)
            verdict = None
            while verdict is None:
                data = await tunnel.next()
                ack_at_once(sock)
                verdict = self._driver.tunnel_received(socket_id, data, now=self._now())
                self._pump()
            if not verdict:
                transport.abort()
                return None
            phase = "tls"
            reader = _Reader(self, socket_id, plain=command.tls is None, quickack=sock)
            if command.tls is not None:
                host, alpn = command.tls
                inner = await loop.start_tls(
                    transport, tunnel, self.tls_context(alpn), server_hostname=host
                )
                assert inner is not None
                transport = inner
            transport.set_protocol(reader)
            reader.connection_made(transport)
        except (OSError, ssl.SSLError) as exc:
            if transport is not None:
                transport.abort()
            sock.close()
            return self._failed(socket_id, phase, exc)
        except BaseException:  # cancelled (CloseSocket, the dial deadline): no socket left
            if transport is not None:
                transport.abort()
            sock.close()
            raise
        return None

    def _failed(self, socket_id: int, phase: Phase, exc: BaseException) -> None:
        self._driver.connect_failed(socket_id, phase, exc, now=self._now())
        self._pump()


class _Tunnel(asyncio.Protocol):
    """An https:// proxy's answer to ``CONNECT``, read in turn by ``_via_tls_proxy``
    (``b""``: its EOF; a loss is raised)."""

    def __init__(self) -> None:
        self._chunks: deque[bytes | BaseException] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def _put(self, item: bytes | BaseException) -> None:
        self._chunks.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._put(data)

    def eof_received(self) -> bool:
        self._put(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._put(exc if exc is not None else b"")

    async def next(self) -> bytes:
        if not self._chunks:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        item = self._chunks.popleft()
        if isinstance(item, BaseException):
            raise item
        return item


class _Reader(asyncio.BufferedProtocol):
    """One connected socket, as the event loop calls it: bytes, EOF and loss in."""

    transport: asyncio.Transport

    def __init__(
        self,
        client: Client,
        socket_id: int,
        *,
        plain: bool = False,
        quickack: socket.socket | None = None,
    ) -> None:
        self.client = client
        self.socket_id = socket_id
        self.plain = plain  # over TLS to a proxy, but plain to the target: no ALPN of its
        self.quickack = quickack  # through a proxy's tunnel: each read acknowledged at once
        self.closed = False  # aborted by the driver, or its end reported: nothing more to say

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        client = self.client
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = None if ssl_object is None or self.plain else ssl_object.selected_alpn_protocol()
        client._readers[self.socket_id] = self
        self._report(client._driver.connected, alpn=alpn)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.client._view  # (a view: asyncio's TLS reads fill slices of it)

    def buffer_updated(self, nbytes: int) -> None:
        if self.quickack is not None:
            ack_at_once(self.quickack)
        if not self.closed:
            self._report(self.client._driver.received, bytes(self.client._view[:nbytes]))

    def eof_received(self) -> bool:
        self._end()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()  # a read or write error, or the server's EOF: the socket ended
        client = self.client
        if client._readers.get(self.socket_id) is self:
            del client._readers[self.socket_id]
        client._closing.discard(self)
        if not client._closing and client._lost is not None and not client._lost.done():
            client._lost.set_result(None)

    def _end(self) -> None:
        if not self.closed:
            self._report(self.client._driver.eof)
            self.closed = True

    def _report(self, report: Any, *args: Any, **kwargs: Any) -> None:
        client = self.client
        now = client._now()  # one clock reading per callback
        try:
            report(self.socket_id, *args, now=now, **kwargs)
            client._pump()
        except Exception as exc:  # a loop callback must never raise: the driver reports it
            self.closed = True
            with contextlib.suppress(Exception):
                client._driver.reader_failed(self.socket_id, exc, now=now)
            with contextlib.suppress(Exception):
                client._pump()


class Conn(ConnBase):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: deque[Deliver | Finished] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def _post(self, command: Deliver | Finished) -> None:
        self._mail.append(command)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _next(self) -> Deliver | Finished:
        if not self._mail:  # what is there already is taken without yielding
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._mail.popleft()


_default_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
    weakref.WeakKeyDictionary()
)


def connect(config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
    """``Client.connect`` on the default client of the running event loop."""
    loop = asyncio.get_running_loop()
    client = _default_clients.get(loop)
    if client is None:
        client = _default_clients[loop] = Client()
    return client.connect(config)


Client._conn_type = Conn
