"""The MCP client machine: one per ``Conn``, pure, driven by HTTP messages and ``now``.

(The façade keeps each operation's whole life -- start, waits, replies, timeouts, close
-- on one screen; what each step does to the exchanges is the transport's, what it
asks the embedder the asks'.  The observation hooks added for progress and telemetry
are a None check each at those same points.)

Theory of operation
-------------------
A caller runs one operation at a time -- :meth:`McpMachine.connect`,
:meth:`~McpMachine.list_tools`, :meth:`~McpMachine.call_tool`,
:meth:`~McpMachine.close` -- and drains outputs with :meth:`~McpMachine.next_output`
(or, a driver, pops :attr:`~McpMachine.outputs` itself: the same outputs in the same
order):

* :class:`StartExchange` / :class:`CancelExchange` -- HTTP work for the driver
  (the adapter), which answers with :data:`~sansmcp.core.http.ExchangeEvent`
  values through :meth:`~McpMachine.receive`;
* exactly one terminal event per operation: :class:`Connected`,
  :class:`ToolsListed`, :class:`ToolCalled`, :class:`Closed` or
  :class:`OperationFailed` (carrying a ``ConnectionFailed``, ``Unauthorized`` or
  ``ServerAnswered``);
* :class:`InputRequired` when a server asks for input the embedder may supply
  (answered with :meth:`~McpMachine.answer_input`);
* observations (:mod:`.notifications`): progress of the call in hand, server
  notifications, and -- telemetry on -- each request's start and end.

The machine is a façade over composed parts: the :class:`~.session.Session` (era
table), the request builder (:mod:`.requests`), the :class:`~.budget.Budget`, the
:class:`~.transport.Transport` (exchanges, streams, held answers, resends), the
embedder's pending :class:`~.asks.Asks`, the :class:`~.toolset.Toolset` and the
operation scripts (:mod:`.operations`, :mod:`.toolops`), which decide with the pure
functions of :mod:`.rules`.  It calls their methods and never writes their fields.  What it keeps
itself is the operation in hand -- its :class:`Phase` (a transition table; a move it
does not list is a ``LocalProtocolError``), its script, deadline and waits.
:attr:`McpMachine.state` is a snapshot of all of it on one screen.  There is no clock
anywhere: every input brings its ``now``, passed down with the call, and a reply the
transport hands a script carries the time it came (``Reply.at``).

The machine owns the deadlines: :meth:`~McpMachine.next_deadline` says when the
driver must call :meth:`~McpMachine.handle_timer`.  Server requests on a legacy
session's standalone stream are answered whether or not an operation runs, so a
driver acts on outputs that come between operations at the next one (see
:meth:`~McpMachine.wanted`).  :meth:`~McpMachine.close` lets answers already sent
finish, then sends a legacy session's ``DELETE``, all within ``Limits.close_timeout``.
A budget overrun cancels the exchange and leaves the machine *exhausted*: every
later operation fails at once with the same error.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, assert_never

from ..cache import CallerCache
from ..errors import ConnectionFailed, LocalProtocolError, McpError
from ..http import ExchangeEvent
from ..limits import Limits
from ..tools import Tool
from . import rules
from .asks import Asks
from .budget import Budget
from .compiled import CompiledSchemas
from .events import (
    Closed,
    InputRequired,
    OperationFailed,
    Output,
    StartExchange,
)
from .exchange import FOREVER, Exchange, Reply, Role
from .notifications import Observer, task_reporter
from .operations import Ask, Operations, OpGen, Send, Sleep
from .requests import Requests
from .session import Era, Session
from .settings import ConnSettings, usable_versions
from .state import PHASE_TRANSITIONS, MachineState, Phase, check_phase
from .taskhandle import task_operation
from .taskop import route_statuses, task_cancel
from .toolops import ToolOps
from .toolset import Toolset, invalidate_listings
from .transport import Transport

__all__ = ["McpMachine"]


# Enum members as module constants, for the per-event path (see transport.py)
_CLOSING: Final = Phase.CLOSING
_IDLE: Final = Phase.IDLE
_RUNNING: Final = Phase.RUNNING
_LISTEN: Final = Role.LISTEN
_OP: Final = Role.OP
_SIDE: Final = Role.SIDE
_LEGACY: Final = Era.LEGACY
_MODERN: Final = Era.MODERN


class McpMachine:
    """One MCP connection's protocol state, sans I/O.

    ``ids`` supplies JSON-RPC request ids (default 1, 2, 3, ...); ``jitter`` returns a float in
    [0, 1) for retry backoff (default 0.5); ``exchange_ids`` numbers exchanges (a driver shares
    one counter across machines so ids are unique on a shared connection).  After an operation
    fails the machine stays usable for the next one unless a budget was exhausted.
    """

    def __init__(
        self,
        settings: ConnSettings,
        *,
        limits: Limits | None = None,
        ids: Iterator[int] | None = None,
        jitter: Callable[[], float] | None = None,
        exchange_ids: Iterator[int] | None = None,
        cache: CallerCache | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits = limits or Limits()
        versions = usable_versions(settings.protocol_versions)
        self._session = session = Session()
        self._budget = budget = Budget(limits)
        self._requests = requests = Requests(settings, session)
        self._t = transport = Transport(
            limits=limits,
            budget=budget,
            requests=requests,
            session=session,
            exchange_ids=exchange_ids,
            # (not the operations' bound method: they own the transport -- a reference cycle)
            on_list_changed=functools.partial(invalidate_listings, cache, session),
            deliver_notices=settings.notifications,
        )
        self.toolset = toolset = Toolset(settings, limits, session, cache)
        self._observer = Observer(transport.outputs, session) if settings.observe else None
        self._ops = ops = Operations(
            settings=settings,
            limits=limits,
            session=session,
            requests=requests,
            transport=transport,
            versions=versions,
            ids=ids,
            cache=cache,
            report_task=task_reporter(transport.outputs, self._observer),
        )
        self._tool_ops = ToolOps(ops, toolset, jitter)
        # the deque ``next_output`` pops, for a driver to drain without a call per output
        self.outputs: deque[Output] = transport.outputs
        self._outputs = transport.outputs
        self._notices = transport.notices
        self._phase = _IDLE
        # the operation in hand
        self._gen: OpGen | None = None
        self._op_bound = ""
        self._op_limit = 0.0
        self._op_deadline = 0.0
        self._op_cap_bound = ""
        self._op_cap = 0.0
        self._sleep_until: float | None = None
        self._close_deadline = 0.0
        can_answer = settings.capabilities is not None
        self._asks = Asks(
            transport, requests, session, can_answer=can_answer, wait=limits.dial_timeout
        )

    # ------------------------------------------------------------ what it knows

    @property
    def era(self) -> str:
        """``"modern"``, ``"legacy"`` or ``"unknown"`` (before negotiation ends)."""
        era = self._session.era
        if era is _MODERN:
            return "modern"
        if era is _LEGACY:
            return "legacy"
        return "unknown"

    @property
    def busy(self) -> bool:
        """An operation is running (its terminal event is not out yet)."""
        return self._phase is not _IDLE

    @property
    def tools(self) -> Mapping[str, Tool]:
        """Tools listed on this connection, by name."""
        return self.toolset.tools

    @property
    def protocol_version(self) -> str | None:
        return self._session.protocol_version

    @property
    def session_id(self) -> bytes | None:
        return self._session.session_id

    @property
    def ttl_ms(self) -> int:
        return self.toolset.ttl_ms

    @property
    def cache_scope(self) -> str | None:
        return self.toolset.cache_scope

    @property
    def tools_from_cache(self) -> bool:
        """This connection's tools came from the Client-wide cache (no listing sent)."""
        return self.toolset.tools_from_cache is True

    @property
    def bytes_received(self) -> int:
        return self._budget.bytes_received

    @property
    def responses_received(self) -> int:
        return self._budget.responses_received

    @property
    def notifications_dropped(self) -> int:
        """Notifications dropped past ``Limits.max_notifications`` (per request)."""
        return self._notices.dropped

    def yield_listen(self, exchange_id: int, *, now: float) -> None:
        """The driver needs the socket of the standalone stream ``exchange_id`` for an
        operation (a cap is reached): the stream is cancelled, and re-opened after this
        connection's next operation when a socket is to spare.  (``now``: every input
        brings the time; this one needs none.)"""
        self._t.yield_listen(exchange_id)

    def propagate(self, meta: Mapping[str, str] | None) -> None:
        """The next operation's requests carry ``meta``'s trace context
        (:meth:`.requests.Requests.use_trace` says which keys)."""
        self._requests.use_trace(meta)

    @property
    def state(self) -> MachineState:
        """A snapshot of the protocol state (built on each access; for tests and tracing)."""
        t = self._t
        counts = dict.fromkeys(Role, 0)
        for exchange in t.exchanges.values():
            counts[exchange.role] += 1
        running = self._phase is _RUNNING
        exhausted = self._budget.exhausted
        return MachineState(
            phase=self._phase,
            era=self._session.era,
            protocol_version=self._session.protocol_version,
            session_id=self._session.session_id is not None,
            op_bound=self._op_bound if running else None,
            op_deadline=self._op_deadline if running else None,
            exchanges=tuple((role.value, n) for role, n in counts.items() if n),
            held_answer=t.held is not None,
            listening=t.listen is not None,
            listen_opens=t.listen_opens,
            pending_asks=len(self._asks),
            bytes_received=self._budget.bytes_received,
            responses_received=self._budget.responses_received,
            exhausted=getattr(exhausted, "bound", None),
        )

    # ------------------------------------------------------------ public commands

    def connect(self, *, now: float) -> None:
        self._start(self._ops.connect(now), "connect_timeout", self.limits.connect_timeout, now)

    def list_tools(self, *, now: float, fresh: bool = False, timeout: float | None = None) -> None:
        """List the tools: from the Client-wide cache when every page is fresh there
        (no request), else from the server; ``fresh`` always asks the server.
        ``timeout`` (seconds) shortens ``Limits.list_timeout`` for this listing."""
        self._require_connected()
        limit = rules.op_timeout(timeout, self.limits.list_timeout)
        tools = self._tool_ops  # (not self: the script would hold the machine -- a cycle)
        gen = self._ops.recovering(lambda at: tools.list_tools(fresh, at), now)
        self._start(gen, "list_timeout", limit, now)

    def call_tool(
        self,
        name: str,
        arguments: bytes = b"",
        *,
        now: float,
        progress: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Call ``name`` with ``arguments`` (JSON object bytes, sent verbatim);
        ``progress`` asks the server for progress notifications; ``timeout`` (seconds)
        shortens ``Limits.call_timeout`` for this call.

        Raises ``CallerError`` at once when the arguments are not bytes holding one
        strict JSON object, the name is not a non-empty string or the timeout is not a
        number > 0.
        """
        self._require_connected()
        bound = "task_timeout" if self.settings.tasks else "call_timeout"  # (a task: longer)
        limit = rules.op_timeout(timeout, getattr(self.limits, bound))
        arguments, parsed = rules.checked_call(name, arguments, self.limits.max_json_depth)
        tools = self._tool_ops
        tools.prepare_call(name, now)
        if progress and self._phase is _IDLE:
            self._t.listen_for_progress(now)
        gen = self._ops.recovering(
            lambda _: tools.call_tool(name, arguments, parsed), now, progress=progress
        )
        self._start(gen, bound, limit, now)

    def task(self, action: str, subject: str, *, now: float, **more: Any) -> None:
        """A task handle's operation: ``action`` on ``subject`` (a tool, or a task id from
        any connection); see :func:`.taskhandle.task_operation` (and ``more``)."""
        self._require_connected()
        make, bound = task_operation(self._tool_ops, action, subject, now=now, **more)
        self._start(self._ops.recovering(make, now), bound, getattr(self.limits, bound), now)

    def close(self, *, now: float) -> None:
        """End the connection: abandon everything in flight; legacy sessions get a DELETE.

        Ends with :class:`Closed` (failures of the DELETE are ignored).
        """
        t = self._t
        if self._phase is _CLOSING:
            return
        # Server requests the embedder was still asked about are declined now, so that
        # every server request gets its answer before the connection ends.
        self._asks.decline_all(now)
        if self._observer is not None:
            self._observer.ended("cancelled", now)
        self._abandon_op()
        t.abandon()
        self._enter(_CLOSING)
        self._close_deadline = now + self.limits.close_timeout
        self._close_progress()

    def abandon(self, *, now: float) -> bool:
        """The caller gave the operation up.  A task it follows is sent ``tasks/cancel``
        (aside, once), and the connection closes as by :meth:`close` but without a
        ``DELETE``, by ``Limits.cancel_grace``: True.  Else False (nothing sent)."""
        if (cancel := task_cancel(self._ops)) is None:
            return False
        self._t.side(cancel, self.limits.cancel_grace, now)
        self._session.ended()  # (the request is built: no DELETE after it)
        self.close(now=now)
        self._close_deadline = min(self._close_deadline, now + self.limits.cancel_grace)
        return True

    def answer_input(self, input_id: int, answers: Mapping[str, Any] | None, *, now: float) -> None:
        """Answer an :class:`InputRequired`; ``None`` refuses (decline).

        ``answers`` comes from the embedder's handler: anything but None or a mapping of
        string keys to JSON values is a ``CallerError``, raised before anything changes.
        """
        if self._asks.answer(input_id, answers, now):  # the operation's own ask
            self._resume(now, answers)

    # ------------------------------------------------------------ driver interface

    def share_compiled(self, compiled: CompiledSchemas) -> None:
        """Compile the server's output schemas into ``compiled`` (the Client's, shared by
        its Conns: a schema the server sent before is not compiled again)."""
        self.toolset.share_compiled(compiled)

    def use_bearer_token(self, token: str | None) -> None:
        """Send ``token`` (None: none) as the bearer credential from the next request on."""
        self.settings = dataclasses.replace(self.settings, bearer_token=token)
        self._requests.use_settings(self.settings)

    def use_era_hint(self, version: str) -> None:
        """Negotiate as if ``version`` was last negotiated here (a hint the shared store
        gave) from the next connect on; a hint the server contradicts is dropped."""
        self.settings = dataclasses.replace(self.settings, era_hint=version)
        self._ops.settings = self.settings

    def next_output(self) -> Output | None:
        return self._outputs.popleft() if self._outputs else None

    def wanted(self, output: Output) -> bool:
        """Whether an output the driver set aside is still to be acted on: False for an
        exchange cancelled meanwhile or an ask whose operation or connection ended."""
        if isinstance(output, StartExchange):
            return output.exchange_id in self._t.exchanges
        if isinstance(output, InputRequired):
            return output.input_id in self._asks
        return True  # the rest (observations, ends, cancels) always are

    def next_deadline(self) -> float | None:
        phase = self._phase
        # FOREVER (a kept standalone stream) is no deadline; it starts the search
        first = (
            self._close_deadline
            if phase is _CLOSING
            else self._op_deadline
            if phase is _RUNNING
            else FOREVER
        )
        if phase is _RUNNING and self._sleep_until is not None and self._sleep_until < first:
            first = self._sleep_until
        first = self._t.next_deadline(first)
        return None if first == FOREVER else first

    def handle_timer(self, *, now: float) -> None:
        t = self._t
        held = t.expire(now)
        if held is not None:
            self._reply(held, now)
            return
        phase = self._phase
        if phase is _CLOSING:
            if now >= self._close_deadline:
                t.cancel_all()
                self._closed()
            else:
                self._close_progress()
            return
        if phase is _IDLE:
            return
        if now >= self._op_deadline:
            self._fail_timeout(self._op_bound, self._op_limit, now)
            return
        op = t.op
        if op is not None and now >= op.deadline:
            self._fail_timeout(self._op_cap_bound, self._op_cap, now)
            return
        if self._sleep_until is not None and now >= self._sleep_until:
            self._sleep_until = None
            self._resume(now)

    def receive(self, event: ExchangeEvent, *, now: float) -> None:
        """Feed one event of an exchange this machine started."""
        t = self._t
        exchange = t.exchanges.get(event.exchange_id)
        if exchange is None:
            return  # cancelled already
        try:
            outcome = t.receive(exchange, event, now)
            if t.statuses:  # (before the reply they came with)
                route_statuses(self._ops, t.statuses, now)
        except McpError as error:
            self._asks.serve(now)  # the requests that came before the bad part
            self._bad_response(exchange, error, now)
        else:
            if t.asked:
                self._asks.serve(now)
            match outcome:
                case None:
                    pass
                case Reply():
                    self._reply(outcome, now)
                case ConnectionFailed():
                    self._op_error(outcome, now)
                case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                    assert_never(outcome)
        if self._phase is _CLOSING:
            self._close_progress()

    # ------------------------------------------------------------ the operation in hand

    def _enter(self, phase: Phase) -> None:
        if phase not in PHASE_TRANSITIONS[self._phase]:
            check_phase(self._phase, phase)  # raises LocalProtocolError
        self._phase = phase

    def _require_connected(self) -> None:
        if self._session.protocol_version is None and self._budget.exhausted is None:
            raise LocalProtocolError("connect() must succeed before other operations")

    def _start(self, gen: OpGen, bound: str, limit: float, now: float) -> None:
        if self._phase is not _IDLE:
            raise LocalProtocolError("an operation is already running on this connection")
        t = self._t
        exhausted = self._budget.exhausted
        if exhausted is not None:
            gen.close()
            self._outputs.append(OperationFailed(error=exhausted))
            return
        t.begin_operation()
        self._gen = gen
        self._enter(_RUNNING)
        self._op_bound = bound
        self._op_limit = limit
        self._op_deadline = now + limit
        self._resume(now)

    def _resume(self, now: float, value: Any = None, error: BaseException | None = None) -> None:
        """Run the operation's script at ``now`` until it waits (or ends), sending it
        ``value`` (or throwing ``error`` into it)."""
        gen = self._gen
        assert gen is not None
        t = self._t
        while True:
            try:
                instruction = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                self._end_op(stop.value, now)
                return
            except McpError as failure:
                # kept as a value: its traceback's frames (this one's ``error``, a driver's
                # caller holding what refers to it) would make a reference cycle of it
                self._end_op(OperationFailed(error=failure.with_traceback(None)), now)
                return
            finally:
                if error is not None:  # thrown in, handled or not: the same, for its frames
                    error.__traceback__ = None
            error = None
            value = None
            match instruction:
                case Send():
                    rpc_id = instruction.rpc_id
                    if self._observer is not None:
                        self._observer.sent(rpc_id, instruction.method, instruction.tool, now)
                    self._op_cap_bound = instruction.cap_bound
                    self._op_cap = instruction.cap
                    t.send(
                        instruction.request,
                        rpc_id,
                        min(self._op_deadline, now + instruction.cap),
                        instruction.parse,
                        instruction.progress,
                    )
                    return
                case Sleep():
                    if instruction.until <= now:
                        continue
                    self._sleep_until = instruction.until
                    return
                case Ask():
                    self._asks.ask(instruction.requests)
                    return
                case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                    assert_never(instruction)

    def _end_op(self, outcome: Output, now: float) -> None:
        self._drop_op()
        self._t.reopen_yielded(now)
        if self._observer is not None:
            self._observer.ended(outcome, now)
        self._outputs.append(outcome)

    def _drop_op(self) -> None:
        """Forget the operation: its generator, waits and multi round-trip asks (server
        requests that came on the standalone stream stay answerable)."""
        if self._phase is _RUNNING:
            self._enter(_IDLE)
        self._gen = None
        self._sleep_until = None
        self._t.end_operation()
        self._requests.use_trace(None)
        self._asks.end_operation()

    def _op_error(self, error: McpError, now: float) -> None:
        self._t.cancel_op()
        # An OP exchange exists only while an operation runs or the close's DELETE is out.
        if self._phase is _CLOSING:
            self._closed()
        else:
            self._resume(now, error=error)

    def _reply(self, reply: Reply, now: float) -> None:
        if self._phase is _CLOSING:
            self._closed()
            return
        if self._observer is not None and reply.broken is None:
            self._observer.replied(reply.message)
        self._resume(now, reply)

    def _abandon_op(self) -> None:
        if self._gen is not None:
            self._gen.close()
        self._drop_op()

    def _closed(self) -> None:
        self._enter(_IDLE)
        self._outputs.append(Closed())

    def _close_progress(self) -> None:
        """Closing: answers and notices already sent are finished first (bounded by
        ``close_timeout``), then a legacy session gets its DELETE, then :class:`Closed`."""
        if self._phase is _CLOSING and self._t.close_step(self._close_deadline):
            self._closed()

    def _fail_timeout(self, bound: str, limit: float, now: float) -> None:
        self._t.abort_op(self.limits.cancel_grace, now)
        if (cancel := task_cancel(self._ops)) is not None:  # a task given up: cancelled
            self._t.side(cancel, self.limits.cancel_grace, now)
        self._abandon_op()
        self._t.reopen_yielded(now)
        failed = OperationFailed(error=rules.timeout(bound, limit))
        if self._observer is not None:
            self._observer.ended(failed, now)
        self._outputs.append(failed)

    # ------------------------------------------------------------ bad responses, server requests

    def _bad_response(self, exchange: Exchange, error: McpError, now: float) -> None:
        """``exchange`` sent something unusable: it is cancelled; the operation fails if
        it waited for it or a connection budget is spent."""
        t = self._t
        t.cancel(exchange)
        spent = self._budget.spent(error)
        if exchange.role is _OP or (spent and self._phase is _RUNNING):
            self._op_error(error, now)
        # A held answer's stream (DRAIN) is not parsed: only a connection budget fails it,
        # and that failed the operation above.
