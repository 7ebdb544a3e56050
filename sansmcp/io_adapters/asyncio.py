"""The asyncio driver: runs the pure core on asyncio streams.

Theory of operation
-------------------
Thin by design: every decision is the core's.  A ``Client`` owns the core's
:class:`~sansmcp.core.net.pool.Pool`; each pooled socket has one reader task that
feeds the socket's wire machine and hands each exchange event straight to the
MCP machine that owns the exchange (the machine charges its budgets as the
bytes enter, so nothing queues up here).  Each ``Conn`` runs its machine in the
caller's task: execute ``StartExchange`` (check out a socket, dialling through
the guard when the pool says so) and ``CancelExchange``, sleep until the
machine's next deadline, and return the operation's terminal event.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import socket
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ..core.config import Config
from ..core.driving import ClientCore, ConnCore, dial_failure
from ..core.errors import ConnectionFailed, McpError
from ..core.http import ExchangeEvent, ExchangeFailed
from ..core.limits import Limits
from ..core.mcp import CancelExchange, InputRequired, McpMachine, Output, StartExchange
from ..core.net import dial
from ..core.net.pool import DialNeeded, MustWait, UseConnection
from ..core.tools import CallResult, Tool
from ..core.url import Origin
from ..core.wire import reader_fault

__all__ = ["Client", "Conn", "connect"]

Resolver = Callable[[str, int], Awaitable[list[str]]]
InputHandler = Callable[[Mapping[str, Mapping[str, Any]]], Awaitable[Mapping[str, Any] | None]]
_READ_SIZE = 65536


class _Socket:
    """A pooled socket; ``wire`` is its machine, kept here because the pool may forget
    the id (the socket closed) before the reader task first runs."""

    __slots__ = ("conn_id", "reader", "task", "wire", "writer")

    def __init__(
        self,
        conn_id: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        wire: Any,
    ) -> None:
        self.conn_id = conn_id
        self.wire = wire
        self.reader = reader
        self.writer = writer
        self.task: asyncio.Task[None] | None = None


class Client(ClientCore):
    """Owns the connection pool and its sockets; hands out :class:`Conn`\\ s.

    The arguments are the same on every runtime: see
    :class:`~sansmcp.core.driving.ClientCore`.
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        allow_loopback: bool = False,
        allow_private: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        http2_prior_knowledge: bool = False,
        resolver: Resolver | None = None,
        input_handler: InputHandler | None = None,
        capabilities: Mapping[str, Any] | None = None,
        client_info: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            limits=limits,
            allow_loopback=allow_loopback,
            allow_private=allow_private,
            http2_prior_knowledge=http2_prior_knowledge,
            answers_input=input_handler is not None,
            capabilities=capabilities,
            client_info=client_info,
        )
        self._ssl = ssl_context
        self._resolver = resolver
        self.input_handler = input_handler
        self._sockets: dict[int, _Socket] = {}
        self._changed = asyncio.Event()
        self._waiters: dict[int, asyncio.Event] = {}  # pool tickets -> their holders
        self._janitor: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._janitor is not None:
            self._janitor.cancel()
        tasks = [s.task for s in self._sockets.values() if s.task is not None]
        for conn_id in self.pool.close_all(now=_now()):
            self._close_socket(conn_id)
        for sock in list(self._sockets.values()):
            self._close_socket(sock.conn_id)
        if self._janitor is not None:
            tasks.append(self._janitor)
        for task in tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), timeout=1.0)

    @contextlib.asynccontextmanager
    async def connect(self, config: Config) -> AsyncIterator[Conn]:
        """Connect (negotiate) to ``config.url``; the ``Conn`` closes on exit."""
        conn = Conn(self, self._machine(config))
        try:
            await conn._run(conn.machine.connect)
            yield conn
        finally:
            await conn.aclose()

    # -- exchanges ------------------------------------------------------------

    async def _start(self, conn: Conn, start: StartExchange) -> None:
        origin = conn.machine.settings.endpoint.origin
        checkout = self.pool.checkout(origin, now=_now())
        if isinstance(checkout, MustWait):
            granted = await self._wait_turn(checkout.ticket, start.deadline, conn)
            if granted is None:
                return  # the exchange's own deadline: the machine's timer names its bound
            checkout = granted
        if isinstance(checkout, UseConnection):
            self._begin(conn, start, checkout.conn_id)
            self._bump()
            return
        for conn_id in checkout.close_first:
            self._close_socket(conn_id)
        try:
            sock, alpn = await self._dial(
                origin, checkout.alpn, min(start.deadline, checkout.deadline)
            )
        except ConnectionFailed as failure:
            self.pool.dial_failed(checkout.conn_id, now=_now())
            self._bump()
            error = dial_failure(start, checkout, failure)
            if error is not None:
                conn.feed(ExchangeFailed(exchange_id=start.exchange_id, error=error))
            return
        except BaseException:
            self.pool.dial_failed(checkout.conn_id, now=_now())
            self._bump()
            raise
        wire = self.pool.dial_succeeded(checkout.conn_id, alpn=alpn, now=_now())
        wrapped = _Socket(checkout.conn_id, *sock, wire)
        self._sockets[checkout.conn_id] = wrapped
        self._begin(conn, start, checkout.conn_id)
        wrapped.task = asyncio.get_running_loop().create_task(self._read(wrapped))
        self._bump()
        self._ensure_janitor()

    async def _wait_turn(
        self, ticket: int, deadline: float, conn: Conn
    ) -> UseConnection | DialNeeded | None:
        """Wait in the pool's queue until ``ticket`` is granted (its grant), or until
        ``deadline`` (None); a cancellation withdraws the ticket.

        The waiting Conn's other deadlines are kept meanwhile: a stream it drains after
        an answer is dropped at its ``cancel_grace``, which may free the very socket this
        checkout waits for (with one socket per origin, it did not, until ``deadline``).
        """
        turn = self._waiters[ticket] = asyncio.Event()
        kept = -math.inf  # when the Conn's deadlines were last acted on
        try:
            while (granted := self._claim(ticket)) is None:
                turn.clear()
                try:
                    async with asyncio.timeout_at(conn._queued_wake(deadline, kept)):
                        await turn.wait()
                except TimeoutError:
                    if _now() >= deadline:
                        raise
                    kept = _now()
                    conn._keep_deadlines()
            return granted
        except BaseException as exc:
            self._close_sockets(self.pool.withdraw(ticket, now=_now()))
            self._bump()
            if isinstance(exc, TimeoutError):
                return None
            raise
        finally:
            del self._waiters[ticket]

    def _claim(self, ticket: int) -> UseConnection | DialNeeded | None:
        changed = self.pool.changed
        granted = self.pool.claim(ticket, now=_now())
        if self.pool.changed != changed:  # a grant given back at the claim went on
            self._bump()
        return granted

    def _begin(self, conn: Conn, start: StartExchange, conn_id: int) -> None:
        self.router.begin(conn, start, conn_id, self._sockets[conn_id].wire, now=_now())
        self._flush(conn_id)

    def _cancel(self, exchange_id: int) -> None:
        flush, doomed = self.router.cancel(exchange_id, self._wire_of, now=_now())
        if flush is not None:
            self._flush(flush)
        self._close_sockets(doomed)
        self._bump()

    def _wire_of(self, conn_id: int) -> Any:
        sock = self._sockets.get(conn_id)
        return sock.wire if sock is not None else None

    def _close_sockets(self, conn_ids: list[int]) -> None:
        for conn_id in conn_ids:
            self._close_socket(conn_id)

    async def _dial(
        self, origin: Origin, alpn: tuple[str, ...], deadline: float
    ) -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter], str | None]:
        try:
            async with asyncio.timeout_at(deadline):
                allowed = dial.vet(
                    origin,
                    await self._resolve(origin),
                    allow_private=self.allow_private,
                    allow_loopback=self.allow_loopback,
                )
                context = None
                if origin.scheme == "https":
                    if self._ssl is None:  # built once: loading the system CA store costs ~35 ms
                        self._ssl = _default_ssl_context()
                    context = self._ssl
                    context.set_alpn_protocols(list(alpn))
                loop = asyncio.get_running_loop()
                failure: ConnectionFailed | None = None
                for address in allowed:
                    # numeric-host semantics, strictly: inet_pton, not getaddrinfo, whose
                    # AI_NUMERICHOST still takes inet_aton's "127.1" for 127.0.0.1
                    family = socket.AF_INET6 if ":" in address else socket.AF_INET
                    sockaddr: tuple[Any, ...] = (address, origin.port)
                    if family == socket.AF_INET6:
                        sockaddr = (address, origin.port, 0, 0)
                    try:
                        socket.inet_pton(family, address)
                        sock = socket.socket(family, socket.SOCK_STREAM)
                    except OSError as exc:
                        failure = dial.connect_error(origin, address, exc)
                        continue
                    try:
                        sock.setblocking(False)
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        try:
                            await loop.sock_connect(sock, sockaddr)
                        except OSError as exc:
                            failure = dial.connect_error(origin, address, exc)
                            sock.close()
                            continue
                        try:
                            reader, writer = await asyncio.open_connection(
                                sock=sock,
                                ssl=context,
                                server_hostname=origin.host if context is not None else None,
                            )
                        except (OSError, ssl.SSLError) as exc:  # TCP is up: a TLS failure
                            failure = dial.tls_error(origin, address, exc)
                            sock.close()
                            continue
                    except BaseException:  # cancelled, or the dial deadline: no socket left
                        sock.close()
                        raise
                    chosen = None
                    ssl_object = writer.get_extra_info("ssl_object")
                    if ssl_object is not None:
                        chosen = ssl_object.selected_alpn_protocol()
                    return (reader, writer), chosen
                assert failure is not None  # vet() returns at least one address
                raise failure
        except TimeoutError:
            raise dial.timeout_error(self.limits) from None

    async def _resolve(self, origin: Origin) -> object:
        """The resolver's raw answer (untrusted: :func:`dial.vet` checks it)."""
        literal = dial.literal_address(origin.host)
        if literal is not None:
            return [literal]
        if self._resolver is not None:
            try:
                return await self._resolver(origin.host, origin.port)
            except Exception as exc:
                raise dial.hook_error(origin, exc) from exc
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                origin.host, origin.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise dial.dns_error(origin, exc) from None
        return [info[4][0] for info in infos]

    # -- sockets ----------------------------------------------------------------

    async def _read(self, sock: _Socket) -> None:
        wire = sock.wire
        try:
            while True:
                try:
                    data = await sock.reader.read(_READ_SIZE)
                except (OSError, ssl.SSLError):
                    data = b""
                if data:
                    wire.receive_data(data, now=_now())
                else:
                    wire.receive_eof(now=_now())
                self._dispatch(sock.conn_id, wire)
                if not data or wire.is_broken:
                    return
                # StreamReader.read returns buffered bytes without yielding: a server that
                # floods this socket would otherwise keep every other task waiting
                await asyncio.sleep(0)
        except Exception as exc:  # the reader task must never die of one
            reader_fault(wire, exc)
            with contextlib.suppress(Exception):
                self._dispatch(sock.conn_id, wire)
        finally:
            with contextlib.suppress(Exception):  # the exchanges left fail "reset" here
                self._close_socket(sock.conn_id)

    def _dispatch(self, conn_id: int, wire: Any) -> None:
        changed = self.pool.changed
        doomed = self.router.deliver(conn_id, wire, now=_now())
        self._flush(conn_id)
        self._close_sockets(doomed)
        if self.pool.changed != changed:
            self._bump()

    def _flush(self, conn_id: int) -> None:
        sock = self._sockets.get(conn_id)
        if sock is None:
            return
        data = sock.wire.data_to_send()
        if data and not sock.writer.is_closing():
            sock.writer.write(data)

    def _close_socket(self, conn_id: int) -> None:
        sock = self._sockets.pop(conn_id, None)
        if sock is None:
            return
        self.router.socket_gone(conn_id, now=_now())
        transport = sock.writer.transport
        transport.abort()
        if sock.task is not None and sock.task is not asyncio.current_task():
            sock.task.cancel()
        self._bump()

    def _bump(self) -> None:
        self._changed.set()
        for ticket, _ in self.pool.take_grants():  # wake exactly the checkouts served
            turn = self._waiters.get(ticket)
            if turn is not None:
                turn.set()

    def _ensure_janitor(self) -> None:
        if self._janitor is None or self._janitor.done():
            self._janitor = asyncio.get_running_loop().create_task(self._expire_idle())

    async def _expire_idle(self) -> None:
        while self._sockets:
            deadline = self.pool.next_deadline()
            self._changed.clear()
            try:
                if deadline is None:
                    await self._changed.wait()
                else:
                    async with asyncio.timeout_at(deadline):
                        await self._changed.wait()
            except TimeoutError:
                pass
            closed = self.pool.expire(now=_now())
            if closed:
                self._close_sockets(closed)
                self._bump()


