"""One refresh of a shared grant, single-flight across a fleet: the pure logic.

Theory of operation
-------------------
N processes share one OAuth grant, its tokens kept in the shared store under
:func:`~sansmcp.core.store.token_key` (issuer, client id, resource, tenant).  At expiry
every one of them wants to refresh, and an authorization server that rotates refresh
tokens revokes the whole family when one is used twice.  A :class:`RefreshFlight` is
one worker's attempt, a sans-I/O machine: it answers each event with the next
:data:`Next` step (a store command to perform, a pause, a refresh to make at the token
endpoint, or the outcome) and never calls anything.

1. Take the lease :func:`~sansmcp.core.store.lease_key` of the token key
   (``Limits.store_lease_expiry``).
2. Acquired: read the token key again.  A version other than the one the worker read
   before means another worker refreshed: use what it stored (no refresh).  The same
   version: refresh (:class:`Refresh`), then write the new tokens by compare-and-set on
   that version, and release the lease.
3. Held by another: re-read at doubling intervals (``POLL_FIRST`` .. ``POLL_MAX``),
   trying the lease again after each read that finds the old tokens; a new version is
   used as soon as it appears.  A holder killed mid-refresh delays the others by at
   most the lease's expiry: past ``store_lease_expiry + store_load_wait`` the waiter
   gives up (``ConnectionFailed(cause="store", bound="store_load_wait")``).
4. The token endpoint refused the refresh (``invalid_grant``, :meth:`RefreshFlight.refused`):
   read again before deleting anything -- another worker may have rotated meanwhile
   (its tokens are used); the tokens are deleted only if still the version read.
5. A store failure ends the flight as ``ConnectionFailed(cause="store")``
   (:func:`~sansmcp.core.store.store_error`): nothing is deleted, nothing older is
   written.  A failure of the compare-and-set after a refresh leaves the new tokens in
   the outcome (:attr:`Failed.unsaved`) so the worker may still use them for the work
   item at hand.

The lease is released (:attr:`Done.release`, a command whose answer does not matter)
whenever the flight held it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConnectionFailed
from .limits import Limits
from .oauth.store import Tokens
from .store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Deleted,
    DeleteIfVersion,
    Found,
    Held,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    Written,
    lease_key,
    store_error,
)
from .store_values import ValueCodec, tokens_body, tokens_from

__all__ = [
    "POLL_FIRST",
    "POLL_MAX",
    "TOKENS_TTL",
    "Done",
    "Failed",
    "Gone",
    "Issue",
    "Next",
    "Refresh",
    "RefreshFlight",
    "Sleep",
    "Use",
    "seal_tokens",
]

POLL_FIRST = 0.02  # a waiter's first re-read
POLL_MAX = 0.5  # the longest pause between two re-reads
TOKENS_TTL = 30 * 86_400.0  # a stored grant lives at most this long unless refreshed


@dataclass(frozen=True, slots=True)
class Issue:
    """Perform ``command`` on the store and hand its answer to :meth:`RefreshFlight.answer`."""

    command: StoreCommand


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause until ``until`` (the driver's clock), then call :meth:`RefreshFlight.woke`."""

    until: float


@dataclass(frozen=True, slots=True)
class Refresh:
    """This worker refreshes ``tokens`` at the token endpoint, then calls
    :meth:`RefreshFlight.refreshed` (granted) or :meth:`RefreshFlight.refused`."""

    tokens: Tokens


@dataclass(frozen=True, slots=True)
class Use:
    """Use ``tokens`` (stored at ``version``): refreshed here or by another worker."""

    tokens: Tokens
    version: int
    by_us: bool


