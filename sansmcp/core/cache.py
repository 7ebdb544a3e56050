"""The Client-wide cache of listings, as the spec's ``ttlMs`` / ``cacheScope`` allow.

Theory of operation
-------------------
One :class:`ListingCache` per ``Client`` (the driver owns it, beside the pool); every
Conn's machine reads and fills it.  It holds *entries*: one ``tools/list`` page
(:class:`CachedPage`) or one ``server/discover`` result (:class:`CachedDiscovery`),
each under the key the spec names -- endpoint URL, protocol version, method and
cursor -- plus, for a ``private`` entry, the caller's *identity*: a digest, salted
per ``Client`` (the salt is an input: the adapter draws it), of everything that
identifies the caller (:func:`caller_identity`).  A ``public`` entry is keyed
without one and is shared by every caller of that endpoint; a ``private`` result
on a Conn that carries no credential at all is not stored.  A result whose
``cacheScope`` is absent or unknown counts as ``private`` (the safe reading).

Freshness is the spec's: an entry is fresh while ``now < t_received + ttlMs``; a
``ttlMs`` that is absent, zero, negative or not an integer means "never served", so
such a result is not stored; one over a day counts as a day (:data:`MAX_TTL_MS`).
Each page has its own clock; a listing is served
only when every page, walked from the first by its ``nextCursor``, is present and
fresh -- any other case fetches the listing again from its first page (and that
listing replaces the pages).

Bounds: at most ``max_entries`` entries and ``max_bytes`` estimated bytes
(:func:`page_size`: overheads plus the UTF-8 bytes of every string and schema kept,
the cursor in the key included -- bytes, never characters); the least recently used entry goes first, and an entry larger
than ``max_bytes`` on its own is not stored.  Invalidation drops every listing page
one caller could be served for an endpoint and version (the public ones and the
caller's private ones) through a group index, without scanning the cache.

Pure: no clock (``now`` comes in), no randomness (the salt comes in); ``hashlib``
digests the identity and the secret itself is never kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .tools import HeaderParam, SkippedTool, Tool, utf8_len

if TYPE_CHECKING:
    from .http import Headers
    from .url import Endpoint

__all__ = [
    "MAX_TTL_MS",
    "CachedDiscovery",
    "CachedListing",
    "CachedPage",
    "Caller",
    "Credentials",
    "ListingCache",
    "caller_identity",
    "credential_parts",
    "page_size",
    "scope_of",
    "ttl_of",
]

LIST_METHOD = "tools/list"
DISCOVER_METHOD = "server/discover"

# url, protocol version, method, cursor (None: the first page), identity (None: public)
Key = tuple[str, str, str, str | None, bytes | None]
# url, protocol version, method, identity
Group = tuple[str, str, str, bytes | None]

# a shared Conn's listings stored, (version, pages, public), and invalidated, (version,
# None, False), in order
Journal = list[tuple[str, list[tuple[str | None, "CachedPage", float]] | None, bool]]

MAX_TTL_MS = 86_400_000  # a day: the longest any entry stays fresh
# per-object overheads: with them the estimate of a bench.server tool is ~1.6x what
# ``python -m bench.cache`` measures it holds (1,042 vs 654 bytes): the bound errs safe
_TOOL_OVERHEAD = 600
_SKIP_OVERHEAD = 200
_ENTRY_OVERHEAD = 400  # the entry, its key and the OrderedDict / group slots
_PARAM_OVERHEAD = 64  # a HeaderParam and its path tuple
_PATH_STEP = 8  # a path tuple's slot


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedPage:
    """One ``tools/list`` page as it was validated: the tools and skipped entries it
    contributed, its own ``ttlMs`` and the cursor of the next page."""

    tools: tuple[Tool, ...]
    skipped: tuple[SkippedTool, ...]
    skipped_count: int
    next_cursor: str | None
    ttl_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedDiscovery:
    """A ``server/discover`` result: the versions the server said it supports."""

    supported: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedListing:
    """A whole listing served from the cache."""

    tools: tuple[Tool, ...]
    skipped: tuple[SkippedTool, ...]
    skipped_count: int
    ttl_ms: int
    cache_scope: str


@dataclass(slots=True)
class _Entry:
    value: CachedPage | CachedDiscovery
    expires: float
    size: int
    group: Group


class Credentials(Protocol):
    """What identifies a caller to the cache: its bearer token and its extra headers.

    A Conn's ``ConnSettings`` is one; the cache names only the fields it keys on, so it
    imports nothing of the MCP package that reads it.
    """

    @property
    def bearer_token(self) -> str | None:
        """The ``Authorization: Bearer`` token, if any."""

    @property
    def headers(self) -> Headers:
        """Every ``Config.headers`` entry."""


class Caller(Credentials, Protocol):
    """One Conn's key parts: its endpoint (the URL the entries are keyed on) and its
    credentials."""

    @property
    def endpoint(self) -> Endpoint:
        """The MCP endpoint; its normalised ``url`` is the entries' key."""


