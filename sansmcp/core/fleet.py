"""The driver's side of the store seam: what one Client shares with its fleet, and when.

Theory of operation
-------------------
With a shared store (``Client(store=...)``) the driver builds a :class:`Fleet`; it
decides which :class:`~sansmcp.core.commands.StoreOp` to emit and reads their answers.
Today it shares **era hints** (the protocol version last negotiated per endpoint), so
a fleet probes a legacy endpoint once, not once per process:

* before the first connect to an endpoint this process has no hint for, the Conn
  waits (at most ``Limits.store_timeout``, on the driver's timer) for one
  :class:`~sansmcp.core.store.Read` of the endpoint's era key; Conns to the same
  endpoint that come meanwhile wait for the same read (:meth:`Fleet.wait_era`);
* the answer (:meth:`Fleet.answered`) is opened defensively
  (:class:`~sansmcp.core.store_values.ValueCodec`); anything else -- a miss, an
  unreadable value, a failed store -- is no hint, and the connect goes on as it would
  have without a store.  An endpoint is read once per process (per
  :data:`ERA_CAPACITY` endpoints remembered);
* on a miss, with lease holder names (the driver has randomness), each waiting Conn
  loads the era once per fleet: the endpoint's load lease, a double-checked read, a
  bounded wait for another worker's hint (:mod:`sansmcp.core.fleet_eras`:
  :attr:`Fleet.eras`);
* after an operation succeeds, a hint that differs from the one known to be stored
  is written by compare-and-set on the version read (:meth:`Fleet.era_write`), with a
  TTL of a day; a conflict (another worker wrote first) only updates the version
  known.  Era hints are soft state: no failure of the store fails a work item.

Tool listings go through the store too (:attr:`Fleet.listings`,
:mod:`sansmcp.core.fleet_listings`): a ``list_tools`` parks here like a connect while
the store is asked.  An OAuth Conn's store steps (:mod:`sansmcp.core.fleet_auth`) come
as ``StoreWanted`` outputs of its authorizer: :meth:`Fleet.ask` emits each, and its
answer goes back to that authorizer.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .commands import Command, StoreOp
from .errors import CallerError
from .fleet_eras import MARKED, SharedEras, hint_or_mark
from .fleet_listings import SharedListings
from .limits import Limits
from .oauth.store import OAuth, StoreWanted
from .store import (
    DEFAULT_PREFIX,
    CompareAndSet,
    Conflict,
    Found,
    Missing,
    Read,
    StoreAnswer,
    StoreFailed,
    Written,
    era_key,
)
from .store_values import ValueCodec, era_body

if TYPE_CHECKING:
    from .conn import ConnRecord
    from .fleet_auth import SharedAuth
    from .mcp import McpMachine
    from .net.pool import Pool

Start = Callable[["ConnRecord"], None]  # what starts a parked Conn's operation

__all__ = ["ERA_CAPACITY", "ERA_TTL", "Fleet"]

ERA_CAPACITY = 1024  # endpoints whose stored hint this process remembers (oldest out)
ERA_TTL = 86_400.0  # a stored era hint lives a day unless written again


class Host(Protocol):
    """What the fleet asks of the driver whose parked Conns it wakes (passed with each
    call, never kept: no reference cycle)."""

    pool: Pool
    _conns: dict[int, ConnRecord]

    def _operate(self, conn_id: int, start: Start, now: float) -> None: ...

    def _drive(self, conn: ConnRecord, now: float) -> None: ...

    def _arm(self, conn: ConnRecord, deadline: float | None) -> None: ...


class Fleet:
    """Era hints through the shared store, for one driver (see the module docstring).

    ``counts`` (the listing loader's names): ``"reads"`` and ``"writes"`` emitted,
    ``"hits"`` (hints found) and ``"misses"`` (reads that found none),
    ``"loads"`` (parked connects that go on without a hint: they probe), ``"waits"``
    (a load lease held by another), ``"waited_out"`` (waiters that probed past
    ``store_load_wait``), ``"unshared"`` (connects that read the no hint mark and
    probed at once), ``"failures"`` (answers ``StoreFailed``),
    ``"timeouts"``, ``"conflicts"`` (a write another worker beat); ``codec.misses``:
    values read that did not open.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        prefix: str = DEFAULT_PREFIX,
        outbox: deque[Command] | None = None,
        secret: bytes | None = None,
        holder: str | None = None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        if secret is not None and not (isinstance(secret, bytes) and secret):
            raise CallerError("a store's fleet_secret is non-empty bytes, or None")
        self.prefix = prefix
        self.limits = limits
        self.codec = ValueCodec(limits.max_store_value_bytes)
        self._op_ids = itertools.count(1)
        self._outbox: deque[Command] = deque() if outbox is None else outbox
        # listings through the store: with a holder name for its leases and a wall clock
        self.listings = (
            None
            if holder is None or wall_clock is None
            else SharedListings(
                limits,
                self._outbox,
                self._op_ids,
                secret=secret,
                holder=holder,
                wall_clock=wall_clock,
                prefix=prefix,
            )
        )
        # endpoint URL -> (the hint known stored there or None, its store version; 0: none)
        self._known: OrderedDict[str, tuple[str | None, int]] = OrderedDict()
        self._reads: dict[int, str] = {}  # op id -> the endpoint whose era is being read
        self._writes: dict[int, tuple[str, str]] = {}  # op id -> (endpoint, hint written)
        self._waiting: dict[str, list[int]] = {}  # endpoint -> Conns waiting for its read
        names = ("reads", "hits", "misses", "loads", "waits", "waited_out", "unshared")
        self.counts = dict.fromkeys((*names, "failures", "timeouts", "writes", "conflicts"), 0)
        # era loads through a lease: with a holder name for its leases
        self.eras = (
            None
            if holder is None
            else SharedEras(
                limits,
                self._outbox,
                self._op_ids,
                holder=holder,
                prefix=prefix,
                codec=self.codec,
                counts=self.counts,
                remember=self._remember,
            )
        )
        # Conns whose operation waits for a store read: conn id -> (its start, the endpoint)
        self.parked: dict[int, tuple[Start, str]] = {}
        self._auth_ops: dict[int, tuple[int, int]] = {}  # op id -> (conn id, its request id)

    @classmethod
    def for_driver(
        cls,
        limits: Limits,
        outbox: deque[Command],
        secret: bytes | None,
        random_bytes: Callable[[int], bytes] | None,
        wall_clock: Callable[[], float] | None,
    ) -> Fleet:
        """A driver's fleet: listings too when it has randomness (lease holders' names)
        and a wall clock."""
        holder = None if random_bytes is None else random_bytes(12).hex()
        return cls(limits, outbox=outbox, secret=secret, holder=holder, wall_clock=wall_clock)

    def store_answered(self, host: Host, op_id: int, answer: StoreAnswer, now: float) -> None:
        """The store's answer to ``op_id``: the Conns parked on it go on, or wait on."""
        auth = self._auth_ops.pop(op_id, None)
        if auth is not None:  # an authorizer's store step
            conn = host._conns.get(auth[0])
            if conn is not None:  # (gone: its flow went with it)
                assert conn.auth is not None
                conn.auth.store_answered(auth[1], answer, now=now)
                host._drive(conn, now)
            return
        listings, eras = self.listings, self.eras
        if listings is not None and listings.owns(op_id):
            woken = listings.answered(op_id, answer, host._conns, now)
            if woken is not None:
                self._parked_next(host, woken[0], woken[1], now)
            return
        if eras is not None and eras.owns(op_id):
            era = eras.answered(op_id, answer, now)
            if era is not None:
                self._era_next(host, *era, now)
            return
        if eras is not None:
            eras.written(op_id, answer)  # (an era write's lease goes after it)
        read = self.answered(op_id, answer)
        if read is None:
            return
        url, hint, waiting = read
        at_once = isinstance(answer, StoreFailed)
        if hint == MARKED:  # the last load stored no hint: probe at once
            hint, at_once = None, True
            self.counts["unshared"] += len(waiting)
        # on a miss (not a failed store, nor the mark), each waiting Conn loads the era
        # under the lease
        lease = None if hint is not None or at_once else eras
        for conn_id in waiting:
            deadline = None if lease is None else lease.start(conn_id, url, now)
            self._era_next(host, conn_id, deadline, hint, now)

    def timed_out(self, host: Host, conn_id: int, now: float) -> None:
        """A parked Conn's deadline passed: the store did not answer in time, or a
        waiter re-reads."""
        listings, eras = self.listings, self.eras
        if listings is not None and listings.waits(conn_id):
            self._parked_next(host, conn_id, listings.timer(conn_id, now), now)
        elif eras is not None and eras.waits(conn_id):
            self._era_next(host, conn_id, eras.timer(conn_id, now), None, now)
        else:  # the endpoint's first era read
            self.counts["timeouts"] += 1
            self._era_next(host, conn_id, None, None, now)

    def _era_next(
        self, host: Host, conn_id: int, deadline: float | None, hint: str | None, now: float
    ) -> None:
        """A connect parked for its era waits on until ``deadline``, or goes on (with
        ``hint``; without one it probes)."""
        if deadline is not None:
            host._arm(host._conns[conn_id], deadline)
            return
        url = self.parked[conn_id][1]
        if hint is None:
            self.counts["loads"] += 1
        elif host.pool.era_hint(url) is None:
            host.pool.remember_era(url, hint)
        self._unpark(host, conn_id, hint, now)

    def _parked_next(self, host: Host, conn_id: int, deadline: float | None, now: float) -> None:
        """A parked Conn waits on until ``deadline``, or (None) goes on."""
        if deadline is None:
            self._unpark(host, conn_id, None, now)
        else:
            host._arm(host._conns[conn_id], deadline)

    def _unpark(self, host: Host, conn_id: int, hint: str | None, now: float) -> None:
        """A parked connect goes on (with the fleet's era hint, when one came)."""
        start = self.unpark(conn_id)
        assert start is not None  # (a Conn waiting for a read is parked)
        conn = host._conns[conn_id]
        if hint is not None:
            conn.machine.use_era_hint(hint)
        host._arm(conn, None)
        host._operate(conn_id, start, now)

    def __repr__(self) -> str:
        return f"Fleet({len(self._known)} endpoints, {self.counts})"

    def shared_auth(
        self, oauth: OAuth, machine: McpMachine, random_bytes: Callable[[int], bytes]
    ) -> SharedAuth:
        """An OAuth Conn's state in the fleet's store (its own lease holder name)."""
        from .fleet_auth import SharedAuth

        url = machine.settings.endpoint.url
        holder = random_bytes(12).hex()
        return SharedAuth(oauth, url, limits=self.limits, holder=holder, prefix=self.prefix)

    def ask(self, conn_id: int, wanted: StoreWanted) -> None:
        """Emit the store step an OAuth Conn's authorizer wants; the answer goes back to it."""
        op = StoreOp(op_id=next(self._op_ids), command=wanted.command)
        self._auth_ops[op.op_id] = (conn_id, wanted.request_id)
        self._outbox.append(op)

    def era_known(self, url: str) -> bool:
        """The store was read for ``url`` already (whatever it answered)."""
        return url in self._known

    def park_connect(self, conn: ConnRecord, start: Start, now: float) -> float | None:
        """Park ``conn``'s connect until its endpoint's era is read (the read emitted,
        unless one is in flight): the deadline of its wait; None: it goes on at once (a
        hint known, or the store read already for this endpoint)."""
        settings = conn.machine.settings
        url = settings.endpoint.url
        if settings.era_hint is not None:
            return None
        conn_id, eras = conn.view.conn_id, self.eras
        if eras is not None and eras.busy(url):  # a load under way: its lease is held
            self.parked[conn_id] = (start, url)
            return eras.start(conn_id, url, now)
        if self.era_known(url):
            return None
        self.parked[conn_id] = (start, url)
        op = self.wait_era(url, conn_id)
        if op is not None:
            self._outbox.append(op)
        return now + self.limits.store_timeout

    def park_listing(self, conn: ConnRecord, start: Start, now: float) -> float | None:
        """Park ``conn``'s ``list_tools`` while the store is asked for its listing: the
        deadline of its wait; None: it goes on at once."""
        if self.listings is None:
            return None
        deadline = self.listings.park(conn, now)
        if deadline is not None:
            self.parked[conn.view.conn_id] = (start, conn.machine.settings.endpoint.url)
        return deadline

    def succeeded(self, conn: ConnRecord, version: str, now: float) -> None:
        """``conn``'s operation succeeded at ``version``: share its era (when new) and
        the listings it stored."""
        op = self.era_write(conn.machine.settings.endpoint.url, version)
        if op is not None:
            self._outbox.append(op)
        if self.eras is not None:  # its era lease goes once the hint is written
            self.eras.done(conn.view.conn_id, None if op is None else op.op_id)
        if self.listings is not None:
            self.listings.listed(conn, now)

    def failed(self, conn_id: int, conn: ConnRecord | None = None) -> None:
        """``conn_id``'s operation failed, or the Conn is gone: its load leases go (and
        the invalidations it made are shared)."""
        if self.eras is not None:  # holding its era lease, it leaves the no hint mark
            self.eras.failed(conn_id)
        if self.listings is not None:
            self.listings.done(conn_id, conn)

    def unpark(self, conn_id: int) -> Start | None:
        """``conn_id`` waits no more (its read came, it timed out, or it was dropped): its
        operation's start (None: it was not parked)."""
        parked = self.parked.pop(conn_id, None)
        if parked is None:
            return None
        self.stop_waiting(parked[1], conn_id)
        return parked[0]

    def wait_era(self, url: str, conn_id: int) -> StoreOp | None:
        """``conn_id`` waits for ``url``'s era: the read to emit (None: one is in flight)."""
        waiting = self._waiting.setdefault(url, [])
        waiting.append(conn_id)
        if len(waiting) > 1:
            return None
        op = StoreOp(op_id=next(self._op_ids), command=Read(key=era_key(url, prefix=self.prefix)))
        self._reads[op.op_id] = url
        self.counts["reads"] += 1
        return op

    def stop_waiting(self, url: str, conn_id: int) -> None:
        """``conn_id`` no longer waits (it timed out, or was dropped)."""
        waiting = self._waiting.get(url)
        if waiting is not None and conn_id in waiting:
            waiting.remove(conn_id)

    def answered(self, op_id: int, answer: StoreAnswer) -> tuple[str, str | None, list[int]] | None:
        """Take the answer to ``op_id``: for an era read, (the endpoint, its hint or None,
        the Conns that waited for it, :data:`~sansmcp.core.fleet_eras.MARKED` for the no
        hint mark); None for anything else (a write, an unknown id)."""
        if isinstance(answer, StoreFailed):
            self.counts["failures"] += 1
        written = self._writes.pop(op_id, None)
        if written is not None:
            if isinstance(answer, Written):
                self._remember(written[0], written[1], answer.version)
            elif isinstance(answer, Conflict):
                self.counts["conflicts"] += 1
                self._remember(written[0], None, answer.version)
            return None
        endpoint = self._reads.pop(op_id, None)
        if endpoint is None:
            return None
        hint: str | None = None
        version = 0
        if isinstance(answer, Found):
            hint, version = self.codec.open("era", answer.value, hint_or_mark), answer.version
        elif isinstance(answer, Missing):
            version = answer.version
        if isinstance(answer, Found | Missing):
            self.counts["misses" if hint is None or hint == MARKED else "hits"] += 1
        self._remember(endpoint, None if hint == MARKED else hint, version)
        return endpoint, hint, self._waiting.pop(endpoint, [])

    def era_write(self, url: str, version: str) -> StoreOp | None:
        """The write that shares ``version`` as ``url``'s era (None: stored already, a
        write is in flight, or the value is over the bound)."""
        hint, stored = self._known.get(url, (None, 0))
        if hint == version or any(url == w for w, _ in self._writes.values()):
            return None
        value = self.codec.seal("era", era_body(version))
        if value is None:
            return None
        command = CompareAndSet(
            key=era_key(url, prefix=self.prefix), value=value, expected=stored, ttl=ERA_TTL
        )
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self._writes[op.op_id] = (url, version)
        self.counts["writes"] += 1
        return op

    def _remember(self, url: str, hint: str | None, version: int) -> None:
        self._known[url] = (hint, version)
        self._known.move_to_end(url)
        while len(self._known) > ERA_CAPACITY:
            self._known.popitem(last=False)
