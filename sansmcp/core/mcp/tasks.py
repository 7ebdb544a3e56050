"""One task's state on our side, and the next step it asks for (pure: ``now`` is passed in).

A server may run a ``tools/call`` as a *task*: it answers with a handle at once and the
client polls until the outcome is there.  :class:`TaskTracker` holds what we know of one
task -- its id, its status, its time to live, the input requests already answered, the
polls spent -- checks every observation the server sends against it, and says what to do
next (a :data:`Step`): poll at a time, ask the embedder for input, send that input back,
fetch the outcome, cancel (once), or deliver the ``CallToolResult``.  Whatever the server
sends, the tracker ends classified: a ``ServerAnswered`` for a broken promise (an id that
changes, a status that moves against :data:`TRANSITIONS`, a lost or expired task), a
``ConnectionFailed`` (``"timeout"``, ``bound="task_timeout"``, after a cancel) once the
deadline has come.  Both wire shapes (:mod:`.taskwire`) are one script: the table
says where the outcome and the input go.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from ..errors import CallerError, LocalProtocolError, McpError, ServerAnswered
from ..limits import Limits
from ..messages import INVALID_PARAMS
from ..tools import utf8_len
from . import rules
from .taskwire import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    STATUSES,
    TERMINAL,
    WORKING,
    TaskShape,
    TaskView,
    read_ack,
    read_task,
    related_task,
)

__all__ = [
    "DEFAULT_POLL_MS",
    "TRANSITIONS",
    "AskInput",
    "Cancel",
    "Deliver",
    "FetchResult",
    "Poll",
    "SendUpdate",
    "Step",
    "TaskTracker",
    "poll_delay",
]

DEFAULT_POLL_MS: Final = 1_000.0
"""The pause between polls when the server suggests none (then clamped like any other)."""

#: status -> the statuses it may move to (the spec's diagram; staying put is allowed).
#: A terminal status moves nowhere.
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    WORKING: STATUSES,
    INPUT_REQUIRED: STATUSES,
    **{status: frozenset({status}) for status in TERMINAL},
}


@dataclass(frozen=True, slots=True)
class Poll:
    """Send ``tasks/get`` at ``at`` (the caller's clock)."""

    at: float


@dataclass(frozen=True, slots=True)
class AskInput:
    """Ask the embedder ``requests`` (only keys not asked before); then :meth:`TaskTracker.answered`."""

    requests: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class SendUpdate:
    """Send ``tasks/update`` with ``responses``; then :meth:`TaskTracker.updated`."""

    responses: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Send ``tasks/result`` (2025-11-25: it blocks until the task ends, and its stream
    carries the server's input requests); then :meth:`TaskTracker.fetched`."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Send ``tasks/cancel`` (once); then :meth:`TaskTracker.cancelled`, which raises."""


@dataclass(frozen=True, slots=True)
class Deliver:
    """The task ended with this ``CallToolResult`` (to be read like a direct call's)."""

    result: Mapping[str, Any]


Step = Poll | AskInput | SendUpdate | FetchResult | Cancel | Deliver


def poll_delay(interval_ms: object, limits: Limits) -> float:
    """Seconds until the next poll: the server's ``interval_ms`` (None: 1 s) clamped into
    ``[Limits.min_task_poll_interval, Limits.max_task_poll_interval]``; the minimum wins
    if the two cross.  0, a negative number, NaN or a value past float range lands on a
    bound, never on a spin or a park."""
    floor = limits.min_task_poll_interval
    if interval_ms is None:
        interval_ms = DEFAULT_POLL_MS
    assert isinstance(interval_ms, int | float)  # read_task let nothing else through
    try:
        seconds = float(interval_ms) / 1000
    except OverflowError:  # an int past float range: as long as may be
        seconds = math.inf
    if math.isnan(seconds):
        return floor
    return max(floor, min(seconds, limits.max_task_poll_interval))


class TaskTracker:
    """One task, from its handle (or its id, resumed) to its end.

    Built with the shape the call declared, the bounds, and ``deadline`` (the caller's
    clock: the task's own time, ``Limits.task_timeout`` from its start, or less).  Feed
    it what the server sends; each method returns the next :data:`Step` or raises a
    classified error, after which the tracker is done (any further call is a
    ``LocalProtocolError``).  ``can_answer``: an input handler is configured;
    ``report(task_id, status, status_message)`` is called when the task is first seen
    and whenever its status or message changes.
    """

    __slots__ = (
        "_answered",
        "_asks",
        "_cancel_error",
        "_expires",
        "_first_seen",
        "_interval",
        "_limit",
        "_pending",
        "can_answer",
        "deadline",
        "done",
        "limits",
        "polls",
        "report",
        "shape",
        "status",
        "status_message",
        "task_id",
    )

    def __init__(
        self,
        shape: TaskShape,
        limits: Limits,
        *,
        deadline: float,
        limit: float,
        can_answer: bool,
        report: Callable[[str, str, str | None], None] | None = None,
    ) -> None:
        self.shape = shape
        self.report = report
        self.limits = limits
        self.deadline = deadline
        self._limit = limit  # the seconds the deadline stands for (for the timeout's message)
        self.can_answer = can_answer
        self.task_id: str | None = None
        self.status: str | None = None
        self.status_message: str | None = None
        self.polls = 0  # tasks/get sent (or due)
        self.done = False
        self._first_seen = 0.0
        self._expires = math.inf
        self._interval = poll_delay(None, limits)
        # input keys answered -> whether the task was seen working since (then asking for
        # one again is a flap)
        self._answered: dict[str, bool] = {}
        self._asks = 0  # rounds of input asked of the embedder
        self._pending: Mapping[str, Mapping[str, Any]] | None = None  # asked, not answered
        self._cancel_error: McpError | None = None  # why we cancel (raised once acknowledged)

    # ------------------------------------------------------------ entry points

    def created(self, view: TaskView, *, now: float) -> Step:
        """The server answered the call with this task (read by ``created_task``)."""
        self._live()
        self._first_seen = now
        return self._observe(view, now)

    def resumed(self, task_id: str, *, now: float) -> Step:
        """Take up a task by its id (from another ``Conn``, process or machine): poll now.
        A ``task_id`` we could not send back is the caller's mistake (``CallerError``)."""
        self._live()
        if not isinstance(task_id, str) or not 0 < utf8_len(task_id) <= self.limits.max_echo_bytes:
            raise CallerError(
                "a task id must be a string of 1 to "
                f"{self.limits.max_echo_bytes:,} bytes (Limits.max_echo_bytes)"
            )
        self.task_id = task_id
        self._first_seen = now
        return self._poll_at(now, now)

    def polled(self, result: Mapping[str, Any], *, now: float) -> Step:
        """The answer to ``tasks/get`` (its ``result`` object)."""
        self._live()
        kind = result.get("resultType", "complete")
        if kind not in ("complete", "task"):  # the spec's own examples use both
            self._fail(
                ServerAnswered(
                    f"the server answered tasks/get with a result of type {str(kind)[:80]!r}",
                    reason="malformed_task",
                )
            )
        return self._observe(self._read(result), now)

    def notified(self, params: Mapping[str, Any], *, now: float) -> None:
        """A status notification: checked and recorded (a notification about another task
        is not ours and is ignored); the next poll reads what it means."""
        self._live()
        view = self._read(params)
        if view.task_id == self.task_id:
            self._check(view)
            self._record(view, now)

    def answered(self, answers: Mapping[str, Any] | None, *, now: float) -> Step:
        """The embedder's answers to the last :class:`AskInput` (None: declined, and the
        task is cancelled, then the call fails ``"input_declined"``)."""
        self._live()
        asked = self._pending
        if asked is None:
            raise LocalProtocolError("answered() without an AskInput outstanding")
        self._pending = None
        if answers is None:
            return self.cancel(
                ServerAnswered(
                    "the input the server asked for was declined", reason="input_declined"
                )
            )
        responses = {key: answers[key] for key in asked if key in answers}
        for key in responses:
            self._answered[key] = False
        if not responses:  # nothing to send: wait for the server's next word
            return self._poll_at(now, now + self._interval)
        return SendUpdate(responses)

    def updated(self, result: Mapping[str, Any], *, now: float) -> Step:
        """``tasks/update`` was acknowledged: poll again."""
        self._live()
        try:
            read_ack(result)
        except ServerAnswered as error:
            self._fail(error)
        return self._poll_at(now, now + self._interval)

    def fetched(self, result: Mapping[str, Any], *, now: float) -> Step:
        """The answer to ``tasks/result`` (2025-11-25): the call's own result."""
        self._live()
        named = related_task(result)
        if named is not None and named != self.task_id:
            self._changed(named)
        self.done = True
        return Deliver(result)

    def failed(self, error: Mapping[str, Any], *, method: str) -> NoReturn:
        """A JSON-RPC error answered ``method`` (``tasks/get``, ``tasks/result``,
        ``tasks/update``): ``-32602`` is a task the server lost; any other is its error."""
        self._live()
        failure = rules.server_error({"error": error})
        if failure.code == INVALID_PARAMS:
            failure = ServerAnswered(
                f"the server does not know task {self._shown()} it created ({method} "
                f"answered -32602: {failure.rpc_message!s:.200})",
                reason="task_lost",
                code=failure.code,
                rpc_message=failure.rpc_message,
                data=failure.data,
            )
        self._fail(failure)

    def cancel(self, error: McpError) -> Step:
        """End the task because of ``error`` (the caller gave up, input was declined):
        :class:`Cancel` the first time; ``error`` itself is raised once the cancel is
        answered (:meth:`cancelled`).  A second cancel raises ``error`` at once."""
        self._live()
        if self._cancel_error is not None or self.task_id is None:
            self._fail(error)
        self._cancel_error = error
        return Cancel()

    def cancelled(self, result: Mapping[str, Any] | None) -> NoReturn:
        """``tasks/cancel`` ended (its result, or None when it failed or timed out: the
        cancel is best effort): the error the cancel was for is raised."""
        self._live()
        error = self._cancel_error
        if error is None:
            raise LocalProtocolError("cancelled() without a Cancel sent")
        if result is not None and self.shape.nested:  # 2025-11-25 answers with the task
            view = self._read(result)
            if view.task_id != self.task_id:
                self._changed(view.task_id)
        self._fail(error)

    # ------------------------------------------------------------ the decisions

    def _observe(self, view: TaskView, now: float) -> Step:
        self._check(view)
        self._record(view, now)
        status = view.status
        if status == COMPLETED:
            if not self.shape.inline:
                return FetchResult()
            assert view.result is not None
            self.done = True
            return Deliver(view.result)
        if status == FAILED:
            if not self.shape.inline:
                return FetchResult()  # the JSON-RPC error, or the isError result
            assert view.error is not None
            self._fail(rules.server_error({"error": view.error}))
        if status == CANCELLED:  # (after our own Cancel nothing is polled)
            self._fail(
                ServerAnswered(
                    f"the server cancelled task {self._shown()}"
                    + (f": {view.status_message}" if view.status_message else ""),
                    reason="task_cancelled",
                )
            )
        if now >= self._expires and self.polls:  # (a handle is polled at least once)
            self._fail(
                ServerAnswered(
                    f"task {self._shown()} is still {status} after its ttl of {view.ttl_ms:g} ms",
                    reason="task_expired",
                )
            )
        if status == INPUT_REQUIRED:
            if not self.shape.inline:
                return FetchResult()  # its stream carries the server's requests
            assert view.input_requests is not None
            fresh = {k: v for k, v in view.input_requests.items() if k not in self._answered}
            if fresh:
                return self._ask(fresh)
        return self._poll_at(now, now + self._interval)

    def _check(self, view: TaskView) -> None:
        """``view`` is about our task and follows the status table."""
        if self.task_id is None:
            self.task_id = view.task_id
        elif view.task_id != self.task_id:
            self._changed(view.task_id)
        previous = self.status
        if previous is not None and view.status not in TRANSITIONS[previous]:
            self._fail(
                ServerAnswered(
                    f"task {self._shown()} moved from {previous} to {view.status}",
                    reason="task_transition",
                )
            )
        if view.status == WORKING:
            for key in self._answered:
                self._answered[key] = True
        elif view.input_requests:
            again = [key for key in view.input_requests if self._answered.get(key)]
            if again:
                self._fail(
                    ServerAnswered(
                        f"task {self._shown()} asks again for input {again[0][:80]!r}, "
                        "answered before it went back to work",
                        reason="task_transition",
                    )
                )

    def _record(self, view: TaskView, now: float) -> None:
        report = self.report
        if report is not None and (view.status, view.status_message) != (
            self.status,
            self.status_message,
        ):
            report(view.task_id, view.status, view.status_message)
        self.status = view.status
        self.status_message = view.status_message
        ttl = view.ttl_ms
        self._expires = math.inf if ttl is None else self._first_seen + ttl / 1000
        self._interval = poll_delay(view.poll_interval_ms, self.limits)

    def _ask(self, requests: Mapping[str, Mapping[str, Any]]) -> Step:
        if not self.can_answer:
            methods = sorted({str(request["method"])[:80] for request in requests.values()})
            self._fail(
                ServerAnswered(
                    f"task {self._shown()} needs input ({', '.join(methods)}) and no input "
                    "handler is configured",
                    reason="input_required",
                    data=dict(requests),
                )
            )
        self._asks += 1
        limit = self.limits.max_call_attempts
        if self._asks > limit:
            self._fail(
                ServerAnswered(
                    f"task {self._shown()} asked for more input {limit} times "
                    "(Limits.max_call_attempts)",
                    reason="max_call_attempts",
                    bound="max_call_attempts",
                    limit=limit,
                )
            )
        self._pending = requests
        return AskInput(requests)

    def _poll_at(self, now: float, at: float) -> Step:
        """The next ``tasks/get``, at ``at`` but never past the task's time to live or the
        deadline (a last look there); at the deadline the task is cancelled instead (and
        the tracker then times out)."""
        if now >= self.deadline:  # out of time: give the task up
            return self.cancel(rules.timeout("task_timeout", self._limit))
        at = min(at, max(now, self._expires), self.deadline)  # a last look at the deadline
        self.polls += 1
        limit = self.limits.max_task_polls
        if self.polls > limit:
            self._fail(
                ServerAnswered(
                    f"task {self._shown()} did not end within {limit} polls "
                    "(Limits.max_task_polls)",
                    reason="max_task_polls",
                    bound="max_task_polls",
                    limit=limit,
                )
            )
        return Poll(at)

    # ------------------------------------------------------------ helpers

    def _read(self, value: object) -> TaskView:
        try:
            return read_task(value, self.shape, max_echo_bytes=self.limits.max_echo_bytes)
        except ServerAnswered as error:
            self._fail(error)

    def _changed(self, other: str) -> NoReturn:
        self._fail(
            ServerAnswered(
                f"the server answered about task {other[:80]!r}, not {self._shown()}",
                reason="task_id_changed",
            )
        )

    def _shown(self) -> str:
        return repr((self.task_id or "")[:80])

    @property
    def cancelling(self) -> bool:
        """A :class:`Cancel` was returned (the task is being given up)."""
        return self._cancel_error is not None

    def _live(self) -> None:
        if self.done:
            raise LocalProtocolError("the task tracker is done")

    def _fail(self, error: McpError) -> NoReturn:
        self.done = True
        raise error