def credential_parts(settings: Credentials) -> list[tuple[bytes, bytes]]:
    """Everything that identifies the caller of a Conn: its bearer token and every
    ``Config.headers`` entry (in a fixed order).  Empty: no credential at all.

    The one seam for OAuth: a token store's identity (issuer, client id, resource,
    which a refresh does not change) joins here, not the access token it holds.
    """
    parts: list[tuple[bytes, bytes]] = []
    if settings.bearer_token is not None:
        parts.append((b"bearer", settings.bearer_token.encode("ascii")))
    parts.extend(sorted((b"header:" + name, value) for name, value in settings.headers))
    return parts


def caller_identity(settings: Credentials, salt: bytes) -> bytes | None:
    """The salted digest of :func:`credential_parts` (None: no credential)."""
    parts = credential_parts(settings)
    if not parts:
        return None
    import hashlib  # here: only a Conn with credentials digests them

    digest = hashlib.blake2b(key=salt[:64], digest_size=32, person=b"sansmcp-cache")
    for name, value in parts:  # length-prefixed: no two part lists digest alike
        digest.update(len(name).to_bytes(4, "big") + name)
        digest.update(len(value).to_bytes(4, "big") + value)
    return digest.digest()


def ttl_of(result: Mapping[str, Any]) -> int:
    """A result's ``ttlMs`` as the cache reads it: 0 unless a positive int, and at most
    :data:`MAX_TTL_MS` (a 400-digit ttl must neither overflow a float nor pin an entry)."""
    ttl = result.get("ttlMs")
    return min(ttl, MAX_TTL_MS) if type(ttl) is int and ttl > 0 else 0


def scope_of(result: dict[str, Any]) -> str:
    """``"public"`` only when the result says so; anything else is ``"private"``."""
    return "public" if result.get("cacheScope") == "public" else "private"


def page_size(page: CachedPage) -> int:
    """The bytes a page is charged: the UTF-8 bytes of its strings (never their
    character count: a 4-byte character is 4 bytes here) and its schemas, plus measured
    overheads.  Exact, not an estimate per character: an ASCII string is measured
    without a copy, any other is encoded once (as validation did)."""
    size = _ENTRY_OVERHEAD + utf8_len(page.next_cursor or "")
    for tool in page.tools:
        name, description, title = tool.name, tool.description, tool.title or ""
        annotations = repr(tool.annotations) if tool.annotations else ""
        if name.isascii() and description.isascii() and title.isascii() and annotations.isascii():
            text = len(name) + len(description) + len(title) + 8 * len(annotations)
        else:
            text = (
                utf8_len(name)
                + utf8_len(description)
                + utf8_len(title)
                + 8 * utf8_len(annotations)  # a parsed JSON object: ~8x its text
            )
        size += _TOOL_OVERHEAD + text + len(tool.input_schema) + len(tool.output_schema or b"")
        if tool.header_params:
            size += sum(map(_param_size, tool.header_params))
    for skip in page.skipped:
        size += _SKIP_OVERHEAD + utf8_len(skip.name or "") + utf8_len(skip.reason)
    return size


def _param_size(param: HeaderParam) -> int:
    """One ``x-mcp-header`` parameter: its objects plus its strings' UTF-8 bytes."""
    return (
        _PARAM_OVERHEAD
        + utf8_len(param.header)
        + utf8_len(param.type)
        + sum(_PATH_STEP + utf8_len(step) for step in param.path)
    )


