"""What the MCP machine emits: HTTP work for the driver and one terminal event per operation.

``StartExchange`` / ``CancelExchange`` are commands for the driver (the adapter); the
others are events (the observations -- progress, notifications, telemetry -- are defined
in :mod:`.notifications`).  ``Output`` is their union, for an exhaustive ``match``;
``Terminal`` the union of the terminal events.

The per-request ones (``StartExchange``, ``CancelExchange``, the terminal events) are
read-only by contract, not ``frozen`` (see :mod:`sansmcp.core.http`: a frozen
``__init__`` costs about four times a plain one); they hash and compare by value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import McpError
from ..http import HttpRequest
from ..results import CallResult
from ..tools import SkippedTool, Tool
from ..url import Origin
from .notifications import (
    LogMessage,
    Notification,
    Progress,
    RequestEnded,
    RequestStarted,
    TaskUpdated,
)

__all__ = [
    "CancelExchange",
    "Closed",
    "Connected",
    "InputRequired",
    "OperationFailed",
    "Output",
    "StartExchange",
    "TaskReported",
    "Terminal",
    "ToolCalled",
    "ToolsListed",
]


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class StartExchange:
    """Send ``request`` on a pooled connection; report its events with ``exchange_id``.

    ``preemptible``: a legacy session's standalone stream, which yields its socket to an
    operation that waits for one (``McpMachine.yield_listen``); ``needs_room``: its
    re-opening after that, started only when the origin has a socket to spare.
    ``origin`` is None for the Conn's own endpoint, else where the request goes (an
    OAuth authorization server: the same pool, guard and flags)."""

    exchange_id: int
    request: HttpRequest
    deadline: float
    preemptible: bool = False
    needs_room: bool = False
    origin: Origin | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class CancelExchange:
    """Abandon the exchange (HTTP/1.1: close its socket; HTTP/2: reset its stream)."""

    exchange_id: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class Connected:
    protocol_version: str


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class ToolsListed:
    tools: tuple[Tool, ...]
    # the first Limits.max_recorded_skips skipped entries, with details
    skipped: tuple[SkippedTool, ...]
    # every skipped entry, recorded or not
    skipped_count: int
    ttl_ms: int
    cache_scope: str | None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class ToolCalled:
    result: CallResult


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class TaskReported:
    """A task handle's operation ended: the task ``task_id`` is ``status`` (the
    server's word, with its message if any)."""

    task_id: str
    status: str
    status_message: str | None = None


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


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class OperationFailed:
    error: McpError = field(compare=False)


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class Closed:
    pass


# An operation's one last output (``isinstance(output, Terminal)`` works too): a new
# terminal event is added here, and whoever waits for the end of an operation sees it.
Terminal = Connected | ToolsListed | ToolCalled | TaskReported | OperationFailed | Closed

Output = (
    StartExchange
    | CancelExchange
    | Terminal
    | InputRequired
    | Progress
    | LogMessage
    | Notification
    | RequestStarted
    | RequestEnded
    | TaskUpdated
)
