"""The tools a connection knows, and its hooks into the Client-wide cache.

:class:`Toolset` holds the listing in hand -- the connection's own, or one the
Client-wide cache (:mod:`..cache`) served -- with its ttl and scope; the operations
read a tool from it (its ``x-mcp-header`` parameters, its compiled output schema) and a
listing replaces it.  It serves a fresh cached listing, stores a new one, and
invalidates the cached ones on ``tools/list_changed`` or an answer that says they are
stale.  The façade reads what it shows (``tools``, ``ttl_ms``, ``cache_scope``) here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cache import CachedListing, CachedPage, CallerCache
from ..errors import CallerError
from ..limits import Limits
from ..tools import HeaderParam, Tool, header_params_of
from .compiled import HELD_PER_STEP, CompiledSchemas, held_estimate
from .session import Session
from .settings import ConnSettings

if TYPE_CHECKING:
    from ..schema.validator import Schema

__all__ = ["TASKS_KEY", "Toolset", "invalidate_listings"]

#: Appended to the protocol version a listing is cached under when it keeps the tools
#: that must run as tasks (:attr:`Toolset.legacy_tasks`): a Conn without tasks is never
#: served one of them, nor one with tasks a listing that skipped them.
TASKS_KEY = " tasks"


def invalidate_listings(cache: CallerCache | None, session: Session) -> None:
    """Cached listings of ``session``'s endpoint the caller of ``cache`` could be served
    are stale now.  A function of the two, not a method: the transport calls it on a
    ``tools/list_changed`` (``functools.partial``), and a bound method of the toolset,
    which the operations (owners of the transport) hold, would be a reference cycle outliving every closed Conn."""
    version = session.protocol_version
    if cache and version is not None:
        cache.invalidate(version)
        cache.invalidate(version + TASKS_KEY)


class Toolset:
    """The tool listing of one connection, its compiled output schemas, its cache hooks."""

    def __init__(
        self,
        settings: ConnSettings,
        limits: Limits,
        session: Session,
        cache: CallerCache | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self.session = session
        self.tools: dict[str, Tool] = {}
        self.ttl_ms = 0
        self.cache_scope: str | None = None
        # the Client-wide cache; whether this Conn's tools came from it (None: no listing)
        self.cache = cache
        self.tools_from_cache: bool | None = None
        # compiled output schemas by tool name, each with the source it was compiled
        # from and its estimate; valid for the listing ``_schemas_of`` (cleared when
        # self.tools is replaced).  One is compiled at a tool's first call, not at the
        # listing, but a caller calling many tools of one listing on one Conn (an agent
        # trying each) would keep one per tool (a 29-byte pattern can hold ~36 MB): so their
        # estimates (``held_estimate``) are bounded by ``Limits.max_compiled_schema_bytes``
        # beside the one in use (the map is cleared before a schema would pass it)
        self._output_schemas: dict[str, tuple[object, Schema, int]] = {}
        self._schemas_of: dict[str, Tool] = self.tools
        # the Client's compiled server schemas, by their bytes (None: compiled per Conn)
        self.compiled: CompiledSchemas | None = None

    @property
    def legacy_tasks(self) -> bool:
        """Calls may run as 2025-11-25 tasks: ``Config.tasks`` and the server's capability
        (a listing then keeps the tools whose ``taskSupport`` is ``"required"``)."""
        return self.settings.tasks and self.session.server_tasks

    def cache_version(self) -> str | None:
        """The version the Client-wide cache (and the fleet's store) keys this Conn's
        listings under: the protocol version, plus :data:`TASKS_KEY` with tasks."""
        version = self.session.protocol_version
        if version is not None and self.legacy_tasks:
            return version + TASKS_KEY
        return version

    def share_compiled(self, compiled: CompiledSchemas) -> None:
        """Compile the server's output schemas into ``compiled`` (the Client's)."""
        self.compiled = compiled

    def listed(
        self,
        tools: list[Tool],
        ttl_ms: int,
        scope: str | None,
        pages: list[tuple[str | None, CachedPage, float]] | None,
        public: bool,
    ) -> None:
        """A listing from the server replaces the tools; its ``pages`` (None: not every
        page cacheable) go to the Client-wide cache."""
        self.tools = {tool.name: tool for tool in tools}
        self.ttl_ms = ttl_ms
        self.cache_scope = scope
        self.tools_from_cache = False
        version = self.cache_version()
        if pages is not None and self.cache is not None and version is not None:
            self.cache.store_listing(version, pages, public=public)

    def cached_listing(self, now: float) -> CachedListing | None:
        cache = self.cache
        version = self.cache_version()
        if not cache or version is None:
            return None
        limits = self.limits
        return cache.listing(
            version,
            now=now,
            max_pages=limits.max_tool_pages,
            max_recorded_skips=limits.max_recorded_skips,
        )

    def adopt(self, hit: CachedListing) -> None:
        self.tools = {tool.name: tool for tool in hit.tools}
        self.ttl_ms = hit.ttl_ms
        self.cache_scope = hit.cache_scope
        self.tools_from_cache = True

    def adopt_cached_tools(self, now: float) -> None:
        """A Conn that has not listed takes its tools (``x-mcp-header`` parameters,
        output schemas) from a fresh cached listing, if there is one."""
        if self.tools_from_cache is None:
            hit = self.cached_listing(now)
            if hit is not None:
                self.adopt(hit)

    def invalidate(self) -> None:
        """Cached listings of this endpoint this caller could be served are stale now."""
        invalidate_listings(self.cache, self.session)

    def header_params(self, name: str) -> tuple[HeaderParam, ...]:
        tool = self.tools.get(name)
        if tool is not None:
            return tool.header_params
        schema = self.settings.tool_schemas.get(name)
        if schema is None:
            return ()
        try:
            return header_params_of(schema)
        except ValueError as exc:
            raise CallerError(f"the schema given for tool {name!r} is unusable: {exc}") from None

    def output_schema(self, name: str) -> Schema | None:
        """The compiled output schema of tool ``name``, or None when none is known or
        validation is off.  Compiled once per Client (``ServerAnswered`` or, for a
        schema from ``Config.output_schemas``, ``CallerError`` when it is unusable)."""
        settings = self.settings
        if not settings.validate_structured_content:
            return None
        tool = self.tools.get(name)
        source: object = None if tool is None else tool.output_schema
        from_config = source is None
        if from_config:
            source = settings.output_schemas.get(name)
            if source is None:
                return None
        kept = self._output_schemas
        if self._schemas_of is not self.tools:
            kept.clear()
            self._schemas_of = self.tools
        known = kept.get(name)
        if known is not None and known[0] is source:
            return known[1]
        shared = None if from_config else self.compiled
        schema = None if shared is None else shared.get(source)  # type: ignore[arg-type]
        if schema is None:
            from ..schema.output import compile_output  # lazy: most Conns never compile one

            schema = compile_output(name, source, self.limits, from_config=from_config)  # type: ignore[arg-type]
            if shared is not None:
                shared.put(source, schema)  # type: ignore[arg-type]
        # (a configured schema, the caller's own and parsed, is charged by its steps)
        size = HELD_PER_STEP * schema.steps if from_config else held_estimate(source, schema)  # type: ignore[arg-type]
        kept.pop(name, None)
        if sum(entry[2] for entry in kept.values()) + size > self.limits.max_compiled_schema_bytes:
            kept.clear()
        kept[name] = (source, schema, size)
        return schema