class ListingCache:
    """A bounded LRU map of fresh-for-a-while results (see the module docstring)."""

    __slots__ = ("_entries", "_groups", "bytes", "max_bytes", "max_entries")

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._groups: dict[Group, set[Key]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------ entries

    def put(
        self, key: Key, value: CachedPage | CachedDiscovery, *, expires: float, size: int
    ) -> None:
        """Store ``value`` under ``key`` (replacing what was there), then evict the
        least recently used entries until both bounds hold.  Too large alone: dropped."""
        self.discard(key)
        if size > self.max_bytes or self.max_entries == 0:
            return
        group = (key[0], key[1], key[2], key[4])
        self._entries[key] = _Entry(value, expires, size, group)
        self._groups.setdefault(group, set()).add(key)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            self.discard(next(iter(self._entries)))

    def get(self, key: Key, *, now: float) -> CachedPage | CachedDiscovery | None:
        """The fresh entry under ``key`` (now the most recently used), else None; a
        stale one is dropped."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.expires:
            self.discard(key)
            return None
        self._entries.move_to_end(key)
        return entry.value

    def discard(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.bytes -= entry.size
        keys = self._groups[entry.group]
        keys.discard(key)
        if not keys:
            del self._groups[entry.group]

    def lookup(
        self,
        url: str,
        version: str,
        method: str,
        cursor: str | None,
        identity: bytes | None,
        *,
        now: float,
    ) -> CachedPage | CachedDiscovery | None:
        """What one caller may be served: its own private entry, else the public one."""
        if identity is not None:
            value = self.get((url, version, method, cursor, identity), now=now)
            if value is not None:
                return value
        return self.get((url, version, method, cursor, None), now=now)

    def invalidate(self, url: str, version: str, method: str, identity: bytes | None) -> None:
        """Drop every ``method`` entry of ``url`` at ``version`` the caller could be
        served: the public ones and, with an identity, its private ones."""
        for owner in {None, identity}:
            for key in list(self._groups.get((url, version, method, owner), ())):
                self.discard(key)

    # ------------------------------------------------------------ listings

    def listing(
        self,
        url: str,
        version: str,
        identity: bytes | None,
        *,
        now: float,
        max_pages: int,
        max_recorded_skips: int,
    ) -> CachedListing | None:
        """The whole listing, when every page from the first is fresh; else None.

        Pages stored by different listings may chain (the server changed meanwhile);
        a chain that repeats a cursor, runs past ``max_pages`` or names a tool twice is
        a miss, never an error: the listing is fetched again.
        """
        tools: list[Tool] = []
        skipped: list[SkippedTool] = []
        skipped_count = 0
        names: set[str] = set()
        seen: set[str] = set()
        cursor: str | None = None
        ttl: int | None = None
        scopes: set[str] = set()
        for _ in range(max_pages):
            page = None
            scope = "private"
            if identity is not None:
                page = self.get((url, version, LIST_METHOD, cursor, identity), now=now)
            if page is None:
                page = self.get((url, version, LIST_METHOD, cursor, None), now=now)
                scope = "public"
            if not isinstance(page, CachedPage):
                return None
            scopes.add(scope)
            for tool in page.tools:
                if tool.name in names:
                    return None
                names.add(tool.name)
            tools.extend(page.tools)
            skipped.extend(page.skipped)
            skipped_count += page.skipped_count
            ttl = page.ttl_ms if ttl is None else min(ttl, page.ttl_ms)
            cursor = page.next_cursor
            if cursor is None:
                assert ttl is not None
                return CachedListing(
                    tools=tuple(tools),
                    skipped=tuple(skipped[:max_recorded_skips]),
                    skipped_count=skipped_count,
                    ttl_ms=ttl,
                    cache_scope="private" if "private" in scopes else "public",
                )
            if cursor in seen:
                return None
            seen.add(cursor)
        return None

    def store_listing(
        self,
        url: str,
        version: str,
        identity: bytes | None,
        pages: Sequence[tuple[str | None, CachedPage, float]],
        *,
        public: bool,
    ) -> None:
        """Store a listing's pages (``(cursor, page, received at)`` each), each fresh
        for its own ``ttl_ms``.  ``public`` only when every page said so; a private
        listing without an identity is not stored."""
        owner = None if public else identity
        if owner is None and not public:
            return
        for cursor, page, received in pages:
            self.put(
                (url, version, LIST_METHOD, cursor, owner),
                page,
                expires=received + page.ttl_ms / 1000,
                # the key's cursor too: the previous page's, kept even once that page is gone
                size=page_size(page) + utf8_len(cursor or ""),
            )

    # ------------------------------------------------------------ server/discover

    def store_discovery(
        self,
        url: str,
        version: str,
        identity: bytes | None,
        supported: tuple[str, ...],
        *,
        public: bool,
        ttl_ms: int,
        received: float,
    ) -> None:
        owner = None if public else identity
        if (owner is None and not public) or ttl_ms <= 0:
            return
        size = _ENTRY_OVERHEAD + sum(utf8_len(v) + 64 for v in supported)
        self.put(
            (url, version, DISCOVER_METHOD, None, owner),
            CachedDiscovery(supported=supported),
            expires=received + ttl_ms / 1000,
            size=size,
        )

    def discovery(
        self, url: str, version: str, identity: bytes | None, *, now: float
    ) -> CachedDiscovery | None:
        value = self.lookup(url, version, DISCOVER_METHOD, None, identity, now=now)
        return value if isinstance(value, CachedDiscovery) else None


class CallerCache:
    """One Conn's view of the Client-wide cache: its endpoint and its caller's identity
    (the salted digest, computed on first use)."""

    __slots__ = ("_identity", "_known", "_salt", "_settings", "cache", "journal", "url")

    def __init__(
        self, cache: ListingCache, settings: Caller, salt: bytes, *, anonymous: bool = False
    ) -> None:
        self.cache = cache
        self.url = settings.endpoint.url
        self._settings = settings
        self._salt = salt
        self._identity: bytes | None = None
        # anonymous: the caller's identity is not in its settings (an OAuth Conn: its
        # token store's, which the key does not hold yet), so it is served and keeps
        # public entries only -- its headers alone must not open another's private ones
        self._known = anonymous
        # with a shared store: each listing stored here, as (version, pages, public), and
        # each invalidated, as (version, None, False), for the driver to share
        # (sansmcp.core.fleet_listings); None: not kept
        self.journal: Journal | None = None

    def __len__(self) -> int:
        return len(self.cache)

    def identity(self) -> bytes | None:
        if not self._known:
            self._identity = caller_identity(self._settings, self._salt)
            self._known = True
        return self._identity

    def listing(
        self, version: str, *, now: float, max_pages: int, max_recorded_skips: int
    ) -> CachedListing | None:
        return self.cache.listing(
            self.url,
            version,
            self.identity(),
            now=now,
            max_pages=max_pages,
            max_recorded_skips=max_recorded_skips,
        )

    def store_listing(
        self, version: str, pages: Sequence[tuple[str | None, CachedPage, float]], *, public: bool
    ) -> None:
        self.cache.store_listing(self.url, version, self.identity(), pages, public=public)
        if self.journal is not None:
            self.journal.append((version, list(pages), public))

    def invalidate(self, version: str, method: str = LIST_METHOD) -> None:
        self.cache.invalidate(self.url, version, method, self.identity())
        if self.journal is not None and method == LIST_METHOD:
            self.journal.append((version, None, False))

    def discovery(self, version: str, *, now: float) -> CachedDiscovery | None:
        return self.cache.discovery(self.url, version, self.identity(), now=now)

    def store_discovery(self, version: str, result: dict[str, Any], *, now: float) -> None:
        supported = result.get("supportedVersions")
        ttl = ttl_of(result)
        if not ttl or not isinstance(supported, list):
            return
        self.cache.store_discovery(
            self.url,
            version,
            self.identity(),
            tuple(v for v in supported[:64] if isinstance(v, str) and len(v) <= 64),
            public=scope_of(result) == "public",
            ttl_ms=ttl,
            received=now,
        )
