"""The asyncio adapter: the pure driver's commands executed on asyncio.

Theory of operation
-------------------
Every decision is the driver's (:mod:`sansmcp.core.driver`); this module only
does I/O.  :meth:`Client._pump` is the one loop: after every call into the
driver it executes the commands waiting in its outbox -- a task per resolve, a
task per socket that connects and then reads (feeding bytes and EOF in, with a
``sleep(0)`` after each read so a flooding server cannot starve other tasks),
writes on the socket's transport, aborts -- hands what the caller must see to the
Conn's mailbox, and moves the one timer (``loop.call_at``) to
``next_deadline()``.  The caller's task runs its operation (``_common.ConnBase``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import weakref
from collections.abc import Awaitable
from typing import Any, TypeVar, assert_never

from ..core.config import Config
from ..core.driver import CloseSocket, Connect, ConnView, Deliver, Finished, Phase, Resolve, Write
from ._common import READ_SIZE, ClientBase, ConnBase, numeric_socket, resolve

__all__ = ["Client", "Conn", "connect"]

T = TypeVar("T")


class Client(ClientBase["Conn"]):
    __doc__ = ClientBase.__doc__
    _conn_type: type[Conn]

    def _setup(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}  # resolves and sockets, by id
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed: float | None = None

    async def aclose(self) -> None:
        """Close every socket; in-flight work fails ``ConnectionFailed``; waits (bounded)
        for the socket tasks to end."""
        self._shut()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _pump(self) -> None:
        driver = self._driver
        while (command := driver.next_command()) is not None:
            match command:
                case Write(socket_id=socket_id, data=data):
                    writer = self._writers[socket_id]
                    if not writer.is_closing():
                        writer.write(data)
                case Deliver() | Finished():
                    self._conns[command.conn_id]._post(command)
                case Connect(socket_id=socket_id):
                    self._spawn(socket_id, self._socket(command))
                case Resolve(dial_id=dial_id):
                    loop = asyncio.get_running_loop()
                    self._spawn(dial_id, resolve(self, command, loop.getaddrinfo))
                case CloseSocket(socket_id=socket_id):
                    self._abort(socket_id)
                case _:
                    assert_never(command)
        deadline = driver.next_deadline()
        if deadline != self._armed:
            self._armed = deadline
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
            if deadline is not None:
                self._timer = asyncio.get_running_loop().call_at(deadline, self._tick, deadline)

    def _tick(self, deadline: float) -> None:
        self._timer = self._armed = None
        # the loop may run a timer a clock tick early: the deadline is what is due
        self._driver.handle_timer(now=max(self._now(), deadline))
        self._pump()

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
        writer = self._writers.pop(io_id, None)
        if writer is not None:
            writer.transport.abort()
        task = self._tasks.pop(io_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _socket(self, command: Connect) -> None:
        """Connect (one address; the phase of a failure reported), then read until EOF."""
        driver, socket_id = self._driver, command.socket_id
        phase: Phase = "tcp"
        try:
            sock, sockaddr = numeric_socket(command.address, command.port)
        except OSError as exc:
            driver.connect_failed(socket_id, phase, exc, now=self._now())
            return self._pump()
        try:
            await asyncio.get_running_loop().sock_connect(sock, sockaddr)
            phase = "tls"
            tls: dict[str, Any] = {}
            if command.tls is not None:
                host, alpn = command.tls
                tls = {"ssl": self.tls_context(alpn), "server_hostname": host}
            reader, writer = await asyncio.open_connection(sock=sock, **tls)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            driver.connect_failed(socket_id, phase, exc, now=self._now())
            return self._pump()
        except BaseException:  # cancelled (CloseSocket, the dial deadline): no socket left
            sock.close()
            raise
        ssl_object = writer.get_extra_info("ssl_object")
        alpn_chosen = None if ssl_object is None else ssl_object.selected_alpn_protocol()
        self._writers[socket_id] = writer
        clock = asyncio.get_running_loop().time  # one look-up per socket, not per read
        try:
            driver.connected(socket_id, alpn=alpn_chosen, now=clock())
            self._pump()
            while data := await _read(reader):
                driver.received(socket_id, data, now=clock())
                self._pump()
                # StreamReader.read returns buffered bytes without yielding: a server that
                # floods this socket would otherwise keep every other task waiting
                await asyncio.sleep(0)
            driver.eof(socket_id, now=clock())
        except Exception as exc:  # the reader must never die of one
            with contextlib.suppress(Exception):
                driver.reader_failed(socket_id, exc, now=clock())
        with contextlib.suppress(Exception):
            self._pump()


class Conn(ConnBase):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, view: ConnView) -> None:
        super().__init__(client, view)
        self._mail: asyncio.Queue[Deliver | Finished] = asyncio.Queue()

    def _post(self, command: Deliver | Finished) -> None:
        self._mail.put_nowait(command)

    async def _next(self) -> Deliver | Finished:
        return await self._mail.get()


async def _read(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(READ_SIZE)
    except (OSError, ssl.SSLError):
        return b""


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
