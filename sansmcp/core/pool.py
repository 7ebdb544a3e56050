"""The connection pool: which socket carries which exchange, idle expiry, era hints.

Theory of operation
-------------------
One :class:`Pool` per ``Client``.  The adapters (asyncio, trio) dial, move bytes
and hold the sockets; the pool *decides*.  It never touches a socket: it hands
out connection ids, and every method returns the ids of the sockets the adapter
must close now.  It tracks each connection in one of three states:

``DIALING``
    :meth:`Pool.checkout` answered :class:`DialNeeded`; the dialer holds its
    one lease.  Ends with :meth:`Pool.dial_succeeded` (-> ``OPEN``, the lease
    kept) or :meth:`Pool.dial_failed` (forgotten).
``OPEN``
    A wire machine (:class:`WireConnection`) is attached.  ``leases`` counts the
    exchanges handed out on it and not yet :meth:`Pool.release`\\ d.  An
    HTTP/1.1 connection carries at most one lease; an HTTP/2 one as many as its
    ``can_start()`` admits.  With no lease it is *idle* since ``idle_since``.
``CLOSED``
    The adapter was told to close the socket (or closed it itself) while
    exchanges still held leases; it only waits for their releases, counts as no
    socket and is never handed out.

**Checkout.**  For an origin, in order: an open HTTP/2 connection that
``can_start()``; else the most recently used idle HTTP/1.1 connection that
``can_start()``; else, if a dial that may turn out HTTP/2 (https, ALPN
pending; or http with ``http2_prior_knowledge``) is in flight, :class:`MustWait`
-- so 50 concurrent work items end up on one HTTP/2 connection; else a new dial
(:class:`DialNeeded`), first evicting the least recently used idle socket of any
origin when the pool is at ``Limits.pool_max_sockets``; with nothing idle to
evict, :class:`MustWait`.  An HTTP/2 connection that cannot start a stream
(streams exhausted, or GOAWAY received) does not make us wait: we dial another,
so a draining connection never holds new work hostage.

**The adapter's contract.**  After ``UseConnection`` (or after
``dial_succeeded``) start the exchange on :meth:`Pool.wire` *before awaiting
anything*, so the wire's ``can_start()`` stays truthful for the next checkout.
Every lease ends in exactly one :meth:`Pool.release` (after the exchange's
terminal event, or after ``cancel()``); a dial ends in ``dial_succeeded`` or
``dial_failed``.  Close every id a method returns (the pool has already called
``wire.close(now=)`` on open ones, so ``data_to_send()`` may hold a GOAWAY worth
flushing first).  Call :meth:`Pool.discard` when a socket died under you.
Sleep until :meth:`Pool.next_deadline` and then call :meth:`Pool.expire`.

**Waiting.**  :attr:`Pool.changed` is a counter bumped by every call that can
turn a :class:`MustWait` into something else (a dial ending, a release, a
socket leaving).  A waiter remembers :attr:`MustWait.changed` and retries
``checkout`` once ``pool.changed`` differs; since only the adapter calls the
pool, it can wake its waiters after each call that bumped the counter.

**Retiring.**  A connection that is broken (``is_broken``) or, with no lease,
cannot start (HTTP/1.1 without keep-alive, HTTP/2 after GOAWAY) is never
handed out and is closed as soon as no lease holds it: at ``release``, or at
the next ``expire`` (``next_deadline`` reports it as already due, because a
wire can break while idle behind the pool's back).  Idle sockets are closed
after ``Limits.pool_idle_timeout`` (at exactly the bound), and ``release`` keeps
at most ``Limits.pool_max_idle_per_origin`` idle sockets per origin, closing
the least recently used.

**Era hints** (soft state): the protocol version last negotiated per endpoint
URL, in a bounded LRU map (``era_capacity`` entries, default 1,024).

Errors: misuse (an unknown id, a release without a lease, ``dial_succeeded``
twice) raises :class:`~sansmcp.core.errors.LocalProtocolError` and leaves the
pool unchanged.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from .errors import LocalProtocolError
from .limits import Limits
from .url import Origin
from .wire.h1 import H1Connection
from .wire.h2 import H2Connection

__all__ = [
    "ALPN_OFFER",
    "ERA_CAPACITY",
    "Checkout",
    "DialNeeded",
    "MustWait",
    "Pool",
    "UseConnection",
    "WireConnection",
    "WireFactory",
    "standard_wire",
]

ERA_CAPACITY = 1024
"""Default bound on remembered era hints (endpoint URLs)."""

ALPN_OFFER = ("h2", "http/1.1")
"""What :class:`DialNeeded` asks the adapter to offer in a TLS handshake."""


class WireConnection(Protocol):
    """The members of a wire machine (``H1Connection`` / ``H2Connection``) the pool uses."""

    def can_start(self) -> bool: ...

    @property
    def is_broken(self) -> bool: ...

    def close(self, *, now: float) -> None: ...


class WireFactory(Protocol):
    """Builds the wire machine for a freshly dialled socket."""

    def __call__(self, *, http2: bool, limits: Limits, now: float) -> WireConnection: ...


@dataclass(frozen=True, slots=True, kw_only=True)
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
    """Nothing usable now: retry ``checkout`` once ``pool.changed != changed``."""

    changed: int


Checkout = UseConnection | DialNeeded | MustWait


class _State(enum.Enum):
    DIALING = enum.auto()
    OPEN = enum.auto()
    CLOSED = enum.auto()


class _Conn:
    __slots__ = (
        "http2",
        "idle_since",
        "last_used",
        "leases",
        "may_be_h2",
        "origin",
        "state",
        "wire",
    )

    def __init__(self, origin: Origin, *, may_be_h2: bool, now: float) -> None:
        self.origin = origin
        self.state = _State.DIALING
        self.wire: WireConnection | None = None
        self.http2 = False
        self.may_be_h2 = may_be_h2
        self.leases = 1
        self.last_used = now
        self.idle_since: float | None = None

    def idle(self) -> bool:
        return self.state is _State.OPEN and self.leases == 0

    def retirable(self) -> bool:
        """Idle and unusable: broken, or unable to start (no keep-alive, GOAWAY)."""
        assert self.wire is not None
        return self.idle() and (self.wire.is_broken or not self.wire.can_start())


def standard_wire(*, http2: bool, limits: Limits, now: float) -> WireConnection:
    """The default :class:`WireFactory`: ``H2Connection`` or ``H1Connection``."""
    if http2:
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
        self._prior_knowledge = http2_prior_knowledge
        self._factory = wire_factory
        self._conns: dict[int, _Conn] = {}
        self._next_id = 1
        self._changed = 0
        self._eras: OrderedDict[str, str] = OrderedDict()
        self._era_capacity = era_capacity

    # -- observation ---------------------------------------------------------

    @property
    def changed(self) -> int:
        """Bumped whenever a waiting checkout may now succeed (see :class:`MustWait`)."""
        return self._changed

    @property
    def socket_count(self) -> int:
        """Sockets the pool accounts for: dialling or open (at most ``pool_max_sockets``)."""
        return sum(1 for conn in self._conns.values() if conn.state is not _State.CLOSED)

    def idle_count(self, origin: Origin) -> int:
        """Open sockets to ``origin`` with no exchange handed out."""
        return sum(1 for conn in self._conns.values() if conn.origin == origin and conn.idle())

    def wire(self, conn_id: int) -> WireConnection:
        """The wire machine of an open (or closed, still leased) connection."""
        conn = self._get(conn_id)
        if conn.wire is None:
            raise LocalProtocolError(f"connection {conn_id} is still dialling; it has no wire yet")
        return conn.wire

    # -- exchanges -----------------------------------------------------------

    def checkout(self, origin: Origin, *, now: float) -> Checkout:
        """Choose a connection for one exchange to ``origin`` (see the module docstring).

        After ``UseConnection`` / ``DialNeeded`` the caller holds a lease; after
        ``DialNeeded`` the evicted ids are already forgotten.
        """
        best: _Conn | None = None
        best_id = 0
        dial_pending = False
        for conn_id, conn in self._conns.items():
            if conn.origin != origin:
                continue
            if conn.state is _State.DIALING:
                dial_pending = dial_pending or conn.may_be_h2
                continue
            if conn.state is _State.CLOSED or conn.wire is None:
                continue
            if conn.wire.is_broken or not conn.wire.can_start():
                continue
            if conn.http2:
                best, best_id = conn, conn_id
                break
            if conn.leases == 0 and (best is None or conn.last_used >= best.last_used):
                best, best_id = conn, conn_id
        if best is not None:
            best.leases += 1
            best.last_used = now
            best.idle_since = None
            return UseConnection(conn_id=best_id)
        if dial_pending:
            return MustWait(changed=self._changed)
        close_first: tuple[int, ...] = ()
        if self.socket_count >= self._limits.pool_max_sockets:
            victims = self._idle_by_preference(None)
            if not victims:
                return MustWait(changed=self._changed)
            close_first = (self._retire(victims[0], now=now),)
        conn_id = self._next_id
        self._next_id += 1
        may_be_h2 = origin.scheme == "https" or self._prior_knowledge
        self._conns[conn_id] = _Conn(origin, may_be_h2=may_be_h2, now=now)
        return DialNeeded(
            conn_id=conn_id,
            origin=origin,
            alpn=ALPN_OFFER if origin.scheme == "https" else (),
            deadline=now + self._limits.dial_timeout,
            close_first=close_first,
        )

    def dial_succeeded(self, conn_id: int, *, alpn: str | None, now: float) -> WireConnection:
        """The socket is up (TLS done); ``alpn`` is the protocol the server selected.

        Builds and returns the wire machine: HTTP/2 if ALPN chose ``h2``, or if no
        ALPN happened and the pool was built with ``http2_prior_knowledge``;
        HTTP/1.1 otherwise.  The dialer keeps its lease.
        """
        conn = self._get(conn_id)
        if conn.state is not _State.DIALING:
            raise LocalProtocolError(f"connection {conn_id} is not dialling")
        http2 = alpn == "h2" or (alpn is None and self._prior_knowledge)
        wire = self._factory(http2=http2, limits=self._limits, now=now)
        conn.wire, conn.http2, conn.state, conn.last_used = wire, http2, _State.OPEN, now
        self._changed += 1
        return wire

    def dial_failed(self, conn_id: int) -> None:
        """The dial failed or was abandoned; the connection (and its lease) is forgotten."""
        conn = self._get(conn_id)
        if conn.state is not _State.DIALING:
            raise LocalProtocolError(f"connection {conn_id} is not dialling")
        del self._conns[conn_id]
        self._changed += 1

    def release(self, conn_id: int, *, now: float) -> list[int]:
        """An exchange on ``conn_id`` is over (ended, failed or cancelled): end its lease.

        Returns the ids to close now: this connection if it is broken or cannot
        start again, and the least recently used idle sockets of its origin over
        ``Limits.pool_max_idle_per_origin``.
        """
        conn = self._get(conn_id)
        if conn.state is _State.DIALING:
            raise LocalProtocolError(
                f"connection {conn_id} is still dialling; end it with dial_failed()"
            )
        if conn.leases == 0:
            raise LocalProtocolError(f"connection {conn_id} has no exchange to release")
        conn.leases -= 1
        conn.last_used = now
        self._changed += 1
        if conn.state is _State.CLOSED:
            if conn.leases == 0:
                del self._conns[conn_id]
            return []
        assert conn.wire is not None
        if conn.wire.is_broken or (conn.leases == 0 and not conn.wire.can_start()):
            return [self._retire(conn_id, now=now)]
        if conn.leases:
            return []
        conn.idle_since = now
        victims = self._idle_by_preference(conn.origin)
        excess = len(victims) - self._limits.pool_max_idle_per_origin
        return [self._retire(victim, now=now) for victim in victims[: max(excess, 0)]]

    def discard(self, conn_id: int) -> None:
        """The adapter closed this socket itself (I/O error, EOF).

        Leases still held stay valid until released.  Discarding an id the pool
        no longer tracks is a no-op, so close paths may race.
        """
        conn = self._conns.get(conn_id)
        if conn is None or conn.state is _State.CLOSED:
            return
        if conn.state is _State.DIALING:
            raise LocalProtocolError(
                f"connection {conn_id} is still dialling; end it with dial_failed()"
            )
        self._forget(conn_id)
        self._changed += 1

    # -- time ----------------------------------------------------------------

    def expire(self, *, now: float) -> list[int]:
        """Close idle sockets idle for ``Limits.pool_idle_timeout`` or longer, and retirable ones."""
        timeout = self._limits.pool_idle_timeout
        doomed = [
            conn_id
            for conn_id, conn in self._conns.items()
            if conn.idle() and (conn.retirable() or _idle_since(conn) + timeout <= now)
        ]
        closed = [self._retire(conn_id, now=now) for conn_id in doomed]
        if closed:
            self._changed += 1
        return closed

    def next_deadline(self) -> float | None:
        """When :meth:`expire` next has work: the earliest idle expiry (already past for a retirable socket)."""
        deadlines = [
            _idle_since(conn)
            if conn.retirable()
            else _idle_since(conn) + self._limits.pool_idle_timeout
            for conn in self._conns.values()
            if conn.idle()
        ]
        return min(deadlines, default=None)

    def close_all(self, *, now: float) -> list[int]:
        """Close every open socket (client shutdown).  Returns their ids.

        Leases still held stay valid until released; dials in flight are not
        affected (their dialers report as usual).  The pool remains usable.
        """
        ids = [conn_id for conn_id, conn in self._conns.items() if conn.state is _State.OPEN]
        closed = [self._retire(conn_id, now=now) for conn_id in ids]
        if closed:
            self._changed += 1
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

    def _idle_by_preference(self, origin: Origin | None) -> list[int]:
        """Idle connections (of ``origin``, or of all), the first to close first.

        Retirable ones come first, then least recently used, then lowest id.
        """
        idle = [
            (not conn.retirable(), conn.last_used, conn_id)
            for conn_id, conn in self._conns.items()
            if conn.idle() and (origin is None or conn.origin == origin)
        ]
        return [conn_id for *_, conn_id in sorted(idle)]

    def _retire(self, conn_id: int, *, now: float) -> int:
        """Tell the wire goodbye and forget the socket; returns ``conn_id``."""
        conn = self._conns[conn_id]
        assert conn.wire is not None
        if not conn.wire.is_broken:
            conn.wire.close(now=now)
        self._forget(conn_id)
        return conn_id

    def _forget(self, conn_id: int) -> None:
        conn = self._conns[conn_id]
        if conn.leases:
            conn.state = _State.CLOSED
        else:
            del self._conns[conn_id]


def _idle_since(conn: _Conn) -> float:
    assert conn.idle_since is not None
    return conn.idle_since
