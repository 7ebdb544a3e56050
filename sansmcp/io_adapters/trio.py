"""The trio adapter: the pure driver's commands executed on trio.

Theory of operation
-------------------
Every decision is the driver's (:mod:`sansmcp.core.driver`); this module does
I/O.  :meth:`Client._pump`, the one loop, executes the driver's commands and keeps
the deadline of the one timer task's cancel scope at or before ``next_deadline()``.
Each resolve and each socket is a task in a cancel scope ``CloseSocket`` cancels; a
socket's task connects, then reads (bytes and EOF in).  The caller's task runs its
operation and takes what it must see from its mailbox (``_common.ConnBase``).

**Who owns the tasks.**  ``async with Client()`` opens the Client's nursery: every
task (resolves, sockets, the timer) runs in it, and the block ends only once each has
ended -- none outlives the Client.  The block's own exception leaves it unchanged (never
wrapped in an ``ExceptionGroup``): no task raises, since what would escape one is
reported instead (a socket's: the driver's ``reader_failed``, its exchanges failing
classified) or dropped (the timer's, a resolve's: the driver's deadlines bound what
waited for them).  A Client never entered (``connect()``'s default one, or one closed
with ``aclose()`` alone) has no nursery: its tasks are trio system tasks.

What a sequential work item costs the scheduler is what a hand-written client costs
it: per response one wake-up of the socket's reader and one of the caller's task.

* A plain TCP socket is written where ``Write`` is executed, in whichever task pumps
  (``socket.send`` on the non-blocking socket: no task hop, no checkpoint); only
  what the kernel did not take is queued, for a task that waits until the socket is
  writable (spawned then, in the socket's nursery), and later writes queue behind it.
  Its reader waits for readable, then reads once (``recv_into`` one buffer the
  Client shares, copied out at once): one read per scheduler pass, so a server that
  floods a socket cannot starve other tasks.  A TLS socket is an ``SSLStream`` with
  a reader and a writer task.
* The mailbox is a deque and the parked caller, rescheduled by ``_post``.
* The timer is moved only earlier: a deadline that moves later (each request arms its
  own) leaves the scope's, which then fires early, finds nothing due (``handle_timer``
  is a no-op then) and sleeps until the driver's next deadline.
"""

from __future__ import annotations

import contextlib
import math
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Self, assert_never

import trio

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
    resolve,
    store_answer_blocking,
)
from ._tasks import TaskHandle

__all__ = ["Client", "Conn", "TaskHandle", "connect"]

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Conn(ConnBase):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: deque[Deliver | Finished] = deque()
        self._parked: trio.lowlevel.Task | None = None

    def _post(self, command: Deliver | Finished) -> None:
        self._mail.append(command)
        task, self._parked = self._parked, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _next(self) -> Deliver | Finished:
        mail = self._mail
        while not mail:  # what is there already is taken without a checkpoint
            self._parked = trio.lowlevel.current_task()
            try:
                await trio.lowlevel.wait_task_rescheduled(self._unpark)
            finally:
                self._parked = None
        return mail.popleft()

    def _unpark(self, _: object) -> trio.lowlevel.Abort:
        """Cancelled while parked: from now on ``_post`` must not reschedule the task."""
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED


