"""The dial walk: resolve a host, vet its addresses, connect to them one at a time.

The driver's sockets (:mod:`sansmcp.core.sockets`) open a :class:`Dial` when the pool
says a new socket is needed, and hand it to the :class:`Dialer`, which walks it: a
:class:`~sansmcp.core.commands.Resolve` for a host name (an IP literal skips it), the
answer vetted by :func:`sansmcp.core.net.dial.vet`, then one
:class:`~sansmcp.core.commands.Connect` per vetted address until one is up
(:data:`DialPhase` says where a connect failed).  Each step that ends the walk hands the
dial back: up (:meth:`Dialer.connected`), or failed with ``dial.failure`` (every other
report).  The dial's deadline (the driver's heap), the pool and the exchange waiting for
the socket stay theirs.  A later step of the walk (a proxy's ``CONNECT``) goes here.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Generic, Literal, TypeVar

from .commands import CloseSocket, Command, Connect, Resolve
from .errors import ConnectionFailed
from .mcp import StartExchange
from .net import dial as dialing
from .net.pool import DialNeeded
from .url import Origin

__all__ = ["Dial", "DialPhase", "Dialer"]

DialPhase = Literal["tcp", "tls"]  # where a connect failed: TCP (or the socket), or TLS

OwnerT = TypeVar("OwnerT")  # what a dial is for: the driver's Conn


class Dial(Generic[OwnerT]):
    """One socket being dialled for ``start`` of ``conn`` (the pool's ``grant``)."""

    __slots__ = (
        "address",
        "addresses",
        "conn",
        "deadline",
        "failure",
        "grant",
        "heap_at",
        "heap_seq",
        "index",
        "io_id",
        "start",
    )

    def __init__(self, conn: OwnerT, start: StartExchange, grant: DialNeeded) -> None:
        self.conn = conn
        self.start = start
        self.grant = grant
        self.deadline = min(start.deadline, grant.deadline)
        self.addresses: list[str] = []
        self.index = 0
        self.address = ""
        self.io_id: int | None = None  # the Resolve or Connect in progress
        self.failure: ConnectionFailed | None = None
        self.heap_at: float | None = None
        self.heap_seq: int | None = None


class Dialer(Generic[OwnerT]):
    """Every dial in progress; its commands go to ``outbox``.

    Each report method returns the dial the report ended (None: the walk goes on, or the
    id is no longer known): failed, with ``failure`` set, or -- :meth:`connected` -- up.
    """

    __slots__ = (
        "_connecting",
        "_io_ids",
        "_outbox",
        "_resolving",
        "allow_loopback",
        "allow_private",
        "dials",
    )

    def __init__(
        self, outbox: deque[Command], *, allow_private: bool, allow_loopback: bool
    ) -> None:
        self._outbox = outbox
        self.allow_private = allow_private
        self.allow_loopback = allow_loopback
        self._io_ids = itertools.count(1)  # Resolve, Connect and socket ids
        self.dials: dict[int, Dial[OwnerT]] = {}  # pool connection id ->
        self._resolving: dict[int, Dial[OwnerT]] = {}  # io id ->
        self._connecting: dict[int, Dial[OwnerT]] = {}  # io id ->

    def open(self, conn: OwnerT, start: StartExchange, grant: DialNeeded) -> Dial[OwnerT]:
        """A new dial, not walked yet (see :meth:`walk`)."""
        dial = Dial(conn, start, grant)
        self.dials[grant.conn_id] = dial
        return dial

    def walk(self, dial: Dial[OwnerT]) -> Dial[OwnerT] | None:
        """Start the walk: resolve the host, or vet it when it is an IP literal."""
        origin = dial.grant.origin
        literal = dialing.literal_address(origin.host)
        if literal is not None:
            return self._vet(dial, [literal])
        dial.io_id = next(self._io_ids)
        self._resolving[dial.io_id] = dial
        self._outbox.append(Resolve(dial_id=dial.io_id, host=origin.host, port=origin.port))
        return None

    def resolved(self, dial_id: int, answers: object) -> Dial[OwnerT] | None:
        dial = self._resolving.pop(dial_id, None)
        if dial is None:
            return None
        dial.io_id = None
        return self._vet(dial, answers)

    def resolve_failed(
        self, dial_id: int, exc: BaseException, *, from_hook: bool
    ) -> Dial[OwnerT] | None:
        dial = self._resolving.pop(dial_id, None)
        if dial is None:
            return None
        dial.io_id = None
        origin = dial.grant.origin
        if from_hook:
            failure = dialing.hook_error(origin, exc)
            failure.__cause__ = exc
        else:
            failure = dialing.dns_error(origin, exc)
        dial.failure = failure
        return dial

    def connected(self, socket_id: int) -> Dial[OwnerT] | None:
        return self._connecting.pop(socket_id, None)

    def connect_failed(
        self, socket_id: int, phase: DialPhase, exc: BaseException
    ) -> Dial[OwnerT] | None:
        dial = self._connecting.pop(socket_id, None)
        if dial is None:
            return None
        dial.io_id = None
        origin = dial.grant.origin
        if phase == "tls":
            # a runtime may wrap the TLS library's error: its reason is in the cause
            reason = exc.__cause__ if exc.__cause__ is not None else exc
            dial.failure = dialing.tls_error(origin, dial.address, reason)
        else:
            dial.failure = dialing.connect_error(origin, dial.address, exc)
        return self._next_address(dial)

    def give_up(self, dial: Dial[OwnerT]) -> None:
        """Abandon the dial's resolve or connect in progress (the caller ends the dial)."""
        assert dial.io_id is not None  # a live dial always waits for a resolve or a connect
        self._resolving.pop(dial.io_id, None)
        self._connecting.pop(dial.io_id, None)
        self._outbox.append(CloseSocket(socket_id=dial.io_id))
        dial.io_id = None

    def _vet(self, dial: Dial[OwnerT], answers: object) -> Dial[OwnerT] | None:
        try:
            dial.addresses = dialing.vet(
                dial.grant.origin,
                answers,
                allow_private=self.allow_private,
                allow_loopback=self.allow_loopback,
            )
        except ConnectionFailed as failure:
            dial.failure = failure
            return dial
        return self._next_address(dial)

    def _next_address(self, dial: Dial[OwnerT]) -> Dial[OwnerT] | None:
        """Connect to the next vetted address, or fail with the last address's failure."""
        if dial.index >= len(dial.addresses):
            assert dial.failure is not None  # vet() returns at least one address
            return dial
        dial.address = dial.addresses[dial.index]
        dial.index += 1
        origin: Origin = dial.grant.origin
        dial.io_id = socket_id = next(self._io_ids)
        self._connecting[socket_id] = dial
        tls = (origin.host, dial.grant.alpn) if origin.scheme == "https" else None
        self._outbox.append(
            Connect(socket_id=socket_id, address=dial.address, port=origin.port, tls=tls)
        )
        return None
