"""What shared state is stored as: records sealed into bytes, opened defensively.

Theory of operation
-------------------
A store (:mod:`sansmcp.core.store`) holds bytes; this module owns their layout.
:meth:`ValueCodec.seal` writes a record as the compact JSON ``[1, kind, body]`` (the
``1`` is the layout's version, ``kind`` what the key holds: ``"tokens"``,
``"registration"``, ``"pending"``, ``"era"``, ``"listing"``); a body is a JSON object
built by one ``*_body`` function and read back by its ``*_from`` twin.  A listing's
tools are stored as the server's entries and validated again when read back
(:func:`listing_from`), exactly as a server's are: a stored tool is never trusted more.

Everything a store returns is untrusted (another worker's older code, an operator's
``SET``, a corrupted or hostile store): :meth:`ValueCodec.open` parses with the core's
bounded JSON parser and checks the layout, the kind and every field's type; anything
else is a miss (None), counted in ``ValueCodec.misses`` by cause -- never an exception.
Members a body does not name are ignored (a newer worker may add some).

Decoding a listing (JSON, then every tool validated again) costs more than the store's
round trip, and a fleet reads the same listing over and over: ``open`` with ``reuse=``
keeps the last :data:`MEMO_ENTRIES` records it opened (at most :data:`MEMO_BYTES` of
values in all) and returns one again, undecoded, only for a value whose bytes are equal
to those it was opened from, under the same kind and ``reuse`` -- a changed or planted
value is decoded and checked again.  Counted in ``ValueCodec.reused``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from .cache import CachedPage
from .jsonvalue import JsonError, decode_kept, dumps_compact, parse_json
from .oauth.store import Binding, ClientRegistration, PendingAuthorization, Tokens
from .tools import SkippedTool, Tool, validate_tool

__all__ = [
    "FORMAT",
    "ValueCodec",
    "era_body",
    "era_from",
    "listing_body",
    "listing_from",
    "pending_body",
    "pending_from",
    "registration_body",
    "registration_from",
    "tokens_body",
    "tokens_from",
]

FORMAT = 1  # the sealed values' layout: [FORMAT, kind, body]
MEMO_ENTRIES = 16  # records opened with reuse= kept for values read again
MEMO_BYTES = 2 << 20  # the values' bytes those records are kept for, in all
_VALUE_DEPTH = 64  # nesting of a sealed value (a listing page's schemas included)
MAX_ERA_CHARS = 64

R = TypeVar("R")

# A field's kind: "str", "str?" (or null), "num?" (int or float, or null), "bool".
Spec = tuple[tuple[str, str], ...]

TOKENS_SPEC: Spec = (
    ("access_token", "str"),
    ("token_type", "str"),
    ("refresh_token", "str?"),
    ("expires_at", "num?"),
    ("scope", "str?"),
    ("issuer", "str"),
    ("token_endpoint", "str"),
)
REGISTRATION_SPEC: Spec = (("client_id", "str"), ("client_secret", "str?"), ("auth_method", "str"))
BINDING_SPEC: Spec = (
    ("url", "str"),
    ("issuer", "str?"),
    ("client_id", "str?"),
    ("client_secret_sha256", "str?"),
    ("client_metadata_url", "str?"),
    ("redirect_uri", "str"),
    ("tenant", "str?"),
)
PENDING_SPEC: Spec = (
    ("state", "str"),
    ("verifier", "str"),
    ("issuer", "str"),
    ("iss_required", "bool"),
    ("token_endpoint", "str"),
    ("resource", "str?"),
    ("redirect_uri", "str"),
)


def _fits(value: object, kind: str) -> bool:
    if value is None:
        return kind.endswith("?")
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, str) if kind.startswith("str") else isinstance(value, int | float)


def _fields(body: Mapping[str, Any], spec: Spec) -> dict[str, Any] | None:
    """``body``'s fields named in ``spec`` when each is present and of its kind (other
    members are ignored: a newer worker may add some), else None."""
    out: dict[str, Any] = {}
    for name, kind in spec:
        if name not in body or not _fits(body[name], kind):
            return None
        out[name] = body[name]
    return out


def _record(value: object, spec: Spec) -> dict[str, Any]:
    return {name: getattr(value, name) for name, _ in spec}


def tokens_body(tokens: Tokens) -> dict[str, Any]:
    """What a :class:`Tokens` is stored as (``expires_at`` is on the driver's clock:
    a fleet's workers must share that clock)."""
    return _record(tokens, TOKENS_SPEC)


def tokens_from(body: Mapping[str, Any]) -> Tokens | None:
    fields = _fields(body, TOKENS_SPEC)
    if fields is None:
        return None
    if fields["expires_at"] is not None:
        fields["expires_at"] = float(fields["expires_at"])
    return Tokens(**fields)


def registration_body(registration: ClientRegistration) -> dict[str, Any]:
    return _record(registration, REGISTRATION_SPEC)


def registration_from(body: Mapping[str, Any]) -> ClientRegistration | None:
    fields = _fields(body, REGISTRATION_SPEC)
    return None if fields is None else ClientRegistration(**fields)


def pending_body(pending: PendingAuthorization) -> dict[str, Any]:
    body = _record(pending, PENDING_SPEC)
    body["registration"] = registration_body(pending.registration)
    body["bound"] = _record(pending.bound, BINDING_SPEC)
    return body


def pending_from(body: Mapping[str, Any]) -> PendingAuthorization | None:
    fields = _fields(body, PENDING_SPEC)
    registration, bound = body.get("registration"), body.get("bound")
    if fields is None or not isinstance(registration, dict) or not isinstance(bound, dict):
        return None
    client, binding = registration_from(registration), _fields(bound, BINDING_SPEC)
    if client is None or binding is None:
        return None
    return PendingAuthorization(**fields, registration=client, bound=Binding(**binding))


def era_body(version: str) -> dict[str, Any]:
    return {"version": version}


def era_from(body: Mapping[str, Any]) -> str | None:
    version = body.get("version")
    return version if isinstance(version, str) and 0 < len(version) <= MAX_ERA_CHARS else None


# a stored listing page: (its cursor, the page, its expiry in seconds since the epoch)
StoredPage = tuple[str | None, CachedPage, float]
_PAGE_SPEC: Spec = (("cursor", "str?"), ("next", "str?"), ("expires", "num"))
_MAX_EPOCH = 1e11  # seconds since the epoch: a stored expiry past it is not one


def _tool_entry(tool: Tool) -> dict[str, Any]:
    """``tool`` as a server's ``tools/list`` entry (what :func:`validate_tool` reads)."""
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": decode_kept(tool.input_schema),
    }
    if tool.title is not None:
        entry["title"] = tool.title
    if tool.annotations is not None:
        entry["annotations"] = dict(tool.annotations)
    if tool.output_schema is not None:
        entry["outputSchema"] = decode_kept(tool.output_schema)
    if tool.task_support is not None:
        entry["execution"] = {"taskSupport": tool.task_support}
    return entry


