"""The connection pool: which socket carries which exchange, in what order, idle expiry, era hints.

(Over ~600 lines on purpose: one state machine -- sockets by origin, their three states,
leases, the FIFO ticket queue and the era cache -- whose methods keep the same invariants
together; the first 90 lines are this docstring.)

Theory of operation
-------------------
One :class:`Pool` per ``Client``, owned by its
:class:`~sansmcp.core.driver.ClientDriver` (called "the driver" below), which has
the adapter dial, move bytes and hold the sockets; the pool *decides*.  It never
touches a socket: it hands out connection ids, and every method returns the ids
of the sockets the driver must close now.  It tracks each connection in one of three states:

``DIALING``
    :meth:`Pool.checkout` answered :class:`DialNeeded`; the dialer holds its
    one lease.  Ends with :meth:`Pool.dial_succeeded` (-> ``OPEN``, the lease
    kept) or :meth:`Pool.dial_failed` (forgotten).
``OPEN``
    A wire machine (:class:`Wire`) is attached.  ``leases`` counts the
    exchanges handed out on it and not yet :meth:`Pool.release`\\ d.  An
    HTTP/1.1 connection carries at most one lease; an HTTP/2 one as many as its
    ``can_start()`` admits.  With no lease it is *idle* since ``idle_since``.
``CLOSED``
    The driver was told to close the socket (or closed it itself) while
    exchanges still held leases; it only waits for their releases, counts as no
    socket and is never handed out.

**Checkout.**  For an origin, in order: an open HTTP/2 connection that
``can_start()``; else the most recently used idle HTTP/1.1 connection that
``can_start()``; else, if a dial that may turn out HTTP/2 (https, ALPN
pending; or http with ``http2_prior_knowledge``) is in flight, wait -- so 50
concurrent work items end up on one HTTP/2 connection; else a new dial
(:class:`DialNeeded`) if the origin holds fewer than
``Limits.pool_max_sockets_per_origin`` sockets and the pool fewer than
``Limits.pool_max_sockets`` (else the least recently used idle socket -- of the
origin at its own cap, of any origin at the pool's -- is evicted to make room;
with nothing idle to evict, wait).  An HTTP/2 connection that cannot start a
stream (streams exhausted, or GOAWAY received) does not make us wait: we dial
another, so a draining connection never holds new work hostage.  The per-origin
cap is what keeps one stalling server from holding every socket of the pool
while work for healthy origins waits, whatever ``Limits`` the caller sets: it is
clamped to ``pool_max_sockets - 1`` (to 1 when the pool has one socket), so an
origin that holds no socket finds one free (or idle, to evict) unless two other
origins or more hold every socket between them.  (Chosen over a reserve
kept for origins holding none: the same guarantee against one stalling origin,
one number the caller can read back (:attr:`Pool.max_sockets_per_origin`), and a
single origin, alone in the pool, may still use every socket but one, where a
reserve would also stop every origin already holding one from taking the last.)

**Waiting: one queue, first come first served.**  A checkout that cannot be
served gets :class:`MustWait` with a *ticket* and joins the queue (also when an
earlier ticket of the same origin is still queued, so no one jumps the line).
Whenever a slot frees (a dial ends, a lease ends, an exchange starts on HTTP/2,
a socket leaves), the pool grants, while it can, the oldest ticket whose
origin can be served: a ticket for a healthy origin under its cap never waits
behind tickets of an origin at its cap, and among tickets that can be served
the oldest wins.  Tickets of one origin get the same answer, so a pass tries
only each origin's oldest: O(origins waiting) per grant.  The driver learns the
granted tickets from :meth:`Pool.take_grants` (after every pool call), wakes
only those holders, and each :meth:`Pool.claim`\\ s its grant -- a
``UseConnection`` or ``DialNeeded`` it holds as if ``checkout`` had returned
it.  A holder that stops waiting (its deadline, a cancellation)
:meth:`Pool.withdraw`\\ s, handing back a grant it has not claimed.  A grant
on a socket that closes before it is claimed goes back to the queue, in its
place.

**The driver's contract.**  After ``UseConnection`` (from ``checkout`` or
``claim``) or after ``dial_succeeded``, start the exchange on :meth:`Pool.wire`
*before awaiting anything* and report it with :meth:`Pool.started`: until then
the lease is *pending*, and an HTTP/2 connection with a pending lease is handed
to no one else (its ``can_start()`` does not count that stream yet).  Every
started lease ends in exactly one :meth:`Pool.release` (after the exchange's
terminal event, or after ``cancel()``); a dial ends in ``dial_succeeded`` or
``dial_failed``.  Close every id a method returns (the pool has already called
``wire.close(now=)`` on open ones, so ``data_to_send()`` may hold a GOAWAY worth
flushing first).  Call :meth:`Pool.discard` when a socket died under you.
Sleep until :meth:`Pool.next_deadline` and then call :meth:`Pool.expire`.

**Retiring.**  A connection that is broken (``is_broken``) or, with no lease,
cannot start (HTTP/1.1 without keep-alive, HTTP/2 after GOAWAY) is never
handed out and is closed as soon as no lease holds it: at ``release``, or at
the next ``expire`` (``next_deadline`` reports it as already due, because a
wire can break while idle behind the pool's back).  Idle sockets are closed
after ``Limits.pool_idle_timeout`` (at exactly the bound), and ``release`` keeps
at most ``Limits.pool_max_idle_per_origin`` idle sockets per origin, closing
the least recently used.

**Costs.**  Socket counts are kept, not counted.  Each origin keeps its idle
sockets in the order they became idle and its HTTP/2 connections apart, so a
checkout looks at the origin's HTTP/2 connections (usually one) and then takes
the most recently idle HTTP/1.1 socket (skipping only unusable ones, which the
next ``expire`` closes); a release appends to that order and sorts only when
the origin holds more than ``pool_max_idle_per_origin`` idle sockets: O(1) per
origin, whatever the number of sockets or exchanges in flight.  Idle expiry,
``next_deadline`` and eviction at the pool's own cap look at idle sockets only.
Origins with no socket and no ticket are forgotten.

**Era hints** (soft state): the protocol version last negotiated per endpoint
URL, in a bounded LRU map (``era_capacity`` entries, default 1,024).

``UseConnection``, made per checkout, is read-only by contract, not ``frozen`` (see
:mod:`sansmcp.core.http`).

Errors: misuse (an unknown id or ticket, a release without a started lease,
``dial_succeeded`` twice) raises :class:`~sansmcp.core.errors.LocalProtocolError`
and leaves the pool unchanged.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from ..errors import LocalProtocolError
from ..limits import Limits
from ..url import Origin
from ..wire import Wire
from ..wire.h1 import H1Connection

__all__ = [
    "ALPN_OFFER",
    "ERA_CAPACITY",
    "Checkout",
    "DialNeeded",
    "Grant",
    "MustWait",
    "Pool",
    "UseConnection",
    "WireFactory",
    "standard_wire",
]

ERA_CAPACITY = 1024
"""Default bound on remembered era hints (endpoint URLs)."""

ALPN_OFFER = ("h2", "http/1.1")
"""What :class:`DialNeeded` asks the dialer to offer in a TLS handshake."""


class WireFactory(Protocol):
    """Builds the wire machine for a freshly dialled socket."""

    def __call__(self, *, http2: bool, limits: Limits, now: float) -> Wire: ...


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class UseConnection:
    """Start the exchange on ``pool.wire(conn_id)`` now; you hold a lease on it."""

    conn_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DialNeeded:
    """Close ``close_first``, then dial ``origin``; report with ``dial_succeeded`` / ``dial_failed``.

    You hold the new connection's lease.  ``alpn`` is what to offer in the TLS
    handshake (empty for http); ``deadline`` is ``now + Limits.dial_timeout``.
    """

    conn_id: int
    origin: Origin
    alpn: tuple[str, ...]
    deadline: float
    close_first: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MustWait:
    """Nothing usable now: you are in the queue as ``ticket``.

    Once :meth:`Pool.take_grants` lists the ticket, :meth:`Pool.claim` it; give it
    up with :meth:`Pool.withdraw`.
    """

    ticket: int


Grant = UseConnection | DialNeeded
Checkout = UseConnection | DialNeeded | MustWait


class _State(enum.Enum):
    DIALING = enum.auto()
    OPEN = enum.auto()
    CLOSED = enum.auto()


# Members as module constants: on Python 3.11 each ``_State.X`` lookup runs the enum
# type's attribute hook, and every checkout and release tests a state.
_DIALING: Final = _State.DIALING
_OPEN: Final = _State.OPEN
_CLOSED: Final = _State.CLOSED


class _Conn:
    __slots__ = (
        "conn_id",
        "granted",
        "home",
        "http2",
        "idle_since",
        "last_used",
        "leases",
        "may_be_h2",
        "origin",
        "pending",
        "state",
        "wire",
    )

    def __init__(
        self, conn_id: int, origin: Origin, home: _Origin, *, may_be_h2: bool, now: float
    ) -> None:
        self.conn_id = conn_id
        self.origin = origin
        # its origin's state, while it is one of its sockets (no Origin hash per release)
        self.home = home
        self.state = _DIALING
        self.wire: Wire | None = None
        self.http2 = False
        self.may_be_h2 = may_be_h2
        self.leases = 1
        # leases whose exchange has not started on the wire yet (see Pool.started)
        self.pending = 1
        # tickets granted a lease on this connection and not yet claimed
        self.granted: set[int] = set()
        self.last_used = now
        self.idle_since: float | None = None

    def idle(self) -> bool:
        return self.state is _OPEN and self.leases == 0

    def retirable(self) -> bool:
        """Idle and unusable: broken, or unable to start (no keep-alive, GOAWAY)."""
        assert self.wire is not None
        return self.idle() and (self.wire.is_broken or not self.wire.can_start())


class _Origin:
    """One origin's sockets (dialling or open, not closed) and its queue of waiting tickets."""

    __slots__ = ("conns", "h2", "h2_dials", "idle", "queue")

    def __init__(self) -> None:
        self.conns: dict[int, _Conn] = {}
        # the open, unleased ones, least recently idle first (a view of Pool._idle)
        self.idle: OrderedDict[int, _Conn] = OrderedDict()
        self.h2: dict[int, _Conn] = {}  # the open HTTP/2 ones
        self.h2_dials = 0  # dials in flight that may turn out HTTP/2
        self.queue: OrderedDict[int, None] = OrderedDict()  # tickets, oldest first


