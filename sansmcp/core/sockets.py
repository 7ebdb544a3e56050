"""The exchanges in flight and the sockets carrying them: :class:`Sockets`.

The driver (:class:`~sansmcp.core.driver.ClientDriver`) keeps the Conns, their machines
and the caller's side; it hands every exchange a machine starts (``StartExchange``) or
cancels to its :class:`Sockets`, and every adapter report about a socket, a resolve or
a connect.  :class:`Sockets` owns what lies between an exchange and the bytes:

* the pool's checkouts (:class:`~sansmcp.core.net.pool.Pool`): an exchange that must
  wait holds its pool ticket (``waits``, ``pending``) until the pool grants it; one that
  needs a new socket opens a dial, walked by the :class:`~sansmcp.core.dialer.Dialer`
  and bounded by ``min(exchange deadline, checkout deadline)``;
* the open sockets (``by_id``, ``by_pool``) with their wire machines, and the route of
  every exchange begun on one (``routes``: exchange -> its Conn and socket);
* the wires' events, each handed straight to the machine that owns the exchange, and
  the :class:`~sansmcp.core.commands.Write` and
  :class:`~sansmcp.core.commands.CloseSocket` commands.

**A standalone stream yields its socket.**  A legacy session's standalone GET stream
(``StartExchange.preemptible``) holds a socket for the session's life (``listeners``);
when an operation's exchange must wait for a socket to its origin (a cap is reached),
one such stream to that origin -- its own session's first -- is cancelled
(``McpMachine.yield_listen``) so its socket goes to the operation.  The session re-opens
it after its next operation only when the origin has a socket to spare
(``needs_room``: :meth:`~sansmcp.core.net.pool.Pool.has_room_for_stream`), so a stream
never starves operations and the caps are never exceeded.

What a machine does with an event or a failure is the driver's: :class:`Sockets` calls
back through :class:`Host`, which it holds by a weak reference (the driver holds it:
no reference cycle, so a dropped ``Client`` is freed by reference counting).
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Protocol, assert_never

from .commands import CloseSocket, Command, Write
from .conn import ConnRecord
from .dialer import Dial, Dialer, DialPhase
from .errors import ConnectionFailed
from .http import ExchangeFailed, ResponseEnded
from .limits import Limits
from .mcp import StartExchange
from .net import dial as dialing
from .net.egress import routed
from .net.pool import DialNeeded, Grant, MustWait, Pool, UseConnection
from .url import Origin
from .wire import Wire, reader_fault

__all__ = ["Host", "Sockets", "client_closed"]

_TERMINAL = (ResponseEnded, ExchangeFailed)  # an exchange's last event


def client_closed() -> ConnectionFailed:
    return ConnectionFailed(
        "the Client was closed while this work was in flight", cause="client_closed"
    )


class Host(Protocol):
    """What :class:`Sockets` asks of the driver that holds it."""

    def _act(self, conn: ConnRecord, now: float) -> None:
        """Act on the Conn's outputs."""

    def _drive(self, conn: ConnRecord, now: float) -> None:
        """Act on the Conn's outputs, then re-arm its deadline."""

    def _rearm(self, conn: ConnRecord) -> None:
        """Re-arm the Conn's deadline."""

    def _arm(self, timed: Dial[ConnRecord], deadline: float | None) -> None:
        """The dial's one live timer is for ``deadline``."""


class _Socket:
    __slots__ = ("exchanges", "pool_id", "socket_id", "wire")

    def __init__(self, socket_id: int, pool_id: int, wire: Wire) -> None:
        self.socket_id = socket_id
        self.pool_id = pool_id
        self.wire = wire
        self.exchanges: set[int] = set()