def listing_body(pages: list[StoredPage]) -> dict[str, Any]:
    """A whole listing: every page, each with its tools, skips, ttl and expiry."""
    return {
        "pages": [
            {
                "cursor": cursor,
                "next": page.next_cursor,
                "ttl_ms": page.ttl_ms,
                "expires": expires,
                "skipped_count": page.skipped_count,
                "skipped": [[s.index, s.name, s.reason] for s in page.skipped],
                "tools": [_tool_entry(tool) for tool in page.tools],
            }
            for cursor, page, expires in pages
        ]
    }


def listing_from(
    body: Mapping[str, Any],
    *,
    modern: bool,
    max_tool_bytes: int,
    max_pages: int,
    tasks: bool = False,
) -> list[StoredPage] | None:
    """The pages of a stored listing, every tool validated again as a server's on a Conn
    with ``tasks`` or without (an entry it would skip, a field of the wrong type, no page:
    the whole value is None)."""
    pages = body.get("pages")
    if not isinstance(pages, list) or not 0 < len(pages) <= max_pages:
        return None
    out: list[StoredPage] = []
    for raw in pages:
        fields = _fields(raw, _PAGE_SPEC) if isinstance(raw, dict) else None
        if fields is None or not 0 < fields["expires"] < _MAX_EPOCH:
            return None
        ttl, count, skips, entries = (
            raw.get(k) for k in ("ttl_ms", "skipped_count", "skipped", "tools")
        )
        if not (
            type(ttl) is int
            and ttl > 0
            and type(count) is int
            and count >= 0
            and isinstance(skips, list)
            and isinstance(entries, list)
        ):
            return None
        skipped: list[SkippedTool] = []
        for skip in skips:
            if not (
                isinstance(skip, list)
                and len(skip) == 3
                and type(skip[0]) is int
                and _fits(skip[1], "str?")
                and isinstance(skip[2], str)
            ):
                return None
            skipped.append(SkippedTool(index=skip[0], name=skip[1], reason=skip[2]))
        tools: list[Tool] = []
        for entry in entries:
            tool = validate_tool(
                0, entry, modern=modern, max_tool_bytes=max_tool_bytes, tasks=tasks
            )
            if not isinstance(tool, Tool):
                return None
            tools.append(tool)
        page = CachedPage(
            tools=tuple(tools),
            skipped=tuple(skipped),
            skipped_count=count,
            next_cursor=fields["next"],
            ttl_ms=ttl,
        )
        out.append((fields["cursor"], page, float(fields["expires"])))
    return out


