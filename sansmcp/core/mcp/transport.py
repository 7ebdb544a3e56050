"""The exchanges of one connection: roles, bodies, event streams, held answers, resends.

Every HTTP exchange the machine starts is an :class:`~.exchange.Exchange` with a
:class:`~.exchange.Role`:

* ``OP`` -- the current operation waits for its reply (``Transport.op``);
* ``SIDE`` -- fire and forget (answers to server requests, cancellations);
* ``DRAIN`` -- answered already; read to its end so the socket can be reused;
* ``LISTEN`` -- the legacy session's one standalone GET stream, carrying server requests.

:meth:`Transport.receive` takes one ``ExchangeEvent`` and returns what the machine
must act on: a :class:`~.exchange.Reply` for the operation, a ``ConnectionFailed`` that fails
the operation's exchange, or None.  Server requests found on a stream are queued in
:attr:`Transport.asked` for the machine, which decides how each is answered.  A bad
response raises ``McpError`` (the machine cancels the exchange).  Every byte is
charged to the :class:`~.budget.Budget` as it arrives.

An answer that arrives on an event stream is *held* until that stream ends (so its
socket can carry the next request) or ``min(stream_end_wait, cancel_grace)`` passes.
The transport keeps these times and its exchanges' deadlines itself
(:meth:`Transport.next_deadline`, :meth:`Transport.expire`), and the exchange side of
an operation's life: its request (:meth:`Transport.send`), its timeout
(:meth:`Transport.abort_op`), its end, and a close (:meth:`Transport.abandon`,
:meth:`Transport.close_step`).  It has no clock: each input brings its ``now``.

Notifications found on a stream (the operation's, or the standalone one) go to
:attr:`Transport.notices` (:mod:`.notifications`), which routes and bounds them.

The standalone stream is opened after ``initialize`` when the embedder answers input
or takes notifications (or at the first call that asks for progress), kept for the
session's life and re-opened at most ``Limits.max_stream_retries`` times (from its last
event id) if the server ends it; never after a refusal.  An event id
the server sent passes :func:`~sansmcp.core.fieldvalue.echoable` before it is kept.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final, assert_never

from ..errors import ConnectionFailed, budget_exceeded
from ..http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    Headers,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
)
from ..jsonvalue import JsonError
from ..limits import Limits
from ..messages import BATCH_VERSION, match_response, parse_message
from ..sse import SseParser
from . import rules
from .budget import Budget
from .events import CancelExchange, Output, StartExchange
from .exchange import FOREVER, Body, Decoder, Exchange, Reply, Role
from .notifications import Notices
from .requests import Requests
from .session import Era, Session
from .taskwire import TASK_STATUS

__all__ = ["Transport"]

LIST_CHANGED = "notifications/tools/list_changed"

# An event stream that failed for these is not resumed: a bound, or the Client closing.
_FINAL = frozenset({"budget", "client_closed"})
_JSON: Final = Body.JSON
_SSE: Final = Body.SSE
_LEGACY: Final = Era.LEGACY
_DRAIN: Final = Role.DRAIN
_LISTEN: Final = Role.LISTEN
_OP: Final = Role.OP
_SIDE: Final = Role.SIDE
_HEAD_JSON: Final = rules.Head.JSON
_HEAD_OTHER: Final = rules.Head.OTHER
_HEAD_REDIRECT: Final = rules.Head.REDIRECT
_HEAD_SSE: Final = rules.Head.SSE
_HEAD_UNAUTHORIZED: Final = rules.Head.UNAUTHORIZED
_HEAD_UNUSABLE: Final = rules.Head.UNUSABLE


class Transport:
    """The exchanges of one connection and the outputs that start and cancel them.

    There is no clock here: each input that needs the time brings it (``now``, the
    time of the event in hand), and each :class:`Reply` carries it on (``at``).
    ``on_list_changed`` is called when the server says its tool list changed (the
    machine's cache hook); ``deliver_notices``: notifications other than progress are
    wanted.  The machine brackets each operation with :meth:`begin_operation` and
    :meth:`end_operation` and sends its requests with :meth:`send`.
    """

    __slots__ = (
        "_exchange_ids",
        "asked",
        "budget",
        "exchanges",
        "held",
        "held_until",
        "limits",
        "listen",
        "listen_last_id",
        "listen_opens",
        "listen_tried",
        "listen_yield_wanted",
        "listen_yielded",
        "notices",
        "on_list_changed",
        "op",
        "outputs",
        "requests",
        "session",
        "statuses",
    )

    def __init__(
        self,
        *,
        limits: Limits,
        budget: Budget,
        requests: Requests,
        session: Session,
        exchange_ids: Iterator[int] | None,
        on_list_changed: Callable[[], None],
        deliver_notices: bool,
    ) -> None:
        self.limits = limits
        self.budget = budget
        self.requests = requests
        self.session = session
        self._exchange_ids = exchange_ids if exchange_ids is not None else itertools.count(1)
        self.outputs: deque[Output] = deque()
        self.exchanges: dict[int, Exchange] = {}
        self.op: Exchange | None = None
        self.held: tuple[Exchange, Reply] | None = None
        self.held_until = 0.0
        # server requests found on streams, for the machine: (the exchange, the request)
        self.asked: list[tuple[Exchange, dict[str, Any]]] = []
        # task status notifications found on streams, for the machine (taskop.route_statuses)
        self.statuses: list[dict[str, Any]] = []
        # The legacy session's one standalone GET stream, how often it was opened this
        # session, its last event id.
        self.listen: Exchange | None = None
        self.listen_opens = 0
        self.listen_last_id: bytes | None = None
        self.on_list_changed = on_list_changed
        self.listen_tried = False  # this session's stream was opened once already
        self.listen_yielded = False  # it gave its socket to an operation: re-open it after
        self.listen_yield_wanted = False  # to give it up as soon as its head arrives
        self.notices = Notices(
            self.outputs, limit=limits.max_notifications, deliver=deliver_notices
        )

    # ------------------------------------------------------------ exchanges

    def open(
        self,
        request: HttpRequest,
        rpc_id: int | None,
        deadline: float,
        role: Role,
        *,
        needs_room: bool = False,
        parse: Decoder = parse_message,
    ) -> Exchange:
        exchange = Exchange(next(self._exchange_ids), request, rpc_id, deadline, role, parse)
        self.exchanges[exchange.exchange_id] = exchange
        self.outputs.append(
            StartExchange(
                exchange_id=exchange.exchange_id,
                request=request,
                deadline=deadline,
                preemptible=role is _LISTEN,
                needs_room=needs_room,
            )
        )
        return exchange

    def side(self, request: HttpRequest, wait: float, now: float) -> None:
        """Send ``request`` and forget it (its answer is drained, at most ``wait`` s)."""
        self.open(request, None, now + wait, _SIDE)

    def cancel(self, exchange: Exchange) -> None:
        if exchange is self.listen:
            self.listen = None  # given up (garbled, over a bound, closing): never re-opened
            self.listen_yield_wanted = False
        if self.exchanges.pop(exchange.exchange_id, None) is not None:
            self.outputs.append(CancelExchange(exchange_id=exchange.exchange_id))

    def cancel_op(self) -> Exchange | None:
        """Cancel the operation's exchange, if any; return it."""
        op = self.op
        if op is not None:
            self.cancel(op)
            self.op = None
        return op

    def release_held(self, now: float) -> Reply:
        """The held answer goes to the operation (at ``now``)."""
        assert self.held is not None
        reply = self.held[1]
        reply.at = now
        self.held = None
        return reply

    # ------------------------------------------------------------ the operation's exchanges

    def begin_operation(self) -> None:
        """An operation starts: the standalone stream's count of server requests
        (``Limits.max_server_requests``) starts again."""
        if self.listen is not None:
            self.listen.server_requests = 0

    def send(
        self,
        request: HttpRequest,
        rpc_id: int | None,
        deadline: float,
        parse: Decoder = parse_message,
        progress: int | None = None,
    ) -> None:
        """Send the operation's request (the one it waits for), its answer parsed with
        ``parse``; a JSON-RPC request's notifications count from here (``progress``: the
        token whose progress is the operation's).  A :class:`Reply` for it ends it (``op``
        is None again)."""
        if rpc_id is not None:
            self.notices.begin(rpc_id, progress)
        self.op = self.open(request, rpc_id, deadline, _OP, parse=parse)

    def end_operation(self) -> None:
        """The operation ended: its exchange and held answer are forgotten (a cancelled
        one was cancelled already), its progress is no longer ours."""
        self.op = None
        self.held = None
        self.notices.end()

    def abandon(self) -> None:
        """The connection closes: every exchange but the side ones (answers and notices
        already sent, which finish) is cancelled; the standalone stream is not re-opened."""
        self.listen = None
        for exchange in list(self.exchanges.values()):
            if exchange.role is not _SIDE:
                self.cancel(exchange)

    def cancel_all(self) -> None:
        """The close ran out of time: everything still out is cancelled."""
        for exchange in list(self.exchanges.values()):
            self.cancel(exchange)
        self.op = None

    def abort_op(self, wait: float, now: float) -> None:
        """The operation ran out of time: its exchange is cancelled, and a legacy server
        is told so (``notifications/cancelled``, its answer drained at most ``wait`` s)."""
        op = self.cancel_op()
        if op is not None and self.session.era is _LEGACY and op.rpc_id is not None:
            request = self.requests.legacy_rpc(
                None, "notifications/cancelled", {"requestId": op.rpc_id, "reason": "timed out"}
            )
            self.side(request, wait, now)

    def close_step(self, deadline: float) -> bool:
        """Closing (the operation abandoned): True once nothing is left to wait for.
        Answers and notices already sent finish first; then a legacy session gets its
        ``DELETE`` (by ``deadline``, once), which is waited for in turn."""
        if self.op is not None or any(e.role is _SIDE for e in self.exchanges.values()):
            return False
        session = self.session
        if session.era is _LEGACY and session.session_id is not None:
            request = self.requests.legacy(b"DELETE", b"")
            session.ended()  # a second close sends no second DELETE
            self.send(request, None, deadline)
            return False
        return True

    # ------------------------------------------------------------ time

    def next_deadline(self, first: float) -> float:
        """The earliest of ``first``, the exchanges' deadlines and the held answer's
        release (an answer is held only while an operation runs)."""
        for exchange in self.exchanges.values():
            if exchange.deadline < first:
                first = exchange.deadline
        if self.held is not None and self.held_until < first:
            first = self.held_until
        return first

    def expire(self, now: float) -> Reply | None:
        """Time passed to ``now``: a held answer whose wait is over is released and
        returned (nothing else happens); else the exchanges the operation does not wait
        for that are past their deadline are cancelled (a standalone stream without a
        head in time: dropped)."""
        if self.held is not None and now >= self.held_until:
            return self.release_held(now)
        for exchange in list(self.exchanges.values()):
            if exchange.role is not _OP and now >= exchange.deadline:
                self.cancel(exchange)
        return None

    # ------------------------------------------------------------ events in

    def receive(
        self, exchange: Exchange, event: ExchangeEvent, now: float
    ) -> Reply | ConnectionFailed | None:
        """Take one event of ``exchange`` (at ``now``); see the module docstring for what
        comes back."""
        match event:
            case DataReceived():
                self.budget.charge(len(event.data) + event.overhead)
                self._on_data(exchange, event.data, now)
                return None
            case ResponseReceived():
                self.budget.count_response(event.raw_size)
                self._on_head(exchange, event.status, event.headers)
                return None
            case ResponseEnded():
                return self._on_end(exchange, now)
            case ExchangeFailed():
                self.exchanges.pop(exchange.exchange_id, None)
                return self._on_failed(exchange, event.error, now)
            case InformationalReceived() | TrailersReceived():
                self.budget.charge(event.raw_size)
                return None
            case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                assert_never(event)

    def _on_head(self, exchange: Exchange, status: int, headers: Headers) -> None:
        exchange.status = status
        exchange.headers = headers
        role = exchange.role
        if role is _LISTEN:
            if rules.listen_accepted(status, headers):
                exchange.kind = _SSE
                exchange.sse = SseParser(max_event_bytes=self.limits.max_response_bytes)
                exchange.deadline = FOREVER  # kept for the session's life
                self.listen_yielded = False
                if self.listen_yield_wanted:  # the driver needs its socket: given up now
                    self.cancel(exchange)
                    self.listen_yielded = True
            else:
                self.listen = None  # refused (405, 409, ...): not offered, never re-opened
            return
        if role is not _OP:
            return
        head = rules.classify_head(status, headers, expects_reply=exchange.rpc_id is not None)
        # An if-chain by identity, exhaustive all the same (mypy narrows on ``is``): a
        # ``match`` needs dotted names, each an Enum attribute lookup.
        if head is _HEAD_SSE:
            exchange.kind = _SSE
            exchange.sse = SseParser(max_event_bytes=self.limits.max_response_bytes)
        elif head is _HEAD_JSON:
            exchange.kind = _JSON
        elif head is _HEAD_OTHER:
            pass
        elif head is _HEAD_REDIRECT:
            raise rules.redirect_error(status, headers)
        elif head is _HEAD_UNAUTHORIZED:
            raise rules.unauthorized_error(status, headers)
        elif head is _HEAD_UNUSABLE:
            raise rules.unusable_head_error(status, headers)
        else:  # pragma: no cover - the enum is exhausted above (mypy checks it)
            assert_never(head)

    def _on_data(self, exchange: Exchange, data: bytes, now: float) -> None:
        for sse_event in exchange.feed(data, self.limits):
            self._on_message_text(exchange, sse_event.data, now)

    def _holds(self, exchange: Exchange) -> bool:
        held = self.held
        return held is not None and held[0] is exchange

    def _ended_aside(self, exchange: Exchange, now: float) -> Reply | None:
        """An exchange that is not the operation's waiting one ended (or failed): the
        standalone stream re-opens; a stream whose answer is held gives the answer up."""
        if exchange is self.listen:
            self._reopen_listen(exchange, now)
            return None
        if self._holds(exchange):
            return self.release_held(now)
        return None

    def _on_end(self, exchange: Exchange, now: float) -> Reply | None:
        self.exchanges.pop(exchange.exchange_id, None)
        if exchange is self.listen or exchange.role is not _OP or self._holds(exchange):
            return self._ended_aside(exchange, now)
        self.op = None  # the operation's exchange ended: whatever it brought, it is done
        status = exchange.status or 0
        if exchange.kind is _SSE:
            assert exchange.sse is not None
            exchange.sse.finish()
            # (an answer on it made it DRAIN: such a stream ends as held or as not OP)
            return self._stream_broken(
                exchange,
                ConnectionFailed(
                    "the server ended the event stream without a response",
                    cause="stream_broken",
                ),
                now,
            )
        rpc_id = exchange.rpc_id
        if rpc_id is not None and exchange.kind is _JSON:
            batch_allowed = self.session.protocol_version == BATCH_VERSION
            message = exchange.json_answer(rpc_id, self.limits, batch_allowed)
            return Reply(status, exchange.headers, message, now)
        # No body read: a notification's answer, a DELETE's, or an error status (a 2xx
        # answer to a request was JSON or an event stream, or its head failed it).
        return Reply(status, exchange.headers, None, now)

    def _on_failed(
        self, exchange: Exchange, error: ConnectionFailed, now: float
    ) -> Reply | ConnectionFailed | None:
        if exchange is self.listen or exchange.role is not _OP or self._holds(exchange):
            return self._ended_aside(exchange, now)
        self.op = None  # the operation's exchange failed (a resend is the next one)
        limit = self.limits.max_stream_retries
        if rules.resend_refused(error.cause, exchange.status is not None, exchange.refusals, limit):
            # The server never processed it (GOAWAY, REFUSED_STREAM): send it again.
            retry = self.open(
                exchange.request, exchange.rpc_id, exchange.deadline, _OP, parse=exchange.parse
            )
            retry.refusals = exchange.refusals + 1
            self.op = retry
            return None
        if exchange.kind is _SSE and exchange.message is None and error.cause not in _FINAL:
            return self._stream_broken(exchange, error, now)
        return error

    def _stream_broken(self, exchange: Exchange, error: ConnectionFailed, now: float) -> Reply:
        assert exchange.sse is not None
        return Reply(
            exchange.status or 0,
            exchange.headers,
            None,
            now,
            broken=error,
            last_event_id=exchange.last_id,
            retry_ms=exchange.sse.retry_ms,
            progressed=exchange.progressed,
        )

    def _on_message_text(self, exchange: Exchange, text: str, now: float) -> None:
        role = exchange.role
        if role is _DRAIN:
            return  # answered already: later events are ignored unparsed
        try:
            parsed = exchange.parse(text, self.limits)
        except JsonError as exc:
            raise ConnectionFailed(
                f"the server sent an event that is not JSON: {exc}", cause="not_jsonrpc"
            ) from None
        if role is _LISTEN:
            items = parsed if isinstance(parsed, list) else [parsed]
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("method"), str):
                    self._from_server(exchange, item)
            return
        # Only the operation's JSON-RPC requests have event streams (a notification's or a
        # side exchange's head never makes one), and DRAIN returned above.
        assert role is _OP and exchange.rpc_id is not None
        message, others = match_response(
            parsed,
            exchange.rpc_id,
            batch_allowed=self.session.protocol_version == BATCH_VERSION,
            idless_ok=False,
        )
        for other in others:
            self._from_server(exchange, other)
        if message is not None:
            limits = self.limits
            exchange.message = message
            exchange.role = _DRAIN
            exchange.deadline = now + limits.cancel_grace
            self.op = None
            self.held = (exchange, Reply(exchange.status or 200, exchange.headers, message, now))
            self.held_until = now + min(limits.stream_end_wait, limits.cancel_grace)

    def _from_server(self, exchange: Exchange, item: dict[str, Any]) -> None:
        """A server request or notification on an event stream (``method`` a string)."""
        if "id" in item:
            self._server_request(exchange, item)
            return
        method = item["method"]
        if method == LIST_CHANGED:
            self.on_list_changed()
        elif method in TASK_STATUS:
            self.statuses.append(item)
        self.notices.take(item)

    def _server_request(self, exchange: Exchange, request: dict[str, Any]) -> None:
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
        self.asked.append((exchange, request))

    # ------------------------------------------------------------ the standalone stream

    def open_listen(self, can_answer: bool, now: float) -> None:
        """A new legacy session: open its one standalone GET stream, if it may have one."""
        self.stop_listen()
        self.listen_opens = 0
        self.listen_last_id = None
        self.listen_tried = False
        self.listen_yielded = False
        if can_answer and self.session.session_id is not None:
            self._start_listen(now)

    def listen_for_progress(self, now: float) -> None:
        """A call asks for progress: a legacy session that never opened its standalone
        stream opens it now (a server may send progress there)."""
        session = self.session
        if not self.listen_tried and session.era is _LEGACY and session.session_id is not None:
            self._start_listen(now)

    def stop_listen(self) -> None:
        if self.listen is not None:
            self.cancel(self.listen)

    def yield_listen(self, exchange_id: int) -> None:
        """The driver needs the standalone stream's socket for an operation: give it up
        now, re-open it after the operation (:meth:`reopen_yielded`)."""
        listen = self.listen
        if listen is not None and listen.exchange_id == exchange_id:
            if listen.status is None:
                # not answered yet: the server may not have the request; given up at its head
                self.listen_yield_wanted = True
                return
            self.cancel(listen)
            self.listen_yielded = True

    def reopen_yielded(self, now: float) -> None:
        """An operation ended: a stream that yielded its socket is opened again (not
        counted as a re-open), when the driver finds a socket to spare for it."""
        if self.listen_yielded and self.listen is None and self.session.session_id is not None:
            self._start_listen(now, needs_room=True)

    def _start_listen(self, now: float, *, needs_room: bool = False) -> None:
        self.listen_tried = True
        self.listen_yield_wanted = False
        extra = [] if self.listen_last_id is None else [(b"last-event-id", self.listen_last_id)]
        request = self.requests.legacy(b"GET", b"", extra)
        # Until its head arrives the stream is bounded like any request; then it is kept.
        self.listen = self.open(
            request, None, now + self.limits.dial_timeout, _LISTEN, needs_room=needs_room
        )

    def _reopen_listen(self, ended: Exchange, now: float) -> None:
        """The server ended the session's stream: open it again, at most
        ``Limits.max_stream_retries`` times per session (resuming from its last event id)."""
        self.listen = None
        self.listen_last_id = ended.last_id or self.listen_last_id
        if ended.kind is not _SSE:
            return  # it never started (a dial failure, a reset before its head)
        if self.listen_opens >= self.limits.max_stream_retries:
            return
        self.listen_opens += 1
        self._start_listen(now)
