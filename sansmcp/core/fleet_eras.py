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

A Conn whose load ends without a hint while it holds the lease (its connect failed:
refused, timed out, an answer that is no MCP server's; or the Conn went) leaves a *no
hint mark* under the era key (``{"scope": "unshared"}``, for
``Limits.store_lease_expiry``, by compare-and-set on the version it read there, so it
never replaces a hint) before its lease goes: a waiter that reads the mark probes at
once instead of re-reading until ``store_load_wait``, and so does a Conn that reads it
first (no lease taken).  A hint written later replaces the mark.

A Conn that comes while this process has a load under way for its endpoint starts at
step 1 (it finds the lease held, by another Conn here or another worker).  A failed
store, or one that does not answer within ``Limits.store_timeout``, is a miss: the
Conn probes.  What it counts goes into the fleet's era counters (``reads``, ``hits``,
``misses``, ``waits``, ``waited_out`` (waiters that probed past ``store_load_wait``),
``unshared`` (Conns that read the no hint mark and probed at once), ``writes`` (the
marks too), ``failures``, ``timeouts``; the fleet counts ``loads``, the Conns that
probe).  A value read that is neither a hint nor the mark is a miss, counted in the
codec's ``misses``.

Only the era hint is shared, never a ``server/discover`` result: the client takes
nothing from that result but the version it negotiates, which the hint carries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .commands import Command, StoreOp
from .fleet_listings import POLL_FIRST, POLL_MAX
from .limits import Limits
from .store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Found,
    Held,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    Written,
    era_key,
    lease_key,
)
from .store_values import ValueCodec, era_from

__all__ = ["NO_HINT_MARK", "SharedEras", "hint_or_mark"]

Remember = Callable[[str, "str | None", int], None]  # (endpoint, hint read, its version)

NO_HINT_MARK = {"scope": "unshared"}  # the last load stored no hint here: probe at once
MARKED = ""  # what the mark opens as (a hint is never empty)


def hint_or_mark(body: Mapping[str, Any]) -> str | None:
    """An era value's body: its hint, :data:`MARKED` for the no hint mark, or None (a
    miss, counted by the codec)."""
    return MARKED if body == NO_HINT_MARK else era_from(body)


@dataclass(slots=True, eq=False)
class _Load:
    """One parked connect's load of its endpoint's era."""

    url: str
    key: str  # the era key
    phase: str = "lease"  # lease -> recheck | sleep -> poll -> sleep ...
    until: float | None = None  # a waiter probes itself past it
    pause: float = POLL_FIRST
    seen: int = 0  # the era key's version read under the lease (0: none read)


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
        self._marks: dict[int, str] = {}  # a no hint mark's op id -> its endpoint
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
            hint = self._codec.open("era", answer.value, hint_or_mark)
        marked = hint == MARKED
        if marked:
            hint = None
        if isinstance(answer, Found | Missing):
            load.seen = answer.version
            self._remember(load.url, hint, answer.version)
        if hint is not None:
            self.counts["hits"] += 1
            self.done(conn_id)
            return conn_id, None, hint
        self.counts["misses"] += 1
        if load.phase == "recheck":
            return self._go(conn_id)  # it probes, holding the lease
        if marked:  # the load under way ended without a hint: probe at once
            self.counts["unshared"] += 1
            return self._go(conn_id)
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
        """``conn_id``'s operation succeeded: its lease goes back, after the answer to op
        ``write`` (the hint it found, written) when one is given."""
        self._loads.pop(conn_id, None)
        load = self._leases.pop(conn_id, None)
        if load is None:
            return
        if write is None:
            self._release(conn_id, load)
        else:
            self._after[write] = (conn_id, load)

    def failed(self, conn_id: int) -> None:
        """``conn_id``'s operation failed (or the Conn is gone): holding the lease, it
        leaves the no hint mark, and its lease goes back after the mark's answer."""
        self._loads.pop(conn_id, None)
        load = self._leases.pop(conn_id, None)
        if load is None:
            return
        value = self._codec.seal("era", NO_HINT_MARK)
        if value is None:  # (a bound too small even for the mark)
            self._release(conn_id, load)
            return
        ttl = self.limits.store_lease_expiry
        command = CompareAndSet(key=load.key, value=value, expected=load.seen, ttl=ttl)
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self.counts["writes"] += 1
        self._marks[op.op_id] = load.url
        self._after[op.op_id] = (conn_id, load)
        self._outbox.append(op)

    def written(self, op_id: int, answer: StoreAnswer) -> None:
        """Op ``op_id`` (an era write) was answered: the lease that waited for it goes;
        a mark written is the version known stored (a hint written later replaces it)."""
        url = self._marks.pop(op_id, None)
        if url is not None and isinstance(answer, Written):
            self._remember(url, None, answer.version)
        after = self._after.pop(op_id, None)
        if after is not None:
            self._release(*after)

    # ------------------------------------------------------------ the load's steps

    def _sleep(self, conn_id: int, load: _Load, now: float) -> float | None:
        """A waiter pauses before its next re-read; past its wait it probes itself."""
        assert load.until is not None
        if now >= load.until:
            self.counts["waited_out"] += 1
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
