"""OpenTelemetry for sansmcp: a span and a duration point per MCP request (extra ``otel``).

Theory of operation
-------------------
Tracing is on only when the embedder passes a :class:`Telemetry` to a ``Client``
(``Client(telemetry=Telemetry())``); nothing else in sansmcp imports this module or
any ``opentelemetry`` one.  With it, the core reports each JSON-RPC request it sends
(``RequestStarted`` / ``RequestEnded``, with the figures) and the adapters hand the
reports to :meth:`Telemetry.observe` in the caller's task -- this module is
runtime-free, the same for every adapter.

It follows the OpenTelemetry semantic conventions for MCP (``gen-ai/mcp``,
Development status):

* one ``CLIENT`` span per request, named ``{mcp.method.name} {gen_ai.tool.name}``
  (or the method alone), with ``mcp.method.name``, ``gen_ai.tool.name`` and
  ``gen_ai.operation.name=execute_tool`` on ``tools/call``, ``jsonrpc.request.id``,
  ``mcp.protocol.version``, ``mcp.session.id`` (legacy sessions),
  ``network.transport=tcp``, ``network.protocol.name=http`` and ``.version`` (``1.1``
  / ``2``), ``server.address`` / ``server.port``; on failure ``error.type`` (the
  JSON-RPC code as a string, ``tool_error`` for ``isError``, else sansmcp's cause),
  ``rpc.response.status_code`` for a JSON-RPC error, and status ERROR with the message.
  A ``tools/call`` the server ran as a task (``Config(tasks=True)``) lasts until the
  task ended (its ``tasks/get`` polls are spans of their own meanwhile) and carries
  ``sansmcp.task.id`` and ``sansmcp.task.status`` (its last status: ``completed``,
  ``failed``..., or ``working`` for a ``start_tool`` that hands the task back).
  A span's parent is the caller's active span; its times are the core's (when the
  request went out, when it ended), not when the report was handed over.
* the histogram ``mcp.client.operation.duration`` (seconds, the conventions' bucket
  boundaries) with the span's attributes minus the ids (request and session);
* context propagation: :meth:`Telemetry.carrier` injects a context (the global
  propagator: ``traceparent``, ``tracestate``, ``baggage``) into each operation's
  ``params._meta``, unprefixed as SEP-414 says -- unless ``Config.meta`` carries a
  ``traceparent``, which wins (the core decides).  For a tool call it is the
  ``tools/call`` client span's own context (the span is opened when the call starts,
  so the server's spans nest under it, as with the official SDK); for the other
  operations, the caller's active context.  (A call's later MRTR attempts carry the
  first attempt's context: ``_meta`` is chosen once per operation.)

Arguments and results are never recorded (the conventions make them opt-in; sansmcp
does not offer it).

A hostile server chooses some of these values, so two rules hold for everything this
module hands to OpenTelemetry:

* **closed sets on metrics** -- a metric attribute takes its values from a set fixed
  here, never from the server: ``error.type`` and ``rpc.response.status_code`` are a
  JSON-RPC or MCP error code the spec documents (:data:`KNOWN_CODES`), one of
  sansmcp's own tags (``ConnectionFailed.cause``, ``ServerAnswered.reason``,
  ``unauthorized``, ``tool_error``, ``cancelled``), else ``_OTHER`` (the conventions'
  value for an ``error.type`` they do not know); ``mcp.protocol.version`` is a
  revision sansmcp speaks.  ``gen_ai.tool.name`` is left off the histogram: the
  server names its tools (and may rename them per session), so it would make one
  series per name; spans keep it.  Spans also keep the server's own code in
  ``rpc.response.status_code``; their ``error.type`` is the metric's.
* **clipped strings** -- every span name, string attribute and status description is
  cut to :data:`MAX_TELEMETRY_BYTES` UTF-8 bytes (at a character boundary, ``…`` at
  the cut; a lone surrogate becomes U+FFFD, so an exporter can encode it) by
  :func:`clip_text`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final, get_args

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import __version__
from .core.errors import Cause, ConnectionFailed, Reason
from .core.mcp import RequestEnded, RequestStarted
from .core.messages import SUPPORTED_VERSIONS

__all__ = [
    "DURATION_BUCKETS",
    "KNOWN_CODES",
    "MAX_TELEMETRY_BYTES",
    "OTHER",
    "Telemetry",
    "clip_text",
    "metric_code",
    "metric_error_type",
]

DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The conventions' advisory bucket boundaries for ``mcp.client.operation.duration`` (s)."""
MAX_TELEMETRY_BYTES: Final = 1024
"""The most UTF-8 bytes of any string sansmcp hands to OpenTelemetry (span name,
attribute value, status description); longer ones are cut by :func:`clip_text`."""
OTHER: Final = "_OTHER"
"""The semantic conventions' value for an ``error.type`` outside the documented set."""
KNOWN_CODES: Final = frozenset(
    {-32700, -32600, -32601, -32602, -32603, -32002, -32020, -32021, -32022, -32042}
)
"""The error codes the spec documents: JSON-RPC 2.0's (parse error, invalid request,
method not found, invalid params, internal error) and MCP's (``-32002`` resource not
found, 2025-11-25 and earlier; ``-32020`` HeaderMismatch; ``-32021``
MissingRequiredClientCapability; ``-32022`` UnsupportedProtocolVersion; ``-32042``
URLElicitationRequired, 2025-11-25).  Any other code is ``_OTHER`` on metrics."""
_TAGS = frozenset({*get_args(Cause), *get_args(Reason), "unauthorized", "tool_error", "cancelled"})
_ERROR_TYPES = _TAGS | {str(code) for code in KNOWN_CODES}
_VERSIONS = frozenset(SUPPORTED_VERSIONS)
_IDS = ("jsonrpc.request.id", "mcp.session.id")
_TASK = ("sansmcp.task.id", "sansmcp.task.status")  # (spans only: an id per task)
_NOT_ON_METRICS = (*_IDS, "gen_ai.tool.name", *_TASK)
_ELLIPSIS = "\u2026"  # 3 UTF-8 bytes