class ValueCodec:
    """Seals records into store values and opens what a store returns, defensively.

    ``misses`` counts the values opened as a miss, by cause: ``"oversized"`` (over
    ``max_bytes``), ``"undecodable"`` (not JSON, or not ``[1, kind, {...}]``),
    ``"kind"`` (another kind's value under this key), ``"shape"`` (a body whose
    fields are missing or of the wrong type).  ``unsealed`` counts records too big
    to store (they are not stored); ``reused``, records returned again for the same
    bytes (``open``'s ``reuse``).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.misses = {"oversized": 0, "undecodable": 0, "kind": 0, "shape": 0}
        self.unsealed = 0
        self.reused = 0
        # (kind, reuse, the value's bytes) -> the record opened from them, oldest first
        self._memo: OrderedDict[tuple[str, Hashable, bytes], Any] = OrderedDict()
        self._memo_bytes = 0

    def __repr__(self) -> str:
        return f"ValueCodec(max_bytes={self.max_bytes:,}, misses={self.misses})"

    def seal(self, kind: str, body: Mapping[str, Any]) -> bytes | None:
        """The stored form of ``body``, or None (counted) when over ``max_bytes``."""
        data = dumps_compact([FORMAT, kind, body])
        if len(data) > self.max_bytes:
            self.unsealed += 1
            return None
        return data

    def open(
        self,
        kind: str,
        data: bytes,
        shape: Callable[[Mapping[str, Any]], R | None],
        *,
        reuse: Hashable = None,
    ) -> R | None:
        """The record ``shape`` builds from the body of ``data``, or None (a miss,
        counted) -- never an exception, whatever ``data`` holds.

        ``reuse`` (not None) names all that ``shape`` depends on besides the body: a
        record opened before from bytes equal to ``data``, with the same ``kind`` and
        ``reuse``, is returned again (the same object: the caller must not change it)."""
        memo_key = (kind, reuse, data)
        if reuse is not None and (kept := self._memo.get(memo_key)) is not None:
            self._memo.move_to_end(memo_key)
            self.reused += 1
            return kept  # type: ignore[no-any-return]
        if len(data) > self.max_bytes:
            cause = "oversized"
        else:
            try:
                value = parse_json(data, max_depth=_VALUE_DEPTH, max_values=self.max_bytes)
            except JsonError:
                value = None
            if not (
                isinstance(value, list)
                and len(value) == 3
                and value[0] == FORMAT
                and isinstance(value[1], str)
                and isinstance(value[2], dict)
            ):
                cause = "undecodable"
            elif value[1] != kind:
                cause = "kind"
            elif (record := shape(value[2])) is not None:
                if reuse is not None:
                    self._keep(memo_key, record)
                return record
            else:
                cause = "shape"
        self.misses[cause] += 1
        return None

    def _keep(self, memo_key: tuple[str, Hashable, bytes], record: Any) -> None:
        """Keep ``record`` for its value's bytes, the oldest forgotten past the bounds."""
        size = len(memo_key[2])
        if size > MEMO_BYTES:
            return
        self._memo[memo_key] = record
        self._memo_bytes += size
        while len(self._memo) > MEMO_ENTRIES or self._memo_bytes > MEMO_BYTES:
            (_, _, data), _ = self._memo.popitem(last=False)
            self._memo_bytes -= len(data)
