"""Era hints through the shared store: a cold endpoint probed once per fleet.

Theory of operation
-------------------
:class:`~sansmcp.core.fleet.Fleet` reads an endpoint's era key once per process
before the first connect to it (the Conns that come meanwhile wait for the same
read).  A hint found ends the wait.  On a miss, with lease holder names (the driver
has randomness), each waiting Conn goes through a double-checked load
(:class:`SharedEras`), as a cold listing does (:mod:`sansmcp.core.fleet_listings`):

1. take the endpoint's load lease (``lease_key(era_key(url))``, for
   ``Limits.store_lease_expiry``);
2. acquired: read the era key again (another worker may have stored a hint
   meanwhile); a hint found: the lease goes back and the Conn connects with it; a
   miss: the Conn probes (``server/discover``, or the legacy fallback) holding the
   lease, and gives it back once the hint its connect found is written (or the
   connect failed, or the Conn went);
3. held by another worker: re-read at doubling intervals until the hint appears; past
   ``Limits.store_load_wait`` the Conn probes itself.

A Conn that comes while this process has a load under way for its endpoint starts at
step 1 (it finds the lease held, by another Conn here or another worker).  A failed
store, or one that does not answer within ``Limits.store_timeout``, is a miss: the
Conn probes.  What it counts goes into the fleet's era counters (``reads``, ``hits``,
``misses``, ``waits``, ``failures``, ``timeouts``; the fleet counts ``loads``, the
Conns that probe).

Only the era hint is shared, never a ``server/discover`` result: the client takes
nothing from that result but the version it negotiates, which the hint carries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .commands import Command, StoreOp
from .fleet_listings import POLL_FIRST, POLL_MAX
from .limits import Limits
from .store import (
    Acquired,
    AcquireLease,
    Found,
    Held,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    era_key,
    lease_key,
)
from .store_values import ValueCodec, era_from

__all__ = ["SharedEras"]

Remember = Callable[[str, "str | None", int], None]  # (endpoint, hint read, its version)


@dataclass(slots=True, eq=False)
class _Load:
    """One parked connect's load of its endpoint's era."""

    url: str
    key: str  # the era key
    phase: str = "lease"  # lease -> recheck | sleep -> poll -> sleep ...
    until: float | None = None  # a waiter probes itself past it
    pause: float = POLL_FIRST


class SharedEras:
    """The era loads of one driver's Conns (the module docstring).

    ``holder`` names this driver's leases (random, unique in the fleet); ``counts``
    and ``codec`` are the fleet's; ``remember`` tells the fleet each hint (or miss)
    read and its version, for the compare-and-set of the hint written later.
    """

    def __init__(
        self,
        limits: Limits,
        outbox: deque[Command],
        op_ids: Iterator[int],
        *,
        holder: str,
        prefix: str,
        codec: ValueCodec,
        counts: dict[str, int],
        remember: Remember,
    ) -> None:
        self.limits = limits
        self._outbox = outbox
        self._op_ids = op_ids
        self._holder = holder
        self._prefix = prefix
        self._codec = codec
        self.counts = counts
        self._remember = remember
        self._loads: dict[int, _Load] = {}  # conn id -> its parked load
        self._ops: dict[int, tuple[int, _Load]] = {}  # op id -> (conn id, its load)
        self._leases: dict[int, _Load] = {}  # conn id -> the load whose lease it holds
        self._after: dict[int, tuple[int, _Load]] = {}  # a write's op id -> the lease after it
        self._releases: set[int] = set()

    def __repr__(self) -> str:
        return f"SharedEras({len(self._loads)} waiting, {len(self._leases)} leases)"

    # ------------------------------------------------------------ the fleet's calls

    def busy(self, url: str) -> bool:
        """A load of ``url``'s era is under way here (a Conn waits or probes)."""
        loads = [*self._loads.values(), *self._leases.values()]
        return any(load.url == url for load in loads)

    def waits(self, conn_id: int) -> bool:
        return conn_id in self._loads

    def owns(self, op_id: int) -> bool:
        return op_id in self._ops or op_id in self._releases

    def start(self, conn_id: int, url: str, now: float) -> float:
        """``conn_id`` (parked) takes its endpoint's lease: the deadline of its wait."""
        load = self._loads[conn_id] = _Load(url, era_key(url, prefix=self._prefix))
        command = AcquireLease(
            key=lease_key(load.key),
            holder=self._holder_of(conn_id),
            ttl=self.limits.store_lease_expiry,
        )
        self._op(conn_id, load, command)
        return now + self.limits.store_timeout

    def answered(
        self, op_id: int, answer: StoreAnswer, now: float
    ) -> tuple[int, float | None, str | None] | None:
        """Take the answer to ``op_id`` (one of :meth:`owns`): (the parked Conn, its next
        deadline or None when it goes on, the hint it goes on with), or None."""
        if isinstance(answer, StoreFailed):
            self.counts["failures"] += 1
        if op_id in self._releases:
            self._releases.discard(op_id)
            return None
        conn_id, load = self._ops.pop(op_id)
        if self._loads.get(conn_id) is not load:  # the Conn went on or went meanwhile
            if isinstance(answer, Acquired):
                self._release(conn_id, load)
            return None
        if load.phase == "lease":
            if isinstance(answer, Acquired):
                self._leases[conn_id] = load
                load.phase = "recheck"
                self._read(conn_id, load)
                return conn_id, now + self.limits.store_timeout, None
            if isinstance(answer, Held):
                self.counts["waits"] += 1
                load.until = now + self.limits.store_load_wait
                return conn_id, self._sleep(conn_id, load, now), None
            return self._go(conn_id)  # (a failed store)
        if isinstance(answer, StoreFailed):
            return self._go(conn_id)
        hint = None
        if isinstance(answer, Found):
            hint = self._codec.open("era", answer.value, era_from)
            self._remember(load.url, hint, answer.version)
        elif isinstance(answer, Missing):
            self._remember(load.url, None, answer.version)
        if hint is not None:
            self.counts["hits"] += 1
            self.done(conn_id)
            return conn_id, None, hint
        self.counts["misses"] += 1
        if load.phase == "recheck":
            return self._go(conn_id)  # it probes, holding the lease
        return conn_id, self._sleep(conn_id, load, now), None

    def timer(self, conn_id: int, now: float) -> float | None:
        """``conn_id``'s deadline passed (one of :meth:`waits`): its next one (a waiter
        re-reads), or None when it goes on (the store did not answer in time)."""
        load = self._loads[conn_id]
        if load.phase == "sleep":
            load.phase = "poll"
            self._read(conn_id, load)
            return now + self.limits.store_timeout
        self.counts["timeouts"] += 1
        del self._loads[conn_id]
        return None

    def done(self, conn_id: int, write: int | None = None) -> None:
        """``conn_id``'s connect ended (or the Conn is gone): its lease goes back, after
        the answer to op ``write`` (the hint it found, written) when one is given."""
        self._loads.pop(conn_id, None)
        load = self._leases.pop(conn_id, None)
        if load is None:
            return
        if write is None:
            self._release(conn_id, load)
        else:
            self._after[write] = (conn_id, load)

    def written(self, op_id: int) -> None:
        """Op ``op_id`` (an era write) was answered: the lease that waited for it goes."""
        after = self._after.pop(op_id, None)
        if after is not None:
            self._release(*after)

    # ------------------------------------------------------------ the load's steps

    def _sleep(self, conn_id: int, load: _Load, now: float) -> float | None:
        """A waiter pauses before its next re-read; past its wait it probes itself."""
        assert load.until is not None
        if now >= load.until:
            del self._loads[conn_id]
            return None
        load.phase = "sleep"
        at = min(now + load.pause, load.until)
        load.pause = min(load.pause * 2, POLL_MAX)
        return at

    def _go(self, conn_id: int) -> tuple[int, None, None]:
        """The Conn probes (holding the lease, if it took it)."""
        del self._loads[conn_id]
        return conn_id, None, None

    def _holder_of(self, conn_id: int) -> str:
        return f"{self._holder}:{conn_id}"

    def _read(self, conn_id: int, load: _Load) -> None:
        self.counts["reads"] += 1
        self._op(conn_id, load, Read(key=load.key))

    def _release(self, conn_id: int, load: _Load) -> None:
        command = ReleaseLease(key=lease_key(load.key), holder=self._holder_of(conn_id))
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self._releases.add(op.op_id)
        self._outbox.append(op)

    def _op(self, conn_id: int, load: _Load, command: StoreCommand) -> None:
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self._ops[op.op_id] = (conn_id, load)
        self._outbox.append(op)
