"""The pure client driver: the pool, the routes and every Conn's machine, as I/O commands.

(Over ~600 lines on purpose: one state machine whose parts -- operations, exchanges and
sockets, dials, deadlines -- share the same few tables (routes, pending exchanges,
dials, the heap), and every method keeps their invariants together; about a third of
the lines are docstrings and the command types.)

Theory of operation
-------------------
One :class:`ClientDriver` per ``Client``.  It owns the connection
:class:`~sansmcp.core.net.pool.Pool`, the route of every exchange in flight
(exchange -> the Conn whose machine started it, and the socket carrying it) and
each Conn's :class:`~sansmcp.core.mcp.McpMachine`.  It never touches a socket,
a clock or a task: time comes in (``now=``), deadlines go out
(:meth:`ClientDriver.next_deadline`), and what the adapter must do waits in an
outbox of :data:`Command`\\ s (:meth:`ClientDriver.next_command`), h2-style:

* I/O: :class:`Resolve` a host name, :class:`Connect` to one vetted address,
  :class:`Write` bytes, :class:`CloseSocket` (abort; also abandons a resolve or a
  connect in progress under that id; the adapter reports nothing back for it);
* the caller's: :class:`Deliver` something the embedder's callback must see (an
  input request, or an observation: progress, a server notification, and -- with
  ``observe`` -- each request's start and end for telemetry), and
  :class:`Finished` (an operation's terminal outcome).  Both are executed in the
  caller's task or thread, never in a socket reader.

The adapter reports back: :meth:`~ClientDriver.resolved` /
:meth:`~ClientDriver.resolve_failed`, :meth:`~ClientDriver.connected` /
:meth:`~ClientDriver.connect_failed` (with the phase, ``"tcp"`` or ``"tls"``),
:meth:`~ClientDriver.received`, :meth:`~ClientDriver.eof`,
:meth:`~ClientDriver.reader_failed`, and calls :meth:`~ClientDriver.handle_timer`
when :meth:`~ClientDriver.next_deadline` passes.

**Machine outputs are acted on the moment they appear.**  ``StartExchange``
checks out a socket: an exchange that must wait holds its pool ticket here until
the pool grants it; a dial walks the vetted addresses one :class:`Connect` at a
time, bounded by ``min(exchange deadline, checkout deadline)``.  Wire events go
straight from a socket's wire machine to the machine that owns the exchange.  An
input request or a terminal output goes to the caller while an operation runs;
one that appears between operations (a server request on the standalone stream)
is held for the next operation, and dropped then if the machine no longer wants it.

**A standalone stream yields its socket.**  A legacy session's standalone GET
stream (``StartExchange.preemptible``) holds a socket for the session's life; when
an operation's exchange must wait for a socket to its origin (a cap is reached), one
such stream to that origin -- its own session's first -- is cancelled
(``McpMachine.yield_listen``) so its socket goes to the operation.  The session
re-opens it after its next operation only when the origin has a socket to spare
(``needs_room``: fewer sockets than both caps), so a stream never starves
operations and the caps are never exceeded.

**Deadlines** are kept in one heap with lazy deletion: each Conn and each dial
has at most one live entry (the one it was last armed with, by sequence number); stale entries
are skipped when they reach the top, and the heap is rebuilt when stale ones
outnumber live ones.  The pool's idle expiry is one more deadline, recomputed
only when the pool changed.  ``next_deadline()`` is O(1) amortised.

**Errors.**  Misuse of the public API raises :class:`~sansmcp.core.errors.UsageError`
(a closed or busy Conn, a closed Client) or ``CallerError`` (an unusable
``Config`` or argument), with nothing changed.  Reports for ids the driver no
longer knows (a socket it closed, a dial it gave up) are ignored.  Everything a
server or a resolver does ends as a classified error in a :class:`Finished`.

The commands' types live in :mod:`sansmcp.core.commands` (re-exported here).

**Threads.**  The driver is not thread-safe; a blocking adapter drives it under
one lock, executing I/O commands after releasing it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, assert_never

from . import config as config_module
from .cache import CallerCache, ListingCache
from .commands import CloseSocket, Command, Connect, Deliver, Finished, Resolve, StoreOp, Write
from .config import Config
from .dialer import Dial, Dialer, DialPhase
from .errors import CallerError, ConnectionFailed, UsageError
from .fleet import Fleet
from .http import ExchangeFailed, ResponseEnded
from .limits import Limits
from .mcp import (
    CancelExchange,
    Closed,
    Connected,
    InputRequired,
    McpMachine,
    Observation,
    OperationFailed,
    Output,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from .mcp.compiled import CompiledSchemas
from .mcp.notifications import OBSERVATIONS, RequestEnded
from .mcp.settings import ConnSettings
from .net import dial as dialing
from .net.pool import DialNeeded, Grant, MustWait, Pool, UseConnection
from .oauth.store import AuthorizationNeeded
from .results import CallResult
from .store import StoreAnswer
from .timers import Timers
from .tools import Tool
from .url import Origin
from .view import ConnView
from .wire import Wire, reader_fault

if TYPE_CHECKING:
    from .oauth.machine import OAuthMachine  # imported only for a Config.oauth Conn

__all__ = [
    "ClientDriver",
    "CloseSocket",
    "Command",
    "ConnView",
    "Connect",
    "Deliver",
    "DialPhase",
    "Finished",
    "Resolve",
    "StoreOp",
    "Write",
]

CONN_CLOSED = "this Conn is closed (closed, or an operation on it was cancelled)"
CONN_BUSY = "a Conn runs one operation at a time"
CLIENT_CLOSED = "this Client is closed"


# ---------------------------------------------------------------- state


class _Conn:
    __slots__ = (
        "attended",
        "auth",
        "exchanges",
        "front",
        "heap_at",
        "heap_seq",
        "held",
        "http",
        "listen_xid",
        "machine",
        "origin",
        "outputs",
        "view",
    )

    def __init__(self, view: ConnView) -> None:
        self.view = view
        self.machine = view.machine
        # an OAuth Conn's authorizer: the operations, events and timers go to it, and the
        # outputs come through it (its own, and the machine's screened)
        self.auth = view.auth
        self.front: McpMachine | OAuthMachine = view.machine if view.auth is None else view.auth
        # the machine's outputs, drained here without a next_output() call each (a Conn
        # without an authorizer)
        self.outputs = view.machine.outputs
        self.origin = view.machine.settings.endpoint.origin
        self.exchanges: set[int] = set()  # started, dialling or waiting for a socket
        self.attended = False  # an operation runs: the caller takes Deliver / Finished
        self.held: list[Deliver] = []  # what came between operations
        self.heap_at: float | None = None  # the deadline of its live heap entry
        self.heap_seq: int | None = None  # and that entry's sequence number
        self.http: str | None = None  # the HTTP version its last exchange began on (telemetry)
        self.listen_xid: int | None = None  # its standalone stream's exchange, once begun


class _Socket:
    __slots__ = ("exchanges", "pool_id", "socket_id", "wire")

    def __init__(self, socket_id: int, pool_id: int, wire: Wire) -> None:
        self.socket_id = socket_id
        self.pool_id = pool_id
        self.wire = wire
        self.exchanges: set[int] = set()


_Timed: TypeAlias = "_Conn | Dial[_Conn]"  # what the timer heap holds


_TERMINAL = (ResponseEnded, ExchangeFailed)  # an exchange's last event


def _client_closed() -> ConnectionFailed:
    return ConnectionFailed(
        "the Client was closed while this work was in flight", cause="client_closed"
    )


# ---------------------------------------------------------------- the driver


class ClientDriver:
    """Every Conn of one ``Client``, sans I/O (see the module docstring).

    ``limits`` bounds everything; ``allow_loopback`` / ``allow_private`` widen the
    address guard; ``http2_prior_knowledge`` speaks h2c to ``http://`` origins;
    ``answers_input`` says the embedder can answer input requests (only then are
    ``capabilities`` declared); ``client_info`` replaces sansmcp's ``clientInfo``;
    ``observe`` reports every request's start and end (telemetry).
    ``cache_salt`` (random bytes the adapter draws, up to 64) salts the caller digests
    that key ``private`` entries of the Client-wide listing cache (:attr:`cache`).
    ``shared_store``: the adapter performs :class:`StoreOp` on a store the fleet shares
    (era hints: :mod:`sansmcp.core.fleet`); without it none is emitted.
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        allow_loopback: bool = False,
        allow_private: bool = False,
        http2_prior_knowledge: bool = False,
        answers_input: bool = False,
        capabilities: Mapping[str, Any] | None = None,
        client_info: Mapping[str, Any] | None = None,
        cache_salt: bytes = b"",
        observe: bool = False,
        random_bytes: Callable[[int], bytes] | None = None,
        wall_clock: Callable[[], float] | None = None,
        shared_store: bool = False,
    ) -> None:
        self.limits = limits or Limits()
        self.fleet = Fleet(self.limits) if shared_store else None
        # Conns whose connect waits for their endpoint's era from the store: conn id ->
        # (the operation's start, the endpoint)
        self._parked: dict[int, tuple[Callable[[_Conn], None], str]] = {}
        self.observe = observe
        self.random_bytes = random_bytes  # PKCE verifiers, state (OAuth only)
        self.wall_clock = wall_clock  # seconds since the epoch, for JWT claims (OAuth only)
        self.allow_loopback = allow_loopback
        self.allow_private = allow_private
        # checked and copied now: what the caller later does to theirs changes nothing sent
        self.capabilities = config_module.json_snapshot(
            "capabilities", (capabilities or {}) if answers_input else None
        )
        self.client_info = config_module.json_snapshot("client_info", client_info)
        self.pool = Pool(limits=self.limits, http2_prior_knowledge=http2_prior_knowledge)
        self.cache = ListingCache(
            max_entries=self.limits.max_cache_entries, max_bytes=self.limits.max_cache_bytes
        )
        self._cache_salt = bytes(cache_salt)
        self.compiled = CompiledSchemas(  # the servers' output schemas, compiled once
            max_entries=self.limits.max_compiled_schemas,
            max_bytes=self.limits.max_compiled_schema_bytes,
        )
        # the last Config opened, when nothing in it can change (see _immutable), with its
        # checked settings and those settings under each era hint the pool gave
        self._settings_memo: tuple[Config, ConnSettings, dict[str, ConnSettings]] | None = None
        self.closed = False
        self._exchange_ids = iter(range(1, 1 << 62))  # unique across Conns sharing sockets
        self._conn_ids = itertools.count(1)
        self._outbox: deque[Command] = deque()
        self._conns: dict[int, _Conn] = {}
        self._routes: dict[int, tuple[_Conn, _Socket]] = {}  # exchange id ->
        self._pending: dict[int, Dial[_Conn] | int] = {}  # exchange id -> its dial or pool ticket
        self._waits: dict[int, tuple[_Conn, StartExchange]] = {}  # pool ticket ->
        self._dialer: Dialer[_Conn] = Dialer(
            self._outbox, allow_private=allow_private, allow_loopback=allow_loopback
        )
        self._sockets: dict[int, _Socket] = {}  # socket id ->
        self._by_pool: dict[int, _Socket] = {}  # pool connection id ->
        self._timers: Timers[_Timed] = Timers()
        self._pool_seen = -1
        self._pool_at: float | None = None
        # origin -> the Conns whose standalone stream may hold a socket there (in order)
        self._listeners: dict[Origin, dict[_Conn, None]] = {}

    # ------------------------------------------------------------ observation

    def next_command(self) -> Command | None:
        """The next thing to do, or None when the outbox is empty."""
        return self._outbox.popleft() if self._outbox else None

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has work (None: nothing timed)."""
        first = self._timers.first()
        pool_at = self._pool_deadline()
        if pool_at is None or (first is not None and first <= pool_at):
            return first
        return pool_at

    def _pool_deadline(self) -> float | None:
        """The pool's next idle expiry, recomputed only when the pool changed."""
        changed = self.pool.changed
        if changed != self._pool_seen:
            self._pool_seen = changed
            self._pool_at = self.pool.next_deadline()
        return self._pool_at

    # ------------------------------------------------------------ the caller's inputs

    def open(self, config: Config, *, now: float) -> ConnView:
        """A new Conn for ``config`` (``CallerError`` when unusable, ``UsageError`` after
        :meth:`close`); start it with :meth:`connect`."""
        if self.closed:
            raise UsageError(CLIENT_CLOSED)
        memo = self._settings_memo
        if memo is not None and memo[0] is config:
            settings = memo[1]
        else:
            settings = config_module.conn_settings(
                config,
                client_info=self.client_info,
                capabilities=self.capabilities,
                era_hint=None,
                observe=self.observe,
            )
            memo = (config, settings, {}) if _immutable(config) else None
            self._settings_memo = memo
        hint = self.pool.era_hint(settings.endpoint.url)
        if hint is not None:
            hinted = None if memo is None else memo[2].get(hint)
            if hinted is None:
                hinted = dataclasses.replace(settings, era_hint=hint)
                if memo is not None:
                    memo[2][hint] = hinted
            settings = hinted
        cache = CallerCache(
            self.cache, settings, self._cache_salt, anonymous=config.oauth is not None
        )
        machine = McpMachine(
            settings, limits=self.limits, exchange_ids=self._exchange_ids, cache=cache
        )
        auth = None if config.oauth is None else _authorizer(self, machine, config)
        machine.share_compiled(self.compiled)
        view = ConnView(next(self._conn_ids), machine, auth)
        view.on_notification = config.on_notification
        self._conns[view.conn_id] = _Conn(view)
        return view

    # ``trace`` (trace context: traceparent, tracestate, baggage) goes into the operation's
    # requests' ``_meta``; ``progress`` asks for the call's progress notifications.

    def connect(self, conn_id: int, *, now: float, trace: Mapping[str, str] | None = None) -> None:
        def start(conn: _Conn) -> None:
            conn.machine.propagate(trace)
            conn.front.connect(now=now)

        conn = self._conns.get(conn_id)
        fleet = self.fleet
        if fleet is None or conn is None or conn.machine.settings.era_hint is not None:
            self._operate(conn_id, start, now)
            return
        url = conn.machine.settings.endpoint.url
        if fleet.era_known(url) or conn.view.closed or self._busy(conn):
            self._operate(conn_id, start, now)  # (its UsageError, if any)
            return
        self._parked[conn_id] = (start, url)  # until the era is read, or store_timeout
        conn.attended = True
        self._arm(conn, now + self.limits.store_timeout)
        op = fleet.wait_era(url, conn_id)
        if op is not None:
            self._outbox.append(op)

    def list_tools(
        self,
        conn_id: int,
        *,
        now: float,
        fresh: bool = False,
        trace: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """List the tools (from the Client-wide cache while fresh there, unless ``fresh``)."""

        def start(conn: _Conn) -> None:
            conn.machine.propagate(trace)
            conn.front.list_tools(now=now, fresh=fresh, timeout=timeout)

        self._operate(conn_id, start, now)

    def call_tool(
        self,
        conn_id: int,
        name: str,
        arguments: bytes,
        *,
        now: float,
        progress: bool = False,
        trace: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        def start(conn: _Conn) -> None:
            conn.machine.propagate(trace)
            conn.front.call_tool(name, arguments, now=now, progress=progress, timeout=timeout)

        self._operate(conn_id, start, now)

    def close_conn(self, conn_id: int, *, now: float) -> None:
        """Close the Conn (a legacy session gets its DELETE); ends with :class:`Finished`,
        at once when it is closed already."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.view.closed:
            self._outbox.append(Finished(conn_id=conn_id))
            return
        if conn.front.busy:
            raise UsageError(CONN_BUSY)  # before anything changes
        conn.view.closed = True
        self._operate(conn_id, lambda conn: conn.machine.close(now=now), now, closing=True)

    def answer(
        self, conn_id: int, input_id: int, answers: Mapping[str, Any] | None, *, now: float
    ) -> None:
        """The embedder's answer to a :class:`Deliver`\\ ed input request (None declines).

        Time comes first: the deadlines due by ``now`` are acted on before the answer, so
        one that comes after its request's deadline (a blocking handler cannot be cut
        short) finds its operation failed with that bound, and is dropped."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        due = self.next_deadline()
        if due is not None and due <= now:
            self.handle_timer(now=now)
        conn.machine.answer_input(input_id, answers, now=now)
        self._drive(conn, now)

    def complete_authorization(self, conn_id: int, redirect: object, *, now: float) -> None:
        """Start the Conn (a ``Config.oauth`` one) by finishing an authorization a person
        made after an ``Unauthorized(cause="authorization_required")``; ends, connected,
        with :class:`Finished`."""

        def start(conn: _Conn) -> None:
            if conn.auth is None:
                raise CallerError("complete_authorization needs a Config with oauth")
            conn.auth.complete_authorization(redirect, now=now)

        self._operate(conn_id, start, now)

    def authorized(self, conn_id: int, auth_id: int, answer: object, *, now: float) -> None:
        """The embedder's answer to a :class:`Deliver`\\ ed ``AuthorizationNeeded``: the
        redirect URL, a mapping of ``code`` / ``state`` / ``iss``, or None (no step);
        ``CallerError`` for anything else."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        auth = conn.auth
        assert auth is not None  # only its Conns get AuthorizationNeeded
        auth.authorized(auth_id, answer, now=now)
        self._drive(conn, now)

    def abandon(self, conn_id: int, *, now: float) -> None:
        """The caller's task was cancelled (or its callback raised): the Conn closes
        without a DELETE and its exchanges are cancelled; nothing more comes for it."""
        conn = self._conns.get(conn_id)
        if conn is not None:
            self._drop(conn, now)

    def close(self, *, now: float) -> None:
        """Client close: every socket closes, every dial and wait fails, later dials fail."""
        self.closed = True
        for conn_id in list(self._parked):  # a connect waiting for the store
            self._drop(self._conns[conn_id], now)
            self._outbox.append(Finished(conn_id=conn_id, error=_client_closed()))
        for ticket, (conn, start) in list(self._waits.items()):
            del self._waits[ticket], self._pending[start.exchange_id]
            self._close_pool_ids(self.pool.withdraw(ticket, now=now), now)
            self._fail(conn, start.exchange_id, _client_closed(), now)
        while self._dialer.dials:
            dial = next(iter(self._dialer.dials.values()))
            self._give_up(dial, now)
            self._settle(dial, _client_closed(), now)
        for pool_id in self.pool.close_all(now=now):
            self._close_socket(self._by_pool[pool_id], now, _client_closed())

    # ------------------------------------------------------------ the adapter's reports

    def store_answered(self, op_id: int, answer: StoreAnswer, *, now: float) -> None:
        """The shared store's answer to :class:`StoreOp` ``op_id`` (untrusted)."""
        assert self.fleet is not None, "a StoreOp answered without a shared store"
        read = self.fleet.answered(op_id, answer)
        if read is None:
            return
        url, hint, waiting = read
        if hint is not None and self.pool.era_hint(url) is None:
            self.pool.remember_era(url, hint)
        for conn_id in waiting:
            self._unpark(conn_id, hint, now)

    def _unpark(self, conn_id: int, hint: str | None, now: float) -> None:
        """A parked connect goes on (with the fleet's era hint, when one came)."""
        start, url = self._parked.pop(conn_id)
        assert self.fleet is not None
        self.fleet.stop_waiting(url, conn_id)
        conn = self._conns[conn_id]
        if hint is not None:
            conn.machine.use_era_hint(hint)
        self._arm(conn, None)
        self._operate(conn_id, start, now)

    def resolved(self, dial_id: int, answers: object, *, now: float) -> None:
        """The resolver's raw answer (any value: vetted here)."""
        self._walked(self._dialer.resolved(dial_id, answers), now)

    def resolve_failed(
        self, dial_id: int, exc: BaseException, *, from_hook: bool, now: float
    ) -> None:
        """The resolver hook raised ``exc`` (``from_hook``), or the system resolver did."""
        self._walked(self._dialer.resolve_failed(dial_id, exc, from_hook=from_hook), now)

    def connected(self, socket_id: int, *, alpn: str | None, now: float) -> None:
        """The socket is up (TLS done); ``alpn`` is what the server selected."""
        dial = self._dialer.connected(socket_id)
        if dial is None:
            return
        self._end_dial(dial)
        pool_id = dial.grant.conn_id
        wire = self.pool.dial_succeeded(pool_id, alpn=alpn, now=now)
        sock = _Socket(socket_id, pool_id, wire)
        self._sockets[socket_id] = sock
        self._by_pool[pool_id] = sock
        self._begin(dial.conn, dial.start, sock, now)

    def connect_failed(
        self, socket_id: int, phase: DialPhase, exc: BaseException, *, now: float
    ) -> None:
        """The connect failed in ``phase``: creating the socket or TCP (``"tcp"``), or the
        TLS handshake after TCP was up (``"tls"``, whatever the exception's class)."""
        self._walked(self._dialer.connect_failed(socket_id, phase, exc), now)

    def received(self, socket_id: int, data: bytes, *, now: float) -> None:
        sock = self._sockets.get(socket_id)
        if sock is not None:
            sock.wire.receive_data(data, now=now)
            self._dispatch(sock, now, ended=False)

    def eof(self, socket_id: int, *, now: float) -> None:
        sock = self._sockets.get(socket_id)
        if sock is not None:
            sock.wire.receive_eof(now=now)
            self._dispatch(sock, now, ended=True)

    def reader_failed(self, socket_id: int, exc: Exception, *, now: float) -> None:
        """The socket's reader caught ``exc`` (from anything on its way): the socket's
        exchanges fail classified (framing) and it closes."""
        sock = self._sockets.get(socket_id)
        if sock is not None:
            reader_fault(sock.wire, exc)
            self._dispatch(sock, now, ended=True)

    def handle_timer(self, *, now: float) -> None:
        """Act on every deadline at or before ``now``."""
        for timed in self._timers.due(now):
            if isinstance(timed, Dial):
                self._give_up(timed, now)
                self._settle(timed, dialing.timeout_error(self.limits), now)
            elif timed.view.conn_id in self._parked:  # the store did not answer in time
                self._unpark(timed.view.conn_id, None, now)
            else:
                timed.front.handle_timer(now=now)
                self._drive(timed, now)
        pool_at = self._pool_deadline()
        if pool_at is not None and pool_at <= now:
            self._close_pool_ids(self.pool.expire(now=now), now)
            self._grants(now)

    # ------------------------------------------------------------ operations

    def _operate(
        self,
        conn_id: int,
        start: Callable[[_Conn], None],
        now: float,
        *,
        closing: bool = False,
    ) -> None:
        conn = self._conns.get(conn_id)
        if conn is None or (conn.view.closed and not closing):
            raise UsageError(CONN_CLOSED)
        if self._busy(conn):
            raise UsageError(CONN_BUSY)
        start(conn)
        conn.attended = True
        mark = len(self._outbox)
        held, conn.held = conn.held, []
        self._drive(conn, now)
        for deliver in reversed(held):  # before what the operation produced, as they came
            item = deliver.item
            assert not isinstance(item, AuthorizationNeeded)  # never held: delivered at once
            if conn.machine.wanted(item):
                self._outbox.insert(mark, deliver)

    def _busy(self, conn: _Conn) -> bool:
        return conn.front.busy or conn.view.conn_id in self._parked

    def _drive(self, conn: _Conn, now: float) -> None:
        """Act on the machine's outputs, then re-arm its deadline."""
        self._act(conn, now)
        self._rearm(conn)

    def _rearm(self, conn: _Conn) -> None:
        if self._conns.get(conn.view.conn_id) is conn:
            self._arm(conn, conn.front.next_deadline())

    def _act(self, conn: _Conn, now: float) -> None:
        """Act on the machine's outputs the moment they appear."""
        auth = conn.auth
        outputs = conn.outputs
        while True:
            if auth is not None:
                output = auth.next_output()
                if output is None:
                    return
            elif outputs:
                output = outputs.popleft()
            else:
                return
            match output:
                case StartExchange():
                    self._start(conn, output, now)
                case Connected() | ToolsListed() | ToolCalled() | OperationFailed() | Closed():
                    self._finish(conn, output, now)
                case CancelExchange(exchange_id=exchange_id):
                    self._cancel(exchange_id, now)
                case AuthorizationNeeded():  # the embedder's wait: no deadline
                    self._outbox.append(
                        Deliver(conn_id=conn.view.conn_id, item=output, deadline=math.inf)
                    )
                case InputRequired():
                    deadline = conn.front.next_deadline()
                    item = Deliver(
                        conn_id=conn.view.conn_id,
                        item=output,
                        deadline=math.inf if deadline is None else deadline,
                    )
                    if conn.attended:
                        self._outbox.append(item)
                    else:
                        conn.held.append(item)
                case _ if isinstance(output, OBSERVATIONS):
                    self._observed(conn, output)
                case _:  # pragma: no cover - exhaustive: mypy proves it unreachable
                    assert_never(output)

    def _observed(self, conn: _Conn, item: Observation) -> None:
        """An observation for the embedder: now, or at the next operation (bounded by
        ``Limits.max_notifications``: only notifications come between operations)."""
        if isinstance(item, RequestEnded):
            item = dataclasses.replace(item, http_version=conn.http)
        deliver = Deliver(conn_id=conn.view.conn_id, item=item, deadline=math.inf)
        if conn.attended:
            self._outbox.append(deliver)
        else:
            conn.held.append(deliver)

    def _finish(self, conn: _Conn, output: Output, now: float) -> None:
        conn.attended = False
        view = conn.view
        value: list[Tool] | CallResult | None = None
        if isinstance(output, OperationFailed):
            self._outbox.append(Finished(conn_id=view.conn_id, error=output.error))
            return
        if isinstance(output, Closed):
            self._drop(conn, now)
        else:
            if isinstance(output, ToolsListed):
                view.skipped_tools = list(output.skipped)
                view.skipped_count = output.skipped_count
                value = list(output.tools)
            elif isinstance(output, ToolCalled):
                value = output.result
            version = conn.machine.protocol_version
            assert version is not None  # an operation succeeded: the era is known
            url = conn.machine.settings.endpoint.url
            self.pool.remember_era(url, version)
            if self.fleet is not None and (op := self.fleet.era_write(url, version)):
                self._outbox.append(op)
        self._outbox.append(Finished(conn_id=view.conn_id, value=value))

    def _drop(self, conn: _Conn, now: float) -> None:
        """The Conn is over: forget it, cancelling whatever it still has in flight."""
        conn.view.closed = True
        del self._conns[conn.view.conn_id]
        conn.heap_at = conn.heap_seq = None
        parked = self._parked.pop(conn.view.conn_id, None)
        if parked is not None:
            assert self.fleet is not None
            self.fleet.stop_waiting(parked[1], conn.view.conn_id)
        listeners = self._listeners.get(conn.origin)
        if listeners is not None:
            listeners.pop(conn, None)
            if not listeners:
                del self._listeners[conn.origin]
        for exchange_id in list(conn.exchanges):
            self._cancel(exchange_id, now)

    # ------------------------------------------------------------ exchanges and sockets

    def _start(self, conn: _Conn, start: StartExchange, now: float) -> None:
        conn.exchanges.add(start.exchange_id)
        if self.closed:
            self._fail(conn, start.exchange_id, _client_closed(), now)
            return
        origin = start.origin or conn.origin
        if start.needs_room and not self._room(origin):
            failure = ConnectionFailed("no socket to spare for the stream", cause="refused")
            self._fail(conn, start.exchange_id, failure, now)
            return
        self._serve(conn, start, self.pool.checkout(origin, now=now), now)

    def _room(self, origin: Origin) -> bool:
        """A stream re-opened to ``origin`` would still leave a socket for an operation:
        fewer than the per-origin cap busy after it, and an idle socket for it to take
        or room under the Client's cap."""
        pool = self.pool
        idle = pool.idle_count(origin)
        busy = pool.origin_socket_count(origin) - idle
        return busy + 1 < pool.max_sockets_per_origin and (
            idle > 0 or pool.socket_count < self.limits.pool_max_sockets
        )

    def _preempt(self, conn: _Conn, origin: Origin, now: float) -> None:
        """``conn`` waits for a socket to ``origin`` (its MCP server's, or an OAuth
        server's): a standalone stream to that origin (its own first) gives its socket
        up (see the module docstring)."""
        listeners = self._listeners.get(origin)
        while listeners:
            owner = conn if conn in listeners else next(iter(listeners))
            del listeners[owner]
            exchange_id, owner.listen_xid = owner.listen_xid, None
            if exchange_id is not None and exchange_id in self._routes:
                owner.machine.yield_listen(exchange_id, now=now)
                self._drive(owner, now)
                return

    def _serve(
        self, conn: _Conn, start: StartExchange, checkout: Grant | MustWait, now: float
    ) -> None:
        match checkout:
            case UseConnection(conn_id=pool_id):
                self._begin(conn, start, self._by_pool[pool_id], now)
            case DialNeeded():
                self._dial(conn, start, checkout, now)
            case MustWait(ticket=ticket):
                self._waits[ticket] = (conn, start)
                self._pending[start.exchange_id] = ticket
                self._preempt(conn, start.origin or conn.origin, now)
            case _:  # pragma: no cover - exhaustive: mypy proves it unreachable
                assert_never(checkout)

    def _begin(self, conn: _Conn, start: StartExchange, sock: _Socket, now: float) -> None:
        sock.wire.start(start.exchange_id, start.request, now=now)
        if self.observe:
            from .wire.h2 import H2Connection  # not at the top: only telemetry loads h2 for h1

            conn.http = "2" if isinstance(sock.wire, H2Connection) else "1.1"
        if start.preemptible:
            conn.listen_xid = start.exchange_id
            self._listeners.setdefault(conn.origin, {})[conn] = None
        self.pool.started(sock.pool_id, now=now)
        self._routes[start.exchange_id] = (conn, sock)
        sock.exchanges.add(start.exchange_id)
        self._flush(sock)
        self._grants(now)

    def _cancel(self, exchange_id: int, now: float) -> None:
        route = self._routes.pop(exchange_id, None)
        if route is not None:
            conn, sock = route
            conn.exchanges.discard(exchange_id)
            sock.exchanges.discard(exchange_id)
            sock.wire.cancel(exchange_id, now=now)
            self._flush(sock)
            self._close_pool_ids(self.pool.release(sock.pool_id, now=now), now)
            self._grants(now)
            return
        pending = self._pending.get(exchange_id)
        match pending:
            case None:
                return
            case Dial():
                pending.conn.exchanges.discard(exchange_id)
                self._give_up(pending, now)
                self.pool.dial_failed(pending.grant.conn_id, now=now)
            case int():
                pending_conn = self._waits.pop(pending)[0]
                del self._pending[exchange_id]
                pending_conn.exchanges.discard(exchange_id)
                self._close_pool_ids(self.pool.withdraw(pending, now=now), now)
            case _:  # pragma: no cover - exhaustive: mypy proves it unreachable
                assert_never(pending)
        self._grants(now)

    def _fail(self, conn: _Conn, exchange_id: int, error: ConnectionFailed, now: float) -> None:
        conn.exchanges.discard(exchange_id)
        conn.front.receive(ExchangeFailed(exchange_id=exchange_id, error=error), now=now)
        self._drive(conn, now)

    def _grants(self, now: float) -> None:
        """Hand what the pool granted to the exchanges waiting for it."""
        pool = self.pool
        while pool.has_grants and not self.closed:
            for ticket, _ in pool.take_grants():
                entry = self._waits.pop(ticket, None)
                if entry is None:  # pragma: no cover - re-granted and served by a nested pass
                    continue
                grant = pool.claim(ticket, now=now)
                if grant is None:  # pragma: no cover - claimed at once: nothing broke it since
                    # (the socket broke before the claim: the ticket is queued again)
                    self._waits[ticket] = entry
                    continue
                conn, start = entry
                del self._pending[start.exchange_id]
                self._serve(conn, start, grant, now)

    def _dispatch(self, sock: _Socket, now: float, *, ended: bool) -> None:
        """Every event the wire has goes to its owner; then flush, or close the socket."""
        wire = sock.wire
        routes = self._routes
        unarmed: _Conn | None = None
        doomed: list[int] = []  # closed once every queued event is handed out: a broken
        # wire's other exchanges get their own errors, not "closed mid-response"
        while (event := wire.next_event()) is not None:
            route = routes.get(event.exchange_id)
            if route is None:  # pragma: no cover - the wires drop a cancelled exchange's events
                continue
            conn = route[0]
            if unarmed is not None and unarmed is not conn:
                self._rearm(unarmed)
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
                self._act(conn, now)
            unarmed = conn  # re-armed once, when the events move on to another Conn
        if unarmed is not None:
            self._rearm(unarmed)
        if doomed:
            self._close_pool_ids(doomed, now)
        if self._sockets.get(sock.socket_id) is sock:
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
            self._close_socket(self._by_pool[pool_id], now)

    def _close_socket(
        self, sock: _Socket, now: float, failure: ConnectionFailed | None = None
    ) -> None:
        """Close the socket: its live exchanges fail (``failure``, else reset), their
        leases end."""
        del self._sockets[sock.socket_id], self._by_pool[sock.pool_id]
        self._outbox.append(CloseSocket(socket_id=sock.socket_id))
        self.pool.discard(sock.pool_id, now=now)
        exchanges = list(sock.exchanges)
        sock.exchanges.clear()
        for exchange_id in exchanges:
            conn = self._routes.pop(exchange_id)[0]
            self.pool.release(sock.pool_id, now=now)
            self._fail(conn, exchange_id, failure or dialing.reset_error(), now)
        self._grants(now)

    # ------------------------------------------------------------ dials

    def _dial(self, conn: _Conn, start: StartExchange, grant: DialNeeded, now: float) -> None:
        for pool_id in grant.close_first:
            self._close_pool_ids([pool_id], now)
        dial = self._dialer.open(conn, start, grant)
        self._pending[start.exchange_id] = dial
        self._arm(dial, dial.deadline)
        self._walked(self._dialer.walk(dial), now)

    def _walked(self, dial: Dial[_Conn] | None, now: float) -> None:
        """The dialer's step ended ``dial`` failed (None: nothing ended)."""
        if dial is not None:
            assert dial.failure is not None  # the dialer hands back a failed dial only
            self._dial_failed(dial, dial.failure, now)

    def _end_dial(self, dial: Dial[_Conn]) -> None:
        del self._dialer.dials[dial.grant.conn_id], self._pending[dial.start.exchange_id]
        dial.heap_at = dial.heap_seq = None
        # (a stale heap entry may keep the dial: not the failure the caller gets raised,
        # whose traceback's frames would make a reference cycle through this driver)
        dial.failure = None

    def _give_up(self, dial: Dial[_Conn], now: float) -> None:
        """Abandon the dial's resolve or connect in progress, and the dial."""
        self._dialer.give_up(dial)
        self._end_dial(dial)

    def _dial_failed(self, dial: Dial[_Conn], failure: ConnectionFailed, now: float) -> None:
        self._end_dial(dial)
        self._settle(dial, failure, now)

    def _settle(self, dial: Dial[_Conn], failure: ConnectionFailed, now: float) -> None:
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

    # ------------------------------------------------------------ deadlines

    def _arm(self, timed: _Timed, deadline: float | None) -> None:
        """``timed``'s one live heap entry is for ``deadline`` (none for None)."""
        self._timers.arm(timed, deadline, live=len(self._conns) + len(self._dialer.dials))

    @property
    def _heap(self) -> list[tuple[float, int, _Timed]]:
        return self._timers.heap  # (what the tests measure)


def _immutable(config: Config) -> bool:
    """Nothing ``conn_settings`` reads of ``config`` can change after it was checked: a
    plain ``Config`` (frozen) without a mapping, a list or an OAuth object in it (the
    caller could mutate those in place), so its settings may be reused as they are."""
    return (
        type(config) is Config
        and config.headers is None
        and config.meta is None
        and config.tool_schemas is None
        and config.output_schemas is None
        and config.oauth is None
        and (config.protocol_versions is None or type(config.protocol_versions) is tuple)
    )


def _authorizer(driver: ClientDriver, machine: McpMachine, config: Config) -> OAuthMachine:
    """The authorizer in front of ``machine`` for a Conn with ``Config.oauth`` (imported
    only then)."""
    from .oauth.machine import OAuthMachine

    if driver.random_bytes is None:
        raise CallerError("Config.oauth needs randomness: ClientDriver(random_bytes=...)")
    assert config.oauth is not None
    return OAuthMachine(
        machine,
        oauth=config.oauth,
        random_bytes=driver.random_bytes,
        wall_clock=driver.wall_clock,
        exchange_ids=driver._exchange_ids,
    )