class Client(ClientBase["Conn"]):
    __doc__ = ClientBase.__doc__
    _conn_type: type[Conn] = Conn
    _now = staticmethod(trio.current_time)

    def _setup(self) -> None:
        self._scopes: dict[int, trio.CancelScope] = {}  # resolves and sockets, by id
        self._outgoing: dict[int, Callable[[bytes], object]] = {}  # each socket's write
        self._timer = trio.CancelScope()
        self._ticking = False
        self._view = memoryview(bytearray(READ_SIZE))  # every plain socket's reads
        self._owner: contextlib.AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None  # where the tasks run (None: system tasks)
        self._entered = 0  # ``async with`` blocks open (the outermost owns the nursery)

    async def __aenter__(self) -> Self:
        if not self._entered:
            owner = trio.open_nursery()
            self._nursery = await owner.__aenter__()
            self._owner = owner
        self._entered += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close, then wait until every task of the Client's nursery has ended; what the
        block raised propagates unchanged."""
        self._entered -= 1
        try:
            await self.aclose()
        finally:
            owner, nursery = self._owner, self._nursery
            if owner is not None and nursery is not None and not self._entered:
                nursery.cancel_scope.cancel()
                try:  # (not given the block's exception: a nursery would wrap it in a group)
                    await owner.__aexit__(None, None, None)
                finally:
                    self._owner = self._nursery = None

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``."""
        self._shut()
        for io_id, scope in [*self._scopes.items(), (0, self._timer)]:
            if io_id >= 0:  # a store op (negative id) ends by itself, in store_timeout
                scope.cancel()
        await trio.lowlevel.checkpoint()

    def _pump(self) -> None:
        driver, outgoing = self._driver, self._outgoing
        while (command := driver.next_command()) is not None:
            match command:
                case Deliver() | Finished():
                    self._conns[command.conn_id]._post(command)
                case Write(socket_id=socket_id):
                    outgoing[socket_id](command.data)
                case CloseSocket(socket_id=socket_id):
                    outgoing.pop(socket_id, None)
                    self._scopes.pop(socket_id, trio.CancelScope()).cancel()
                case Resolve():
                    ask = trio.socket.getaddrinfo
                    self._spawn(command.dial_id, resolve, self, command, ask, trio.Cancelled)
                case Connect():
                    self._spawn(command.socket_id, self._socket, command)
                case StoreOp():  # the blocking API in a worker thread (negative: apart from ids)
                    self._spawn(-command.op_id, self._store_op, command)
                case _:
                    assert_never(command)
        deadline = driver.next_deadline()
        if deadline is not None and deadline < self._timer.deadline:  # (later: it stays)
            self._timer.deadline = deadline
        if not self._ticking:
            self._ticking = True
            self._start(self._tick, "sansmcp-timer")

    async def _tick(self) -> None:
        """The one timer: sleeps until the driver's next deadline (or earlier, moved by
        ``_pump``); ends once the Client is closed and nothing is timed."""
        driver = self._driver
        while (deadline := driver.next_deadline()) is not None or not driver.closed:
            self._timer = trio.CancelScope(deadline=math.inf if deadline is None else deadline)
            with self._timer:
                await trio.sleep_forever()
            with contextlib.suppress(Exception):  # a timer task must not die of one
                driver.handle_timer(now=self._now())  # (nothing due: it moved later)
                self._pump()
        self._ticking = False

    async def _within(self, deadline: float, awaitable: Awaitable[Any]) -> tuple[bool, Any]:
        with trio.move_on_at(deadline):
            return True, await awaitable
        return False, None

    def _start(self, task: Callable[[], Awaitable[None]], name: str) -> None:
        """Run ``task`` in the Client's nursery, or as a system task when it has none."""
        if self._nursery is not None:
            self._nursery.start_soon(task, name=name)
        else:
            trio.lowlevel.spawn_system_task(task, name=name)

    def _spawn(self, io_id: int, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        scope = self._scopes[io_id] = trio.CancelScope()

        async def scoped() -> None:
            with scope, contextlib.suppress(Exception):  # a task must not die of one
                await fn(*args)
            if self._scopes.get(io_id) is scope:
                del self._scopes[io_id]

        self._start(scoped, f"sansmcp-{fn.__name__.strip('_')}-{io_id}")

    async def _store_op(self, command: StoreOp) -> None:
        """Perform ``command`` with the store's blocking API in a worker thread."""
        answer = await trio.to_thread.run_sync(
            store_answer_blocking, self, command, abandon_on_cancel=True
        )
        self._driver.store_answered(command.op_id, answer, now=self._now())
        self._pump()

    async def _socket(self, command: Connect) -> None:
        """A socket's task: :meth:`_connect` it; what escapes (a fault anywhere on its way)
        is the driver's ``reader_failed``: the socket's exchanges fail classified."""
        try:
            await self._connect(command)
        except Exception as exc:  # the task must not die of one
            with contextlib.suppress(Exception):
                self._driver.reader_failed(command.socket_id, exc, now=self._now())
                self._pump()

    async def _connect(self, command: Connect) -> None:
        """Connect (one address; the phase of a failure reported), then read and write."""
        socket_id = command.socket_id
        phase: Phase = "tcp"
        try:
            raw, sockaddr = numeric_socket(command.address, command.port)
            sock = trio.socket.from_stdlib_socket(raw)
        except OSError as exc:
            return self._failed(socket_id, "tcp", exc)
        stream: trio.abc.Stream = trio.SocketStream(sock)
        alpn = None
        try:
            await sock.connect(sockaddr)
            if command.proxy_tls is not None:  # an https:// proxy: TLS to it first
                phase = "proxy-tls"
                stream = trio.SSLStream(
                    stream,
                    self.tls_context(("http/1.1",)),
                    server_hostname=command.proxy_tls,
                    https_compatible=True,
                )
                await stream.do_handshake()
            if command.tunnel is not None:  # an egress proxy's CONNECT, read for the driver
                phase = "proxy"
                if not await self._tunnel(socket_id, stream, command.tunnel, raw):
                    await trio.aclose_forcefully(stream)
                    return None
            quickack = raw if command.tunnel is not None else None
            if command.tls is None and command.proxy_tls is None:
                return await self._plain(socket_id, sock, raw, quickack)
            if command.tls is not None:
                phase = "tls"
                host, offer = command.tls
                inner = trio.SSLStream(
                    stream, self.tls_context(offer), server_hostname=host, https_compatible=True
                )
                await inner.do_handshake()
                stream, alpn = inner, inner.selected_alpn_protocol()
        except _BROKEN as exc:
            sock.close()
            return self._failed(socket_id, phase, exc)
        except BaseException:  # cancelled (CloseSocket, the dial deadline): no socket left
            sock.close()
            raise
        send, queued = trio.open_memory_channel[bytes](math.inf)
        self._outgoing[socket_id] = send.send_nowait
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write, stream, queued)
                await self._read(socket_id, stream, alpn, quickack)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)

    async def _plain(
        self,
        socket_id: int,
        sock: trio.socket.SocketType,
        raw: socket.socket,
        quickack: socket.socket | None,
    ) -> None:
        """A connected plain TCP socket: written by ``_pump``, read here."""
        sender = _Sender(raw)
        self._outgoing[socket_id] = sender.write
        try:
            async with trio.open_nursery() as nursery:
                sender.nursery = nursery
                await self._read(socket_id, raw, None, quickack)
                nursery.cancel_scope.cancel()
        finally:
            sender.broken = True
            sock.close()

    async def _tunnel(
        self, socket_id: int, stream: trio.abc.Stream, request: bytes, raw: socket.socket
    ) -> bool:
        """Send the ``CONNECT``; hand the proxy's answer to the driver until it decides."""
        await stream.send_all(request)
        verdict = None
        while verdict is None:
            data = bytes(await stream.receive_some(READ_SIZE))
            ack_at_once(raw)
            verdict = self._driver.tunnel_received(socket_id, data, now=self._now())
            self._pump()
        return verdict

    def _failed(self, socket_id: int, phase: Phase, exc: BaseException) -> None:
        self._driver.connect_failed(socket_id, phase, exc, now=self._now())
        self._pump()

    async def _read(
        self,
        socket_id: int,
        source: trio.abc.ReceiveStream | socket.socket,
        alpn: str | None,
        quickack: socket.socket | None = None,
    ) -> None:
        """Report the socket connected, then its bytes and its EOF, one read per pass; the
        reader never dies of an exception (it is the driver's ``reader_failed``).  Through
        a proxy's tunnel, ``quickack`` (the TCP socket) acknowledges each read at once."""
        driver, view = self._driver, self._view
        wait_readable, now = trio.lowlevel.wait_readable, self._now()
        try:
            driver.connected(socket_id, alpn=alpn, now=now)
            self._pump()
            while True:
                if isinstance(source, socket.socket):
                    await wait_readable(source)
                    try:
                        data = bytes(view[: source.recv_into(view)])
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                else:
                    try:
                        data = bytes(await source.receive_some(READ_SIZE))
                    except _BROKEN:
                        data = b""
                if quickack is not None:
                    ack_at_once(quickack)
                now = self._now()  # one clock reading per wake-up
                if not data:
                    driver.eof(socket_id, now=now)
                    break
                driver.received(socket_id, data, now=now)
                self._pump()
        except Exception as exc:  # the reader must never die of one
            with contextlib.suppress(Exception):
                driver.reader_failed(socket_id, exc, now=now)
        with contextlib.suppress(Exception):
            self._pump()


class _Sender:
    """A plain socket's writes: sent at once; what the kernel did not take is queued and
    flushed by a task that waits until the socket is writable."""

    __slots__ = ("broken", "nursery", "queued", "raw")

    def __init__(self, raw: socket.socket) -> None:
        self.raw = raw
        self.queued: deque[memoryview] = deque()
        self.nursery: trio.Nursery | None = None
        self.broken = False  # the socket failed or ended: what comes is dropped

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        if self.queued:
            self.queued.append(memoryview(data))
            return
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:  # the reader sees the socket end
            self.broken = True
            return
        if sent < len(data):
            assert self.nursery is not None  # (set before the socket is reported connected)
            self.queued.append(memoryview(data)[sent:])
            self.nursery.start_soon(self._flush)

    async def _flush(self) -> None:
        queued, raw = self.queued, self.raw
        try:
            while queued:
                await trio.lowlevel.wait_writable(raw)
                try:
                    sent = raw.send(queued[0])
                except BlockingIOError:
                    continue
                if sent == len(queued[0]):
                    queued.popleft()
                else:
                    queued[0] = queued[0][sent:]
        except Exception:  # broken (the reader sees the socket end); a task must not die of one
            self.broken = True
            queued.clear()


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
