"""RedisStore: the core's store commands performed on Redis (the ``redis`` extra).

Theory of operation
-------------------
Each :data:`~sansmcp.core.store.StoreCommand` becomes one *plan* (:meth:`RedisStore._plan`):
one Redis command or one Lua script over the command's single key, and the function
that turns Redis's reply into the answer.  The blocking API (:meth:`RedisStore.execute`,
redis-py's blocking client: the sync adapter, and trio in a worker thread) and the
asyncio one (:meth:`RedisStore.aexecute`, redis-py's asyncio client) run the same plan,
so both keep the same contract.  Every command touches one key, so a Redis Cluster or
Valkey serves it too; scripts go by ``EVALSHA`` and, on ``NOSCRIPT`` (a restarted or
failed-over server), once by ``EVAL``, which caches them again.

Stored form: ``b"<version>:" + payload``; the version is 1 to 18 decimal digits
(drawn at random for each write, so a key deleted and written again never repeats
one), the payload ``b"P" + value``, or, with ``at_rest=`` keys, the value sealed by
:class:`~sansmcp.stores.atrest.AtRest` (AES-GCM, bound to the key and the version).
A read fetches at most ``Limits.max_store_value_bytes`` plus the framing
(``GETRANGE``), so a planted giant costs no memory.  Anything else found under a key
-- no version, another Redis type, a plaintext value where sealing is on, a sealed one
that does not open, one too big -- is a miss, counted in ``misses``.  Without a
readable version the scripts treat it as absent (a compare-and-set expecting ``0``
replaces it); with one, the miss carries that version (``Missing.version``) and a
compare-and-set on it replaces the value.

Every operation is bounded by ``Limits.store_timeout`` (the socket and connect
timeouts of redis-py, and ``asyncio.timeout`` around the asyncio one), with redis-py's
own retries off.  Every failure is an answer, :class:`~sansmcp.core.store.StoreFailed`
(``"unavailable"``: no connection; ``"timeout"``; ``"refused"``: Redis answered an
error, or the value is over the bound; ``"failed"``: a reply of an unexpected shape),
counted in ``failures``; what it means is the core's policy.  A connection that a
restarted server closed is noticed by redis-py when it is next taken from the pool,
and dialled again.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from ..core.errors import CallerError
from ..core.limits import Limits
from ..core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    Deleted,
    DeleteIfVersion,
    FailReason,
    Found,
    Held,
    Missing,
    NotHeld,
    Read,
    Released,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    Take,
    Written,
    fleet_identity,
)
from .atrest import AtRest

__all__ = ["RedisStore"]

PLAIN = b"P"
MAX_VERSION_DIGITS = 18
_VERSIONS = 10**MAX_VERSION_DIGITS - 1
_FRAMING = 128  # version, ":", the payload's marker, a sealed value's key id, nonce and tag
_HOLDER_READ = 255  # bytes of a lease key read to compare its holder (holders are <= 128)
MIN_SECRET_BYTES = 16

# The stored version of KEYS[1], as the digits; '0' when absent or unreadable.
_VERSION = """
local function version(key)
  local head = redis.pcall('GETRANGE', key, 0, 19)
  if type(head) ~= 'string' then return '0' end
  local digits = string.match(head, '^([1-9]%d*):')
  if digits == nil or #digits > 18 then return '0' end
  return digits
end
"""
_CAS = (
    _VERSION
    + """
local found = version(KEYS[1])
if found ~= ARGV[1] then return {0, found} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1}
"""
)
_DELETE = (
    _VERSION
    + """