@dataclass(frozen=True, slots=True)
class Gone:
    """No usable grant is stored any more (refused and deleted, or deleted by another):
    a person must authorize again."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The flight could not be made safely; ``unsaved``: tokens the token endpoint
    granted that could not be stored (usable for the work item at hand)."""

    error: ConnectionFailed
    unsaved: Tokens | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The outcome; ``release``: the lease to release (answer ignored), when held."""

    outcome: Use | Gone | Failed
    release: ReleaseLease | None


Next = Issue | Sleep | Refresh | Done


def seal_tokens(codec: ValueCodec, key: str, tokens: Tokens, expected: int) -> CompareAndSet | None:
    """The compare-and-set storing ``tokens`` over ``expected``; None when too big."""
    data = codec.seal("tokens", tokens_body(tokens))
    if data is None:
        return None
    return CompareAndSet(key=key, value=data, expected=expected, ttl=TOKENS_TTL)


class RefreshFlight:
    """One worker's refresh of the grant under ``key`` (the module docstring).

    ``stale``/``version``: the tokens this worker read (and found expired) and the
    version it read them at; ``holder``: this worker's lease token (unique in the fleet).
    """

    def __init__(
        self,
        key: str,
        stale: Tokens,
        version: int,
        *,
        holder: str,
        limits: Limits,
        codec: ValueCodec,
        now: float,
    ) -> None:
        self.key = key
        self.lease = lease_key(key)
        self.stale = stale
        self.version = version
        self._holder = holder
        self._limits = limits
        self._codec = codec
        self._give_up = now + limits.store_lease_expiry + limits.store_load_wait
        self._pause = POLL_FIRST
        self._held = False
        self._fresh: Tokens | None = None  # what the token endpoint granted us
        self.phase = "lease"  # lease recheck refresh write | poll sleep | reread delete | done
        self.counts = dict.fromkeys(("reads", "waits", "refreshes", "conflicts"), 0)

    def __repr__(self) -> str:
        return f"RefreshFlight({self.phase}, {self.counts})"

    # -- events ----------------------------------------------------------------

    def start(self) -> Next:
        """The first step: take the lease."""
        return self._acquire()

    def _acquire(self) -> Issue:
        ttl = self._limits.store_lease_expiry
        return Issue(AcquireLease(key=self.lease, holder=self._holder, ttl=ttl))

    def woke(self, now: float) -> Next:
        """After a :class:`Sleep`: read the tokens again (or give up, past the bound)."""
        if now >= self._give_up:
            return self._done(
                Failed(
                    ConnectionFailed(
                        "another worker held the refresh lease past store_lease_expiry + "
                        "store_load_wait; no token was written or deleted",
                        cause="store",
                        bound="store_load_wait",
                    )
                )
            )
        return self._read("poll")

    def refreshed(self, tokens: Tokens) -> Next:
        """The token endpoint granted ``tokens``: write them over the version read."""
        self.counts["refreshes"] += 1
        self._fresh = tokens
        command = seal_tokens(self._codec, self.key, tokens, self.version)
        if command is None:
            return self._done(
                Failed(
                    ConnectionFailed(
                        "the refreshed tokens are over max_store_value_bytes; they were not stored",
                        cause="store",
                        bound="max_store_value_bytes",
                    ),
                    unsaved=tokens,
                )
            )
        self.phase = "write"
        return Issue(command)

    def refused(self) -> Next:
        """The token endpoint refused the refresh (``invalid_grant``): read before deleting."""
        return self._read("reread")

    def answer(self, answer: StoreAnswer, now: float) -> Next:
        """The store's answer to the last :class:`Issue`."""
        if isinstance(answer, StoreFailed):
            return self._done(Failed(store_error(answer, self._doing()), unsaved=self._fresh))
        match self.phase, answer:
            case "lease", Acquired():
                self._held = True
                return self._read("recheck")
            case "lease", Held():
                self.counts["waits"] += 1
                return self._sleep(now)
            case (("recheck" | "poll" | "reread"), Found() | Missing()):
                return self._read_answer(answer, now)
            case "write", Written(version=version) if self._fresh is not None:
                return self._done(Use(self._fresh, version, by_us=True))
            case "write", Conflict() if self._fresh is not None:
                # the lease expired under us and another wrote: theirs stays stored (never
                # overwritten); ours, just granted, serves this work item (version 0)
                self.counts["conflicts"] += 1
                return self._done(Use(self._fresh, 0, by_us=True))
            case "delete", Deleted():
                return self._done(Gone())
            case "delete", _:  # rotated or deleted between our read and our delete
                self.counts["conflicts"] += 1
                return self._read("reread")
            case _:
                return self._done(
                    Failed(
                        ConnectionFailed(
                            f"the store answered {type(answer).__name__} while {self._doing()}",
                            cause="store",
                        )
                    )
                )

    # -- steps -----------------------------------------------------------------

    def _read_answer(self, answer: Found | Missing, now: float) -> Next:
        if isinstance(answer, Missing):
            return self._done(Gone())  # deleted by another worker (refused), or unreadable
        if answer.version != self.version:
            tokens = self._codec.open("tokens", answer.value, tokens_from)
            if tokens is None:  # unreadable: never refresh blindly, never delete
                return self._done(Gone())
            return self._done(Use(tokens, answer.version, by_us=False))  # another rotated
        if self.phase == "recheck":
            self.phase = "refresh"
            return Refresh(self.stale)
        if self.phase == "reread":
            self.phase = "delete"
            return Issue(DeleteIfVersion(key=self.key, version=self.version))
        self.phase = "lease"  # poll: still the old tokens; try the lease again
        return self._acquire()

    def _read(self, phase: str) -> Issue:
        self.phase = phase
        self.counts["reads"] += 1
        return Issue(Read(key=self.key))

    def _sleep(self, now: float) -> Sleep:
        self.phase = "sleep"
        until = now + self._pause
        self._pause = min(self._pause * 2, POLL_MAX)
        return Sleep(until)

    def _doing(self) -> str:
        return {
            "write": "storing refreshed tokens",
            "delete": "deleting refused tokens",
            "lease": "taking the refresh lease",
        }.get(self.phase, "reading tokens")

    def _done(self, outcome: Use | Gone | Failed) -> Done:
        self.phase = "done"
        release = ReleaseLease(key=self.lease, holder=self._holder) if self._held else None
        self._held = False
        return Done(outcome, release)
