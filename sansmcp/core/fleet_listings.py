"""Tool listings through the shared store: a cold listing loaded once per fleet.

Theory of operation
-------------------
With a shared store, ``list_tools`` (not ``fresh``) on a connected Conn whose
Client-wide cache (:mod:`sansmcp.core.cache`) has no fresh listing for its caller asks
the store first (:class:`SharedListings`, held by :class:`~sansmcp.core.fleet.Fleet`).
One store value holds one whole listing -- every page with its ``ttlMs`` and its expiry
in seconds since the epoch (:func:`~sansmcp.core.store_values.listing_body`) -- under
:func:`~sansmcp.core.store.listing_key`: endpoint URL, the version the local cache keys
it under (the protocol version, plus ``" tasks"`` when the Conn runs 2025-11-25 tasks:
such a listing keeps the tools whose ``taskSupport`` is ``"required"``, is read back
with tasks on, and never reaches a Conn without them), ``tools/list`` and, for a
``private`` listing, the caller's :func:`~sansmcp.core.store.fleet_identity`
(HMAC-SHA256 under the fleet secret of what identifies the caller, never the token).  The rules are today's: a ``public`` listing
serves every caller, a ``private`` one only the same credential (an OAuth Conn, whose
identity is its token store's, shares public listings only), a listing with a page
that may not be served (no ``ttlMs``) is not stored; and only a listing the machine
stored whole in the local cache reaches the store, so an empty (no tool), partial or
failed one never does.

The Conn waits (parked by the driver: busy) through a double-checked load:

1. read the public key and, with an identity, the private one: a fresh value found
   goes into the local cache and the operation is served from it (no request);
2. on a miss, take the load lease (``Limits.store_lease_expiry``) of the public key --
   the endpoint's, whatever the credential, so a ``public`` listing is loaded once per
   fleet; acquired: read again (another worker may have stored it meanwhile), then list
   from the server holding the lease, store the listing, release the lease;
3. held by another worker: re-read at doubling intervals until the listing appears;
   past ``Limits.store_load_wait`` (from the first lease held) the Conn lists from the
   server itself.

A ``private`` listing is stored under the caller's key, and a *private mark* (a
``listing`` value ``{"scope": "private"}``, for the listing's ttl) under the public
key: a Conn that reads the mark takes the lease of its own private key instead, so
each credential loads its private listing once, in parallel with the others; without
an identity (no secret, an OAuth Conn) it lists at once (nothing it could wait for).

A Conn that listed holding a lease but stored nothing under that lease's key (the
server sent no ``ttlMs``, an empty listing, one over ``Limits.max_store_value_bytes``)
leaves an *unshared mark* there (``{"scope": "unshared"}``, for
``Limits.store_lease_expiry``): the key will not be written by this load, so a waiter
that reads the mark lists at once instead of re-reading until ``store_load_wait``, and
so does a Conn that reads it first (no lease taken).  Most servers send no cache hints:
without the mark every concurrent ``list_tools`` of such an endpoint would wait out
``store_load_wait`` behind the one listing it.

An invalidation (``tools/list_changed``, a call that says a cached tool is stale) reaches
the store when the Conn's operation ends, succeeded or failed: the listing this process
read or wrote there is deleted by delete-if-version (one another worker stored since
stays), and a stored listing received before the invalidation is stale in this process
whatever the store still holds (a delete that lost a race, a write under way).  A
listing stored after an invalidation replaces the stored one by compare-and-set on the
version known; one invalidated after it was stored is not shared.

A failed store, or one that does not answer within ``Limits.store_timeout``, is a miss
(counted): the operation goes on and lists from the server.  A value that does not
open (oversized, undecodable, a tool a server's listing would have skipped, an expiry
out of range) is a miss, counted in ``codec.misses``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cache import LIST_METHOD, CachedPage, credential_parts
from .commands import Command, StoreOp
from .limits import Limits
from .mcp.toolset import TASKS_KEY
from .messages import is_modern
from .store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    DeleteIfVersion,
    Found,
    Held,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreFailed,
    Written,
    fleet_identity,
    lease_key,
    listing_key,
)
from .store_values import StoredPage, ValueCodec, listing_body, listing_from

if TYPE_CHECKING:
    from .conn import ConnRecord

__all__ = ["POLL_FIRST", "POLL_MAX", "SharedListings"]

POLL_FIRST = 0.02  # a waiter's first re-read, after another worker's lease was found
POLL_MAX = 0.5  # the longest pause between two re-reads
LEASE_SUFFIX = lease_key("")  # what lease_key appends to the key it guards
KEPT = 1024  # keys whose version (and invalidation) this process remembers


PRIVATE_MARK = {"scope": "private"}  # under the public key: the listing is private
UNSHARED_MARK = {"scope": "unshared"}  # the last load stored nothing here: list at once


@dataclass(slots=True)
class _Load:
    """One parked ``list_tools``: the keys it reads (public, then private), the lease it
    would take, the answers so far and where it is in the load."""

    version: str  # the local cache's (" tasks" appended with tasks)
    modern: bool
    keys: list[str]
    lease: str
    phase: str = "read"  # read -> lease -> recheck | sleep -> poll -> sleep ...
    answers: dict[str, StoreAnswer] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # key -> the version read there
    until: float | None = None  # a waiter loads itself past it
    pause: float = POLL_FIRST
    marked: bool = False  # the public key holds the private mark
    unshared: bool = False  # a key read holds the unshared mark


class SharedListings:
    """Listings of one driver's Conns through the shared store (the module docstring).

    ``secret`` (the fleet's) keys private listings (None: only public ones are shared);
    ``holder`` names this driver's leases (random, unique in the fleet); ``wall_clock``
    (seconds since the epoch) dates what is stored.  ``counts``: ``reads``, ``hits``,
    ``misses``, ``loads`` (Conns that list from the server), ``waits`` (a lease held by
    another), ``waited_out`` (waiters that listed past ``store_load_wait``),
    ``unshared`` (Conns that read the unshared mark and listed at once), ``failures``,
    ``timeouts``, ``writes``, ``conflicts``, ``deletes``.
    """

    def __init__(
        self,
        limits: Limits,
        outbox: deque[Command],
        op_ids: Iterator[int],
        *,
        secret: bytes | None,
        holder: str,
        wall_clock: Callable[[], float],
        prefix: str,
    ) -> None:
        self.limits = limits
        self.codec = ValueCodec(limits.max_store_value_bytes)
        self._outbox = outbox
        self._op_ids = op_ids
        self._secret = secret
        self._holder = holder
        self._wall = wall_clock
        self._prefix = prefix
        self._loads: dict[int, _Load] = {}  # conn id -> its parked load
        self._ops: dict[int, tuple[int, str]] = {}  # op id -> (conn id, key read or leased)
        # conn id -> (the lease it holds or None, the versions it read) while it lists
        self._loading: dict[int, tuple[str | None, dict[str, int]]] = {}
        self._unawaited: dict[int, str | None] = {}  # writes (their key) and releases
        # key -> the version known stored there (read or written here), and key -> when
        # (wall clock) this process invalidated what it held: older stored pages are stale
        self._versions: OrderedDict[str, int] = OrderedDict()
        self._stale: OrderedDict[str, float] = OrderedDict()
        self.counts = dict.fromkeys(
            (
                "reads",
                "hits",
                "misses",
                "loads",
                "waits",
                "waited_out",
                "unshared",
                "failures",
                "timeouts",
                "writes",
                "conflicts",
                "deletes",
            ),
            0,
        )

    def __repr__(self) -> str:
        return f"SharedListings({len(self._loads)} waiting, {self.counts})"

    # ------------------------------------------------------------ the driver's calls

    def park(self, conn: ConnRecord, now: float) -> float | None:
        """The deadline of ``conn``'s wait for the store (its reads emitted), or None:
        its ``list_tools`` goes on at once (not connected, or served locally)."""
        cache, version = conn.cache, conn.machine.toolset.cache_version()
        limits = self.limits
        if cache is None or version is None or conn.view.conn_id in self._loads:
            return None
        local = cache.listing(
            version,
            now=now,
            max_pages=limits.max_tool_pages,
            max_recorded_skips=limits.max_recorded_skips,
        )
        if local is not None:
            return None
        keys = [self._key(conn, version, None)]
        identity = self._identity(conn)
        if identity is not None:
            keys.append(self._key(conn, version, identity))
        load = _Load(version, is_modern(version.removesuffix(TASKS_KEY)), keys, lease_key(keys[0]))
        self._loads[conn.view.conn_id] = load
        self._read(conn.view.conn_id, load)
        return now + limits.store_timeout

    def answered(
        self, op_id: int, answer: StoreAnswer, conns: Mapping[int, ConnRecord], now: float
    ) -> tuple[int, float | None] | None:
        """Take the answer to ``op_id`` (one of :meth:`owns`): (the parked Conn, its next
        deadline or None when its ``list_tools`` goes on), or None (nothing waits)."""
        if isinstance(answer, StoreFailed):
            self.counts["failures"] += 1
        if op_id in self._unawaited:
            written = self._unawaited.pop(op_id)
            self.counts["conflicts"] += isinstance(answer, Conflict)
            if written is not None and isinstance(answer, Written):
                _keep(self._versions, written, answer.version)
            return None
        conn_id, key = self._ops.pop(op_id)
        load = self._loads.get(conn_id)
        conn = conns.get(conn_id)
        if conn is None or load is None:
            if isinstance(answer, Acquired):  # its Conn went meanwhile: give it back
                self._release(conn_id, key)
            return None
        return conn_id, self._step(conn, load, key, answer, now)

    def _step(
        self, conn: ConnRecord, load: _Load, key: str, answer: StoreAnswer, now: float
    ) -> float | None:
        conn_id = conn.view.conn_id
        if load.phase == "lease":
            return self._leased(conn, load, answer, now)
        if isinstance(answer, StoreFailed):
            return self._go(conn_id, load, lease=load.lease if load.phase == "recheck" else None)
        load.answers[key] = answer
        if len(load.answers) < len(load.keys):
            return now + self.limits.store_timeout  # (the other key's answer is due)
        if self._serve(conn, load, now):
            if load.phase == "recheck":
                self._release(conn_id, load.lease)
            self.counts["hits"] += 1
            del self._loads[conn_id]
            return None
        self.counts["misses"] += 1
        if load.phase == "recheck":
            return self._go(conn_id, load, lease=load.lease)
        if load.unshared:  # nothing will be stored by the load under way: list at once
            self.counts["unshared"] += 1
            return self._go(conn_id, load, lease=None)
        if load.marked and load.lease == lease_key(load.keys[0]):
            # a private listing: the lease of the caller's own key, if it has one
            if len(load.keys) == 1:
                return self._go(conn_id, load, lease=None)
            load.lease = lease_key(load.keys[1])
        elif load.phase != "read":
            return self._sleep(conn_id, load, now)  # (a waiter's re-read)
        load.phase = "lease"
        self._op(
            conn_id,
            load.lease,
            AcquireLease(
                key=load.lease,
                holder=self._holder_of(conn_id),
                ttl=self.limits.store_lease_expiry,
            ),
        )
        return now + self.limits.store_timeout

    def waits(self, conn_id: int) -> bool:
        """``conn_id`` is parked here."""
        return conn_id in self._loads

    def owns(self, op_id: int) -> bool:
        return op_id in self._ops or op_id in self._unawaited

    def timer(self, conn_id: int, now: float) -> float | None:
        """``conn_id``'s deadline passed: its next one (a waiter re-reads), or None
        when its ``list_tools`` goes on (the store did not answer in time)."""
        load = self._loads.get(conn_id)
        if load is None:
            return None
        if load.phase == "sleep":
            load.phase = "poll"
            self._read(conn_id, load)
            return now + self.limits.store_timeout
        self.counts["timeouts"] += 1
        lease = load.lease if load.phase == "recheck" else None
        return self._go(conn_id, load, lease=lease)

    def listed(self, conn: ConnRecord, now: float) -> None:
        """``conn``'s operation succeeded: share the listings it stored in the local
        cache and the invalidations it made, then release its lease."""
        conn_id = conn.view.conn_id
        lease, seen = self._loading.pop(conn_id, (None, {}))
        cache = conn.cache
        written: set[str] = set()
        if cache is not None and cache.journal:
            journal, cache.journal = cache.journal, []
            for at, (version, pages, public) in enumerate(journal):
                # the last word on a version counts: a listing stored after an
                # invalidation replaces it, one invalidated since is not shared
                if any(v == version and (p is None) != (pages is None) for v, p, _ in journal[at:]):
                    continue
                if pages is not None:
                    written |= self._share(conn, version, pages, public, seen, now)
                else:
                    self._drop(conn, version)
        if lease is not None:
            key = lease.removesuffix(LEASE_SUFFIX)
            if key not in written:  # its waiters would wait for nothing: tell them
                self._mark_unshared(key, seen)
            self._release(conn_id, lease)

    def done(self, conn_id: int, conn: ConnRecord | None = None) -> None:
        """``conn_id`` failed or is gone: share the invalidations it made (its listings
        wait for an operation that succeeds), forget its wait, release its lease."""
        cache = None if conn is None else conn.cache
        if cache is not None and cache.journal:
            assert conn is not None
            for version, pages, _ in cache.journal:
                if pages is None:
                    self._drop(conn, version)
            cache.journal = [entry for entry in cache.journal if entry[1] is not None]
        self._loads.pop(conn_id, None)
        lease, _ = self._loading.pop(conn_id, (None, {}))
        if lease is not None:
            self._release(conn_id, lease)

    # ------------------------------------------------------------ the load's steps

    def _leased(
        self, conn: ConnRecord, load: _Load, answer: StoreAnswer, now: float
    ) -> float | None:
        conn_id = conn.view.conn_id
        if isinstance(answer, Acquired):
            load.phase = "recheck"
            self._read(conn_id, load)
            return now + self.limits.store_timeout
        if isinstance(answer, Held):
            self.counts["waits"] += 1
            if load.until is None:  # (from the first lease held: a private one may follow)
                load.until = now + self.limits.store_load_wait
            return self._sleep(conn_id, load, now)
        return self._go(conn_id, load, lease=None)  # (a failed store)

    def _sleep(self, conn_id: int, load: _Load, now: float) -> float | None:
        """A waiter pauses before its next re-read; past its wait it lists itself."""
        assert load.until is not None
        if now >= load.until:
            self.counts["waited_out"] += 1
            return self._go(conn_id, load, lease=None)
        load.phase = "sleep"
        at = min(now + load.pause, load.until)
        load.pause = min(load.pause * 2, POLL_MAX)
        return at

    def _go(self, conn_id: int, load: _Load, *, lease: str | None) -> float | None:
        """The Conn lists from the server (holding ``lease``, if one)."""
        del self._loads[conn_id]
        self.counts["loads"] += 1
        self._loading[conn_id] = (lease, load.seen)
        return None

    def _serve(self, conn: ConnRecord, load: _Load, now: float) -> bool:
        """A fresh stored listing (private first) goes into the local cache."""
        cache = conn.cache
        assert cache is not None
        wall = self._wall()
        limits = self.limits
        tasks = load.version.endswith(TASKS_KEY)

        def opened(body: Any) -> list[StoredPage] | str | None:
            scope = body.get("scope")
            if scope in ("private", "unshared"):
                return str(scope)  # a mark (a stored listing has a page)
            return listing_from(
                body,
                modern=load.modern,
                max_tool_bytes=limits.max_tool_bytes,
                max_pages=limits.max_tool_pages,
                tasks=tasks,
            )

        served = False
        for index in reversed(range(len(load.keys))):
            key = load.keys[index]
            answer = load.answers.pop(key)
            if isinstance(answer, Missing):
                load.seen[key] = answer.version
                continue
            assert isinstance(answer, Found)
            load.seen[key] = answer.version
            pages = (
                None
                if served
                else self.codec.open("listing", answer.value, opened, reuse=load.version)
            )
            if pages == "unshared":
                load.unshared = True
                continue
            if pages == "private":
                load.marked = not index  # (a mark under the private key: a miss)
                continue
            if not isinstance(pages, list) or any(
                expires <= wall or expires - page.ttl_ms / 1000 < self._stale.get(key, 0.0)
                for _, page, expires in pages
            ):
                continue  # (stale, or received before this process invalidated it)
            _keep(self._versions, key, answer.version)
            # (received at most now: a page stays fresh here no longer than its ttl)
            local = [
                (c, page, min(now, now + (expires - wall) - page.ttl_ms / 1000))
                for c, page, expires in pages
            ]
            identity = cache.identity() if index else None
            cache.cache.store_listing(cache.url, load.version, identity, local, public=not index)
            served = True
        return served

    def _share(
        self,
        conn: ConnRecord,
        version: str,
        pages: list[tuple[str | None, CachedPage, float]],
        public: bool,
        seen: dict[str, int],
        now: float,
    ) -> set[str]:
        """Write one listing the Conn got from its server (never an empty one); a
        private one with the private mark under the public key.  The keys written."""
        if not any(page.tools for _, page, _ in pages):
            return set()
        wall = self._wall()
        stored = [
            (c, page, wall + received + page.ttl_ms / 1000 - now) for c, page, received in pages
        ]
        ttl = min(expires for _, _, expires in stored) - wall
        if ttl <= 0:
            return set()
        identity = None if public else self._identity(conn)
        writes: list[tuple[bytes | None, Mapping[str, Any]]]
        writes = [] if public or identity is None else [(identity, listing_body(stored))]
        writes.append((None, listing_body(stored) if public else PRIVATE_MARK))
        written: set[str] = set()
        for owner, body in writes:
            value = self.codec.seal("listing", body)
            if value is None:
                continue
            key = self._key(conn, version, owner)
            written.add(key)
            self._write(key, value, seen, ttl)
        return written

    def _mark_unshared(self, key: str, seen: dict[str, int]) -> None:
        """Leave the unshared mark under ``key``: the load that held its lease stored
        nothing there (the module docstring)."""
        value = self.codec.seal("listing", UNSHARED_MARK)
        if value is not None:
            self._write(key, value, seen, self.limits.store_lease_expiry)

    def _write(self, key: str, value: bytes, seen: dict[str, int], ttl: float) -> None:
        self.counts["writes"] += 1
        expected = seen.get(key, self._versions.get(key, 0))
        self._emit(CompareAndSet(key=key, value=value, expected=expected, ttl=ttl), key)

    def _drop(self, conn: ConnRecord, version: str) -> None:
        """``conn`` invalidated its listings at ``version`` (``tools/list_changed``, a
        stale tool): what was read or written here before is stale in this process, and
        deleted from the store when its version is known (by delete-if-version: a
        listing another worker stored since stays)."""
        identity = self._identity(conn)
        wall = self._wall()
        for owner in (None, identity) if identity is not None else (None,):
            key = self._key(conn, version, owner)
            _keep(self._stale, key, wall)
            known = self._versions.pop(key, 0)
            if known:
                self.counts["deletes"] += 1
                self._emit(DeleteIfVersion(key=key, version=known))

    # ------------------------------------------------------------ keys and commands

    def _identity(self, conn: ConnRecord) -> bytes | None:
        if self._secret is None or conn.auth is not None:
            return None
        return fleet_identity(self._secret, credential_parts(conn.machine.settings))

    def _key(self, conn: ConnRecord, version: str, identity: bytes | None) -> str:
        url = conn.machine.settings.endpoint.url
        return listing_key(url, version, LIST_METHOD, None, identity, prefix=self._prefix)

    def _holder_of(self, conn_id: int) -> str:
        return f"{self._holder}:{conn_id}"

    def _read(self, conn_id: int, load: _Load) -> None:
        load.answers.clear()
        for key in load.keys:
            self.counts["reads"] += 1
            self._op(conn_id, key, Read(key=key))

    def _release(self, conn_id: int, lease: str) -> None:
        self._emit(ReleaseLease(key=lease, holder=self._holder_of(conn_id)))

    def _op(self, conn_id: int, key: str, command: Any) -> None:
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self._ops[op.op_id] = (conn_id, key)
        self._outbox.append(op)

    def _emit(self, command: Any, written: str | None = None) -> None:
        """A command whose answer nothing waits for (a write of key ``written``, a
        release, a delete)."""
        op = StoreOp(op_id=next(self._op_ids), command=command)
        self._unawaited[op.op_id] = written
        self._outbox.append(op)


def _keep(kept: OrderedDict[str, Any], key: str, value: Any) -> None:
    """Remember ``value`` for ``key``, the oldest forgotten past :data:`KEPT` keys."""
    kept[key] = value
    kept.move_to_end(key)
    if len(kept) > KEPT:
        kept.popitem(last=False)