def standard_wire(*, http2: bool, limits: Limits, now: float) -> Wire:
    """The default :class:`WireFactory`: ``H2Connection`` or ``H1Connection``."""
    if http2:
        # imported on first use: h2 and hpack are ~25 % of `import sansmcp`, and most
        # servers speak HTTP/1.1
        from ..wire.h2 import H2Connection

        return H2Connection(limits=limits, now=now)
    return H1Connection(limits=limits, now=now)


class Pool:
    """Sockets per origin for one ``Client`` (see the module docstring)."""

    def __init__(
        self,
        *,
        limits: Limits,
        http2_prior_knowledge: bool = False,
        wire_factory: WireFactory = standard_wire,
        era_capacity: int = ERA_CAPACITY,
    ) -> None:
        self._limits = limits
        # one socket always left to another origin (see "Checkout" above)
        self._per_origin = min(
            limits.pool_max_sockets_per_origin, max(limits.pool_max_sockets - 1, 1)
        )
        self._prior_knowledge = http2_prior_knowledge
        self._factory = wire_factory
        self._conns: dict[int, _Conn] = {}
        self._origins: dict[Origin, _Origin] = {}
        self._sockets = 0  # dialling or open
        self._idle: OrderedDict[int, _Conn] = OrderedDict()  # least recently idle first
        self._next_id = 1
        self._next_ticket = 1
        self._tickets: dict[int, Origin] = {}  # queued tickets
        self._queued: dict[Origin, _Origin] = {}  # the origins with queued tickets
        self._granted: dict[int, Grant] = {}  # granted, not yet claimed
        self._announce: list[int] = []  # granted since the last take_grants()
        self._changed = 0
        self._eras: OrderedDict[str, str] = OrderedDict()
        self._era_capacity = era_capacity

    # -- observation ---------------------------------------------------------

    @property
    def changed(self) -> int:
        """Bumped by every call that changed what the pool holds or grants."""
        return self._changed

    @property
    def has_grants(self) -> bool:
        """Whether :meth:`take_grants` may have tickets to hand out (cheap: no list built)."""
        return bool(self._announce)

    @property
    def socket_count(self) -> int:
        """Sockets the pool accounts for: dialling or open (at most ``pool_max_sockets``)."""
        return self._sockets

    @property
    def max_sockets_per_origin(self) -> int:
        """The per-origin cap in force: ``pool_max_sockets_per_origin``, at most
        ``pool_max_sockets - 1`` (1 when the pool has one socket)."""
        return self._per_origin

    def origin_socket_count(self, origin: Origin) -> int:
        """Sockets to ``origin``: dialling or open (at most :attr:`max_sockets_per_origin`)."""
        state = self._origins.get(origin)
        return 0 if state is None else len(state.conns)

    def idle_count(self, origin: Origin) -> int:
        """Open sockets to ``origin`` with no exchange handed out."""
        state = self._origins.get(origin)
        return 0 if state is None else len(state.idle)

    def has_room_for_stream(self, origin: Origin) -> bool:
        """A long-lived stream to ``origin`` would leave a socket for an operation: fewer
        than the per-origin cap busy after it, and an idle socket or room to dial one."""
        idle = self.idle_count(origin)
        busy = self.origin_socket_count(origin) - idle
        return busy + 1 < self._per_origin and (
            idle > 0 or self._sockets < self._limits.pool_max_sockets
        )

    def waiting(self) -> list[tuple[int, Origin]]:
        """The queued tickets and their origins, oldest first."""
        return sorted(self._tickets.items())

    def wire(self, conn_id: int) -> Wire:
        """The wire machine of an open (or closed, still leased) connection."""
        conn = self._get(conn_id)
        if conn.wire is None:
            raise LocalProtocolError(f"connection {conn_id} is still dialling; it has no wire yet")
        return conn.wire

    # -- exchanges -----------------------------------------------------------

    def checkout(self, origin: Origin, *, now: float) -> Checkout:
        """Choose a connection for one exchange to ``origin`` (see the module docstring).

        After ``UseConnection`` / ``DialNeeded`` the caller holds a lease; after
        ``DialNeeded`` the evicted ids are already forgotten.  After ``MustWait``
        the caller's ticket is queued behind every earlier one.
        """
        state = self._origins.get(origin)
        if state is None or not state.queue:  # else an earlier ticket is first in line
            grant = self._serve_in(origin, state, now=now)
            if grant is not None:
                return grant
        ticket = self._next_ticket
        self._next_ticket += 1
        state = self._origin(origin)
        state.queue[ticket] = None
        self._queued[origin] = state
        self._tickets[ticket] = origin
        return MustWait(ticket=ticket)

    def take_grants(self) -> list[tuple[int, Grant]]:
        """The tickets granted since the last call, with their grants: wake their holders,
        who :meth:`claim` them."""
        announce, self._announce = self._announce, []
        return [
            (ticket, self._granted[ticket])
            for ticket in dict.fromkeys(announce)
            if ticket in self._granted
        ]

    def claim(self, ticket: int, *, now: float) -> Grant | None:
        """The grant for ``ticket`` (now the caller's, as if ``checkout`` had returned it),
        or None while it is still queued.

        A connection granted and then broken (or unable to start: GOAWAY, a lowered
        stream limit) behind the pool's back before the claim is not handed out: the
        ticket goes back to its place in the queue and is served again, if it can be.
        """
        grant = self._granted.pop(ticket, None)
        if grant is None:
            if ticket not in self._tickets:
                raise LocalProtocolError(f"unknown ticket {ticket}")
            return None
        if isinstance(grant, DialNeeded):
            return grant
        conn = self._conns[grant.conn_id]
        conn.granted.discard(ticket)
        assert conn.wire is not None
        if not conn.wire.is_broken and conn.wire.can_start():
            return grant
        conn.leases -= 1
        conn.pending -= 1
        if not conn.leases:  # idle and retirable: the next expire() closes it
            self._set_idle(conn, now=now)
        self._requeue(conn.origin, [ticket])
        self._changed += 1
        self._grant_waiters(now=now)
        return self.claim(ticket, now=now) if ticket in self._granted else None

    def withdraw(self, ticket: int, *, now: float) -> list[int]:
        """Give ``ticket`` up (its holder stopped waiting): leave the queue, or hand back
        what was granted and not yet claimed.  Returns the ids to close."""
        origin = self._tickets.pop(ticket, None)
        if origin is not None:
            state = self._origins[origin]
            del state.queue[ticket]
            if not state.queue:
                del self._queued[origin]
            self._tidy(origin)
            return []
        grant = self._granted.pop(ticket, None)
        if grant is None:
            raise LocalProtocolError(f"unknown ticket {ticket}")
        self._changed += 1
        if isinstance(grant, DialNeeded):
            self._drop_dial(self._conns[grant.conn_id])
            doomed = list(grant.close_first)
        else:
            conn = self._conns[grant.conn_id]
            conn.granted.discard(ticket)
            conn.pending -= 1
            doomed = self._end_lease(conn, now=now)
        self._grant_waiters(now=now)
        return doomed

    def started(self, conn_id: int, *, now: float) -> None:
        """The exchange of a lease on ``conn_id`` has started on its wire (after
        ``UseConnection``, a claimed grant, or ``dial_succeeded``).  Until then an HTTP/2
        connection's ``can_start()`` does not count that exchange, so no one else gets it."""
        conn = self._get(conn_id)
        if conn.state is _DIALING or conn.pending == 0:
            raise LocalProtocolError(f"connection {conn_id} has no exchange about to start")
        conn.pending -= 1
        self._changed += 1
        if conn.http2 and conn.pending == 0:
            self._grant_waiters(now=now)

    def dial_succeeded(self, conn_id: int, *, alpn: str | None, now: float) -> Wire:
        """The socket is up (TLS done); ``alpn`` is the protocol the server selected.

        Builds and returns the wire machine: HTTP/2 if ALPN chose ``h2``, or if no
        ALPN happened and the pool was built with ``http2_prior_knowledge``;
        HTTP/1.1 otherwise.  The dialer keeps its lease (call :meth:`started`).
        """
        conn = self._get(conn_id)
        if conn.state is not _DIALING:
            raise LocalProtocolError(f"connection {conn_id} is not dialling")
        http2 = alpn == "h2" or (alpn is None and self._prior_knowledge)
        wire = self._factory(http2=http2, limits=self._limits, now=now)
        conn.wire, conn.http2, conn.state, conn.last_used = wire, http2, _OPEN, now
        state = conn.home
        if conn.may_be_h2:
            state.h2_dials -= 1
        if http2:
            state.h2[conn_id] = conn
        self._changed += 1
        self._grant_waiters(now=now)
        return wire

    def dial_failed(self, conn_id: int, *, now: float) -> None:
        """The dial failed or was abandoned; the connection (and its lease) is forgotten."""
        conn = self._get(conn_id)
        if conn.state is not _DIALING:
            raise LocalProtocolError(f"connection {conn_id} is not dialling")
        self._drop_dial(conn)
        self._changed += 1
        self._grant_waiters(now=now)

    def release(self, conn_id: int, *, now: float) -> list[int]:
        """An exchange on ``conn_id`` is over (ended, failed or cancelled): end its lease.

        Returns the ids to close now: this connection if it is broken or cannot
        start again, and the least recently used idle sockets of its origin over
        ``Limits.pool_max_idle_per_origin``.
        """
        conn = self._get(conn_id)
        if conn.state is _DIALING:
            raise LocalProtocolError(
                f"connection {conn_id} is still dialling; end it with dial_failed()"
            )
        if conn.leases == conn.pending:
            raise LocalProtocolError(f"connection {conn_id} has no started exchange to release")
        self._changed += 1
        doomed = self._end_lease(conn, now=now)
        self._grant_waiters(now=now)
        return doomed

    def discard(self, conn_id: int, *, now: float) -> None:
        """The driver closed this socket itself (I/O error, EOF).

        Leases still held stay valid until released.  Discarding an id the pool
        no longer tracks is a no-op, so close paths may race.
        """
        conn = self._conns.get(conn_id)
        if conn is None or conn.state is _CLOSED:
            return
        if conn.state is _DIALING:
            raise LocalProtocolError(
                f"connection {conn_id} is still dialling; end it with dial_failed()"
            )
        self._forget(conn)
        self._changed += 1
        self._grant_waiters(now=now)

    # -- time ----------------------------------------------------------------

    def expire(self, *, now: float) -> list[int]:
        """Close idle sockets idle for ``Limits.pool_idle_timeout`` or longer, and retirable ones."""
        timeout = self._limits.pool_idle_timeout
        doomed = [
            conn
            for conn in self._idle.values()
            if conn.retirable() or _idle_since(conn) + timeout <= now
        ]
        closed = [self._retire(conn, now=now) for conn in doomed]
        if closed:
            self._changed += 1
            self._grant_waiters(now=now)
        return closed

    def next_deadline(self) -> float | None:
        """When :meth:`expire` next has work: the earliest idle expiry (already past for a retirable socket)."""
        deadlines = [
            _idle_since(conn)
            if conn.retirable()
            else _idle_since(conn) + self._limits.pool_idle_timeout
            for conn in self._idle.values()
        ]
        return min(deadlines, default=None)

    def close_all(self, *, now: float) -> list[int]:
        """Close every open socket (client shutdown).  Returns their ids.

        Leases still held stay valid until released; dials in flight are not
        affected (their dialers report as usual).  The pool remains usable.
        """
        doomed = [conn for conn in self._conns.values() if conn.state is _OPEN]
        closed = [self._retire(conn, now=now) for conn in doomed]
        if closed:
            self._changed += 1
            self._grant_waiters(now=now)
        return closed

    # -- era hints -----------------------------------------------------------

    def era_hint(self, url: str) -> str | None:
        """The protocol version last negotiated with endpoint ``url``, if remembered."""
        version = self._eras.get(url)
        if version is not None:
            self._eras.move_to_end(url)
        return version

    def remember_era(self, url: str, version: str) -> None:
        """Remember ``version`` for ``url``, forgetting the least recently used hint beyond the bound."""
        if self._eras.get(url) == version:  # known already (every operation says it)
            self._eras.move_to_end(url)
            return
        self._eras[url] = version
        self._eras.move_to_end(url)
        while len(self._eras) > self._era_capacity:
            self._eras.popitem(last=False)

    def forget_era(self, url: str) -> None:
        """Drop the hint for ``url`` (a failure contradicted it)."""
        self._eras.pop(url, None)

    # -- internals -----------------------------------------------------------

    def _get(self, conn_id: int) -> _Conn:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise LocalProtocolError(f"unknown connection id {conn_id}")
        return conn

    def _origin(self, origin: Origin) -> _Origin:
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _Origin()
        return state

    def _tidy(self, origin: Origin) -> None:
        """Forget an origin with no socket and no waiter (the map stays bounded)."""
        state = self._origins[origin]
        if not state.conns and not state.queue:
            del self._origins[origin]

    def _serve(self, origin: Origin, *, now: float) -> Grant | None:
        """What one exchange to ``origin`` gets now, or None (the pool is left unchanged)."""
        return self._serve_in(origin, self._origins.get(origin), now=now)

    def _serve_in(self, origin: Origin, state: _Origin | None, *, now: float) -> Grant | None:
        """:meth:`_serve`, with the origin's state (None: it has none) already looked up."""
        victim: _Conn | None = None
        if state is not None:
            best = self._usable(state)
            if best is not None:
                if not best.leases:
                    self._idle.pop(best.conn_id)
                    del state.idle[best.conn_id]
                best.leases += 1
                best.pending += 1
                best.last_used = now
                best.idle_since = None
                return UseConnection(conn_id=best.conn_id)
            if state.h2_dials or any(
                conn.pending and _can_start(conn) for conn in state.h2.values()
            ):
                return None  # wait: a dial may turn out HTTP/2, an h2 stream is about to start
            if len(state.conns) >= self._per_origin:
                # every idle socket of this origin is unusable (else it was chosen above): the
                # least recently idle goes
                victim = next(iter(state.idle.values()), None)
                if victim is None:
                    return None
        if victim is None and self._sockets >= self._limits.pool_max_sockets:
            victim = _first_to_close(self._idle.values())
            if victim is None:
                return None
        close_first = () if victim is None else (self._retire(victim, now=now),)
        conn_id = self._next_id
        self._next_id += 1
        may_be_h2 = origin.scheme == "https" or self._prior_knowledge
        state = self._origin(origin)
        conn = _Conn(conn_id, origin, state, may_be_h2=may_be_h2, now=now)
        state.conns[conn_id] = conn
        state.h2_dials += may_be_h2
        self._conns[conn_id] = conn
        self._sockets += 1
        return DialNeeded(
            conn_id=conn_id,
            origin=origin,
            alpn=ALPN_OFFER if origin.scheme == "https" else (),
            deadline=now + self._limits.dial_timeout,
            close_first=close_first,
        )

    @staticmethod
    def _usable(state: _Origin) -> _Conn | None:
        """The connection of an origin to hand out: an open HTTP/2 one that can start a
        stream (none about to start), else the most recently idle HTTP/1.1 one that can
        start.  O(HTTP/2 connections + unusable idle ones skipped): not O(sockets)."""
        for conn in state.h2.values():
            if not conn.pending and _can_start(conn):
                return conn
        for conn in reversed(state.idle.values()):
            if not conn.http2 and _can_start(conn):
                return conn
        return None

    def _set_idle(self, conn: _Conn, *, now: float) -> None:
        conn.idle_since = now
        self._idle[conn.conn_id] = conn
        conn.home.idle[conn.conn_id] = conn

    def _grant_waiters(self, *, now: float) -> None:
        """Serve queued tickets while any can be served, always the oldest that can.

        The tickets of one origin are alike (same origin, same answer), so only each
        origin's oldest is tried: one pass costs O(origins waiting), not O(tickets).
        """
        if not self._queued:
            return  # nobody waits (the usual case): nothing to sort
        while (served := self._serve_oldest(now=now)) is not None:
            ticket, origin, grant = served
            state = self._origins[origin]
            del state.queue[ticket]
            if not state.queue:
                del self._queued[origin]
            del self._tickets[ticket]
            self._granted[ticket] = grant
            self._announce.append(ticket)
            if isinstance(grant, UseConnection):
                self._conns[grant.conn_id].granted.add(ticket)
            self._changed += 1

    def _serve_oldest(self, *, now: float) -> tuple[int, Origin, Grant] | None:
        heads = sorted((next(iter(state.queue)), origin) for origin, state in self._queued.items())
        for ticket, origin in heads:
            grant = self._serve(origin, now=now)
            if grant is not None:
                return ticket, origin, grant
        return None

    def _end_lease(self, conn: _Conn, *, now: float) -> list[int]:
        """One lease on ``conn`` is over; returns the ids to close."""
        conn.leases -= 1
        conn.last_used = now
        if conn.state is _CLOSED:
            if conn.leases == 0:
                del self._conns[conn.conn_id]
            return []
        assert conn.wire is not None
        if conn.wire.is_broken or (conn.leases == 0 and not conn.wire.can_start()):
            return [self._retire(conn, now=now)]
        if conn.leases:
            return []
        self._set_idle(conn, now=now)
        idle = conn.home.idle
        excess = len(idle) - self._limits.pool_max_idle_per_origin
        if excess <= 0:
            return []
        # over the bound (at most by the few idle sockets a failed claim left): sort them
        victims = sorted(_close_order(conn) for conn in idle.values())
        return [self._retire(victim, now=now) for *_, victim in victims[:excess]]

    def _requeue(self, origin: Origin, tickets: list[int]) -> None:
        """Put granted tickets back in the queue, each in its place (by age)."""
        state = self._origins[origin]
        for ticket in tickets:
            self._tickets[ticket] = origin
        state.queue = OrderedDict.fromkeys(sorted([*state.queue, *tickets]))
        self._queued[origin] = state

    def _drop_dial(self, conn: _Conn) -> None:
        """Forget a dialling connection (its dial failed or was never made)."""
        state = conn.home
        del state.conns[conn.conn_id]
        del self._conns[conn.conn_id]
        self._sockets -= 1
        state.h2_dials -= conn.may_be_h2
        self._tidy(conn.origin)

    def _retire(self, conn: _Conn, *, now: float) -> int:
        """Tell the wire goodbye and forget the socket; returns its id."""
        assert conn.wire is not None
        if not conn.wire.is_broken:
            conn.wire.close(now=now)
        self._forget(conn)
        return conn.conn_id

    def _forget(self, conn: _Conn) -> None:
        """An open socket leaves: grants not yet claimed on it go back to the queue (in
        their place); leases already held stay valid until released."""
        state = conn.home
        del state.conns[conn.conn_id]
        self._sockets -= 1
        self._idle.pop(conn.conn_id, None)
        state.idle.pop(conn.conn_id, None)
        state.h2.pop(conn.conn_id, None)
        if conn.granted:
            for ticket in conn.granted:
                del self._granted[ticket]
            conn.leases -= len(conn.granted)
            conn.pending -= len(conn.granted)
            self._requeue(conn.origin, list(conn.granted))
            conn.granted.clear()
        if conn.leases:
            conn.state = _CLOSED
        else:
            del self._conns[conn.conn_id]
        self._tidy(conn.origin)


def _close_order(conn: _Conn) -> tuple[bool, float, int, _Conn]:
    """Sort key of idle sockets, the first to close first: retirable ones, then least
    recently used, then lowest id."""
    return (not conn.retirable(), conn.last_used, conn.conn_id, conn)


def _can_start(conn: _Conn) -> bool:
    wire = conn.wire
    assert wire is not None
    return not wire.is_broken and wire.can_start()


def _first_to_close(idle: Iterable[_Conn]) -> _Conn | None:
    best = min((_close_order(conn) for conn in idle), default=None)
    return None if best is None else best[-1]


def _idle_since(conn: _Conn) -> float:
    assert conn.idle_since is not None
    return conn.idle_since
