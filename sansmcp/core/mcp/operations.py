"""The operations as generator scripts: the request primitive and the session's scripts.

Each operation is a generator that yields what it needs -- send a request and wait
for its reply (:class:`Send`), wait until a time (:class:`Sleep`), ask the embedder
(:class:`Ask`) -- and returns its terminal event, so negotiation, pagination, multi
round-trip calls, stream resumption and session recovery read as straight-line code.
The machine runs them (``McpMachine._resume``); the decisions they take are in
:mod:`.rules`, the requests they send are built by :mod:`.requests`.

Here: :meth:`Operations.request` (one JSON-RPC request: stream resumption, re-issue,
session expiry, a wrong era hint), connect (negotiation, ``initialize``) and
:meth:`Operations.recovering`, under which every later operation runs.  The Client-wide
cache's ``server/discover`` entries are read and filled here, where the era is known.
The tool scripts are :mod:`.toolops`'; a new kind of operation is a script of its own
beside them, written on :meth:`Operations.request`.

A script learns the time from its start (``now``) and from each reply (``Reply.at``):
there is no clock to read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, assert_never

from ..cache import DISCOVER_METHOD, CallerCache
from ..errors import ConnectionFailed, ServerAnswered
from ..fieldvalue import echoable
from ..http import HttpRequest, header_value
from ..limits import Limits
from ..messages import (
    INVALID_PARAMS,
    LEGACY_VERSIONS,
    METHOD_NOT_FOUND,
    Verdict,
    classify_probe,
    is_modern,
    negotiate_version,
    parse_message,
)
from . import rules
from .events import Connected
from .exchange import Decoder, Reply
from .notifications import TaskReport
from .requests import Requests
from .session import Era, Session
from .settings import ConnSettings
from .transport import Transport

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
    ``method`` / ``tool`` name a JSON-RPC request (for telemetry); ``parse`` decodes its
    answer; ``progress``: the progress token whose notifications are the operation's
    while this request is in hand (None: none are)."""

    request: HttpRequest
    rpc_id: int | None
    cap: float
    cap_bound: str
    method: str = ""
    tool: str | None = None
    parse: Decoder = parse_message
    progress: int | None = None


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
    """A remembered era hint the server's answer (which came at ``at``) contradicts."""

    def __init__(self, at: float) -> None:
        super().__init__(at)
        self.at = at


