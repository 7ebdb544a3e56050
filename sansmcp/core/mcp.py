"""The MCP client machine: one per ``Conn``, pure, driven by HTTP messages and ``now``.

Theory of operation
-------------------
A caller runs one operation at a time -- :meth:`McpMachine.connect`,
:meth:`~McpMachine.list_tools`, :meth:`~McpMachine.call_tool`,
:meth:`~McpMachine.close` -- and drains outputs with :meth:`~McpMachine.next_output`:

* :class:`StartExchange` / :class:`CancelExchange` -- HTTP work for the driver
  (the adapter), which answers with :data:`~sansmcp.core.http.ExchangeEvent`
  values through :meth:`~McpMachine.receive`;
* exactly one terminal event per operation: :class:`Connected`,
  :class:`ToolsListed`, :class:`ToolCalled`, :class:`Closed` or
  :class:`OperationFailed` (carrying a ``ConnectionFailed``, ``Unauthorized`` or
  ``ServerAnswered``);
* :class:`InputRequired` when a server asks for input the embedder may supply
  (answered with :meth:`~McpMachine.answer_input`).

Each operation is written as a generator that yields what it needs -- send a
request and wait for its reply (``_Send``), wait until a time (``_Sleep``), ask
the embedder (``_Ask``) -- so negotiation, pagination, multi round-trip calls,
stream resumption and session recovery read as straight-line code.  The machine
owns the deadlines: :meth:`~McpMachine.next_deadline` says when the driver must
call :meth:`~McpMachine.handle_timer`.

A legacy session whose embedder answers input has one standalone GET stream,
opened after ``initialize`` and kept for the session's life (re-opened at most
``Limits.max_stream_retries`` times if the server ends it; never after a refusal):
server requests on it are answered whether or not an operation runs, so a driver
acts on outputs that come between operations at the next one (see
:meth:`~McpMachine.wanted`).  :meth:`~McpMachine.close` lets answers already sent
finish, then sends a legacy session's ``DELETE``, all within ``Limits.close_timeout``.
A server-chosen value sent back in a header (event id, session id) passes
:func:`~sansmcp.core.fieldvalue.echoable` before it is kept.

Every response byte the driver reports (head blocks as counted on the wire,
bodies, trailers, 1xx heads) is charged to ``Limits.max_response_bytes`` as it
arrives, and every final head to ``Limits.max_responses``.  A budget overrun
cancels the exchange and leaves the machine *exhausted*: every later operation
fails at once with the same error.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .auth import parse_www_authenticate
from .errors import (
    CallerError,
    ConnectionFailed,
    LocalProtocolError,
    McpError,
    ServerAnswered,
    Unauthorized,
    budget_exceeded,
)
from .fieldvalue import echoable
from .http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    Headers,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
    header_value,
)
from .jsonvalue import JsonError, dumps_compact, parse_json, parse_json_object_strict
from .limits import Limits
from .messages import (
    BATCH_VERSION,
    HEADER_MISMATCH,
    LEGACY_VERSIONS,
    MODERN_VERSION,
    SUPPORTED_VERSIONS,
    Verdict,
    build_body,
    classify_probe,
    content_type,
    is_modern,
    match_response,
    negotiate_version,
)
from .sse import SseError, SseParser
from .tools import (
    CallResult,
    HeaderParam,
    SkippedTool,
    Tool,
    encode_header_value,
    header_params_of,
    param_headers,
    parse_call_result,
    validate_tool,
)
from .url import Endpoint

__all__ = [
    "CancelExchange",
    "Closed",
    "ConnSettings",
    "Connected",
    "InputRequired",
    "McpMachine",
    "OperationFailed",
    "Output",
    "StartExchange",
    "ToolCalled",
    "ToolsListed",
]

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"

# The deadline of a standalone stream the server accepted: it lives as long as the session.
_FOREVER = float("inf")

# Budgets of the whole connection: once spent, every later operation fails at once.
_CONN_BUDGETS = frozenset({"max_response_bytes", "max_responses"})

# Header names the machine sets itself; a caller's custom header of the same name is dropped.
_RESERVED_HEADERS = frozenset(
    {
        b"accept",
        b"authorization",
        b"connection",
        b"content-length",
        b"content-type",
        b"host",
        b"last-event-id",
        b"mcp-method",
        b"mcp-name",
        b"mcp-protocol-version",
        b"mcp-session-id",
        b"te",
        b"transfer-encoding",
        b"upgrade",
    }
)


# ---------------------------------------------------------------- settings and outputs


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnSettings:
    """What one ``Conn`` is configured with (from the caller's ``Config`` and ``Client``).

    ``capabilities`` is None when the embedder cannot answer input requests: then
    nothing is declared and every ask is refused.  ``tool_schemas`` maps a tool name to
    its input schema (parsed JSON) so ``Mcp-Param-*`` headers can be sent without a
    listing.  ``reissue_calls`` opts in to re-issuing a ``tools/call`` whose modern
    stream broke, even for a tool not marked idempotent.
    """

    endpoint: Endpoint
    bearer_token: str | None = None
    headers: Headers = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    tool_schemas: Mapping[str, Any] = field(default_factory=dict)
    protocol_versions: tuple[str, ...] = SUPPORTED_VERSIONS
    client_info: Mapping[str, Any] = field(
        default_factory=lambda: {"name": "sansmcp", "version": __version__}
    )
    capabilities: Mapping[str, Any] | None = None
    user_agent: str = f"sansmcp/{__version__}"
    era_hint: str | None = None
    reissue_calls: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StartExchange:
    """Send ``request`` on a pooled connection; report its events with ``exchange_id``."""

    exchange_id: int
    request: HttpRequest
    deadline: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelExchange:
    """Abandon the exchange (HTTP/1.1: close its socket; HTTP/2: reset its stream)."""

    exchange_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Connected:
    protocol_version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsListed:
    tools: tuple[Tool, ...]
    # the first Limits.max_recorded_skips skipped entries, with details
    skipped: tuple[SkippedTool, ...]
    # every skipped entry, recorded or not
    skipped_count: int
    ttl_ms: int
    cache_scope: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCalled:
    result: CallResult


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequired:
    """The server asks for input: ``requests`` maps a key to ``{"method", "params"}``.

    Answer with ``answer_input(input_id, {key: result, ...})`` or ``None`` to refuse.
    ``server_request`` is True for a legacy server-to-client request (one key,
    ``"request"``), False for a multi round-trip ``inputRequests`` set.
    """

    input_id: int
    requests: Mapping[str, Mapping[str, Any]]
    server_request: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFailed:
    error: McpError = field(compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Closed:
    pass


Output = (
    StartExchange
    | CancelExchange
    | Connected
    | ToolsListed
    | ToolCalled
    | InputRequired
    | OperationFailed
    | Closed
)


# ---------------------------------------------------------------- internal instructions


@dataclass(slots=True)
class _Send:
    request: HttpRequest
    rpc_id: int | None
    cap: float
    cap_bound: str


@dataclass(slots=True)
class _Sleep:
    until: float


@dataclass(slots=True)
class _Ask:
    requests: Mapping[str, Mapping[str, Any]]


_Instruction = _Send | _Sleep | _Ask


@dataclass(slots=True)
class _Reply:
    status: int
    headers: Headers
    message: dict[str, Any] | None
    broken: ConnectionFailed | None = None
    last_event_id: bytes | None = None
    retry_ms: int | None = None
    progressed: bool = False


class _SessionExpired(Exception):
    pass


class _EraMismatch(Exception):
    pass


class _Era(enum.Enum):
    UNKNOWN = "unknown"  # probing
    MODERN = "modern"
    INITIALIZING = "initializing"  # legacy initialize in flight: no version header yet
    LEGACY = "legacy"


class _Role(enum.Enum):
    OP = "op"  # the current operation waits for it
    SIDE = "side"  # fire and forget (answers to server requests, cancellations)
    DRAIN = "drain"  # answered already; read to the end so the socket can be reused
    LISTEN = "listen"  # the legacy session's standalone GET stream, carrying server requests


class _Body(enum.Enum):
    JSON = "json"
    SSE = "sse"
    OTHER = "other"


class _Exchange:
    __slots__ = (
        "body",
        "deadline",
        "exchange_id",
        "headers",
        "judged_id",
        "kind",
        "last_id",
        "message",
        "progressed",
        "refusals",
        "request",
        "role",
        "rpc_id",
        "server_requests",
        "sse",
        "status",
    )

    def __init__(
        self,
        exchange_id: int,
        request: HttpRequest,
        rpc_id: int | None,
        deadline: float,
        role: _Role,
    ) -> None:
        self.exchange_id = exchange_id
        self.request = request
        self.refusals = 0
        self.rpc_id = rpc_id
        self.deadline = deadline
        self.role = role
        self.status: int | None = None
        self.headers: Headers = ()
        self.kind = _Body.OTHER
        self.body = bytearray()
        self.sse: SseParser | None = None
        self.last_id: bytes | None = None  # the last event id that passed ``echoable``
        self.judged_id: str | None = None  # the parser's last id judged by ``echoable``
        self.message: dict[str, Any] | None = None
        self.progressed = False
        self.server_requests = 0


OpGen = Generator[_Instruction, Any, Any]


def _timeout(bound: str, limit: float) -> ConnectionFailed:
    return ConnectionFailed(
        f"the server did not finish within {limit:g} s (Limits.{bound})",
        cause="timeout",
        bound=bound,
        limit=limit,
    )


def _server_error(message: Mapping[str, Any]) -> ServerAnswered:
    error = message["error"]
    code = error["code"]
    text = error["message"]
    return ServerAnswered(
        f"server answered with JSON-RPC error {code}: {text[:200]}",
        reason="jsonrpc_error",
        code=code,
        rpc_message=text,
        data=error.get("data"),
    )


# ---------------------------------------------------------------- the machine


class McpMachine:
    """One MCP connection's protocol state, sans I/O.

    ``ids`` supplies JSON-RPC request ids (default 1, 2, 3, ...); ``jitter`` returns a
    float in [0, 1) for retry backoff (default 0.5); ``exchange_ids`` numbers
    exchanges (a driver shares one counter across machines so ids are unique on a
    shared connection).  After an operation fails the
    machine stays usable for the next one unless a budget was exhausted.
    """

    def __init__(
        self,
        settings: ConnSettings,
        *,
        limits: Limits | None = None,
        ids: Iterator[int] | None = None,
        jitter: Callable[[], float] | None = None,
        exchange_ids: Iterator[int] | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits or Limits()
        self._ids = ids if ids is not None else itertools.count(1)
        self._jitter = jitter or (lambda: 0.5)
        self._exchange_ids = exchange_ids if exchange_ids is not None else itertools.count(1)
        self._outputs: deque[Output] = deque()
        self._exchanges: dict[int, _Exchange] = {}
        # operation state
        self._gen: OpGen | None = None
        self._op_bound = ""
        self._op_limit = 0.0
        self._op_deadline = 0.0
        self._op_exchange: _Exchange | None = None
        self._op_cap_bound = ""
        self._op_cap = 0.0
        self._sleep_until: float | None = None
        # An answer that arrived on an event stream, held until that stream ends (so its
        # socket can carry the next request) or Limits.stream_end_wait passes.
        self._held: tuple[_Exchange, _Reply] | None = None
        self._held_until = 0.0
        self._asks: dict[
            int, _Exchange | None
        ] = {}  # input id -> exchange (server request) or None (MRTR)
        self._ask_server_ids: dict[int, Any] = {}
        self._input_ids = itertools.count(1)
        self._closing = False
        self._close_deadline = 0.0
        self._now = 0.0
        # The legacy session's one standalone GET stream (opened after initialize when the
        # embedder answers input), how often it was opened this session, its last event id.
        self._listen: _Exchange | None = None
        self._listen_opens = 0
        self._listen_last_id: bytes | None = None
        # protocol state
        self.protocol_version: str | None = None
        self.session_id: bytes | None = None
        self._era = _Era.UNKNOWN
        self._probe_version = MODERN_VERSION
        self._hinted = False
        self._tools: dict[str, Tool] = {}
        self.ttl_ms = 0
        self.cache_scope: str | None = None
        # accounting
        self.bytes_received = 0
        self.responses_received = 0
        self._exhausted: McpError | None = None
        self._static_headers: list[tuple[bytes, bytes]] | None = None
        self._meta_cache: dict[str, bytes] = {}
        self._can_answer = settings.capabilities is not None
        versions = tuple(v for v in settings.protocol_versions if v in SUPPORTED_VERSIONS)
        if not versions:
            raise CallerError(
                f"protocol_versions {settings.protocol_versions!r} names no version sansmcp "
                f"speaks ({', '.join(SUPPORTED_VERSIONS)})"
            )
        self._versions = versions

    # ------------------------------------------------------------ public commands

    @property
    def era(self) -> str:
        """``"modern"``, ``"legacy"`` or ``"unknown"`` (before negotiation ends)."""
        if self._era is _Era.MODERN:
            return "modern"
        if self._era is _Era.LEGACY:
            return "legacy"
        return "unknown"

    @property
    def busy(self) -> bool:
        """An operation is running (its terminal event is not out yet)."""
        return self._gen is not None or self._closing

    @property
    def tools(self) -> Mapping[str, Tool]:
        """Tools listed on this connection, by name."""
        return self._tools

    def connect(self, *, now: float) -> None:
        self._start(self._connect_op(), "connect_timeout", self.limits.connect_timeout, now)

    def list_tools(self, *, now: float) -> None:
        self._require_connected()
        self._start(self._recovering(self._list_op), "list_timeout", self.limits.list_timeout, now)

    def call_tool(self, name: str, arguments: bytes = b"", *, now: float) -> None:
        """Call ``name`` with ``arguments`` (JSON object bytes, sent verbatim).

        Raises ``CallerError`` at once when the arguments are not bytes holding one
        strict JSON object or the name is not a non-empty string.
        """
        self._require_connected()
        if not isinstance(name, str) or not name:
            raise CallerError("tool name must be a non-empty string")
        if not isinstance(arguments, bytes | bytearray | memoryview):
            # checked here, before the operation starts: a str got as far as building the
            # request and raised TypeError there, leaving the Conn busy for good
            raise CallerError(
                f"tool arguments must be bytes (one JSON object), not {type(arguments).__name__}"
            )
        arguments = bytes(arguments)
        if not arguments.strip():
            arguments = b"{}"
        try:
            parsed = parse_json_object_strict(arguments, max_depth=self.limits.max_json_depth)
        except JsonError as exc:
            raise CallerError(f"tool arguments must be one JSON object: {exc}") from None
        if self._era is _Era.MODERN:
            self._header_params(name)  # a caller's unusable schema: CallerError, before any I/O
        self._start(
            self._recovering(lambda: self._call_op(name, arguments, parsed)),
            "call_timeout",
            self.limits.call_timeout,
            now,
        )

    def close(self, *, now: float) -> None:
        """End the connection: abandon everything in flight; legacy sessions get a DELETE.

        Ends with :class:`Closed` (failures of the DELETE are ignored).
        """
        self._now = now
        if self._closing:
            return
        # Server requests the embedder was still asked about are declined now, so that
        # every server request gets its answer before the connection ends.
        for input_id, exchange in list(self._asks.items()):
            if exchange is not None:
                self._answer_server(
                    self._ask_server_ids[input_id],
                    error={"code": -32600, "message": "the client closed the connection"},
                )
        self._asks.clear()
        self._ask_server_ids.clear()
        self._abandon_op()
        self._listen = None
        for exchange in list(self._exchanges.values()):
            if exchange.role is not _Role.SIDE:
                self._cancel(exchange)
        self._closing = True
        self._close_deadline = now + self.limits.close_timeout
        self._close_progress()

    def _close_progress(self) -> None:
        """Closing: answers and notices already sent are finished first (bounded by
        ``close_timeout``), then a legacy session gets its DELETE, then :class:`Closed`."""
        if not self._closing or self._op_exchange is not None:
            return
        if any(exchange.role is _Role.SIDE for exchange in self._exchanges.values()):
            return
        if self._era is _Era.LEGACY and self.session_id is not None:
            request = self._legacy_request(b"DELETE", b"")
            self.session_id = None  # ended by us: a second close sends no second DELETE
            self._op_exchange = self._open(request, None, self._close_deadline, _Role.OP)
            return
        self._closed()

    def answer_input(self, input_id: int, answers: Mapping[str, Any] | None, *, now: float) -> None:
        """Answer an :class:`InputRequired`; ``None`` refuses (decline)."""
        self._now = now
        if input_id not in self._asks:
            return  # the operation ended meanwhile
        exchange = self._asks.pop(input_id)
        if exchange is None:
            self._resume(answers)
            return
        server_id = self._ask_server_ids.pop(input_id)
        if answers is not None and isinstance(answers.get("request"), Mapping):
            self._answer_server(server_id, result=answers["request"])
        else:
            self._answer_server(
                server_id, error={"code": -32600, "message": "declined by the user"}
            )

    # ------------------------------------------------------------ driver interface

    def next_output(self) -> Output | None:
        return self._outputs.popleft() if self._outputs else None

    def wanted(self, output: Output) -> bool:
        """Whether an output the driver set aside is still to be acted on: False for an
        exchange cancelled meanwhile or an ask whose operation or connection ended."""
        if isinstance(output, StartExchange):
            return output.exchange_id in self._exchanges
        if isinstance(output, InputRequired):
            return output.input_id in self._asks
        return True

    def next_deadline(self) -> float | None:
        deadlines = [
            exchange.deadline
            for exchange in self._exchanges.values()
            if exchange.deadline != _FOREVER
        ]
        if self._closing:
            deadlines.append(self._close_deadline)
        if self._gen is not None:
            deadlines.append(self._op_deadline)
            if self._sleep_until is not None:
                deadlines.append(self._sleep_until)
            if self._held is not None:
                deadlines.append(self._held_until)
        return min(deadlines) if deadlines else None

    def handle_timer(self, *, now: float) -> None:
        self._now = now
        if self._held is not None and now >= self._held_until:
            self._release_held()
            return
        for exchange in list(self._exchanges.values()):
            if exchange.role is not _Role.OP and now >= exchange.deadline:
                self._cancel(exchange)  # a standalone stream without a head in time: dropped
        if self._closing:
            if now >= self._close_deadline:
                for exchange in list(self._exchanges.values()):
                    self._cancel(exchange)
                self._closed()
            else:
                self._close_progress()
            return
        if self._gen is None:
            return
        if now >= self._op_deadline:
            self._fail_timeout(self._op_bound, self._op_limit)
            return
        op = self._op_exchange
        if op is not None and now >= op.deadline:
            self._fail_timeout(self._op_cap_bound, self._op_cap)
            return
        if self._sleep_until is not None and now >= self._sleep_until:
            self._sleep_until = None
            self._resume(None)

    def receive(self, event: ExchangeEvent, *, now: float) -> None:
        """Feed one event of an exchange this machine started."""
        self._now = now
        exchange = self._exchanges.get(event.exchange_id)
        if exchange is None:
            return  # cancelled already
        try:
            self._receive(exchange, event)
        except McpError as error:
            self._cancel(exchange)
            if isinstance(error, ConnectionFailed) and error.bound in _CONN_BUDGETS:
                self._exhausted = error
            if exchange.role is _Role.OP or (self._exhausted is error and self._gen is not None):
                self._op_error(error)
            elif self._held is not None and self._held[0] is exchange:
                self._release_held()  # the answer stands; only the rest of its stream was bad
        self._close_progress()

    # ------------------------------------------------------------ operation driver

    def _require_connected(self) -> None:
        if self.protocol_version is None and self._exhausted is None:
            raise LocalProtocolError("connect() must succeed before other operations")

    def _start(self, gen: OpGen, bound: str, limit: float, now: float) -> None:
        if self.busy:
            raise LocalProtocolError("an operation is already running on this connection")
        self._now = now
        if self._exhausted is not None:
            gen.close()
            self._outputs.append(OperationFailed(error=self._exhausted))
            return
        if self._listen is not None:
            self._listen.server_requests = 0  # Limits.max_server_requests: per operation
        self._gen = gen
        self._op_bound = bound
        self._op_limit = limit
        self._op_deadline = now + limit
        self._resume(None)

    def _resume(self, value: Any = None, error: BaseException | None = None) -> None:
        gen = self._gen
        assert gen is not None
        while True:
            try:
                instruction = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                self._end_op(stop.value)
                return
            except McpError as failure:
                self._end_op(OperationFailed(error=failure))
                return
            error = None
            value = None
            if isinstance(instruction, _Send):
                deadline = min(self._op_deadline, self._now + instruction.cap)
                self._op_cap_bound = instruction.cap_bound
                self._op_cap = instruction.cap
                self._op_exchange = self._open(
                    instruction.request, instruction.rpc_id, deadline, _Role.OP
                )
                return
            if isinstance(instruction, _Sleep):
                if instruction.until <= self._now:
                    continue
                self._sleep_until = instruction.until
                return
            input_id = next(self._input_ids)
            self._asks[input_id] = None
            self._outputs.append(
                InputRequired(
                    input_id=input_id, requests=instruction.requests, server_request=False
                )
            )
            return

    def _release_held(self) -> None:
        assert self._held is not None
        reply = self._held[1]
        self._held = None
        self._reply(reply)

    def _end_op(self, outcome: Output) -> None:
        self._drop_op()
        self._outputs.append(outcome)

    def _drop_op(self) -> None:
        """Forget the operation: its generator, waits and multi round-trip asks (server
        requests that came on the standalone stream stay answerable)."""
        self._gen = None
        self._op_exchange = None
        self._sleep_until = None
        self._held = None
        for input_id, exchange in list(self._asks.items()):
            if exchange is None or exchange.role is not _Role.LISTEN:
                del self._asks[input_id]
                self._ask_server_ids.pop(input_id, None)

    def _op_error(self, error: McpError) -> None:
        if self._op_exchange is not None:
            self._cancel(self._op_exchange)
            self._op_exchange = None
        if self._closing:
            self._closed()
            return
        if self._gen is None:
            return
        self._resume(error=error)

    def _reply(self, reply: _Reply) -> None:
        if self._closing:
            self._closed()
            return
        self._op_exchange = None
        self._resume(reply)

    def _abandon_op(self) -> None:
        if self._gen is not None:
            self._gen.close()
        self._drop_op()

    def _closed(self) -> None:
        self._closing = False
        self._op_exchange = None
        self._outputs.append(Closed())

    def _fail_timeout(self, bound: str, limit: float) -> None:
        op = self._op_exchange
        if op is not None:
            self._cancel(op)
            if self._era is _Era.LEGACY and op.rpc_id is not None:
                self._send_side(
                    "notifications/cancelled",
                    {"requestId": op.rpc_id, "reason": "timed out"},
                )
        self._abandon_op()
        self._outputs.append(OperationFailed(error=_timeout(bound, limit)))

    # ------------------------------------------------------------ exchanges

    def _open(
        self, request: HttpRequest, rpc_id: int | None, deadline: float, role: _Role
    ) -> _Exchange:
        exchange = _Exchange(next(self._exchange_ids), request, rpc_id, deadline, role)
        self._exchanges[exchange.exchange_id] = exchange
        self._outputs.append(
            StartExchange(exchange_id=exchange.exchange_id, request=request, deadline=deadline)
        )
        return exchange

    def _cancel(self, exchange: _Exchange) -> None:
        if exchange is self._listen:
            self._listen = None  # given up (garbled, over a bound, closing): never re-opened
        if self._exchanges.pop(exchange.exchange_id, None) is not None:
            self._outputs.append(CancelExchange(exchange_id=exchange.exchange_id))

    def _finish(self, exchange: _Exchange) -> None:
        self._exchanges.pop(exchange.exchange_id, None)

    def _charge(self, nbytes: int) -> None:
        self.bytes_received += nbytes
        limit = self.limits.max_response_bytes
        if self.bytes_received > limit:
            raise budget_exceeded(
                f"the server sent more than {limit:,} response bytes on this connection "
                "(Limits.max_response_bytes)",
                "max_response_bytes",
                limit,
                self.bytes_received,
            )

    def _receive(self, exchange: _Exchange, event: ExchangeEvent) -> None:
        if isinstance(event, DataReceived):
            self._charge(len(event.data) + event.overhead)
            self._on_data(exchange, event.data)
        elif isinstance(event, ResponseReceived):
            self._charge(event.raw_size)
            self.responses_received += 1
            limit = self.limits.max_responses
            if self.responses_received > limit:
                raise budget_exceeded(
                    f"the server sent more than {limit} HTTP responses on this connection "
                    "(Limits.max_responses)",
                    "max_responses",
                    limit,
                    self.responses_received,
                )
            self._on_head(exchange, event.status, event.headers)
        elif isinstance(event, ResponseEnded):
            self._on_end(exchange)
        elif isinstance(event, ExchangeFailed):
            self._finish(exchange)
            self._on_failed(exchange, event.error)
        elif isinstance(event, InformationalReceived | TrailersReceived):
            self._charge(event.raw_size)

    def _on_head(self, exchange: _Exchange, status: int, headers: Headers) -> None:
        exchange.status = status
        exchange.headers = headers
        if exchange.role is _Role.LISTEN:
            media = content_type(header_value(headers, b"content-type"))
            if status == 200 and media == "text/event-stream":
                exchange.kind = _Body.SSE
                exchange.sse = SseParser(max_event_bytes=self.limits.max_response_bytes)
                exchange.deadline = _FOREVER  # kept for the session's life
            else:
                self._listen = None  # refused (405, 409, ...): not offered, never re-opened
            return
        if exchange.role is not _Role.OP:
            return
        if 300 <= status < 400:
            location = header_value(headers, b"location")
            where = location.decode("latin-1")[:512] if location is not None else None
            raise ConnectionFailed(
                f"the server answered HTTP {status} redirecting to {where!r}; "
                "redirects are never followed",
                cause="redirect",
                status=status,
                location=where,
            )
        if status in (401, 403):
            raw = header_value(headers, b"www-authenticate")
            text = raw.decode("latin-1") if raw is not None else None
            raise Unauthorized(
                f"the server answered HTTP {status}"
                + (f" (WWW-Authenticate: {text[:200]})" if text else ""),
                status=status,
                www_authenticate=text,
                challenges=parse_www_authenticate(text) if text else [],
            )
        if exchange.rpc_id is None:
            return
        media = content_type(header_value(headers, b"content-type"))
        if media == "text/event-stream" and 200 <= status < 300:
            exchange.kind = _Body.SSE
            exchange.sse = SseParser(max_event_bytes=self.limits.max_response_bytes)
        elif media == "application/json" or media.endswith("+json"):
            exchange.kind = _Body.JSON
        elif 200 <= status < 300 and exchange.role is _Role.OP:
            raise ConnectionFailed(
                f"the server answered HTTP {status} with content type {media or 'none'!r}, "
                "not JSON or an event stream",
                cause="not_jsonrpc",
                status=status,
            )

    def _on_data(self, exchange: _Exchange, data: bytes) -> None:
        if exchange.kind is _Body.JSON:
            exchange.body += data
        elif exchange.kind is _Body.SSE:
            assert exchange.sse is not None
            try:
                events = exchange.sse.feed(data)
            except SseError as exc:
                if exc.reason == "text":  # its decoded text: 3 x the budget at most
                    raise budget_exceeded(
                        f"{exc} (3 x Limits.max_response_bytes)",
                        "max_response_bytes",
                        exc.limit,
                        exc.observed,
                    ) from None
                # defensive: the parser's byte limit is max_response_bytes, which _charge
                # enforces on these bytes first
                raise ConnectionFailed(  # pragma: no cover
                    f"the server sent an unusable event stream: {exc}", cause="framing"
                ) from None
            last_id = exchange.sse.last_event_id
            if last_id is not None and last_id is not exchange.judged_id:
                # Judged once per id the parser decoded, not once per body chunk.  An id we
                # could not send back as Last-Event-ID is treated as absent.
                exchange.judged_id = last_id
                exchange.last_id = echoable(last_id, self.limits.max_echo_bytes) or exchange.last_id
            for sse_event in events:
                exchange.progressed = True
                self._on_message_text(exchange, sse_event.data)

    def _on_end(self, exchange: _Exchange) -> None:
        self._finish(exchange)
        if exchange is self._listen:
            self._reopen_listen(exchange)
            return
        if self._held is not None and self._held[0] is exchange:
            self._release_held()
            return
        if exchange.role is not _Role.OP:
            return
        status = exchange.status or 0
        if exchange.kind is _Body.SSE:
            assert exchange.sse is not None
            exchange.sse.finish()
            if exchange.message is None:
                self._stream_broken(
                    exchange,
                    ConnectionFailed(
                        "the server ended the event stream without a response",
                        cause="stream_broken",
                    ),
                )
            return
        if exchange.rpc_id is not None and exchange.kind is _Body.JSON:
            body, exchange.body = exchange.body, bytearray()  # parse_json consumes it
            try:
                parsed = self._parse(body)
                message, _ = match_response(
                    parsed,
                    exchange.rpc_id,
                    batch_allowed=self.protocol_version == BATCH_VERSION,
                    idless_ok=status >= 400,
                )
            except (JsonError, ConnectionFailed) as exc:
                if isinstance(exc, ConnectionFailed) and exc.cause == "budget":
                    raise
                if status >= 300:
                    message = None  # an error status with an unreadable body
                else:
                    raise ConnectionFailed(
                        f"the server's response is not a JSON-RPC response: {exc}",
                        cause="not_jsonrpc",
                    ) from None
            if message is None and 200 <= status < 300:
                raise ConnectionFailed(
                    "the server's response holds no JSON-RPC response to our request",
                    cause="not_jsonrpc",
                )
            self._reply(_Reply(status, exchange.headers, message))
            return
        if exchange.rpc_id is not None and 200 <= status < 300:
            raise ConnectionFailed(
                f"the server answered HTTP {status} without a response body", cause="not_jsonrpc"
            )
        self._reply(_Reply(status, exchange.headers, None))

    def _on_failed(self, exchange: _Exchange, error: ConnectionFailed) -> None:
        if exchange is self._listen:
            self._reopen_listen(exchange)
            return
        if self._held is not None and self._held[0] is exchange:
            self._release_held()
            return
        if exchange.role is not _Role.OP:
            return
        if (
            error.cause == "refused"
            and exchange.status is None
            and exchange.refusals < self.limits.max_stream_retries
        ):
            # The server never processed it (GOAWAY, REFUSED_STREAM): send it again.
            retry = self._open(exchange.request, exchange.rpc_id, exchange.deadline, _Role.OP)
            retry.refusals = exchange.refusals + 1
            self._op_exchange = retry
            return
        if exchange.kind is _Body.SSE and exchange.message is None and error.cause != "budget":
            self._stream_broken(exchange, error)
            return
        self._op_error(error)

    def _stream_broken(self, exchange: _Exchange, error: ConnectionFailed) -> None:
        assert exchange.sse is not None
        self._reply(
            _Reply(
                exchange.status or 0,
                exchange.headers,
                None,
                broken=error,
                last_event_id=exchange.last_id,
                retry_ms=exchange.sse.retry_ms,
                progressed=exchange.progressed,
            )
        )

    def _open_listen(self) -> None:
        """A new legacy session: open its one standalone GET stream, if it may have one."""
        self._stop_listen()
        self._listen_opens = 0
        self._listen_last_id = None
        if self._can_answer and self._era is _Era.LEGACY and self.session_id is not None:
            self._start_listen()

    def _start_listen(self) -> None:
        extra = [] if self._listen_last_id is None else [(b"last-event-id", self._listen_last_id)]
        request = self._legacy_request(b"GET", b"", extra)
        # Until its head arrives the stream is bounded like any request; then it is kept.
        deadline = self._now + self.limits.dial_timeout
        self._listen = self._open(request, None, deadline, _Role.LISTEN)

    def _reopen_listen(self, ended: _Exchange) -> None:
        """The server ended the session's stream: open it again, at most
        ``Limits.max_stream_retries`` times per session (resuming from its last event id)."""
        self._listen = None
        self._listen_last_id = ended.last_id or self._listen_last_id
        if ended.kind is not _Body.SSE:
            return  # it never started (a dial failure, a reset before its head)
        if self._listen_opens >= self.limits.max_stream_retries:
            return
        self._listen_opens += 1
        self._start_listen()

    def _stop_listen(self) -> None:
        if self._listen is not None:
            self._cancel(self._listen)

    def _parse(self, data: bytearray | str) -> Any:
        """Parse one message; a text over ``max_json_values``, or one whose decoded text
        would take more than 3 x ``max_response_bytes`` (so that text and the value built
        from it stay within 6 x the budget), fails the exchange as a spent budget before it
        is decoded (any other ``JsonError`` is the caller's)."""
        limits = self.limits
        try:
            return parse_json(
                data,
                max_depth=limits.max_json_depth,
                max_values=limits.max_json_values,
                max_text_bytes=3 * limits.max_response_bytes,
            )
        except JsonError as exc:
            if exc.reason not in ("values", "text"):
                raise
            assert exc.limit is not None and exc.observed is not None
            if exc.reason == "values":
                message = (
                    f"the server sent a message of up to {exc.observed:,} JSON values; the "
                    f"limit is {exc.limit:,} (Limits.max_json_values)"
                )
                bound = "max_json_values"
            else:
                message = f"{exc} (3 x Limits.max_response_bytes)"
                bound = "max_response_bytes"
            raise budget_exceeded(message, bound, exc.limit, exc.observed) from None

    def _on_message_text(self, exchange: _Exchange, text: str) -> None:
        if exchange.role is _Role.DRAIN:
            return  # answered already: later events are ignored unparsed
        try:
            parsed = self._parse(text)
        except JsonError as exc:
            raise ConnectionFailed(
                f"the server sent an event that is not JSON: {exc}", cause="not_jsonrpc"
            ) from None
        if exchange.role is _Role.LISTEN:
            items = parsed if isinstance(parsed, list) else [parsed]
            for item in items:
                if isinstance(item, dict) and "id" in item and isinstance(item.get("method"), str):
                    self._on_server_request(exchange, item)
            return
        if exchange.role is not _Role.OP or exchange.rpc_id is None:
            return  # answered already: later events are ignored
        message, others = match_response(
            parsed,
            exchange.rpc_id,
            batch_allowed=self.protocol_version == BATCH_VERSION,
            idless_ok=False,
        )
        for other in others:
            if "id" in other:
                self._on_server_request(exchange, other)
        if message is not None:
            exchange.message = message
            exchange.role = _Role.DRAIN
            exchange.deadline = self._now + self.limits.cancel_grace
            reply = _Reply(exchange.status or 200, exchange.headers, message)
            self._op_exchange = None
            self._held = (exchange, reply)
            self._held_until = self._now + min(
                self.limits.stream_end_wait, self.limits.cancel_grace
            )

    def _on_server_request(self, exchange: _Exchange, request: dict[str, Any]) -> None:
        exchange.server_requests += 1
        limit = self.limits.max_server_requests
        if exchange.server_requests > limit:
            raise budget_exceeded(
                f"the server sent more than {limit} requests while answering one of ours "
                "(Limits.max_server_requests)",
                "max_server_requests",
                limit,
                exchange.server_requests,
            )
        if self._era is not _Era.LEGACY:
            return  # a modern server must not send requests; nothing may answer them
        server_id = request["id"]
        method = request["method"]
        if method == "ping":
            self._answer_server(server_id, result={})
            return
        if not self._can_answer:
            self._answer_server(
                server_id, error={"code": -32601, "message": f"client does not support {method}"}
            )
            return
        input_id = next(self._input_ids)
        self._asks[input_id] = exchange
        self._ask_server_ids[input_id] = server_id
        params = request.get("params")
        self._outputs.append(
            InputRequired(
                input_id=input_id,
                requests={
                    "request": {"method": method, "params": params if params is not None else {}}
                },
                server_request=True,
            )
        )

    # ------------------------------------------------------------ requests

    def _base_headers(self) -> list[tuple[bytes, bytes]]:
        """Accept and Content-Type first (requests edit those two in place), then the rest."""
        if self._static_headers is None:
            headers = [
                (b"accept", b"application/json, text/event-stream"),
                (b"content-type", b"application/json"),
            ]
            custom = [
                (k.lower(), v)
                for k, v in self.settings.headers
                if k.lower() not in _RESERVED_HEADERS
            ]
            if not any(k == b"user-agent" for k, _ in custom):
                headers.append((b"user-agent", self.settings.user_agent.encode()))
            token = self.settings.bearer_token
            if token is not None:
                headers.append((b"authorization", b"Bearer " + token.encode()))
            headers.extend(custom)
            self._static_headers = headers
        return list(self._static_headers)

    def _meta_json(self, version: str) -> bytes:
        """``_meta`` of every modern request at ``version``, encoded once."""
        encoded = self._meta_cache.get(version)
        if encoded is None:
            meta = {
                META_VERSION: version,
                META_CLIENT_INFO: self.settings.client_info,
                META_CAPABILITIES: self._capabilities(),
                **self.settings.meta,
            }
            encoded = self._meta_cache[version] = dumps_compact(meta)
        return encoded

    def _post(self, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpRequest:
        endpoint = self.settings.endpoint
        return HttpRequest(
            method=b"POST",
            scheme=endpoint.origin.scheme.encode(),
            authority=endpoint.authority,
            target=endpoint.target,
            headers=tuple(headers),
            body=body,
        )

    def _legacy_request(
        self, method: bytes, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
    ) -> HttpRequest:
        """A legacy-era request: POST (JSON-RPC), GET (stream resumption) or DELETE."""
        headers = self._base_headers()
        if method == b"GET":
            headers[0] = (b"accept", b"text/event-stream")
        if method != b"POST":
            del headers[1]  # no body, no content type
        if self._era is _Era.LEGACY:
            assert self.protocol_version is not None
            if self.protocol_version != BATCH_VERSION:
                headers.append((b"mcp-protocol-version", self.protocol_version.encode()))
            if self.session_id is not None:
                headers.append((b"mcp-session-id", self.session_id))
        headers.extend(extra)
        endpoint = self.settings.endpoint
        return HttpRequest(
            method=method,
            scheme=endpoint.origin.scheme.encode(),
            authority=endpoint.authority,
            target=endpoint.target,
            headers=tuple(headers),
            body=body,
        )

    def _capabilities(self) -> Mapping[str, Any]:
        return self.settings.capabilities or {}

    def _modern_request(
        self,
        rpc_id: int,
        method: str,
        params: Mapping[str, Any],
        *,
        arguments: bytes | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> HttpRequest:
        version = self.protocol_version or self._probe_version
        body = build_body(
            rpc_id, method, params, arguments=arguments, meta=self._meta_json(version)
        )
        headers = self._base_headers()
        headers.append((b"mcp-protocol-version", version.encode()))
        headers.append((b"mcp-method", method.encode()))
        headers.extend(extra)
        return self._post(headers, body)

    def _legacy_rpc(
        self,
        rpc_id: int | None,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        arguments: bytes | None = None,
    ) -> HttpRequest:
        if self.settings.meta and params is not None:
            params = {"_meta": dict(self.settings.meta), **params}
        return self._legacy_request(
            b"POST", build_body(rpc_id, method, params, arguments=arguments)
        )

    def _send_side(self, method: str, params: Mapping[str, Any]) -> None:
        request = self._legacy_rpc(None, method, params)
        self._open(request, None, self._now + self.limits.cancel_grace, _Role.SIDE)

    def _answer_server(self, server_id: Any, *, result: Any = None, error: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": server_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        request = self._legacy_request(b"POST", dumps_compact(message))
        self._open(request, None, self._now + self.limits.dial_timeout, _Role.SIDE)

    # ------------------------------------------------------------ the request primitive

    def _request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        arguments: bytes | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
        reissue: bool = True,
    ) -> Generator[_Instruction, Any, _Reply]:
        """Send one JSON-RPC request and return the reply for it.

        Handles stream breaks (legacy resumption with ``Last-Event-ID``; modern
        re-issue with a new id when ``reissue``), legacy session expiry
        (``_SessionExpired``) and a wrong era hint (``_EraMismatch``).
        """
        is_call = method == "tools/call"
        cap = self.limits.call_timeout if is_call else self.limits.dial_timeout
        cap_bound = "call_timeout" if is_call else "dial_timeout"
        retries = 0
        last_id: bytes | None = None
        retry_ms: int | None = None
        rpc_id = next(self._ids)
        request = self._build(rpc_id, method, params, arguments, extra)
        sent_session = self.session_id
        while True:
            reply: _Reply = yield _Send(request, rpc_id, cap, cap_bound)
            if reply.broken is None:
                break
            retries = 0 if reply.progressed else retries + 1
            if retries > self.limits.max_stream_retries:
                raise ConnectionFailed(
                    f"the server broke the response stream {retries} times in a row "
                    "(Limits.max_stream_retries)",
                    cause="stream_broken",
                    bound="max_stream_retries",
                    limit=self.limits.max_stream_retries,
                    observed=retries,
                )
            if self._era is _Era.MODERN or self._era is _Era.UNKNOWN:
                if not reissue:
                    raise reply.broken
                rpc_id = next(self._ids)
                request = self._build(rpc_id, method, params, arguments, extra)
                continue
            # The last event id and the retry delay outlive one response (WHATWG SSE):
            # a resumed stream that breaks before sending an id resumes from the same one.
            last_id = reply.last_event_id or last_id
            retry_ms = reply.retry_ms if reply.retry_ms is not None else retry_ms
            if last_id is None:
                raise reply.broken
            if retry_ms:
                yield _Sleep(self._now + retry_ms / 1000)
            request = self._legacy_request(b"GET", b"", [(b"last-event-id", last_id)])
        if self._era is _Era.LEGACY and reply.status == 404 and sent_session is not None:
            raise _SessionExpired()
        if self._hinted and self._era is _Era.MODERN:
            verdict = classify_probe(reply.status, reply.message, method=method)
            if verdict is Verdict.LEGACY or verdict is Verdict.RETRY_VERSION:
                raise _EraMismatch()
            self._hinted = False  # the hint held
        return reply

    def _build(
        self,
        rpc_id: int,
        method: str,
        params: Mapping[str, Any],
        arguments: bytes | None,
        extra: Sequence[tuple[bytes, bytes]],
    ) -> HttpRequest:
        if self._era is _Era.MODERN or self._era is _Era.UNKNOWN:
            return self._modern_request(rpc_id, method, params, arguments=arguments, extra=extra)
        return self._legacy_rpc(rpc_id, method, params, arguments=arguments)

    def _result(self, reply: _Reply) -> dict[str, Any]:
        message = reply.message
        if message is None:
            raise ConnectionFailed(
                f"the server answered HTTP {reply.status} without a JSON-RPC response",
                cause="http_status",
                status=reply.status,
            )
        if "error" in message:
            raise _server_error(message)
        result = message["result"]
        if not isinstance(result, dict):
            raise ServerAnswered("the server's result is not an object", reason="malformed_result")
        return result

    # ------------------------------------------------------------ negotiation

    def _connect_op(self) -> OpGen:
        try:
            yield from self._negotiate(use_hint=True)
        except _EraMismatch:  # a legacy hint the server's answer to initialize contradicts
            yield from self._negotiate(use_hint=False)
        assert self.protocol_version is not None
        return Connected(protocol_version=self.protocol_version)

    def _negotiate(self, *, use_hint: bool) -> OpGen:
        self._stop_listen()
        self.protocol_version = None
        self.session_id = None
        self._hinted = False
        self._era = _Era.UNKNOWN
        versions = self._versions
        legacy = [v for v in versions if v in LEGACY_VERSIONS]
        modern = [v for v in versions if is_modern(v)]
        hint = self.settings.era_hint if use_hint else None
        if hint is not None and hint in versions:
            if is_modern(hint):
                self.protocol_version = hint
                self._era = _Era.MODERN
                self._hinted = True
                return
            # A remembered legacy era: initialize at once, no server/discover probe.  With
            # modern versions allowed, an answer that is not a usable legacy initialize
            # result contradicts the hint and re-probes (_EraMismatch).
            self._hinted = bool(modern)
            yield from self._initialize(hint)
            return
        if not modern:
            yield from self._initialize(legacy[0])
            return
        retried = False
        version = modern[0]
        while True:
            self._probe_version = version
            reply = yield from self._request("server/discover", {})
            verdict = classify_probe(reply.status, reply.message, method="server/discover")
            if verdict is Verdict.MODERN:
                assert reply.message is not None
                supported = reply.message["result"].get("supportedVersions")
                chosen = negotiate_version(versions, supported)
            elif verdict is Verdict.RETRY_VERSION:
                assert reply.message is not None
                chosen = negotiate_version(versions, reply.message["error"]["data"]["supported"])
                if retried:
                    chosen = None
                retried = True
            elif verdict is Verdict.MODERN_ERROR:
                assert reply.message is not None
                raise _server_error(reply.message)
            elif verdict is Verdict.LEGACY:
                if not legacy:
                    raise ServerAnswered(
                        "the server speaks only legacy MCP revisions, which protocol_versions "
                        f"excludes ({', '.join(versions)})",
                        reason="unsupported_version",
                    )
                yield from self._initialize(legacy[0])
                return
            else:
                raise ConnectionFailed(
                    f"the server answered HTTP {reply.status} to server/discover",
                    cause="http_status",
                    status=reply.status,
                )
            if chosen is None:
                raise ServerAnswered(
                    "the server supports no protocol version in common with us "
                    f"(we speak {', '.join(versions)})",
                    reason="unsupported_version",
                )
            if not is_modern(chosen):
                yield from self._initialize(chosen)
                return
            if verdict is Verdict.MODERN:
                self.protocol_version = chosen
                self._era = _Era.MODERN
                return
            version = chosen  # retry the probe once with the version the server named

    def _initialize(self, version: str) -> OpGen:
        legacy = [v for v in self._versions if v in LEGACY_VERSIONS]
        retried = False
        self._stop_listen()
        while True:
            self._era = _Era.INITIALIZING
            self.session_id = None
            params = {
                "protocolVersion": version,
                "capabilities": dict(self._capabilities()),
                "clientInfo": dict(self.settings.client_info),
            }
            reply = yield from self._request("initialize", params)
            message = reply.message
            if self._hinted:
                if not _initialize_result(message, legacy):
                    raise _EraMismatch()
                self._hinted = False  # the hint held
            if message is not None and "error" in message and not retried:
                data = message["error"].get("data")
                supported = data.get("supported") if isinstance(data, Mapping) else None
                other = negotiate_version(legacy, supported)
                if other is not None and other != version:
                    retried = True
                    version = other
                    continue
            result = self._result(reply)
            chosen = result.get("protocolVersion")
            if not isinstance(chosen, str) or chosen not in legacy:
                raise ServerAnswered(
                    f"the server chose protocol version {chosen!r}, which we do not speak "
                    f"(we offered {', '.join(legacy)})",
                    reason="unsupported_version",
                )
            session = header_value(reply.headers, b"mcp-session-id")
            if (
                session is not None
                and echoable(session, self.limits.max_echo_bytes, spaces=False) is None
            ):
                raise ServerAnswered(
                    "the server assigned an unusable session id", reason="bad_session_id"
                )
            self.protocol_version = chosen
            self.session_id = session
            self._era = _Era.LEGACY
            notify = self._legacy_rpc(None, "notifications/initialized", None)
            done: _Reply = yield _Send(notify, None, self.limits.dial_timeout, "dial_timeout")
            if not 200 <= done.status < 300:
                raise ConnectionFailed(
                    f"the server answered HTTP {done.status} to notifications/initialized",
                    cause="http_status",
                    status=done.status,
                )
            self._open_listen()
            return

    def _recovering(self, make: Callable[[], OpGen]) -> OpGen:
        """Run an operation; re-initialize once on legacy session expiry, and
        re-negotiate once when a modern era hint proves wrong, restarting it."""
        recovered = False
        while True:
            try:
                return (yield from make())
            except _SessionExpired:
                if recovered:
                    raise ConnectionFailed(
                        "the server expired the new session at once (HTTP 404)",
                        cause="session_expired",
                        status=404,
                    ) from None
                assert self.protocol_version is not None
                yield from self._initialize(self.protocol_version)
            except _EraMismatch:
                if recovered:  # pragma: no cover - a re-negotiated connection is never hinted
                    raise
                yield from self._negotiate(use_hint=False)
            recovered = True

    # ------------------------------------------------------------ tools/list

    def _list_op(self) -> OpGen:
        tools, skipped, skipped_count = yield from self._list_pages()
        return ToolsListed(
            tools=tuple(tools),
            skipped=tuple(skipped),
            skipped_count=skipped_count,
            ttl_ms=self.ttl_ms,
            cache_scope=self.cache_scope,
        )

    def _list_pages(
        self,
    ) -> Generator[_Instruction, Any, tuple[list[Tool], list[SkippedTool], int]]:
        modern = self._era is _Era.MODERN
        tools: list[Tool] = []
        skipped: list[SkippedTool] = []
        skipped_count = 0
        max_tools = self.limits.max_tools
        names: set[str] = set()
        seen: set[str] = set()
        cursor: str | None = None
        index = 0
        ttl: int | None = None
        scope: str | None = None
        for page in itertools.count(1):
            if page > self.limits.max_tool_pages:
                raise ServerAnswered(
                    f"the tool listing goes on past {self.limits.max_tool_pages} pages "
                    "(Limits.max_tool_pages)",
                    reason="max_tool_pages",
                    bound="max_tool_pages",
                    limit=self.limits.max_tool_pages,
                )
            params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            result = self._result((yield from self._request("tools/list", params)))
            self._check_complete(result, allow_input=False)
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
            for raw in raw_tools:
                outcome = validate_tool(
                    index, raw, modern=modern, max_tool_bytes=self.limits.max_tool_bytes
                )
                if isinstance(outcome, Tool) and outcome.name in names:
                    outcome = SkippedTool(
                        index=index, name=outcome.name, reason="duplicate tool name"
                    )
                if isinstance(outcome, Tool):
                    names.add(outcome.name)
                    tools.append(outcome)
                else:
                    skipped_count += 1
                    if len(skipped) < self.limits.max_recorded_skips:
                        skipped.append(outcome)
                index += 1
            page_ttl = result.get("ttlMs")
            page_ttl = page_ttl if type(page_ttl) is int and page_ttl > 0 else 0
            ttl = page_ttl if ttl is None else min(ttl, page_ttl)
            page_scope = result.get("cacheScope")
            if isinstance(page_scope, str) and scope != "private":
                scope = page_scope
            cursor = result.get("nextCursor")
            if cursor is None:
                break
            if not isinstance(cursor, str):
                raise ServerAnswered(
                    "the server sent a non-string nextCursor", reason="malformed_result"
                )
            if _utf8_len(cursor) > self.limits.max_echo_bytes:
                raise ServerAnswered(
                    f"the server sent a cursor longer than {self.limits.max_echo_bytes:,} bytes "
                    "(Limits.max_echo_bytes)",
                    reason="oversized_cursor",
                    bound="max_echo_bytes",
                    limit=self.limits.max_echo_bytes,
                )
            if cursor in seen:
                raise ServerAnswered(
                    f"the server's listing loops: cursor {cursor[:80]!r} came back on page {page}",
                    reason="cursor_cycle",
                )
            seen.add(cursor)
        self._tools = {tool.name: tool for tool in tools}
        self.ttl_ms = ttl or 0
        self.cache_scope = scope
        return tools, skipped, skipped_count

    def _check_complete(self, result: Mapping[str, Any], *, allow_input: bool) -> str:
        kind = result.get("resultType", "complete")
        if kind == "complete" or (allow_input and kind == "input_required"):
            return str(kind)
        raise ServerAnswered(
            f"the server sent a result of unknown type {kind!r}", reason="unknown_result_type"
        )

    # ------------------------------------------------------------ tools/call

    def _header_params(self, name: str) -> tuple[HeaderParam, ...]:
        tool = self._tools.get(name)
        if tool is not None:
            return tool.header_params
        schema = self.settings.tool_schemas.get(name)
        if schema is None:
            return ()
        try:
            return header_params_of(schema)
        except ValueError as exc:
            raise CallerError(f"the schema given for tool {name!r} is unusable: {exc}") from None

    def _call_op(self, name: str, arguments: bytes, parsed: Mapping[str, Any]) -> OpGen:
        limits = self.limits
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
            modern = self._era is _Era.MODERN
            if modern:
                extra.append((b"mcp-name", encode_header_value(name)))
                extra.extend(param_headers(self._header_params(name), parsed))
            if inputs is not None:
                params["inputResponses"] = inputs
            if state is not None:
                params["requestState"] = state
            tool = self._tools.get(name)
            reissue = self.settings.reissue_calls or (tool is not None and tool.idempotent)
            reply = yield from self._request(
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
                yield from self._list_pages()
                continue
            result = self._result(reply)
            if self._check_complete(result, allow_input=True) == "complete":
                return ToolCalled(result=parse_call_result(result, modern=modern))
            requests = result.get("inputRequests")
            state = result.get("requestState")
            if requests is None and state is None:
                raise ServerAnswered(
                    "the server asked for input without inputRequests or requestState",
                    reason="malformed_result",
                )
            if state is not None and (
                not isinstance(state, str) or _utf8_len(state) > limits.max_echo_bytes
            ):
                raise ServerAnswered(
                    "the server sent a requestState that is not a string of at most "
                    f"{limits.max_echo_bytes:,} bytes (Limits.max_echo_bytes)",
                    reason="bad_request_state",
                    bound="max_echo_bytes",
                    limit=limits.max_echo_bytes,
                )
            if requests:
                if not isinstance(requests, dict) or not all(
                    isinstance(v, dict) and isinstance(v.get("method"), str)
                    for v in requests.values()
                ):
                    raise ServerAnswered(
                        "the server sent malformed inputRequests", reason="malformed_result"
                    )
                if not self._can_answer:
                    raise ServerAnswered(
                        "the server needs input ("
                        + ", ".join(sorted({str(v["method"]) for v in requests.values()}))
                        + ") and no input handler is configured",
                        reason="input_required",
                        data=requests,
                    )
                answers = yield _Ask(requests)
                if answers is None:
                    raise ServerAnswered(
                        "the input the server asked for was declined", reason="input_declined"
                    )
                inputs = dict(answers)
                shed = 0
            else:
                inputs = None
                delay = min(0.05 * (2**shed), 0.5) * (0.5 + self._jitter())
                shed += 1
                yield _Sleep(self._now + delay)


def _initialize_result(message: Mapping[str, Any] | None, legacy: Sequence[str]) -> bool:
    """``message`` is a legacy initialize result at one of ``legacy``'s versions."""
    result = message.get("result") if message is not None else None
    return isinstance(result, Mapping) and result.get("protocolVersion") in legacy


def _utf8_len(text: str) -> int:
    """The UTF-8 length of ``text`` (a lone surrogate counted as its 3-byte form)."""
    return len(text.encode("utf-8", "surrogatepass"))
