"""One HTTP exchange of a connection, and what its request got.

An :class:`Exchange` is one request the machine sent, with its :class:`Role` (what
waits for it), its head once it came and its body as it arrives: a JSON body is
collected and decoded at its end (:meth:`Exchange.json_answer`), an event stream is fed
to its parser chunk by chunk (:meth:`Exchange.feed`), anything else is not read.  The
:class:`~.transport.Transport` keeps the exchanges of one connection; a :class:`Reply`
is what it hands the operation for the one the operation waits for.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..errors import ConnectionFailed, budget_exceeded
from ..fieldvalue import echoable
from ..http import Headers, HttpRequest
from ..jsonvalue import JsonError
from ..limits import Limits
from ..messages import match_response, parse_message
from ..sse import SseError, SseEvent, SseParser

__all__ = ["FOREVER", "Body", "Decoder", "Exchange", "Reply", "Role"]

#: How a request's answer is parsed (a JSON body or one event's text): ``parse_message``,
#: or ``listing.parse_page`` for a ``tools/list`` request (its ``Send`` says which).
Decoder = Callable[[bytearray | str, Limits], Any]

# The deadline of a standalone stream the server accepted: it lives as long as the session.
FOREVER = float("inf")


class Role(enum.Enum):
    OP = "op"  # the current operation waits for it
    SIDE = "side"  # fire and forget (answers to server requests, cancellations)
    DRAIN = "drain"  # answered already; read to the end so the socket can be reused
    LISTEN = "listen"  # the legacy session's standalone GET stream, carrying server requests


class Body(enum.Enum):
    JSON = "json"
    SSE = "sse"
    OTHER = "other"


# Enum members as module constants: on Python 3.11 each ``Enum.MEMBER`` lookup runs
# EnumType.__getattr__'s hook (a bound wrapper per access), which the per-event path
# should not pay.
_JSON: Final = Body.JSON
_OTHER: Final = Body.OTHER
_SSE: Final = Body.SSE
_NO_EVENTS: Sequence[SseEvent] = ()


class Reply:
    """What the operation's request got: its status, headers and JSON-RPC response, or
    (``broken``) how its event stream broke and where it may resume; ``at``: when it
    reached the operation (the time of the input that brought it)."""

    __slots__ = (
        "at",
        "broken",
        "headers",
        "last_event_id",
        "message",
        "progressed",
        "retry_ms",
        "status",
    )

    def __init__(
        self,
        status: int,
        headers: Headers,
        message: dict[str, Any] | None,
        at: float,
        broken: ConnectionFailed | None = None,
        last_event_id: bytes | None = None,
        retry_ms: int | None = None,
        progressed: bool = False,
    ) -> None:
        self.status = status
        self.headers = headers
        self.message = message
        self.at = at
        self.broken = broken
        self.last_event_id = last_event_id
        self.retry_ms = retry_ms
        self.progressed = progressed


class Exchange:
    __slots__ = (
        "body",
        "deadline",
        "exchange_id",
        "headers",
        "judged_id",
        "kind",
        "last_id",
        "message",
        "parse",
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
        role: Role,
        parse: Decoder = parse_message,
    ) -> None:
        self.exchange_id = exchange_id
        self.request = request
        self.refusals = 0
        self.rpc_id = rpc_id
        self.deadline = deadline
        self.role = role
        self.status: int | None = None
        self.headers: Headers = ()
        self.kind = _OTHER
        self.body = bytearray()
        self.sse: SseParser | None = None
        self.last_id: bytes | None = None  # the last event id that passed ``echoable``
        self.judged_id: str | None = None  # the parser's last id judged by ``echoable``
        self.message: dict[str, Any] | None = None
        self.progressed = False
        self.server_requests = 0
        self.parse = parse

    def feed(self, data: bytes, limits: Limits) -> Sequence[SseEvent]:
        """A chunk of the body: a JSON body keeps it, an event stream's parser takes it
        (the events it completed are returned), any other body is not read."""
        kind = self.kind
        if kind is _JSON:
            self.body += data
            return _NO_EVENTS
        if kind is not _SSE:
            return _NO_EVENTS
        sse = self.sse
        assert sse is not None
        try:
            events = sse.feed(data)
        except SseError as exc:
            if exc.reason == "text":  # its decoded text: 3 x the budget at most
                raise budget_exceeded(
                    f"{exc} (3 x Limits.max_response_bytes)",
                    "max_response_bytes",
                    exc.limit,
                    exc.observed,
                ) from None
            # defensive: the parser's byte limit is max_response_bytes, which the
            # budget enforces on these bytes first
            raise ConnectionFailed(  # pragma: no cover - the budget refuses them first
                f"the server sent an unusable event stream: {exc}", cause="framing"
            ) from None
        last_id = sse.last_event_id
        if last_id is not None and last_id is not self.judged_id:
            # Judged once per id the parser decoded, not once per body chunk.  An id we
            # could not send back as Last-Event-ID is treated as absent.
            self.judged_id = last_id
            self.last_id = echoable(last_id, limits.max_echo_bytes) or self.last_id
        if events:
            self.progressed = True
        return events

    def json_answer(
        self, rpc_id: int, limits: Limits, batch_allowed: bool
    ) -> dict[str, Any] | None:
        """The JSON-RPC response to request ``rpc_id`` in the JSON body (consumed), or
        None for an error status with an unreadable body or none for us."""
        status = self.status or 0
        body, self.body = self.body, bytearray()  # parse_json consumes it
        try:
            parsed = self.parse(body, limits)
            message, _ = match_response(
                parsed, rpc_id, batch_allowed=batch_allowed, idless_ok=status >= 400
            )
        except (JsonError, ConnectionFailed) as exc:
            if isinstance(exc, ConnectionFailed) and exc.cause == "budget":
                raise
            if status >= 300:
                return None  # an error status with an unreadable body
            raise ConnectionFailed(
                f"the server's response is not a JSON-RPC response: {exc}",
                cause="not_jsonrpc",
            ) from None
        if message is None and 200 <= status < 300:
            raise ConnectionFailed(
                "the server's response holds no JSON-RPC response to our request",
                cause="not_jsonrpc",
            )
        return message