class Operations:
    """The request primitive and the session scripts of one connection."""

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
        cache: CallerCache | None,
        report_task: TaskReport,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self.session = session
        self.requests = requests
        self.transport = transport
        self.versions = versions
        self.can_answer = settings.capabilities is not None
        self._ids = ids if ids is not None else itertools.count(1)
        self.cache = cache  # the Client-wide cache (server/discover entries)
        # the call in hand asked for progress (its tools/call requests carry a token);
        # set for the operation's life by ``recovering``
        self.progress = False
        # the progress token of the call in hand's last tools/call: a task it became keeps
        # it for its polls (2025-11-25: "valid throughout the task lifetime")
        self.call_token: int | None = None
        self.server_logs = False  # the legacy server declared the logging capability
        # the legacy session's standalone stream opens for input, notifications or progress
        self.listens = self.can_answer or settings.notifications
        self.task: TaskTracker | None = None  # the task the call in hand follows (taskop)
        # what a task's tracker calls on a change (notifications.task_reporter)
        self.report_task = report_task

    # ------------------------------------------------------------ the request primitive

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        arguments: bytes | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
        reissue: bool = True,
        parse: Decoder = parse_message,
    ) -> Generator[Instruction, Any, Reply]:
        """Send one JSON-RPC request and return the reply for it (its answer decoded
        with ``parse``).

        Handles stream breaks (legacy resumption with ``Last-Event-ID``; modern
        re-issue with a new id when ``reissue``), legacy session expiry
        (``SessionExpired``) and a wrong era hint (``EraMismatch``).
        """
        limits = self.limits
        session = self.session
        is_call = method == "tools/call"
        if is_call:
            cap, cap_bound = limits.call_timeout, "call_timeout"
        elif method == "tasks/result":  # (2025-11-25: answers when the task ends)
            cap, cap_bound = limits.task_timeout, "task_timeout"
        else:
            cap, cap_bound = limits.dial_timeout, "dial_timeout"
        retries = 0
        last_id: bytes | None = None
        retry_ms: int | None = None
        wants_progress = self.progress
        progress = is_call and wants_progress
        tool: str | None = params.get("name") if is_call else None
        rpc_id = next(self._ids)
        request = self.requests.rpc(
            rpc_id, method, params, arguments, extra, _token(rpc_id, progress)
        )
        sent_session = session.session_id
        while True:
            reply: Reply = yield Send(
                request, rpc_id, cap, cap_bound, method, tool, parse, self._route(rpc_id, progress)
            )
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
                yield Sleep(reply.at + retry_ms / 1000)
            request = self.requests.legacy(b"GET", b"", [(b"last-event-id", last_id)])
        if session.era is _LEGACY and reply.status == 404 and sent_session is not None:
            raise SessionExpired()
        if session.hinted and session.era is _MODERN:
            verdict = classify_probe(reply.status, reply.message, method=method)
            if verdict is _V_LEGACY or verdict is _V_RETRY_VERSION:
                raise EraMismatch(reply.at)
            session.hinted = False  # the hint held
        return reply

    def _route(self, rpc_id: int, progress: bool) -> int | None:
        """The progress token notifications are routed to while request ``rpc_id`` is in
        hand: a tools/call asking for progress, its own; a request of the task that call
        became, the call's; any other, none."""
        if progress:
            self.call_token = rpc_id
            return rpc_id
        return self.call_token if self.task is not None else None

    # ------------------------------------------------------------ negotiation

    def connect(self, now: float) -> OpGen:
        try:
            yield from self.negotiate(now, use_hint=True)
        except EraMismatch as mismatch:  # a legacy hint the answer to initialize contradicts
            yield from self.negotiate(mismatch.at, use_hint=False)
        assert self.session.protocol_version is not None
        return Connected(protocol_version=self.session.protocol_version)

    def negotiate(self, now: float, *, use_hint: bool) -> Generator[Instruction, Any, float]:
        """Find the era and version (from ``now``); return the time of the last reply."""
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
                hint = self.discovered_version(cache, modern[0], now) or hint
            else:  # the server contradicted what it was said to be
                cache.invalidate(modern[0], DISCOVER_METHOD)
        if hint is not None and hint in versions:
            if is_modern(hint):
                session.modern_at(hint)
                session.hinted = True
                return now
            # A remembered legacy era: initialize at once, no server/discover probe.  With
            # modern versions allowed, an answer that is not a usable legacy initialize
            # result contradicts the hint and re-probes (EraMismatch).
            session.hinted = bool(modern)
            return (yield from self.initialize(hint))
        if not modern:
            return (yield from self.initialize(legacy[0]))
        retried = False
        version = modern[0]
        while True:
            session.probe_version = version
            reply = yield from self.request("server/discover", {})
            now = reply.at
            verdict = classify_probe(reply.status, reply.message, method="server/discover")
            match verdict:
                case Verdict.MODERN:
                    assert reply.message is not None
                    if self.cache is not None:
                        self.cache.store_discovery(version, reply.message["result"], now=now)
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
                    return (yield from self.initialize(legacy[0]))
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
                return (yield from self.initialize(chosen))
            if verdict is Verdict.MODERN:
                session.modern_at(chosen)
                return now
            version = chosen  # retry the probe once with the version the server named

    def discovered_version(self, cache: CallerCache, probe: str, now: float) -> str | None:
        """The version a fresh cached ``server/discover`` result (sent at ``probe``)
        negotiates to, if there is one."""
        hit = cache.discovery(probe, now=now)
        return None if hit is None else negotiate_version(self.versions, list(hit.supported))

    def initialize(self, version: str) -> Generator[Instruction, Any, float]:
        """Initialize a legacy session at ``version``; return the time of the last reply."""
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
                    raise EraMismatch(reply.at)
                session.hinted = False  # the hint held
            if message is not None and "error" in message and not retried:
                data = message["error"].get("data")
                supported = data.get("supported") if isinstance(data, Mapping) else None
                other = negotiate_version(legacy, supported)
                if other is not None and other != version:
                    retried = True
                    version = other
                    continue
            result = rules.result_of(reply.status, reply.message)
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
            session.server_tasks = chosen == "2025-11-25" and rules.declares_task_calls(result)
            notify = self.requests.legacy_rpc(None, "notifications/initialized", None)
            done: Reply = yield Send(notify, None, self.limits.dial_timeout, "dial_timeout")
            if not 200 <= done.status < 300:
                raise ConnectionFailed(
                    f"the server answered HTTP {done.status} to notifications/initialized",
                    cause="http_status",
                    status=done.status,
                )
            now = done.at
            level = self.settings.log_level
            if level is not None and self.server_logs:
                # once per session; an error answer (an unknown level...) is not fatal
                now = (yield from self.request("logging/setLevel", {"level": level})).at
            self.transport.open_listen(self.listens, now)
            return now

    def recovering(
        self, make: Callable[[float], OpGen], now: float, *, progress: bool = False
    ) -> OpGen:
        """Run an operation (``make(now)``, started at ``now``); re-initialize once on
        legacy session expiry, and re-negotiate once when a modern era hint proves wrong,
        restarting it (at the time of the last reply).  ``progress``: the caller asked
        for progress, for the operation's life."""
        self.progress = progress
        try:
            recovered = False
            while True:
                try:
                    return (yield from make(now))
                except SessionExpired:
                    if recovered:
                        raise ConnectionFailed(
                            "the server expired the new session at once (HTTP 404)",
                            cause="session_expired",
                            status=404,
                        ) from None
                    assert self.session.protocol_version is not None
                    now = yield from self.initialize(self.session.protocol_version)
                except EraMismatch as mismatch:
                    if recovered:  # pragma: no cover - a re-negotiated connection is never hinted
                        raise
                    now = yield from self.negotiate(mismatch.at, use_hint=False)
                recovered = True
        finally:
            self.progress = False  # ended, failed or abandoned (closed)
            self.call_token = None