def clip_text(text: str, limit: int = MAX_TELEMETRY_BYTES) -> str:
    """``text`` in at most ``limit`` (>= 3) UTF-8 bytes: cut at a character boundary
    with ``…`` at the cut; lone surrogates become U+FFFD.  Costs O(``limit``), not
    O(``len(text)``)."""
    head = text[: limit + 1]  # every character is at least one byte
    if not head.isascii():
        head = head.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    data = head.encode()
    if len(data) <= limit:
        return head  # the whole text (more than ``limit`` characters is over ``limit`` bytes)
    return data[: limit - 3].decode("utf-8", "ignore") + _ELLIPSIS


def metric_code(code: int) -> str:
    """A JSON-RPC error code as a metric attribute: documented, else ``_OTHER``."""
    return str(code) if code in KNOWN_CODES else OTHER


def metric_error_type(kind: str) -> str:
    """An ``error.type``: a documented code or one of sansmcp's tags, else ``_OTHER``."""
    return kind if kind in _ERROR_TYPES else OTHER


class Telemetry:
    """Spans, the duration histogram and propagation for one or more ``Client``\\ s.

    ``tracer_provider`` / ``meter_provider`` default to the global ones;
    ``propagate=False`` sends no trace context; ``clock`` (ns since the epoch) places
    the core's times on the wall clock.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        propagate: bool = True,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._tracer = trace.get_tracer("sansmcp", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("sansmcp", __version__, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            "mcp.client.operation.duration",
            unit="s",
            description="The duration of an MCP request as the client observed it.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._propagate = propagate
        self._clock = clock
        self._spans: dict[int, dict[int, Span]] = {}  # id(conn) -> rpc id -> its open span
        # id(conn) -> the tools/call span opened before its request (its context is in _meta)
        self._opened: dict[int, Span] = {}

    # ------------------------------------------------------------ what the adapters call

    def carrier(self, conn: Any, tool: str | None) -> Mapping[str, str] | None:
        """The trace context for ``conn``'s next operation's ``_meta``: for a call
        (``tool`` given) the ``tools/call`` span itself, opened here so the server's spans
        nest under it; for the others the caller's active context."""
        if not self._propagate:
            return None
        context = None
        if tool is not None:
            stale = self._opened.pop(id(conn), None)
            if stale is not None:  # pragma: no cover - every call ends what it opened
                stale.end()
            span = self._tracer.start_span(
                _span_name("tools/call", tool),
                kind=SpanKind.CLIENT,
                start_time=self._clock(),
            )
            self._opened[id(conn)] = span
            context = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=context)
        return carrier or None

    def observe(self, conn: Any, item: RequestStarted | RequestEnded, now: float) -> None:
        """A request of ``conn`` started or ended; ``now`` is the clock of ``item.at``."""
        wall = self._clock()
        spans = self._spans.setdefault(id(conn), {})
        if isinstance(item, RequestStarted):
            attributes = self._attributes(conn, item.method, item.tool, item.rpc_id)
            opened = self._opened.pop(id(conn), None) if item.method == "tools/call" else None
            if opened is not None:  # the span whose context the request's _meta carries
                opened.set_attributes(attributes)
                spans[item.rpc_id] = opened
                return
            spans[item.rpc_id] = self._tracer.start_span(
                _span_name(item.method, item.tool),
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=wall - _ns(now - item.at),
            )
            return
        span = spans.pop(item.rpc_id, None)
        start = wall - _ns(now - item.started)
        if span is None:  # pragma: no cover - the core reports a start before every end
            span = self._tracer.start_span(
                _span_name(item.method, item.tool), kind=SpanKind.CLIENT, start_time=start
            )
        attributes = self._attributes(conn, item.method, item.tool, item.rpc_id)
        if item.protocol_version is not None:
            attributes["mcp.protocol.version"] = clip_text(item.protocol_version)
        if item.session_id is not None:
            attributes["mcp.session.id"] = clip_text(item.session_id)
        if item.http_version is not None:
            attributes["network.protocol.version"] = clip_text(item.http_version)
        if item.error_type is not None:
            attributes["error.type"] = metric_error_type(item.error_type)
        if item.rpc_code is not None:
            attributes["rpc.response.status_code"] = clip_text(str(item.rpc_code))
        if item.task_id is not None:
            attributes[_TASK[0]] = clip_text(item.task_id)
            attributes[_TASK[1]] = clip_text(item.task_status or "")
        span.set_attributes(attributes)
        if item.error_type is not None:
            text = item.error_message or item.error_type
            span.set_status(Status(StatusCode.ERROR, clip_text(text)))
        span.end(end_time=wall - _ns(now - item.at))
        points = {k: v for k, v in attributes.items() if k not in _NOT_ON_METRICS}
        if item.rpc_code is not None:
            points["rpc.response.status_code"] = metric_code(item.rpc_code)
        version = points.get("mcp.protocol.version")
        if version is not None and version not in _VERSIONS:  # pragma: no cover - negotiated
            points["mcp.protocol.version"] = OTHER
        self._duration.record(max(item.at - item.started, 0.0), points)
        if not spans:
            del self._spans[id(conn)]

    def abandon(self, conn: Any, error: BaseException) -> None:
        """``conn``'s operation was abandoned (cancelled, or a callback raised): its
        open spans end with that as their error."""
        kind = error.cause if isinstance(error, ConnectionFailed) else type(error).__name__
        kind = clip_text(kind)  # the caller's own exception class: a span-only value
        open_spans = list(self._spans.pop(id(conn), {}).values())
        opened = self._opened.pop(id(conn), None)  # a call that ended before its request
        if opened is not None:
            open_spans.append(opened)
        for span in open_spans:
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, clip_text(str(error) or kind)))
            span.end()

    # ------------------------------------------------------------ attributes

    @staticmethod
    def _attributes(conn: Any, method: str, tool: str | None, rpc_id: int) -> dict[str, Any]:
        origin = conn.machine.settings.endpoint.origin
        attributes: dict[str, Any] = {
            "mcp.method.name": method,
            "jsonrpc.request.id": str(rpc_id),
            "network.transport": "tcp",
            "network.protocol.name": "http",
            "server.address": clip_text(origin.host),
            "server.port": origin.port,
        }
        version = conn.machine.protocol_version
        if version is not None:
            attributes["mcp.protocol.version"] = clip_text(version)
        if tool is not None:
            attributes["gen_ai.tool.name"] = clip_text(tool)
            attributes["gen_ai.operation.name"] = "execute_tool"
        return attributes


def _span_name(method: str, tool: str | None) -> str:
    return clip_text(method if tool is None else f"{method} {tool}")


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