class Conn(ConnCore):
    """One MCP connection (one work item): not safe for concurrent use."""

    def __init__(self, client: Client, machine: McpMachine) -> None:
        super().__init__(client.pool, machine)
        self.client = client
        # Outputs that came while no operation ran (an answer to a ping on the standalone
        # stream, an ask, its re-opening): acted on by the next operation or the close.
        self._deferred: collections.deque[Output] = collections.deque()
        self._wake = asyncio.Event()
        self._idle_timer: asyncio.TimerHandle | None = None

    async def list_tools(self) -> list[Tool]:
        self._check_open()
        return self._tools(await self._run(self.machine.list_tools))

    async def call_tool(self, name: str, arguments: bytes = b"") -> CallResult:
        self._check_open()
        return self._result(
            await self._run(lambda now: self.machine.call_tool(name, arguments, now=now))
        )

    async def aclose(self) -> None:
        """Close: abandon what is in flight; a legacy session gets its DELETE (bounded)."""
        if self._closed:
            return
        self._closed = True
        await self._run(self.machine.close)

    def feed(self, event: ExchangeEvent) -> None:
        self.machine.receive(event, now=_now())
        self._wake.set()

    async def _run(self, start: Callable[..., None]) -> Output:
        machine = self.machine
        self._stop_idle_timer()
        self._begin(start, now=_now())
        try:
            while True:
                output = self._deferred.popleft() if self._deferred else machine.next_output()
                if output is not None and not machine.wanted(output):
                    continue
                if output is None:
                    await self._sleep()
                elif isinstance(output, StartExchange):
                    await self.client._start(self, output)
                elif isinstance(output, CancelExchange):
                    self.client._cancel(output.exchange_id)
                elif isinstance(output, InputRequired):
                    await self._ask(output)
                else:
                    return self._finished(output)
        except McpError:
            raise
        except BaseException:
            for exchange_id in self._abandoned():
                self.client._cancel(exchange_id)
            raise
        finally:
            self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        """Between operations the machine may still hold deadlines (a stream drained after
        its answer, a cancellation notice): honour them without waiting for the next call."""
        deadline = self.machine.next_deadline()
        if deadline is not None and not self.machine.busy and self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_at(deadline, self._on_idle_timer)

    def _stop_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _on_idle_timer(self) -> None:
        self._idle_timer = None
        if self.machine.busy:
            return
        self._keep_deadlines()
        self._arm_idle_timer()

    def _keep_deadlines(self) -> None:
        """Let the machine act on its deadlines now: cancellations are carried out at once,
        anything else waits for the operation's loop."""
        self.machine.handle_timer(now=_now())
        while (output := self.machine.next_output()) is not None:
            if isinstance(output, CancelExchange):
                self.client._cancel(output.exchange_id)
            else:
                self._deferred.append(output)

    async def _sleep(self) -> None:
        deadline = self.machine.next_deadline()
        self._wake.clear()
        if deadline is None:
            await self._wake.wait()
            return
        try:
            async with asyncio.timeout_at(deadline):
                await self._wake.wait()
        except TimeoutError:
            self.machine.handle_timer(now=_now())

    async def _ask(self, output: InputRequired) -> None:
        handler = self.client.input_handler
        answer: Mapping[str, Any] | None = None
        if handler is not None:
            deadline = self.machine.next_deadline()
            try:
                if deadline is None:
                    answer = await handler(output.requests)
                else:
                    async with asyncio.timeout_at(deadline):
                        answer = await handler(output.requests)
            except TimeoutError:
                self.machine.handle_timer(now=_now())
                return
        self.machine.answer_input(output.input_id, answer, now=_now())


def _now() -> float:
    return asyncio.get_running_loop().time()


def _default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


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