local found = version(KEYS[1])
if found == '0' or found ~= ARGV[1] then return {0, found} end
redis.call('DEL', KEYS[1])
return {1}
"""
)
_TAKE = """
local value = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[1])
if value == '' then return {0} end
redis.call('DEL', KEYS[1])
if type(value) ~= 'string' then return {1} end
return {2, value}
"""
_RELEASE = """
if redis.pcall('GETRANGE', KEYS[1], 0, ARGV[2]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


class _Script:
    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


SCRIPTS = {
    name: _Script(source)
    for name, source in (("cas", _CAS), ("delete", _DELETE), ("take", _TAKE), ("release", _RELEASE))
}

Plan = tuple[_Script | None, tuple[Any, ...], Callable[[Any], StoreAnswer]]


class RedisStore:
    """The store of a fleet, on Redis: ``RedisStore("redis://host:6379/0", secret=...)``
    (the ``redis`` extra, redis-py: ``pip install 'sansmcp[redis]'``).

    * ``url``: redis-py's forms (``redis://``, ``rediss://``, ``unix://``);
    * ``secret``: bytes (at least 16), the same on every worker: it keys the digest of
      a caller's credentials for ``private`` listings (:meth:`identity`), so the same
      caller matches on every worker and no token is ever part of a key;
    * ``at_rest``: ``(key id, AES key)`` pairs: values are sealed with the first and
      opened with any (:class:`~sansmcp.stores.atrest.AtRest`); without it values are
      stored as they are;
    * ``limits``: ``store_timeout`` and ``max_store_value_bytes`` apply.

    ``execute`` is blocking and thread-safe; ``aexecute`` runs on one asyncio loop at a
    time (a new loop gets a new client: ``aclose`` the store before its loop ends).
    """

    def __init__(
        self,
        url: str,
        *,
        secret: bytes,
        at_rest: Sequence[tuple[str, bytes]] | None = None,
        limits: Limits | None = None,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:  # tests/test_extras.py
            raise CallerError(
                "RedisStore needs the 'redis' package (redis-py): pip install 'sansmcp[redis]'"
            ) from exc

        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise CallerError(
                f"RedisStore(secret=) is bytes of at least {MIN_SECRET_BYTES}, "
                "the same on every worker of the fleet"
            )
        self._limits = limits or Limits()
        self._secret = secret
        self._at_rest = AtRest(at_rest) if at_rest is not None else None
        self._max_read = self._limits.max_store_value_bytes + _FRAMING
        self._options: dict[str, Any] = {
            "socket_timeout": self._limits.store_timeout,
            "socket_connect_timeout": self._limits.store_timeout,
            "decode_responses": False,
        }
        try:
            self._client: Any = redis.Redis.from_url(
                url, retry=Retry(NoBackoff(), 0), **self._options
            )
        except ValueError as exc:
            raise CallerError(f"RedisStore: {exc}") from None
        self._url = url
        self._aclient: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # the counters: execute runs in many threads
        self.misses = {"corrupt": 0, "oversized": 0, "sealing": 0}
        self.failures: dict[FailReason, int] = {
            "unavailable": 0,
            "timeout": 0,
            "refused": 0,
            "failed": 0,
        }

    def __repr__(self) -> str:
        sealed = f", at_rest={self._at_rest.ids!r}" if self._at_rest else ""
        return f"RedisStore({_without_password(self._url)!r}{sealed})"

    @property
    def fleet_secret(self) -> bytes:
        """The fleet's secret: the Client keys private listings by an HMAC under it."""
        return self._secret

    def identity(self, parts: Sequence[tuple[bytes, bytes]]) -> bytes | None:
        """The fleet-wide digest of a caller's credential parts (None: no credential)."""
        return fleet_identity(self._secret, parts)

    # -- the two ways to run a plan -------------------------------------------

    def execute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` (blocking, at most about ``Limits.store_timeout`` per
        socket step); never raises for a store failure."""
        plan = self._plan(command)
        if isinstance(plan, StoreFailed):
            return plan
        script, args, answer = plan
        try:
            if script is None:
                reply = self._client.execute_command(*args)
            else:
                try:
                    reply = self._client.execute_command("EVALSHA", script.sha, 1, *args)
                except self._no_script():
                    reply = self._client.execute_command("EVAL", script.source, 1, *args)
        except Exception as exc:
            return self._failed(exc)
        return self._answer(answer, reply)

    async def aexecute(self, command: StoreCommand) -> StoreAnswer:
        """Perform ``command`` on the running asyncio loop, within
        ``Limits.store_timeout``; never raises for a store failure."""
        plan = self._plan(command)
        if isinstance(plan, StoreFailed):
            return plan
        script, args, answer = plan
        client = self._async_client()
        try:
            async with asyncio.timeout(self._limits.store_timeout):
                if script is None:
                    reply = await client.execute_command(*args)
                else:
                    try:
                        reply = await client.execute_command("EVALSHA", script.sha, 1, *args)
                    except self._no_script():
                        reply = await client.execute_command("EVAL", script.source, 1, *args)
        except Exception as exc:
            return self._failed(exc)
        return self._answer(answer, reply)

    def close(self) -> None:
        """Close the blocking client's connections."""
        self._client.close()

    async def aclose(self) -> None:
        """Close the asyncio client's connections (on the loop that opened them)."""
        client, self._aclient, self._aloop = self._aclient, None, None
        if client is not None:
            await client.aclose()

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aloop is not loop:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._aclient = redis.asyncio.Redis.from_url(
                self._url, retry=Retry(NoBackoff(), 0), **self._options
            )
            self._aloop = loop
        return self._aclient

    @staticmethod
    def _no_script() -> type[Exception]:
        from redis.exceptions import NoScriptError

        return NoScriptError

    # -- plans: one command or script per operation, and the reply's meaning ----

    def _plan(self, command: StoreCommand) -> Plan | StoreFailed:
        key = command.key
        match command:
            case Read():
                return None, ("GETRANGE", key, 0, self._max_read), lambda r: self._found(key, r)
            case Take():
                return SCRIPTS["take"], (key, self._max_read), lambda r: self._taken(key, r)
            case CompareAndSet(value=value, expected=expected, ttl=ttl):
                if len(value) > self._limits.max_store_value_bytes:
                    return self._count_failure(
                        "refused",
                        f"a value of {len(value):,} bytes is over "
                        f"Limits.max_store_value_bytes ({self._limits.max_store_value_bytes:,})",
                    )
                version = secrets.randbelow(_VERSIONS) + 1
                blob = b"%d:" % version + self._protect(key, version, value)
                args = (key, str(expected), blob, _milliseconds(ttl))
                return SCRIPTS["cas"], args, lambda r: _written(r, version)
            case DeleteIfVersion(version=version):
                return SCRIPTS["delete"], (key, str(version)), _deleted
            case AcquireLease(holder=holder, ttl=ttl):
                lease = ("SET", key, holder, "NX", "PX", _milliseconds(ttl))
                return None, lease, lambda r: Acquired() if r else Held()
            case ReleaseLease(holder=holder):
                return SCRIPTS["release"], (key, holder, _HOLDER_READ), _released
            case _:
                assert_never(command)

    def _answer(self, answer: Callable[[Any], StoreAnswer], reply: Any) -> StoreAnswer:
        try:
            return answer(reply)
        except (TypeError, ValueError, IndexError, KeyError):
            return self._count_failure("failed", f"unexpected reply from Redis: {reply!r:.100}")

    def _found(self, key: str, reply: Any) -> Found | Missing:
        if not isinstance(reply, bytes):
            raise TypeError(reply)
        return Missing() if reply == b"" else self._open(key, reply)

    def _taken(self, key: str, reply: Any) -> Found | Missing:
        if reply[0] == 0:
            return Missing()
        if reply[0] == 1:
            return self._miss("corrupt")
        return self._found(key, reply[1])

    def _open(self, key: str, blob: bytes) -> Found | Missing:
        head, colon, _ = blob[: MAX_VERSION_DIGITS + 1].partition(b":")
        if not colon or not head.isdigit() or head.startswith(b"0"):
            return self._miss("corrupt")
        version = int(head)
        if len(blob) > self._max_read:
            return self._miss("oversized", version)
        payload = blob[len(head) + 1 :]
        if self._at_rest is None:
            value = payload[1:] if payload[:1] == PLAIN else None
        else:
            value = self._at_rest.open(payload, _aad(key, version))
        if value is None:
            return self._miss("sealing", version)
        if len(value) > self._limits.max_store_value_bytes:
            return self._miss("oversized", version)
        return Found(value=value, version=version)

    def _protect(self, key: str, version: int, value: bytes) -> bytes:
        if self._at_rest is None:
            return PLAIN + value
        return self._at_rest.seal(value, _aad(key, version))

    # -- counting ---------------------------------------------------------------

    def _miss(self, cause: str, version: int = 0) -> Missing:
        with self._lock:
            self.misses[cause] += 1
        return Missing(version=version)

    def _count_failure(self, reason: FailReason, detail: str) -> StoreFailed:
        with self._lock:
            self.failures[reason] += 1
        return StoreFailed(reason=reason, detail=detail)

    def _failed(self, exc: Exception) -> StoreAnswer:
        from redis import exceptions as rx

        if isinstance(exc, rx.ResponseError) and str(exc).startswith("WRONGTYPE"):
            return self._miss("corrupt")  # a read of a key holding another Redis type
        reason: FailReason
        if isinstance(exc, rx.TimeoutError | TimeoutError):
            reason = "timeout"
        elif isinstance(exc, rx.ConnectionError | OSError):
            reason = "unavailable"
        elif isinstance(exc, rx.ResponseError):
            reason = "refused"
        else:
            reason = "failed"
        return self._count_failure(reason, f"{type(exc).__name__}: {exc}")


def _without_password(url: str) -> str:
    """``url`` without its user, password and query (a repr is logged)."""
    scheme, sep, rest = url.partition("?")[0].partition("://")
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"


def _milliseconds(ttl: float) -> int:
    return max(1, math.ceil(ttl * 1000))


def _aad(key: str, version: int) -> bytes:
    return key.encode() + b"\x00%d" % version


def _version(reply: Any) -> int:
    digits = reply if isinstance(reply, bytes) else str(reply).encode()
    if not digits.isdigit() or len(digits) > MAX_VERSION_DIGITS:
        raise ValueError(reply)
    return int(digits)


def _written(reply: Any, version: int) -> Written | Conflict:
    return Written(version=version) if reply[0] == 1 else Conflict(version=_version(reply[1]))


def _deleted(reply: Any) -> Deleted | Conflict:
    return Deleted() if reply[0] == 1 else Conflict(version=_version(reply[1]))


def _released(reply: Any) -> Released | NotHeld:
    return Released() if reply == 1 else NotHeld()
