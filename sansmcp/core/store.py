"""The store seam: shared state as commands and answers, and the in-process store.

Theory of operation
-------------------
State a fleet of processes shares -- OAuth tokens and client registrations, pending
authorizations, listing pages and ``server/discover`` results, era hints -- lives in a
*store*, and a store is I/O like a socket: the core never calls one.  It builds a
:data:`StoreCommand` (:class:`Read`, :class:`CompareAndSet`, :class:`DeleteIfVersion`,
:class:`Take`, :class:`AcquireLease`, :class:`ReleaseLease`); the adapter performs it
on the embedder's store and hands back one :data:`StoreAnswer`.  :class:`MemoryStore`
(here, pure: ``now`` comes in) is the default, one process's store;
``sansmcp.stores.RedisStore`` serves a fleet; an embedder's own store keeps the contract:

* every operation touches one key and is atomic;
* a value has a *version*: an int in ``1 .. 2**63 - 1`` that differs from every earlier
  version of its key, deleted or not (a counter here, 63 random bits in Redis); ``0``
  means "absent".  Versions are compared for equality only, never ordered;
* :class:`CompareAndSet` writes only when the key's version is ``expected`` (``0``: only
  when absent) and answers :class:`Written` (the new version) or :class:`Conflict` (the
  version found); :class:`DeleteIfVersion` likewise (:class:`Deleted` or
  :class:`Conflict`); :class:`Take` answers :class:`Found` and deletes in one step, so
  of two takers one misses;
* every written key has a TTL (nothing lives forever in the embedder's store);
* a lease is a key held by a ``holder`` token until released by that token
  (:class:`Released`, else :class:`NotHeld`) or until it expires;
* a value whose stored form is unreadable is a miss: :class:`Missing` carries its
  version when the store can still read that (a compare-and-set on it replaces the
  value), else it counts as absent (version ``0``);
* a failure is the answer :class:`StoreFailed` (``reason``), never an exception.

**Keys** are pure functions of what they name: ``<prefix>:<kind>:<hex SHA-256 of the
length-prefixed parts>``, so a key is bounded whatever the URL, holds no secret and no
cluster hash tag.  A ``private`` listing is keyed by :func:`fleet_identity`:
HMAC-SHA256 of the caller's credential parts under a secret every worker of the fleet
shares -- the same caller matches on every worker, the token itself is never a key.

**Values** read back are untrusted: :mod:`sansmcp.core.store_values` owns their
layout and opens them defensively (a miss, counted, never an exception).  What a failed store means is the caller's policy (:func:`degraded`: a
cache lookup goes on with a miss; :func:`store_error`: a token operation fails with
``ConnectionFailed(cause="store")``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, assert_never

from .errors import CallerError, ConnectionFailed

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_STORE_TTL",
    "MAX_VERSION",
    "AcquireLease",
    "Acquired",
    "CompareAndSet",
    "Conflict",
    "DeleteIfVersion",
    "Deleted",
    "Found",
    "Held",
    "MemoryStore",
    "Missing",
    "NotHeld",
    "Read",
    "ReleaseLease",
    "Released",
    "StoreAnswer",
    "StoreCommand",
    "StoreFailed",
    "Take",
    "Written",
    "degraded",
    "era_key",
    "fleet_identity",
    "lease_key",
    "listing_key",
    "pending_key",
    "registration_key",
    "store_error",
    "store_key",
    "token_key",
]

DEFAULT_PREFIX = "sansmcp"
MAX_PREFIX_CHARS = 64
MAX_KEY_CHARS = 256  # a built key is ~80 characters; an embedder's key must fit too
MAX_HOLDER_CHARS = 128
MAX_STORE_TTL = 30 * 86_400.0  # 30 days: the longest any key lives
MAX_VALUE_CEILING = 64 << 20  # no command carries more, whatever Limits say
MAX_VERSION = 2**63 - 1
_MAX_DETAIL_CHARS = 300


# -- commands ------------------------------------------------------------------


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
        raise CallerError(
            f"a store key is a str of 1 to {MAX_KEY_CHARS} characters; got {key!r:.80}"
        )


def _check_ttl(ttl: object) -> None:
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_STORE_TTL
    ):
        raise CallerError(
            f"a store TTL is a finite number of seconds in (0, {MAX_STORE_TTL:,.0f}]; got {ttl!r:.40}"
        )


def _check_version(version: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        raise CallerError(f"a store version is an int in 0 .. 2**63 - 1; got {version!r:.40}")


def _check_holder(holder: object) -> None:
    if not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER_CHARS:
        raise CallerError(f"a lease holder is a str of 1 to {MAX_HOLDER_CHARS} characters")


@dataclass(frozen=True, slots=True, kw_only=True)
class Read:
    """Read ``key``: :class:`Found` (value and version) or :class:`Missing`."""

    key: str

    def __post_init__(self) -> None:
        _check_key(self.key)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareAndSet:
    """Write ``value`` (living ``ttl`` seconds) when ``key``'s version is ``expected``
    (0: only when absent): :class:`Written` or :class:`Conflict`."""

    key: str
    value: bytes
    expected: int
    ttl: float

    def __post_init__(self) -> None:
        _check_key(self.key)
        if not isinstance(self.value, bytes) or len(self.value) > MAX_VALUE_CEILING:
            raise CallerError(f"a store value is at most {MAX_VALUE_CEILING:,} bytes")
        _check_version(self.expected)
        _check_ttl(self.ttl)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteIfVersion:
    """Delete ``key`` when its version is ``version``: :class:`Deleted` or :class:`Conflict`."""

    key: str
    version: int

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_version(self.version)


@dataclass(frozen=True, slots=True, kw_only=True)
class Take:
    """Read ``key`` and delete it in one step: :class:`Found` (to one taker only) or
    :class:`Missing`."""

    key: str

    def __post_init__(self) -> None:
        _check_key(self.key)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcquireLease:
    """Hold the lease ``key`` for ``ttl`` seconds as ``holder`` when no one holds it:
    :class:`Acquired` or :class:`Held`."""

    key: str
    holder: str
    ttl: float

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_holder(self.holder)
        _check_ttl(self.ttl)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseLease:
    """Release the lease ``key`` when ``holder`` holds it: :class:`Released` or
    :class:`NotHeld` (expired, or taken by another since)."""

    key: str
    holder: str

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_holder(self.holder)


StoreCommand = Read | CompareAndSet | DeleteIfVersion | Take | AcquireLease | ReleaseLease


# -- answers -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """The key's value (bytes, untrusted) and its version."""

    value: bytes
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Missing:
    """No usable value: never written, deleted, expired, or unreadable.  ``version`` is
    that of an unreadable value still stored (sealed under a key this worker does not
    hold, too big), so a compare-and-set may replace it; 0 when there is none."""

    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """The compare-and-set wrote; ``version`` is the value's new version."""

    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    """The key's version was not the one expected; ``version`` is the one found (0: absent)."""

    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Deleted:
    """The key was deleted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Acquired:
    """The lease is the holder's until it expires or is released."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """Another holder has the lease."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    """The holder's lease was released."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotHeld:
    """The holder did not hold the lease (it expired, maybe taken by another since)."""


