"""The trio driver: runs the pure core on trio streams.

Theory of operation
-------------------
Thin by design: every decision is the core's.  A ``Client`` owns the core's
:class:`~sansmcp.core.net.pool.Pool`.  Each pooled socket runs as one system task
with a reader (bytes in → wire machine → each exchange event straight into the
MCP machine that owns it) and a writer (drains the wire's ``data_to_send()``
whenever something queued bytes), inside a cancel scope that closing the socket
cancels.  Each ``Conn`` runs its machine in the caller's task: execute
``StartExchange`` (check out a socket, dialling through the guard when the pool
says so) and ``CancelExchange``, sleep until the machine's next deadline, and
return the operation's terminal event.
"""

from __future__ import annotations

import collections
import contextlib
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import trio

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
    the id (the socket closed) before the socket's task first runs."""

    __slots__ = ("conn_id", "outgoing", "scope", "stream", "wire")

    def __init__(self, conn_id: int, stream: trio.abc.Stream, wire: Any) -> None:
        self.conn_id = conn_id
        self.stream = stream
        self.wire = wire
        self.scope = trio.CancelScope()
        self.outgoing = trio.Event()


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
        self._changed = trio.Event()
        self._waiters: dict[int, trio.Event] = {}  # pool tickets -> their holders
        self._janitor: trio.CancelScope | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._janitor is not None:
            self._janitor.cancel()
        for conn_id in self.pool.close_all(now=trio.current_time()):
            self._close_socket(conn_id)
        for conn_id in list(self._sockets):
            self._close_socket(conn_id)
        await trio.lowlevel.checkpoint()

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
        checkout = self.pool.checkout(origin, now=trio.current_time())
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
            stream, alpn = await self._dial(
                origin, checkout.alpn, min(start.deadline, checkout.deadline)
            )
        except ConnectionFailed as failure:
            self.pool.dial_failed(checkout.conn_id, now=trio.current_time())
            self._bump()
            error = dial_failure(start, checkout, failure)
            if error is not None:
                conn.feed(ExchangeFailed(exchange_id=start.exchange_id, error=error))
            return
        except BaseException:
            self.pool.dial_failed(checkout.conn_id, now=trio.current_time())
            self._bump()
            raise
        wire = self.pool.dial_succeeded(checkout.conn_id, alpn=alpn, now=trio.current_time())
        sock = _Socket(checkout.conn_id, stream, wire)
        self._sockets[checkout.conn_id] = sock
        self._begin(conn, start, checkout.conn_id)
        trio.lowlevel.spawn_system_task(self._run_socket, sock)
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
        kept = -math.inf  # when the Conn's deadlines were last acted on
        try:
            with trio.move_on_at(deadline):
                while (granted := self._claim(ticket)) is None:
                    turn = self._waiters[ticket] = trio.Event()
                    with trio.move_on_at(conn._queued_wake(deadline, kept)) as nap:
                        await turn.wait()
                    if nap.cancelled_caught and trio.current_time() < deadline:
                        kept = trio.current_time()
                        conn._keep_deadlines()
                return granted
        except BaseException:
            self._close_sockets(self.pool.withdraw(ticket, now=trio.current_time()))
            self._bump()
            raise
        finally:
            self._waiters.pop(ticket, None)
        self._close_sockets(self.pool.withdraw(ticket, now=trio.current_time()))
        self._bump()
        return None

    def _claim(self, ticket: int) -> UseConnection | DialNeeded | None:
        changed = self.pool.changed
        granted = self.pool.claim(ticket, now=trio.current_time())
        if self.pool.changed != changed:  # a grant given back at the claim went on
            self._bump()
        return granted

    def _begin(self, conn: Conn, start: StartExchange, conn_id: int) -> None:
        wire = self._sockets[conn_id].wire
        self.router.begin(conn, start, conn_id, wire, now=trio.current_time())
        self._flush(conn_id)

    def _cancel(self, exchange_id: int) -> None:
        flush, doomed = self.router.cancel(exchange_id, self._wire_of, now=trio.current_time())
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
    ) -> tuple[trio.abc.Stream, str | None]:
        with trio.move_on_at(deadline):
            allowed = dial.vet(
                origin,
                await self._resolve(origin),
                allow_private=self.allow_private,
                allow_loopback=self.allow_loopback,
            )
            failure: ConnectionFailed | None = None
            for address in allowed:
                # numeric-host semantics, strictly: inet_pton, not getaddrinfo, whose
                # AI_NUMERICHOST still takes inet_aton's "127.1" for 127.0.0.1
                family = trio.socket.AF_INET6 if ":" in address else trio.socket.AF_INET
                sockaddr: tuple[Any, ...] = (address, origin.port)
                if family == trio.socket.AF_INET6:
                    sockaddr = (address, origin.port, 0, 0)
                try:
                    trio.socket.inet_pton(family, address)
                    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
                except OSError as exc:
                    failure = dial.connect_error(origin, address, exc)
                    continue
                try:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
                    try:
                        await sock.connect(sockaddr)
                    except OSError as exc:
                        failure = dial.connect_error(origin, address, exc)
                        sock.close()
                        continue
                    tcp = trio.SocketStream(sock)
                    if origin.scheme != "https":
                        return tcp, None
                    if self._ssl is None:  # built once: loading the system CA store costs ~35 ms
                        self._ssl = _default_ssl_context()
                    context = self._ssl
                    context.set_alpn_protocols(list(alpn))
                    stream = trio.SSLStream(
                        tcp, context, server_hostname=origin.host, https_compatible=True
                    )
                    try:
                        await stream.do_handshake()
                    except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                        # TCP is up: whatever the class, a TLS failure (trio chains ssl's error)
                        reason = exc.__cause__ if exc.__cause__ is not None else exc
                        failure = dial.tls_error(origin, address, reason)
                        sock.close()
                        continue
                except BaseException:  # cancelled, or the dial deadline: no socket left behind
                    sock.close()
                    raise
                return stream, stream.selected_alpn_protocol()
            assert failure is not None  # vet() returns at least one address
            raise failure
        raise dial.timeout_error(self.limits)

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
            infos = await trio.socket.getaddrinfo(
                origin.host, origin.port, type=trio.socket.SOCK_STREAM
            )
        except OSError as exc:
            raise dial.dns_error(origin, exc) from None
        return [info[4][0] for info in infos]

    # -- sockets ----------------------------------------------------------------

    async def _run_socket(self, sock: _Socket) -> None:
        try:
            with sock.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write, sock)
                    await self._read(sock)
                    nursery.cancel_scope.cancel()
        finally:
            self._close_socket(sock.conn_id)
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await trio.aclose_forcefully(sock.stream)

    async def _read(self, sock: _Socket) -> None:
        wire = sock.wire
        try:
            while True:
                try:
                    data = await sock.stream.receive_some(_READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if data:
                    wire.receive_data(data, now=trio.current_time())
                else:
                    wire.receive_eof(now=trio.current_time())
                self._dispatch(sock.conn_id, wire)
                if not data or wire.is_broken:
                    return
        except Exception as exc:  # the reader task must never die of one
            reader_fault(wire, exc)
            with contextlib.suppress(Exception):
                self._dispatch(sock.conn_id, wire)

    async def _write(self, sock: _Socket) -> None:
        wire = sock.wire
        while True:
            data = wire.data_to_send()
            if not data:
                sock.outgoing = trio.Event()
                await sock.outgoing.wait()
                continue
            try:
                await sock.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                sock.scope.cancel()
                return

    def _dispatch(self, conn_id: int, wire: Any) -> None:
        changed = self.pool.changed
        doomed = self.router.deliver(conn_id, wire, now=trio.current_time())
        self._flush(conn_id)
        self._close_sockets(doomed)
        if self.pool.changed != changed:
            self._bump()

    def _flush(self, conn_id: int) -> None:
        sock = self._sockets.get(conn_id)
        if sock is not None:
            sock.outgoing.set()

    def _close_socket(self, conn_id: int) -> None:
        sock = self._sockets.pop(conn_id, None)
        if sock is None:
            return
        self.router.socket_gone(conn_id, now=trio.current_time())
        sock.scope.cancel()
        self._bump()

    def _bump(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
        for ticket, _ in self.pool.take_grants():  # wake exactly the checkouts served
            turn = self._waiters.get(ticket)
            if turn is not None:
                turn.set()

    def _ensure_janitor(self) -> None:
        if self._janitor is None:
            self._janitor = trio.CancelScope()
            trio.lowlevel.spawn_system_task(self._expire_idle, self._janitor)

    async def _expire_idle(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                deadline = self.pool.next_deadline()
                changed = self._changed
                with trio.move_on_at(math.inf if deadline is None else deadline):
                    await changed.wait()
                closed = self.pool.expire(now=trio.current_time())
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
        self._wake = trio.Event()
        self._idle_scope: trio.CancelScope | None = None

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
        self.machine.receive(event, now=trio.current_time())
        self._wake.set()

    async def _run(self, start: Callable[..., None]) -> Output:
        machine = self.machine
        self._stop_idle_timer()
        self._begin(start, now=trio.current_time())
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
        if deadline is not None and not self.machine.busy and self._idle_scope is None:
            self._idle_scope = trio.CancelScope(deadline=deadline)
            trio.lowlevel.spawn_system_task(self._idle_timer, self._idle_scope)

    def _stop_idle_timer(self) -> None:
        scope, self._idle_scope = self._idle_scope, None
        if scope is not None:
            scope.cancel()

    async def _idle_timer(self, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_forever()
        if self._idle_scope is not scope:
            return  # stopped: an operation started
        self._idle_scope = None
        if self.machine.busy:
            return
        self._keep_deadlines()
        self._arm_idle_timer()

    def _keep_deadlines(self) -> None:
        """Let the machine act on its deadlines now: cancellations are carried out at once,
        anything else waits for the operation's loop."""
        self.machine.handle_timer(now=trio.current_time())
        while (output := self.machine.next_output()) is not None:
            if isinstance(output, CancelExchange):
                self.client._cancel(output.exchange_id)
            else:
                self._deferred.append(output)

    async def _sleep(self) -> None:
        deadline = self.machine.next_deadline()
        with trio.move_on_at(math.inf if deadline is None else deadline) as scope:
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = trio.Event()
        if scope.cancelled_caught:
            self.machine.handle_timer(now=trio.current_time())

    async def _ask(self, output: InputRequired) -> None:
        handler = self.client.input_handler
        answer: Mapping[str, Any] | None = None
        if handler is not None:
            deadline = self.machine.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline) as scope:
                answer = await handler(output.requests)
            if scope.cancelled_caught:
                self.machine.handle_timer(now=trio.current_time())
                return
        self.machine.answer_input(output.input_id, answer, now=trio.current_time())


def _default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


_default_client: trio.lowlevel.RunVar[Client] = trio.lowlevel.RunVar("sansmcp_default_client")


def connect(config: Config) -> contextlib.AbstractAsyncContextManager[Conn]:
    """``Client.connect`` on the default client of the current trio run."""
    try:
        client = _default_client.get()
    except LookupError:
        client = Client()
        _default_client.set(client)
    return client.connect(config)
