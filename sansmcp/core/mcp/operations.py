"""The operations as generator scripts: connect, list tools, call a tool.

Each operation is a generator that yields what it needs -- send a request and wait
for its reply (:class:`Send`), wait until a time (:class:`Sleep`), ask the embedder
(:class:`Ask`) -- and returns its terminal event, so negotiation, pagination, multi
round-trip calls, stream resumption and session recovery read as straight-line code.
The machine runs them (``McpMachine._resume``); the decisions they take are in
:mod:`.rules`, the requests they send are built by :mod:`.requests`, the tools they
read and the listing they keep are the :class:`~.toolset.Toolset`'s.  The Client-wide
cache's ``server/discover`` entries are read and filled here, where the era is known.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, assert_never

from ..cache import DISCOVER_METHOD, CachedPage, CallerCache, scope_of, ttl_of
from ..errors import ConnectionFailed, ServerAnswered
from ..fieldvalue import echoable
from ..http import HttpRequest, header_value
from ..limits import Limits
from ..messages import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    LEGACY_VERSIONS,
    METHOD_NOT_FOUND,
    Verdict,
    classify_probe,
    is_modern,
    negotiate_version,
)
from ..results import parse_call_result
from ..tools import (
    SkippedTool,
    Tool,
    encode_header_value,
    param_headers,
)
from . import rules
from .events import Connected, ToolCalled, ToolsListed
from .requests import Requests
from .session import Era, Session
from .settings import ConnSettings
from .taskwire import EXTENSION, TaskView, created_task
from .toolset import Toolset
from .transport import Reply, Transport

if TYPE_CHECKING:
    from .tasks import TaskTracker

__all__ = [
    "Ask",
    "EraMismatch",
    "Instruction",
    "OpGen",
    "Operations",
    "Send",
    "SessionExpired",
    "Sleep",
]


@dataclass(slots=True)
class Send:
    """Send ``request`` and wait for its reply, at most ``cap`` s (``Limits.<cap_bound>``);
    ``method`` / ``tool`` name a JSON-RPC request (for progress and telemetry)."""

    request: HttpRequest
    rpc_id: int | None
    cap: float
    cap_bound: str
    method: str = ""
    tool: str | None = None


@dataclass(slots=True)
class Sleep:
    until: float


@dataclass(slots=True)
class Ask:
    requests: Mapping[str, Mapping[str, Any]]


Instruction = Send | Sleep | Ask
OpGen = Generator[Instruction, Any, Any]


# Members as module constants for the per-request paths (an ``Enum.X`` lookup runs the
# enum type's attribute hook on Python 3.11)
_LEGACY: Final = Era.LEGACY
_MODERN: Final = Era.MODERN
_V_LEGACY: Final = Verdict.LEGACY
_V_RETRY_VERSION: Final = Verdict.RETRY_VERSION

# JSON-RPC errors on tools/call that say the caller's idea of the tool is stale (the spec's
# caching page: "method not found or the parameters were invalid")
STALE_TOOL_CODES = frozenset({METHOD_NOT_FOUND, INVALID_PARAMS})


def _token(rpc_id: int, progress: bool) -> int | None:
    """A request's progress token: its JSON-RPC id, unique among our active requests."""
    return rpc_id if progress else None


class SessionExpired(Exception):
    """The legacy server answered 404 to a request in the session (it ended it)."""


class EraMismatch(Exception):
    """A remembered era hint the server's answer contradicts."""