class Sockets:
    """The exchanges and sockets of one driver (see the module docstring); its commands go
    to ``outbox``."""

    def __init__(
        self,
        host: Host,
        outbox: deque[Command],
        *,
        pool: Pool,
        limits: Limits,
        observe: bool,
        allow_private: bool,
        allow_loopback: bool,
    ) -> None:
        self._host: Host = weakref.proxy(host)
        self._outbox = outbox
        self.pool = pool
        self.limits = limits
        self.observe = observe
        self.closed = False
        self.dialer: Dialer[ConnRecord] = Dialer(
            outbox, allow_private=allow_private, allow_loopback=allow_loopback, limits=limits
        )
        self.routes: dict[int, tuple[ConnRecord, _Socket]] = {}  # exchange id ->
        # exchange id -> its dial or pool ticket
        self.pending: dict[int, Dial[ConnRecord] | int] = {}
        self.waits: dict[int, tuple[ConnRecord, StartExchange]] = {}  # pool ticket ->
        self.by_id: dict[int, _Socket] = {}  # socket id ->
        self.by_pool: dict[int, _Socket] = {}  # pool connection id ->
        # origin -> the Conns whose standalone stream may hold a socket there (in order)
        self.listeners: dict[Origin, dict[ConnRecord, None]] = {}
        self._pool_seen = -1
        self._pool_at: float | None = None

    # ------------------------------------------------------------ the driver's calls

    def start(self, conn: ConnRecord, start: StartExchange, now: float) -> None:
        """The Conn's machine starts an exchange: check out a socket for it."""
        conn.exchanges.add(start.exchange_id)
        if self.closed:
            self._fail(conn, start.exchange_id, client_closed(), now)
            return
        origin = _origin_of(conn, start)
        if start.needs_room and not self.pool.has_room_for_stream(origin):
            failure = ConnectionFailed("no socket to spare for the stream", cause="refused")
            self._fail(conn, start.exchange_id, failure, now)
            return
        self._serve(conn, start, self.pool.checkout(origin, now=now), now)

    def cancel(self, exchange_id: int, now: float) -> None:
        route = self.routes.pop(exchange_id, None)
        if route is not None:
            conn, sock = route
            conn.exchanges.discard(exchange_id)
            sock.exchanges.discard(exchange_id)
            sock.wire.cancel(exchange_id, now=now)
            self._flush(sock)
            self._close_pool_ids(self.pool.release(sock.pool_id, now=now), now)
            self._grants(now)
            return
        pending = self.pending.get(exchange_id)
        match pending:
            case None:
                return
            case Dial():
                pending.conn.exchanges.discard(exchange_id)
                self._give_up(pending, now)
                self.pool.dial_failed(pending.grant.conn_id, now=now)
            case int():
                pending_conn = self.waits.pop(pending)[0]
                del self.pending[exchange_id]
                pending_conn.exchanges.discard(exchange_id)
                self._close_pool_ids(self.pool.withdraw(pending, now=now), now)
            case _:  # pragma: no cover - exhaustive: mypy proves it unreachable
                assert_never(pending)
        self._grants(now)

    def drop(self, conn: ConnRecord, now: float) -> None:
        """The Conn is over: forget its stream, cancel whatever it still has in flight."""
        listeners = self.listeners.get(conn.origin)
        if listeners is not None:
            listeners.pop(conn, None)
            if not listeners:
                del self.listeners[conn.origin]
        for exchange_id in list(conn.exchanges):
            self.cancel(exchange_id, now)

    def close(self, now: float) -> None:
        """Client close: every socket closes, every dial and wait fails, later dials fail."""
        self.closed = True
        for ticket, (conn, start) in list(self.waits.items()):
            del self.waits[ticket], self.pending[start.exchange_id]
            self._close_pool_ids(self.pool.withdraw(ticket, now=now), now)
            self._fail(conn, start.exchange_id, client_closed(), now)
        while self.dialer.dials:
            dial = next(iter(self.dialer.dials.values()))
            self._give_up(dial, now)
            self._settle(dial, client_closed(), now)
        for pool_id in self.pool.close_all(now=now):
            self._close_socket(self.by_pool[pool_id], now, client_closed())

    def pool_deadline(self) -> float | None:
        """The pool's next idle expiry, recomputed only when the pool changed."""
        changed = self.pool.changed
        if changed != self._pool_seen:
            self._pool_seen = changed
            self._pool_at = self.pool.next_deadline()
        return self._pool_at

    def expire(self, now: float) -> None:
        """Close the idle sockets past their expiry, if any is due."""
        pool_at = self.pool_deadline()
        if pool_at is not None and pool_at <= now:
            self._close_pool_ids(self.pool.expire(now=now), now)
            self._grants(now)

    def dial_timed_out(self, dial: Dial[ConnRecord], now: float) -> None:
        """The dial's ``due`` passed: its deadline, or its proxy's answer's."""
        failure = self.dialer.timeout_error(dial)  # (naming a proxy that has not answered)
        self._give_up(dial, now)
        self._settle(dial, failure, now)

    # ------------------------------------------------------------ the adapter's reports

    def resolved(self, dial_id: int, answers: object, now: float) -> None:
        self._walked(self.dialer.resolved(dial_id, answers, now), now)

    def resolve_failed(
        self, dial_id: int, exc: BaseException, *, from_hook: bool, now: float
    ) -> None:
        self._walked(self.dialer.resolve_failed(dial_id, exc, from_hook=from_hook), now)

    def connected(self, socket_id: int, *, alpn: str | None, now: float) -> None:
        dial = self.dialer.connected(socket_id)
        if dial is None:
            return
        self._end_dial(dial)
        pool_id = dial.grant.conn_id
        wire = self.pool.dial_succeeded(pool_id, alpn=alpn, now=now)
        sock = _Socket(socket_id, pool_id, wire)
        self.by_id[socket_id] = sock
        self.by_pool[pool_id] = sock
        self._begin(dial.conn, dial.start, sock, now)

    def connect_failed(
        self, socket_id: int, phase: DialPhase, exc: BaseException, now: float
    ) -> None:
        self._walked(self.dialer.connect_failed(socket_id, phase, exc, now), now)

    def tunnel_received(self, socket_id: int, data: bytes, now: float) -> bool | None:
        verdict, dial = self.dialer.tunnel_received(socket_id, data, now)
        self._walked(dial, now)
        return verdict

    def received(self, socket_id: int, data: bytes, now: float) -> None:
        sock = self.by_id.get(socket_id)
        if sock is not None:
            sock.wire.receive_data(data, now=now)
            self._dispatch(sock, now, ended=False)

    def eof(self, socket_id: int, now: float) -> None:
        sock = self.by_id.get(socket_id)
        if sock is not None:
            sock.wire.receive_eof(now=now)
            self._dispatch(sock, now, ended=True)

    def reader_failed(self, socket_id: int, exc: Exception, now: float) -> None:
        sock = self.by_id.get(socket_id)
        if sock is not None:
            reader_fault(sock.wire, exc)
            self._dispatch(sock, now, ended=True)

    # ------------------------------------------------------------ exchanges and sockets

    def _preempt(self, conn: ConnRecord, origin: Origin, now: float) -> None:
        """``conn`` waits for a socket to ``origin`` (its MCP server's, or an OAuth
        server's): a standalone stream to that origin (its own first) gives its socket
        up (see the module docstring)."""
        listeners = self.listeners.get(origin)
        while listeners:
            owner = conn if conn in listeners else next(iter(listeners))
            del listeners[owner]
            exchange_id, owner.listen_xid = owner.listen_xid, None
            if exchange_id is not None and exchange_id in self.routes:
                owner.machine.yield_listen(exchange_id, now=now)
                self._host._drive(owner, now)
                return

    def _serve(
        self, conn: ConnRecord, start: StartExchange, checkout: Grant | MustWait, now: float
    ) -> None:
        match checkout:
            case UseConnection(conn_id=pool_id):
                self._begin(conn, start, self.by_pool[pool_id], now)
            case DialNeeded():
                self._dial(conn, start, checkout, now)
            case MustWait(ticket=ticket):
                self.waits[ticket] = (conn, start)
                self.pending[start.exchange_id] = ticket
                self._preempt(conn, _origin_of(conn, start), now)
            case _:  # pragma: no cover - exhaustive: mypy proves it unreachable
                assert_never(checkout)

    def _begin(self, conn: ConnRecord, start: StartExchange, sock: _Socket, now: float) -> None:
        sock.wire.start(start.exchange_id, start.request, now=now)
        if self.observe:
            conn.http = sock.wire.http_version
        if start.preemptible:
            conn.listen_xid = start.exchange_id
            self.listeners.setdefault(conn.origin, {})[conn] = None
        self.pool.started(sock.pool_id, now=now)
        self.routes[start.exchange_id] = (conn, sock)
        sock.exchanges.add(start.exchange_id)
        self._flush(sock)
        self._grants(now)

    def _fail(
        self, conn: ConnRecord, exchange_id: int, error: ConnectionFailed, now: float
    ) -> None:
        conn.exchanges.discard(exchange_id)
        conn.front.receive(ExchangeFailed(exchange_id=exchange_id, error=error), now=now)
        self._host._drive(conn, now)

    def _grants(self, now: float) -> None:
        """Hand what the pool granted to the exchanges waiting for it."""
        pool = self.pool
        while pool.has_grants and not self.closed:
            for ticket, _ in pool.take_grants():
                entry = self.waits.pop(ticket, None)
                if entry is None:  # pragma: no cover - re-granted and served by a nested pass
                    continue
                grant = pool.claim(ticket, now=now)
                if grant is None:  # pragma: no cover - claimed at once: nothing broke it since
                    # (the socket broke before the claim: the ticket is queued again)
                    self.waits[ticket] = entry
                    continue
                conn, start = entry
                del self.pending[start.exchange_id]
                self._serve(conn, start, grant, now)

    def _dispatch(self, sock: _Socket, now: float, *, ended: bool) -> None:
        """Every event the wire has goes to its owner; then flush, or close the socket."""
        wire = sock.wire
        routes = self.routes
        host = self._host
        unarmed: ConnRecord | None = None
        doomed: list[int] = []  # closed once every queued event is handed out: a broken
        # wire's other exchanges get their own errors, not "closed mid-response"
        while (event := wire.next_event()) is not None:
            route = routes.get(event.exchange_id)
            if route is None:  # pragma: no cover - the wires drop a cancelled exchange's events
                continue
            conn = route[0]
            if unarmed is not None and unarmed is not conn:
                host._rearm(unarmed)
            machine = conn.front
            if isinstance(event, _TERMINAL):
                del routes[event.exchange_id]
                conn.exchanges.discard(event.exchange_id)
                sock.exchanges.discard(event.exchange_id)
                machine.receive(event, now=now)
                doomed += self.pool.release(sock.pool_id, now=now)
                self._grants(now)
            else:
                machine.receive(event, now=now)
            if conn.auth is not None or conn.outputs:  # most body events produce nothing
                host._act(conn, now)
            unarmed = conn  # re-armed once, when the events move on to another Conn
        if unarmed is not None:
            host._rearm(unarmed)
        if doomed:
            self._close_pool_ids(doomed, now)
        if self.by_id.get(sock.socket_id) is sock:
            if ended or wire.is_broken:
                self._close_socket(sock, now)
            else:
                self._flush(sock)

    def _flush(self, sock: _Socket) -> None:
        data = sock.wire.data_to_send()
        if data:
            self._outbox.append(Write(socket_id=sock.socket_id, data=data))

    def _close_pool_ids(self, pool_ids: list[int], now: float) -> None:
        for pool_id in pool_ids:
            self._close_socket(self.by_pool[pool_id], now)

    def _close_socket(
        self, sock: _Socket, now: float, failure: ConnectionFailed | None = None
    ) -> None:
        """Close the socket: its live exchanges fail (``failure``, else reset), their
        leases end."""
        del self.by_id[sock.socket_id], self.by_pool[sock.pool_id]
        self._outbox.append(CloseSocket(socket_id=sock.socket_id))
        self.pool.discard(sock.pool_id, now=now)
        exchanges = list(sock.exchanges)
        sock.exchanges.clear()
        for exchange_id in exchanges:
            conn = self.routes.pop(exchange_id)[0]
            self.pool.release(sock.pool_id, now=now)
            self._fail(conn, exchange_id, failure or dialing.reset_error(), now)
        self._grants(now)

    # ------------------------------------------------------------ dials

    def _dial(self, conn: ConnRecord, start: StartExchange, grant: DialNeeded, now: float) -> None:
        for pool_id in grant.close_first:
            self._close_pool_ids([pool_id], now)
        dial = self.dialer.open(conn, start, grant)
        self.pending[start.exchange_id] = dial
        self._host._arm(dial, dial.deadline)
        self._walked(self.dialer.walk(dial, now), now)

    def _walked(self, dial: Dial[ConnRecord] | None, now: float) -> None:
        """The dialer's step ended ``dial`` failed (None: nothing ended); the dials whose
        ``due`` changed are re-armed."""
        retimed = self.dialer.retimed
        while retimed:  # (a dial is retimed only by a step that goes on with it)
            live = retimed.pop()
            self._host._arm(live, live.due)
        if dial is not None:
            assert dial.failure is not None  # the dialer hands back a failed dial only
            self._dial_failed(dial, dial.failure, now)

    def _end_dial(self, dial: Dial[ConnRecord]) -> None:
        del self.dialer.dials[dial.grant.conn_id], self.pending[dial.start.exchange_id]
        dial.heap_at = dial.heap_seq = None
        # (a stale heap entry may keep the dial: not the failure the caller gets raised,
        # whose traceback's frames would make a reference cycle through this driver)
        dial.failure = None

    def _give_up(self, dial: Dial[ConnRecord], now: float) -> None:
        """Abandon the dial's resolve or connect in progress, and the dial."""
        self.dialer.give_up(dial)
        self._end_dial(dial)

    def _dial_failed(self, dial: Dial[ConnRecord], failure: ConnectionFailed, now: float) -> None:
        self._end_dial(dial)
        self._settle(dial, failure, now)

    def _settle(self, dial: Dial[ConnRecord], failure: ConnectionFailed, now: float) -> None:
        """The ended dial failed with ``failure``: tell the pool, then the exchange.

        When the dial ran out of time because the exchange's own, tighter deadline
        passed (``connect_timeout``, ``call_timeout``...), the exchange is not told:
        the machine's timer reports that bound by its name.
        """
        self.pool.dial_failed(dial.grant.conn_id, now=now)
        self._grants(now)
        exchange_id = dial.start.exchange_id
        if failure.bound == "dial_timeout" and dial.grant.deadline > dial.start.deadline:
            dial.conn.exchanges.discard(exchange_id)
            return
        self._fail(dial.conn, exchange_id, failure, now)


def _origin_of(conn: ConnRecord, start: StartExchange) -> Origin:
    """Where ``start`` goes: its Conn's server, or another (OAuth) origin, by the Conn's
    route."""
    if start.origin is None:
        return conn.origin
    return start.origin if conn.route is None else routed(start.origin, conn.route)
