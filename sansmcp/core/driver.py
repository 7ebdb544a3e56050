"""The pure client driver: every Conn's machine, the caller's side, as I/O commands.

Theory of operation
-------------------
One :class:`ClientDriver` per ``Client``.  It owns each Conn's
:class:`~sansmcp.core.mcp.McpMachine` (its record: :mod:`sansmcp.core.conn`), and
through its :class:`~sansmcp.core.sockets.Sockets` the connection
:class:`~sansmcp.core.net.pool.Pool`, the dials and the route of every exchange in
flight.  It never touches a socket, a clock or a task: time comes in (``now=``),
deadlines go out (:meth:`ClientDriver.next_deadline`), and what the adapter must do
waits in an outbox of :data:`Command`\\ s (:meth:`ClientDriver.next_command`), h2-style:

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

**Machine outputs are acted on the moment they appear.**  ``StartExchange`` and
``CancelExchange`` go to the :class:`~sansmcp.core.sockets.Sockets` (pool checkouts,
the dial walk of :mod:`sansmcp.core.dialer`, the wires; a standalone stream yields its
socket there), which hands each wire event straight to the machine that owns the
exchange.  An input request or a terminal output goes to the caller while an operation
runs; one that appears between operations (a server request on the standalone stream)
is held for the next operation, and dropped then if the machine no longer wants it.

**Deadlines** are kept in one heap with lazy deletion (:mod:`sansmcp.core.timers`):
each Conn and each dial has at most one live entry.  The pool's idle expiry is one
more deadline, recomputed only when the pool changed.  ``next_deadline()`` is O(1)
amortised.

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
from .conn import ConnRecord
from .dialer import Dial, DialPhase
from .errors import CallerError, UsageError
from .fleet import Fleet
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
    TaskReported,
    ToolCalled,
    ToolsListed,
)
from .mcp.compiled import CompiledSchemas
from .mcp.notifications import OBSERVATIONS, RequestEnded
from .net import egress
from .net.pool import Pool
from .oauth.store import AuthorizationNeeded, StoreWanted
from .results import CallResult
from .sockets import Sockets, client_closed
from .store import StoreAnswer
from .timers import Timers
from .tools import Tool
from .view import ConnView

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


_Timed: TypeAlias = "ConnRecord | Dial[ConnRecord]"  # what the timer heap holds


# ---------------------------------------------------------------- the driver


class ClientDriver:
    """Every Conn of one ``Client``, sans I/O (see the module docstring).

    ``limits`` bounds everything; ``allow_loopback`` / ``allow_private`` widen the
    address guard; ``http2_prior_knowledge`` speaks h2c to ``http://`` origins;
    ``answers_input`` says the embedder can answer input requests (only then are
    ``capabilities`` declared); ``client_info`` replaces sansmcp's ``clientInfo``;
    ``observe`` reports every request's start and end (telemetry).
    ``proxy`` (an ``http://`` URL, with optional ``user:password``) sends every request
    through that egress proxy's ``CONNECT`` tunnels, with the guard mode ``guard``
    (``"local"``, the default, or ``"proxy"``: :mod:`sansmcp.core.net.egress`); a
    ``Config`` may override both, and narrow or widen the guard (``Config.egress``).
    ``cache_salt`` (random bytes the adapter draws, up to 64) salts the caller digests
    that key ``private`` entries of the Client-wide listing cache (:attr:`cache`).
    ``shared_store``: the adapter performs :class:`StoreOp` on a store the fleet shares
    (:mod:`sansmcp.core.fleet`: :attr:`fleet`; era hints, and listings given
    ``random_bytes`` and ``wall_clock``; ``fleet_secret`` keys private ones); without it
    none is emitted.
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
        proxy: str | None = None,
        guard: str | None = None,
        shared_store: bool = False,
        fleet_secret: bytes | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.route = egress.default_route(
            proxy, guard, allow_private=allow_private, allow_loopback=allow_loopback
        )
        self._outbox: deque[Command] = deque()
        self.fleet = (
            Fleet.for_driver(self.limits, self._outbox, fleet_secret, random_bytes, wall_clock)
            if shared_store
            else None
        )
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
        self._settings = config_module.SettingsMemo(  # a Config's settings, checked once
            client_info=self.client_info, capabilities=self.capabilities, observe=observe
        )
        self.closed = False
        self._exchange_ids = iter(range(1, 1 << 62))  # unique across Conns sharing sockets
        self._conn_ids = itertools.count(1)
        self._conns: dict[int, ConnRecord] = {}
        self._timers: Timers[_Timed] = Timers()
        # the exchanges in flight and their sockets, pool checkouts and dials
        self._sockets = Sockets(
            self,
            self._outbox,
            pool=self.pool,
            limits=self.limits,
            observe=observe,
            allow_private=allow_private,
            allow_loopback=allow_loopback,
        )

    # ------------------------------------------------------------ observation

    def next_command(self) -> Command | None:
        """The next thing to do, or None when the outbox is empty."""
        return self._outbox.popleft() if self._outbox else None

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` next has work (None: nothing timed)."""
        first = self._timers.first()
        pool_at = self._sockets.pool_deadline()
        if pool_at is None or (first is not None and first <= pool_at):
            return first
        return pool_at

    # ------------------------------------------------------------ the caller's inputs

    def open(self, config: Config, *, now: float) -> ConnView:
        """A new Conn for ``config`` (``CallerError`` when unusable, ``UsageError`` after
        :meth:`close`); start it with :meth:`connect`."""
        if self.closed:
            raise UsageError(CLIENT_CLOSED)
        settings = self._settings.settings(config, self.pool.era_hint)
        route = egress.route(config.proxy, config.guard, config.egress, default=self.route)
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
        conn = self._conns[view.conn_id] = ConnRecord(view)
        if route is not None:
            conn.route = route
            conn.origin = egress.routed(conn.origin, route)
        if self.fleet is not None and self.fleet.listings is not None:
            conn.cache, cache.journal = cache, []  # (what it lists is shared)
        return view

    # ``trace`` (trace context: traceparent, tracestate, baggage) goes into the operation's
    # requests' ``_meta``; ``progress`` asks for the call's progress notifications.

    def connect(self, conn_id: int, *, now: float, trace: Mapping[str, str] | None = None) -> None:
        def start(conn: ConnRecord) -> None:
            conn.machine.propagate(trace)
            conn.front.connect(now=now)

        self._park_or_operate(conn_id, start, now, Fleet.park_connect)

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

        def start(conn: ConnRecord) -> None:
            conn.machine.propagate(trace)
            conn.front.list_tools(now=now, fresh=fresh, timeout=timeout)

        self._park_or_operate(conn_id, start, now, None if fresh else Fleet.park_listing)

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
        def start(conn: ConnRecord) -> None:
            conn.machine.propagate(trace)
            conn.front.call_tool(name, arguments, now=now, progress=progress, timeout=timeout)

        self._operate(conn_id, start, now)

    def task(
        self,
        conn_id: int,
        action: str,
        subject: str,
        *,
        now: float,
        trace: Mapping[str, str] | None = None,
        **more: Any,
    ) -> None:
        """A task handle's operation (``McpMachine.task``); ends with :class:`Finished`
        whose value is a ``TaskReported`` or a ``CallResult``."""

        def start(conn: ConnRecord) -> None:
            conn.machine.propagate(trace)
            conn.front.task(action, subject, now=now, **more)

        self._operate(conn_id, start, now)

    def close_conn(self, conn_id: int, *, now: float) -> None:
        """Close the Conn (a legacy session gets its DELETE); ends with :class:`Finished`,
        at once when it is closed already."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.view.closed:
            self._outbox.append(Finished(conn_id=conn_id))
            return
        if self._busy(conn):
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

        def start(conn: ConnRecord) -> None:
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
        without a DELETE and its exchanges are cancelled; nothing more comes for it.  A
        task its call follows is sent ``tasks/cancel`` first: the Conn lingers, closed
        and unattended, until that is answered or ``Limits.cancel_grace`` passes."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        if not conn.machine.abandon(now=now):
            self._drop(conn, now)
            return
        conn.view.closed, conn.attended = True, False
        conn.held.clear()
        self._drive(conn, now)

    def close(self, *, now: float) -> None:
        """Client close: every socket closes, every dial and wait fails, later dials fail."""
        self.closed = True
        if self.fleet is not None:
            for conn_id in list(self.fleet.parked):  # a connect waiting for the store
                self._drop(self._conns[conn_id], now)
                self._outbox.append(Finished(conn_id=conn_id, error=client_closed()))
        self._sockets.close(now)

    # ------------------------------------------------------------ the adapter's reports

    def store_answered(self, op_id: int, answer: StoreAnswer, *, now: float) -> None:
        """The shared store's answer to :class:`StoreOp` ``op_id`` (untrusted)."""
        assert self.fleet is not None, "a StoreOp answered without a shared store"
        self.fleet.store_answered(self, op_id, answer, now)

    def resolved(self, dial_id: int, answers: object, *, now: float) -> None:
        """The resolver's raw answer (any value: vetted here)."""
        self._sockets.resolved(dial_id, answers, now)

    def resolve_failed(
        self, dial_id: int, exc: BaseException, *, from_hook: bool, now: float
    ) -> None:
        """The resolver hook raised ``exc`` (``from_hook``), or the system resolver did."""
        self._sockets.resolve_failed(dial_id, exc, from_hook=from_hook, now=now)

    def connected(self, socket_id: int, *, alpn: str | None, now: float) -> None:
        """The socket is up (TLS done); ``alpn`` is what the server selected."""
        self._sockets.connected(socket_id, alpn=alpn, now=now)

    def connect_failed(
        self, socket_id: int, phase: DialPhase, exc: BaseException, *, now: float
    ) -> None:
        """The connect failed in ``phase``: creating the socket or TCP (``"tcp"``), or the
        TLS handshake after TCP was up (``"tls"``, whatever the exception's class)."""
        self._sockets.connect_failed(socket_id, phase, exc, now)

    def received(self, socket_id: int, data: bytes, *, now: float) -> None:
        self._sockets.received(socket_id, data, now)

    def eof(self, socket_id: int, *, now: float) -> None:
        self._sockets.eof(socket_id, now)

    def tunnel_received(self, socket_id: int, data: bytes, *, now: float) -> bool | None:
        """An egress proxy's answer to the ``CONNECT`` of ``socket_id`` (``b""``: its EOF):
        None, read on; True, the tunnel is up (TLS, if any, next); False, close the socket
        and report nothing more (see :class:`Connect`)."""
        return self._sockets.tunnel_received(socket_id, data, now)

    def reader_failed(self, socket_id: int, exc: Exception, *, now: float) -> None:
        """The socket's reader caught ``exc`` (from anything on its way): the socket's
        exchanges fail classified (framing) and it closes."""
        self._sockets.reader_failed(socket_id, exc, now)

    def handle_timer(self, *, now: float) -> None:
        """Act on every deadline at or before ``now``."""
        for timed in self._timers.due(now):
            if isinstance(timed, Dial):
                self._sockets.dial_timed_out(timed, now)
            elif self.fleet is not None and timed.view.conn_id in self.fleet.parked:
                self.fleet.timed_out(self, timed.view.conn_id, now)  # the store is late
            else:
                timed.front.handle_timer(now=now)
                self._drive(timed, now)
        self._sockets.expire(now)

    # ------------------------------------------------------------ operations

    def _park_or_operate(
        self,
        conn_id: int,
        start: Callable[[ConnRecord], None],
        now: float,
        park: Callable[[Fleet, ConnRecord, Callable[[ConnRecord], None], float], float | None]
        | None,
    ) -> None:
        """Start the operation, unless ``park`` parks it while the store is asked."""
        conn = self._conns.get(conn_id)
        fleet = self.fleet
        if fleet and park and conn and not (self._busy(conn) or conn.view.closed):
            deadline = park(fleet, conn, start, now)  # (busy or closed: _operate raises)
            if deadline is not None:
                conn.attended = True
                self._arm(conn, deadline)
                return
        self._operate(conn_id, start, now)

    def _operate(
        self,
        conn_id: int,
        start: Callable[[ConnRecord], None],
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

    def _busy(self, conn: ConnRecord) -> bool:
        return conn.front.busy or (
            self.fleet is not None and conn.view.conn_id in self.fleet.parked
        )

    def _drive(self, conn: ConnRecord, now: float) -> None:
        """Act on the machine's outputs, then re-arm its deadline."""
        self._act(conn, now)
        self._rearm(conn)

    def _rearm(self, conn: ConnRecord) -> None:
        if self._conns.get(conn.view.conn_id) is conn:
            self._arm(conn, conn.front.next_deadline())

    def _act(self, conn: ConnRecord, now: float) -> None:
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
                    self._sockets.start(conn, output, now)
                case (
                    Connected()
                    | ToolsListed()
                    | ToolCalled()
                    | TaskReported()
                    | OperationFailed()
                    | Closed()
                ):
                    self._finish(conn, output, now)
                case CancelExchange(exchange_id=exchange_id):
                    self._sockets.cancel(exchange_id, now)
                case StoreWanted():  # (only with a shared store)
                    assert self.fleet is not None
                    self.fleet.ask(conn.view.conn_id, output)
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

    def _observed(self, conn: ConnRecord, item: Observation) -> None:
        """An observation for the embedder: now, or at the next operation (bounded by
        ``Limits.max_notifications``: only notifications come between operations)."""
        if isinstance(item, RequestEnded):
            item = dataclasses.replace(item, http_version=conn.http)
        deliver = Deliver(conn_id=conn.view.conn_id, item=item, deadline=math.inf)
        if conn.attended:
            self._outbox.append(deliver)
        else:
            conn.held.append(deliver)

    def _finish(self, conn: ConnRecord, output: Output, now: float) -> None:
        attended, conn.attended = conn.attended, False
        view = conn.view
        value: list[Tool] | CallResult | TaskReported | None = None
        if isinstance(output, OperationFailed):
            if self.fleet is not None:
                self.fleet.failed(view.conn_id, conn)
            self._outbox.append(Finished(conn_id=view.conn_id, error=output.error))
            return
        if isinstance(output, Closed):
            self._drop(conn, now)
            if not attended:  # an abandoned Conn's tasks/cancel ended: nobody waits
                return
        else:
            if isinstance(output, ToolsListed):
                view.skipped_tools = list(output.skipped)
                view.skipped_count = output.skipped_count
                value = list(output.tools)
            elif isinstance(output, ToolCalled):
                value = output.result
            elif isinstance(output, TaskReported):
                value = output
            version = conn.machine.protocol_version
            assert version is not None  # an operation succeeded: the era is known
            self.pool.remember_era(conn.machine.settings.endpoint.url, version)
            if self.fleet is not None:
                self.fleet.succeeded(conn, version, now)
        self._outbox.append(Finished(conn_id=view.conn_id, value=value))

    def _drop(self, conn: ConnRecord, now: float) -> None:
        """The Conn is over: forget it, cancelling whatever it still has in flight."""
        conn.view.closed = True
        del self._conns[conn.view.conn_id]
        conn.heap_at = conn.heap_seq = None
        if self.fleet is not None:
            self.fleet.unpark(conn.view.conn_id)
            self.fleet.failed(conn.view.conn_id, conn)
        self._sockets.drop(conn, now)

    # ------------------------------------------------------------ deadlines

    def _arm(self, timed: _Timed, deadline: float | None) -> None:
        """``timed``'s one live heap entry is for ``deadline`` (none for None)."""
        self._timers.arm(timed, deadline, live=len(self._conns) + len(self._sockets.dialer.dials))

    @property
    def _heap(self) -> list[tuple[float, int, _Timed]]:
        return self._timers.heap  # (what the tests measure)


def _authorizer(driver: ClientDriver, machine: McpMachine, config: Config) -> OAuthMachine:
    """The authorizer in front of ``machine`` for a Conn with ``Config.oauth`` (imported
    only then)."""
    from .oauth.machine import OAuthMachine

    if driver.random_bytes is None:
        raise CallerError("Config.oauth needs randomness: ClientDriver(random_bytes=...)")
    assert config.oauth is not None
    fleet = driver.fleet  # with one, tokens, registrations and pending are the fleet's
    shared = (
        None if fleet is None else fleet.shared_auth(config.oauth, machine, driver.random_bytes)
    )
    return OAuthMachine(
        machine,
        oauth=config.oauth,
        random_bytes=driver.random_bytes,
        wall_clock=driver.wall_clock,
        exchange_ids=driver._exchange_ids,
        shared=shared,
    )