class Operations:
    """The scripts of one connection, and the tool listing they keep."""

    def __init__(
        self,
        *,
        settings: ConnSettings,
        limits: Limits,
        session: Session,
        requests: Requests,
        transport: Transport,
        versions: tuple[str, ...],
        ids: Iterator[int] | None,
        jitter: Callable[[], float] | None,
        toolset: Toolset,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self.session = session
        self.requests = requests
        self.transport = transport
        self.versions = versions
        self.can_answer = settings.capabilities is not None
        self._ids = ids if ids is not None else itertools.count(1)
        self._jitter = jitter or (lambda: 0.5)
        self.toolset = toolset  # what the listing keeps, and the Client-wide cache's hooks
        self.cache = toolset.cache
        # the call in hand asked for progress (its tools/call requests carry a token)
        self.progress = False
        self.server_logs = False  # the legacy server declared the logging capability
        # the legacy session's standalone stream opens for input, notifications or progress
        self.listens = self.can_answer or settings.notifications
        self.task: TaskTracker | None = None  # the task the call in hand follows (taskop)
        # how a task handle is followed: taskop.follow, set by the machine (taskop imports
        # this module, so this module names it only by its shape)
        self.follow_task: Callable[[Operations, TaskView], OpGen] | None = None

    # ------------------------------------------------------------ the request primitive

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        arguments: bytes | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
        reissue: bool = True,
    ) -> Generator[Instruction, Any, Reply]:
        """Send one JSON-RPC request and return the reply for it.

        Handles stream breaks (legacy resumption with ``Last-Event-ID``; modern
        re-issue with a new id when ``reissue``), legacy session expiry
        (``SessionExpired``) and a wrong era hint (``EraMismatch``).
        """
        limits = self.limits
        session = self.session
        is_call = method == "tools/call"
        cap = limits.call_timeout if is_call else limits.dial_timeout
        cap_bound = "call_timeout" if is_call else "dial_timeout"
        retries = 0
        last_id: bytes | None = None
        retry_ms: int | None = None
        progress = is_call and self.progress
        tool: str | None = params.get("name") if is_call else None
        rpc_id = next(self._ids)
        request = self.requests.rpc(
            rpc_id, method, params, arguments, extra, _token(rpc_id, progress)
        )
        sent_session = session.session_id
        while True:
            reply: Reply = yield Send(request, rpc_id, cap, cap_bound, method, tool)
            if reply.broken is None:
                break
            retries = rules.count_break(retries, reply.progressed, limits.max_stream_retries)
            if session.modern:
                if not reissue:
                    raise reply.broken
                rpc_id = next(self._ids)
                request = self.requests.rpc(
                    rpc_id, method, params, arguments, extra, _token(rpc_id, progress)
                )
                continue
            # The last event id and the retry delay outlive one response (WHATWG SSE):
            # a resumed stream that breaks before sending an id resumes from the same one.
            last_id = reply.last_event_id or last_id
            retry_ms = reply.retry_ms if reply.retry_ms is not None else retry_ms
            if last_id is None:
                raise reply.broken
            if retry_ms:
                yield Sleep(self.transport.now + retry_ms / 1000)
            request = self.requests.legacy(b"GET", b"", [(b"last-event-id", last_id)])
        if session.era is _LEGACY and reply.status == 404 and sent_session is not None:
            raise SessionExpired()
        if session.hinted and session.era is _MODERN:
            verdict = classify_probe(reply.status, reply.message, method=method)
            if verdict is _V_LEGACY or verdict is _V_RETRY_VERSION:
                raise EraMismatch()
            session.hinted = False  # the hint held
        return reply

    def result(self, reply: Reply) -> dict[str, Any]:
        message = reply.message
        if message is None:
            raise ConnectionFailed(
                f"the server answered HTTP {reply.status} without a JSON-RPC response",
                cause="http_status",
                status=reply.status,
            )
        if "error" in message:
            raise rules.server_error(message)
        result = message["result"]
        if not isinstance(result, dict):
            raise ServerAnswered("the server's result is not an object", reason="malformed_result")
        return result

    # ------------------------------------------------------------ negotiation

    def connect(self) -> OpGen:
        try:
            yield from self.negotiate(use_hint=True)
        except EraMismatch:  # a legacy hint the server's answer to initialize contradicts
            yield from self.negotiate(use_hint=False)
        assert self.session.protocol_version is not None
        return Connected(protocol_version=self.session.protocol_version)

    def negotiate(self, *, use_hint: bool) -> OpGen:
        session = self.session
        self.transport.stop_listen()
        session.reset()
        versions = self.versions
        legacy = [v for v in versions if v in LEGACY_VERSIONS]
        modern = [v for v in versions if is_modern(v)]
        hint = self.settings.era_hint if use_hint else None
        cache = self.cache
        if modern and cache:
            if use_hint:  # a fresh server/discover result: the era is known, no probe
                hint = self.discovered_version(cache, modern[0]) or hint
            else:  # the server contradicted what it was said to be
                cache.invalidate(modern[0], DISCOVER_METHOD)
        if hint is not None and hint in versions:
            if is_modern(hint):
                session.modern_at(hint)
                session.hinted = True
                return
            # A remembered legacy era: initialize at once, no server/discover probe.  With
            # modern versions allowed, an answer that is not a usable legacy initialize
            # result contradicts the hint and re-probes (EraMismatch).
            session.hinted = bool(modern)
            yield from self.initialize(hint)
            return
        if not modern:
            yield from self.initialize(legacy[0])
            return
        retried = False
        version = modern[0]
        while True:
            session.probe_version = version
            reply = yield from self.request("server/discover", {})
            verdict = classify_probe(reply.status, reply.message, method="server/discover")
            match verdict:
                case Verdict.MODERN:
                    assert reply.message is not None
                    if self.cache is not None:
                        self.cache.store_discovery(
                            version, reply.message["result"], now=self.transport.now
                        )
                    supported = reply.message["result"].get("supportedVersions")
                    chosen = negotiate_version(versions, supported)
                case Verdict.RETRY_VERSION:
                    assert reply.message is not None
                    supported = reply.message["error"]["data"]["supported"]
                    chosen = negotiate_version(versions, supported)
                    if retried:
                        chosen = None
                    retried = True
                case Verdict.MODERN_ERROR:
                    assert reply.message is not None
                    raise rules.server_error(reply.message)
                case Verdict.LEGACY:
                    if not legacy:
                        raise ServerAnswered(
                            "the server speaks only legacy MCP revisions, which "
                            f"protocol_versions excludes ({', '.join(versions)})",
                            reason="unsupported_version",
                        )
                    yield from self.initialize(legacy[0])
                    return
                case Verdict.FAILED:
                    raise ConnectionFailed(
                        f"the server answered HTTP {reply.status} to server/discover",
                        cause="http_status",
                        status=reply.status,
                    )
                case _:  # pragma: no cover - the enum is exhausted above (mypy checks it)
                    assert_never(verdict)
            if chosen is None:
                raise ServerAnswered(
                    "the server supports no protocol version in common with us "
                    f"(we speak {', '.join(versions)})",
                    reason="unsupported_version",
                )
            if not is_modern(chosen):
                yield from self.initialize(chosen)
                return
            if verdict is Verdict.MODERN:
                session.modern_at(chosen)
                return
            version = chosen  # retry the probe once with the version the server named

    def discovered_version(self, cache: CallerCache, probe: str) -> str | None:
        """The version a fresh cached ``server/discover`` result (sent at ``probe``)
        negotiates to, if there is one."""
        hit = cache.discovery(probe, now=self.transport.now)
        return None if hit is None else negotiate_version(self.versions, list(hit.supported))

    def initialize(self, version: str) -> OpGen:
        session = self.session
        legacy = [v for v in self.versions if v in LEGACY_VERSIONS]
        retried = False
        self.transport.stop_listen()
        while True:
            session.initializing()
            params = {
                "protocolVersion": version,
                "capabilities": dict(self.requests.capabilities()),
                "clientInfo": dict(self.settings.client_info),
            }
            reply = yield from self.request("initialize", params)
            message = reply.message
            if session.hinted:
                if not rules.initialize_result(message, legacy):
                    raise EraMismatch()
                session.hinted = False  # the hint held
            if message is not None and "error" in message and not retried:
                data = message["error"].get("data")
                supported = data.get("supported") if isinstance(data, Mapping) else None
                other = negotiate_version(legacy, supported)
                if other is not None and other != version:
                    retried = True
                    version = other
                    continue
            result = self.result(reply)
            self.server_logs = rules.declares(result, "logging")
            chosen = result.get("protocolVersion")
            if not isinstance(chosen, str) or chosen not in legacy:
                raise ServerAnswered(
                    f"the server chose protocol version {chosen!r}, which we do not speak "
                    f"(we offered {', '.join(legacy)})",
                    reason="unsupported_version",
                )
            session_id = header_value(reply.headers, b"mcp-session-id")
            if (
                session_id is not None
                and echoable(session_id, self.limits.max_echo_bytes, spaces=False) is None
            ):
                raise ServerAnswered(
                    "the server assigned an unusable session id", reason="bad_session_id"
                )
            session.legacy_at(chosen, session_id)
            notify = self.requests.legacy_rpc(None, "notifications/initialized", None)
            done: Reply = yield Send(notify, None, self.limits.dial_timeout, "dial_timeout")
            if not 200 <= done.status < 300:
                raise ConnectionFailed(
                    f"the server answered HTTP {done.status} to notifications/initialized",
                    cause="http_status",
                    status=done.status,
                )
            level = self.settings.log_level
            if level is not None and self.server_logs:
                # once per session; an error answer (an unknown level...) is not fatal
                yield from self.request("logging/setLevel", {"level": level})
            self.transport.open_listen(self.listens)
            return

    def recovering(self, make: Callable[[], OpGen]) -> OpGen:
        """Run an operation; re-initialize once on legacy session expiry, and
        re-negotiate once when a modern era hint proves wrong, restarting it."""
        recovered = False
        while True:
            try:
                return (yield from make())
            except SessionExpired:
                if recovered:
                    raise ConnectionFailed(
                        "the server expired the new session at once (HTTP 404)",
                        cause="session_expired",
                        status=404,
                    ) from None
                assert self.session.protocol_version is not None
                yield from self.initialize(self.session.protocol_version)
            except EraMismatch:
                if recovered:  # pragma: no cover - a re-negotiated connection is never hinted
                    raise
                yield from self.negotiate(use_hint=False)
            recovered = True

    # ------------------------------------------------------------ tools/list

    def list_tools(self, fresh: bool = False) -> OpGen:
        if not fresh:
            toolset = self.toolset
            hit = toolset.cached_listing(self.transport.now)
            if hit is not None:  # every page fresh: no request at all
                toolset.adopt(hit)
                return ToolsListed(
                    tools=hit.tools,
                    skipped=hit.skipped,
                    skipped_count=hit.skipped_count,
                    ttl_ms=hit.ttl_ms,
                    cache_scope=hit.cache_scope,
                )
        tools, skipped, skipped_count = yield from self.list_pages()
        return ToolsListed(
            tools=tuple(tools),
            skipped=tuple(skipped),
            skipped_count=skipped_count,
            ttl_ms=self.toolset.ttl_ms,
            cache_scope=self.toolset.cache_scope,
        )

    def list_pages(
        self,
    ) -> Generator[Instruction, Any, tuple[list[Tool], list[SkippedTool], int]]:
        from ..listing import validate_entry  # lazy: msgspec on the first listing

        limits = self.limits
        modern = self.session.era is _MODERN
        tools: list[Tool] = []
        skipped: list[SkippedTool] = []
        skipped_count = 0
        max_tools = limits.max_tools
        names: set[str] = set()
        seen: set[str] = set()
        cursor: str | None = None
        index = 0
        ttl: int | None = None
        scope: str | None = None
        page = 0
        # the pages kept for the cache while every page so far is cacheable
        recording = self.cache is not None
        pages: list[tuple[str | None, CachedPage, float]] = []
        public = True
        while True:
            page += 1
            if page > limits.max_tool_pages:
                raise ServerAnswered(
                    f"the tool listing goes on past {limits.max_tool_pages} pages "
                    "(Limits.max_tool_pages)",
                    reason="max_tool_pages",
                    bound="max_tool_pages",
                    limit=limits.max_tool_pages,
                )
            params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            reply = yield from self.request("tools/list", params)
            if cursor is not None and reply.message is not None and "error" in reply.message:
                self.toolset.invalidate()  # a cursor turned invalid: every cached page goes
            result = self.result(reply)
            rules.result_kind(result, allow_input=False)
            raw_tools = result.get("tools")
            if not isinstance(raw_tools, list):
                raise ServerAnswered(
                    "the tools/list result has no tools array", reason="malformed_result"
                )
            if index + len(raw_tools) > max_tools:
                raise ServerAnswered(
                    f"the tool listing has more than {max_tools:,} entries: "
                    f"{index + len(raw_tools):,} by page {page} (Limits.max_tools)",
                    reason="max_tools",
                    bound="max_tools",
                    limit=max_tools,
                )
            tools_at, skipped_at, count_at = len(tools), len(skipped), skipped_count
            max_tool_bytes = limits.max_tool_bytes
            for raw in raw_tools:
                outcome = validate_entry(index, raw, modern=modern, max_tool_bytes=max_tool_bytes)
                if isinstance(outcome, Tool):
                    if outcome.name not in names:
                        names.add(outcome.name)
                        tools.append(outcome)
                        index += 1
                        continue
                    outcome = SkippedTool(
                        index=index, name=outcome.name, reason="duplicate tool name"
                    )
                skipped_count += 1
                if len(skipped) < limits.max_recorded_skips:
                    skipped.append(outcome)
                index += 1
            ttl, scope = rules.merge_cache(ttl, scope, result)
            sent = cursor
            cursor = rules.advance_cursor(
                result.get("nextCursor"), seen, page, limits.max_echo_bytes
            )
            if recording:
                page_ttl = ttl_of(result)
                recording = page_ttl > 0  # a page never served: the listing cannot be
            if recording:
                public = public and scope_of(result) == "public"
                cached = CachedPage(
                    tools=tuple(tools[tools_at:]),
                    skipped=tuple(skipped[skipped_at:]),
                    skipped_count=skipped_count - count_at,
                    next_cursor=cursor,
                    ttl_ms=page_ttl,
                )
                pages.append((sent, cached, self.transport.now))
            if cursor is None:
                break
        self.toolset.listed(tools, ttl or 0, scope, pages if recording else None, public)
        return tools, skipped, skipped_count

    # ------------------------------------------------------------ tools/call

    def call_tool(self, name: str, arguments: bytes, parsed: Mapping[str, Any]) -> OpGen:
        limits = self.limits
        toolset = self.toolset
        toolset.output_schema(name)  # an unusable schema fails the call before it is sent
        attempts = 0
        relisted = False
        inputs: Mapping[str, Any] | None = None
        state: str | None = None
        shed = 0
        while True:
            attempts += 1
            if attempts > limits.max_call_attempts:
                raise ServerAnswered(
                    f"the server asked for more input {limits.max_call_attempts} times "
                    "(Limits.max_call_attempts)",
                    reason="max_call_attempts",
                    bound="max_call_attempts",
                    limit=limits.max_call_attempts,
                )
            params: dict[str, Any] = {"name": name}
            extra: list[tuple[bytes, bytes]] = []
            modern = self.session.era is _MODERN
            if modern:
                extra.append((b"mcp-name", encode_header_value(name)))
                extra.extend(param_headers(toolset.header_params(name), parsed))
            if inputs is not None:
                params["inputResponses"] = inputs
            if state is not None:
                params["requestState"] = state
            tool = toolset.tools.get(name)
            reissue = self.settings.reissue_calls or (tool is not None and tool.idempotent)
            reply = yield from self.request(
                "tools/call", params, arguments=arguments, extra=extra, reissue=reissue
            )
            message = reply.message
            if (
                modern
                and not relisted
                and message is not None
                and "error" in message
                and message["error"]["code"] == HEADER_MISMATCH
            ):
                relisted = True
                toolset.invalidate()  # the listing the headers came from is stale
                yield from self.list_pages()
                continue
            if (
                message is not None
                and "error" in message
                and message["error"]["code"] in STALE_TOOL_CODES
                and name in toolset.tools
            ):
                toolset.invalidate()
            result = self.result(reply)
            task = created_task(
                result,
                EXTENSION if modern and self.settings.tasks else None,
                method="tools/call",
                max_echo_bytes=limits.max_echo_bytes,
            )
            if task is not None:  # the server runs the call as a task: poll it to its end
                assert self.follow_task is not None
                result = yield from self.follow_task(self, task)
            step = rules.next_call_step(
                result, can_answer=self.can_answer, max_echo_bytes=limits.max_echo_bytes
            )
            match step:
                case rules.Complete():
                    call = parse_call_result(result, modern=modern)
                    schema = None if call.is_error else toolset.output_schema(name)
                    if schema is not None:
                        from ..schema.output import check_output

                        check_output(name, schema, result, limits)
                        call = dataclasses.replace(call, validated=True)
                    return ToolCalled(result=call)
                case rules.AskInput():
                    state = step.state
                    answers = yield Ask(step.requests)
                    if answers is None:
                        raise ServerAnswered(
                            "the input the server asked for was declined", reason="input_declined"
                        )
                    inputs = dict(answers)
                    shed = 0
                case rules.Backoff():
                    state = step.state
                    inputs = None
                    delay = rules.backoff_delay(shed, self._jitter())
                    shed += 1
                    yield Sleep(self.transport.now + delay)
                case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                    assert_never(step)