FailReason = Literal["unavailable", "timeout", "refused", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreFailed:
    """The operation did not happen, or its outcome is unknown.

    ``reason``: ``"unavailable"`` (no connection: refused, reset, the server restarted),
    ``"timeout"`` (past ``Limits.store_timeout``), ``"refused"`` (the store answered
    with an error: out of memory, read-only replica, wrong type), ``"failed"``
    (anything else).  ``detail`` is at most 300 characters.
    """

    reason: FailReason
    detail: str

    def __post_init__(self) -> None:
        if len(self.detail) > _MAX_DETAIL_CHARS:
            object.__setattr__(self, "detail", self.detail[: _MAX_DETAIL_CHARS - 3] + "...")


StoreAnswer = (
    Found
    | Missing
    | Written
    | Conflict
    | Deleted
    | Acquired
    | Held
    | Released
    | NotHeld
    | StoreFailed
)


def degraded(answer: StoreAnswer) -> StoreAnswer:
    """A cache lookup's policy (listings, discover results, era hints): a failed store
    is a miss, and the work item goes on."""
    return Missing() if isinstance(answer, StoreFailed) else answer


def store_error(failed: StoreFailed, what: str) -> ConnectionFailed:
    """A token operation's policy: a failed store ends it, classified and named.  A
    timed-out operation may still happen after its answer was given up (a paused Redis
    runs the command it had read on waking): being a compare-and-set or delete-if-version,
    it applies only to the version read, never over newer tokens."""
    if failed.reason == "timeout":
        bound: str | None = "store_timeout"
        outcome = (
            "its outcome is unknown: a write or delete it carried applies, if ever, only "
            "to the version read, never over newer tokens"
        )
    else:
        bound, outcome = None, "no token was written or deleted"
    return ConnectionFailed(
        f"the store failed while {what} ({failed.reason}: {failed.detail}); {outcome}",
        cause="store",
        bound=bound,
    )


# -- keys ----------------------------------------------------------------------

Part = str | bytes | None


def store_key(kind: str, parts: Sequence[Part], *, prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>:<kind>:<digest>``, the digest a SHA-256 of the length-prefixed
    ``parts`` (None, a str and the same bytes never digest alike)."""
    if not isinstance(prefix, str) or not 0 < len(prefix) <= MAX_PREFIX_CHARS:
        raise CallerError(f"a store prefix is a str of 1 to {MAX_PREFIX_CHARS} characters")
    import hashlib  # here: a plain work item builds no key (``import sansmcp`` stays light)

    digest = hashlib.sha256(kind.encode())
    for part in parts:
        if part is None:
            digest.update(b"\x00")
            continue
        tag, data = (
            (b"\x01", part.encode("utf-8", "surrogatepass"))
            if isinstance(part, str)
            else (b"\x02", part)
        )
        digest.update(tag + len(data).to_bytes(8, "big") + data)
    return f"{prefix}:{kind}:{digest.hexdigest()}"


def token_key(
    issuer: str, client_id: str, resource: str, tenant: str | None, *, prefix: str = DEFAULT_PREFIX
) -> str:
    """Tokens: one grant, by its issuer, client id and resource, per tenant (the
    embedder's subject key; None: one tenant)."""
    return store_key("tokens", [issuer, client_id, resource, tenant], prefix=prefix)


def registration_key(issuer: str, tenant: str | None, *, prefix: str = DEFAULT_PREFIX) -> str:
    """A client registration at the authorization server ``issuer``."""
    return store_key("registration", [issuer, tenant], prefix=prefix)


def pending_key(state: str, *, prefix: str = DEFAULT_PREFIX) -> str:
    """A pending authorization, by its ``state``."""
    return store_key("pending", [state], prefix=prefix)


def listing_key(
    url: str,
    version: str,
    method: str,
    cursor: str | None,
    identity: bytes | None,
    *,
    prefix: str = DEFAULT_PREFIX,
) -> str:
    """A listing page or a ``server/discover`` result, as the spec keys it; ``identity``
    (:func:`fleet_identity`) for a ``private`` one, None for a ``public`` one."""
    return store_key("listing", [url, version, method, cursor, identity], prefix=prefix)


def era_key(url: str, *, prefix: str = DEFAULT_PREFIX) -> str:
    """The era hint (the protocol version last negotiated) of the endpoint ``url``."""
    return store_key("era", [url], prefix=prefix)


def lease_key(key: str) -> str:
    """The lease guarding ``key`` (a refresh of its tokens, a load of its listing)."""
    return f"{key}:lease"


def fleet_identity(secret: bytes, parts: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """HMAC-SHA256 under the fleet's ``secret`` of a caller's credential parts
    (``cache.credential_parts``); None when there is none (nothing private is shared)."""
    if not parts:
        return None
    import hashlib
    import hmac

    mac = hmac.new(secret, b"sansmcp-listing", hashlib.sha256)
    for name, value in parts:  # length-prefixed: no two part lists digest alike
        mac.update(len(name).to_bytes(4, "big") + name + len(value).to_bytes(4, "big") + value)
    return mac.digest()


# -- the in-process store ------------------------------------------------------

MEMORY_MAX_ENTRIES = 4096


@dataclass(slots=True)
class _Entry:
    value: bytes
    version: int
    expires: float


class MemoryStore:
    """The default store: one process's keys in a dict, bounded.

    Pure: ``execute(command, now=)`` takes the adapter's clock.  At most
    ``max_entries`` keys: past it the least recently written goes (``evicted`` counts
    them); an expired key is dropped when next touched.  Versions count up from 1 and
    are never reused.
    """

    def __init__(self, *, max_entries: int = MEMORY_MAX_ENTRIES) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise CallerError(f"MemoryStore(max_entries=) is an int >= 1; got {max_entries!r:.40}")
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max_entries = max_entries
        self._versions = 0
        self.evicted = 0

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._entries)} keys)"

    def __len__(self) -> int:
        return len(self._entries)

    def execute(self, command: StoreCommand, *, now: float) -> StoreAnswer:
        """Perform ``command`` at ``now``; the answer the contract names."""
        entry = self._live(command.key, now)
        found = entry.version if entry is not None else 0
        match command:
            case Read():
                return (
                    Missing() if entry is None else Found(value=entry.value, version=entry.version)
                )
            case Take():
                if entry is None:
                    return Missing()
                del self._entries[command.key]
                return Found(value=entry.value, version=entry.version)
            case CompareAndSet(key=key, value=value, expected=expected, ttl=ttl):
                if found != expected:
                    return Conflict(version=found)
                return Written(version=self._put(key, value, now + ttl))
            case DeleteIfVersion(key=key, version=version):
                if entry is None or found != version:
                    return Conflict(version=found)
                del self._entries[key]
                return Deleted()
            case AcquireLease(key=key, holder=holder, ttl=ttl):
                if entry is not None:
                    return Held()
                self._put(key, holder.encode(), now + ttl)
                return Acquired()
            case ReleaseLease(key=key, holder=holder):
                if entry is None or entry.value != holder.encode():
                    return NotHeld()
                del self._entries[key]
                return Released()
            case _:
                assert_never(command)

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= now:
            del self._entries[key]
            return None
        return entry

    def _put(self, key: str, value: bytes, expires: float) -> int:
        self._versions += 1
        self._entries[key] = _Entry(value, self._versions, expires)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
            self.evicted += 1
        return self._versions
