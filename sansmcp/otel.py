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
  A span's parent is the caller's active span; its times are the core's (when the
  request went out, when it ended), not when the report was handed over.
* the histogram ``mcp.client.operation.duration`` (seconds, the conventions' bucket
  boundaries) with the span's attributes minus the ids (request and session);
* context propagation: :meth:`Telemetry.carrier` injects the active context (the
  global propagator: ``traceparent``, ``tracestate``, ``baggage``) into each
  operation's ``params._meta``, unprefixed as SEP-414 says -- unless ``Config.meta``
  carries a ``traceparent``, which wins (the core decides).

Arguments and results are never recorded (the conventions make them opt-in; sansmcp
does not offer it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import __version__
from .core.errors import ConnectionFailed
from .core.mcp import RequestEnded, RequestStarted

__all__ = ["DURATION_BUCKETS", "Telemetry"]

DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The conventions' advisory bucket boundaries for ``mcp.client.operation.duration`` (s)."""
_IDS = ("jsonrpc.request.id", "mcp.session.id")


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

    # ------------------------------------------------------------ what the adapters call

    def carrier(self) -> Mapping[str, str] | None:
        """The active trace context for the next operation's ``_meta``."""
        if not self._propagate:
            return None
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier or None

    def observe(self, conn: Any, item: RequestStarted | RequestEnded, now: float) -> None:
        """A request of ``conn`` started or ended; ``now`` is the clock of ``item.at``."""
        wall = self._clock()
        spans = self._spans.setdefault(id(conn), {})
        if isinstance(item, RequestStarted):
            spans[item.rpc_id] = self._tracer.start_span(
                item.method if item.tool is None else f"{item.method} {item.tool}",
                kind=SpanKind.CLIENT,
                attributes=self._attributes(conn, item.method, item.tool, item.rpc_id),
                start_time=wall - _ns(now - item.at),
            )
            return
        span = spans.pop(item.rpc_id, None)
        start = wall - _ns(now - item.started)
        if span is None:  # pragma: no cover - the core reports a start before every end
            span = self._tracer.start_span(item.method, kind=SpanKind.CLIENT, start_time=start)
        attributes = self._attributes(conn, item.method, item.tool, item.rpc_id)
        if item.protocol_version is not None:
            attributes["mcp.protocol.version"] = item.protocol_version
        if item.session_id is not None:
            attributes["mcp.session.id"] = item.session_id
        if item.http_version is not None:
            attributes["network.protocol.version"] = item.http_version
        if item.error_type is not None:
            attributes["error.type"] = item.error_type
        if item.rpc_code is not None:
            attributes["rpc.response.status_code"] = str(item.rpc_code)
        span.set_attributes(attributes)
        if item.error_type is not None:
            span.set_status(Status(StatusCode.ERROR, item.error_message or item.error_type))
        span.end(end_time=wall - _ns(now - item.at))
        self._duration.record(
            max(item.at - item.started, 0.0),
            {key: value for key, value in attributes.items() if key not in _IDS},
        )
        if not spans:
            del self._spans[id(conn)]

    def abandon(self, conn: Any, error: BaseException) -> None:
        """``conn``'s operation was abandoned (cancelled, or a callback raised): its
        open spans end with that as their error."""
        kind = error.cause if isinstance(error, ConnectionFailed) else type(error).__name__
        for span in self._spans.pop(id(conn), {}).values():
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, str(error) or kind))
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
            "server.address": origin.host,
            "server.port": origin.port,
        }
        version = conn.machine.protocol_version
        if version is not None:
            attributes["mcp.protocol.version"] = version
        if tool is not None:
            attributes["gen_ai.tool.name"] = tool
            attributes["gen_ai.operation.name"] = "execute_tool"
        return attributes


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
