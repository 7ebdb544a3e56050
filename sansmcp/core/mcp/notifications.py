"""What a connection observes besides answers: progress, server notifications, telemetry.

Theory of operation
-------------------
Three kinds of observation leave the machine as outputs, for the driver to
``Deliver`` to the embedder in the caller's task (never inside a socket reader):

* :class:`Progress` -- a ``notifications/progress`` whose ``progressToken`` is the
  token of the request in hand (the request's JSON-RPC id; sent only when the caller
  asked for progress) -- or, while the call is followed as a task, the token of the
  ``tools/call`` that created it (valid for the task's lifetime) -- wherever it arrived:
  on the request's own event stream or (legacy) on the session's standalone stream;
* :class:`LogMessage` (``notifications/message``) and :class:`Notification` (any
  other method: list-changed and the rest) -- only when the embedder set
  ``Config.on_notification``;
* :class:`RequestStarted` / :class:`RequestEnded` -- one pair per JSON-RPC request,
  only when telemetry is configured (``ConnSettings.observe``); off, the machine holds
  no :class:`Observer` and pays one None check per request.  A ``tools/call`` the
  server runs as a task stays open until the operation ends (its polls are requests
  of their own meanwhile) and ends naming the task and its last status;
* :class:`TaskUpdated` -- the task a call runs as was created, or its status or status
  message changed (:func:`task_reporter`; at most once per answer about the task).

:class:`Notices` routes the notifications the transport finds and bounds them:
at most ``Limits.max_notifications`` are delivered per request (from one request's
first send to the next's; notifications between operations count towards the last
one); past it they are dropped and counted (:attr:`Notices.dropped`), never fatal.
Their bytes were charged to the connection's byte budget as they arrived, and each
message is parsed within the same bounds as an answer.  A notification whose params
are malformed is delivered as far as it is usable: a progress value that is not a
number is dropped, a log message without a known level is a plain
:class:`Notification`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import ConnectionFailed, McpError, ServerAnswered, Unauthorized
from ..results import CallResult

__all__ = [
    "LOG_LEVELS",
    "META_LOG_LEVEL",
    "OBSERVATIONS",
    "LogMessage",
    "Notices",
    "Notification",
    "Observation",
    "Observer",
    "Progress",
    "RequestEnded",
    "RequestStarted",
    "TaskUpdated",
    "error_type",
    "task_reporter",
]

#: RFC 5424 severities, as the logging pages name them (least severe first).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
#: The 2026-07-28 per-request log level, in ``_meta``.
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"

PROGRESS = "notifications/progress"
MESSAGE = "notifications/message"


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """One ``notifications/progress`` for the request in hand."""

    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LogMessage:
    """A server log message (``notifications/message``): ``level`` is one of
    :data:`LOG_LEVELS`; ``data`` any JSON value."""

    level: str
    logger: str | None
    data: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification:
    """Any other server notification, by method name (``params`` is {} when absent)."""

    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestStarted:
    """A JSON-RPC request went out at ``at`` (the machine's clock)."""

    rpc_id: int
    method: str
    tool: str | None
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEnded:
    """The request ``rpc_id`` ended at ``at``: ``error_type`` is None on success, the
    JSON-RPC code as a string for an error answer, ``"tool_error"`` for a call's
    ``isError``, else the sansmcp cause (``timeout``, ``budget``, ``reset``...).
    ``http_version`` (``"1.1"`` / ``"2"``) is the driver's, from the socket."""

    rpc_id: int
    method: str
    tool: str | None
    started: float
    at: float
    error_type: str | None = None
    error_message: str | None = None
    rpc_code: int | None = None
    protocol_version: str | None = None
    session_id: str | None = None
    http_version: str | None = None
    # a tools/call the server ran as a task: its id and its last status
    task_id: str | None = None
    task_status: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskUpdated:
    """The task ``task_id`` that the operation in hand runs or follows was created, or its
    ``status`` (one of the spec's five) or ``status_message`` changed."""

    task_id: str
    status: str
    status_message: str | None = None


Observation = Progress | LogMessage | Notification | RequestStarted | RequestEnded | TaskUpdated
OBSERVATIONS: Final = (
    Progress,
    LogMessage,
    Notification,
    RequestStarted,
    RequestEnded,
    TaskUpdated,
)

#: ``report(task_id, status, status_message)``: what a task tracker calls on a change.
TaskReport = Callable[[str, str, str | None], None]


def task_reporter(outputs: deque[Any], observer: Observer | None) -> TaskReport:
    """The report of a connection's task changes: a :class:`TaskUpdated` output, and
    the task named on the ``tools/call`` request it runs as (telemetry on)."""

    def report(task_id: str, status: str, status_message: str | None) -> None:
        outputs.append(TaskUpdated(task_id=task_id, status=status, status_message=status_message))
        if observer is not None:
            observer.task(task_id, status)

    return report


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def progress_of(params: Mapping[str, Any]) -> Progress | None:
    """The progress in ``params``, or None when its values are unusable."""
    progress: Any = params.get("progress")
    total: Any = params.get("total")
    message = params.get("message")
    if not _number(progress) or (total is not None and not _number(total)):
        return None
    return Progress(
        progress=progress,  # an int or a float as sent (a float() of a huge int overflows)
        total=total,
        message=message if isinstance(message, str) else None,
    )


def notification_of(method: str, params: Mapping[str, Any]) -> LogMessage | Notification:
    if method == MESSAGE:
        level = params.get("level")
        logger = params.get("logger")
        if level in LOG_LEVELS and (logger is None or isinstance(logger, str)):
            return LogMessage(level=level, logger=logger, data=params.get("data"))
    return Notification(method=method, params=params)


class Notices:
    """Routes and bounds one connection's notifications (see the module docstring).

    ``deliver`` says whether notifications other than progress are wanted.  The
    machine calls :meth:`begin` for every request it sends; the transport calls
    :meth:`take` for every notification it parsed.
    """

    __slots__ = ("count", "deliver", "dropped", "limit", "outputs", "rpc_id", "token")

    def __init__(self, outputs: deque[Any], *, limit: int, deliver: bool) -> None:
        self.outputs = outputs
        self.limit = limit
        self.deliver = deliver
        self.rpc_id: int | None = None  # the request in hand (its count runs)
        self.token: int | None = None  # its progress token, when progress is wanted
        self.count = 0
        self.dropped = 0  # past Limits.max_notifications, over the connection's life

    def begin(self, rpc_id: int, token: int | None) -> None:
        """Request ``rpc_id`` is sent (again, when it is resumed: its count goes on);
        progress for ``token`` is the operation's (None: no progress is)."""
        if rpc_id != self.rpc_id:
            self.rpc_id = rpc_id
            self.count = 0
        self.token = token

    def end(self) -> None:
        """The operation ended: no progress is ours any more."""
        self.token = None

    def take(self, message: Mapping[str, Any]) -> None:
        ours = self.token
        if ours is None and not self.deliver:
            return  # nobody asked for anything: not even looked at
        method: str = message["method"]
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        item: Progress | LogMessage | Notification | None
        if method == PROGRESS:
            token = params.get("progressToken")
            if ours is None or type(token) is not int or token != ours:
                return  # not for the request in hand (or no progress asked)
            item = progress_of(params)
            if item is None:
                return
        elif self.deliver:
            item = notification_of(method, params)
        else:
            return
        self.count += 1
        if self.count > self.limit:
            self.dropped += 1
            return
        self.outputs.append(item)


def error_type(error: McpError) -> str:
    """The ``error.type`` of a failure: the JSON-RPC code, else sansmcp's cause."""
    if isinstance(error, ServerAnswered):
        return str(error.code) if error.code is not None else error.reason
    if isinstance(error, ConnectionFailed):
        return error.cause
    if isinstance(error, Unauthorized):
        return "unauthorized"
    return type(error).__name__  # pragma: no cover - every McpError is one of the three


@dataclass(slots=True)
class _Open:
    rpc_id: int
    method: str
    tool: str | None
    started: float
    # the last reply to it: (JSON-RPC error code, its message), or None
    answer: tuple[int, str] | None = field(default=None)
    task_id: str | None = None  # a tools/call the server runs as a task: which, and
    task_status: str | None = None  # its last status


class Observer:
    """Reports every JSON-RPC request of one connection (telemetry on).

    A request is *open* from its first send until the operation has judged its reply
    (at the next request, or when the operation ends), so that a result the operation
    refuses ends the request with that error.  A ``tools/call`` answered with a task
    (:meth:`task`) stays open beside the task's requests until the operation ends (or
    the next ``tools/call``), and ends with the operation's outcome.
    """

    __slots__ = ("_call", "_open", "outputs", "session")

    def __init__(self, outputs: deque[Any], session: Any) -> None:
        self.outputs = outputs
        self.session = session  # .protocol_version, .session_id
        self._open: _Open | None = None
        self._call: _Open | None = None  # the tools/call a task runs for

    def sent(self, rpc_id: int | None, method: str, tool: str | None, now: float) -> None:
        if rpc_id is None or not method:
            return  # a notification, a resumption GET or a DELETE: no request of its own
        current = self._open
        if current is not None:
            if current.rpc_id == rpc_id:
                return  # the same request, resumed
            if current is not self._call:
                self._close(current, now, None)
        held = self._call
        if held is not None and method == "tools/call":  # the task's call is over
            self._call = None
            self._close(held, now, None)
        self._open = _Open(rpc_id, method, tool, now)
        self.outputs.append(RequestStarted(rpc_id=rpc_id, method=method, tool=tool, at=now))

    def replied(self, message: Mapping[str, Any] | None) -> None:
        current = self._open
        if current is None:
            return
        error = message.get("error") if message is not None else None
        current.answer = (error["code"], error["message"]) if isinstance(error, dict) else None

    def task(self, task_id: str, status: str) -> None:
        """The ``tools/call`` in hand runs as task ``task_id``, now ``status`` (nothing
        when no call is in hand: a task handle's poll or result)."""
        current = self._open
        call = current if current is not None and current.method == "tools/call" else self._call
        if call is not None:
            call.task_id, call.task_status = task_id, status
            self._call = call

    def ended(self, outcome: object, now: float) -> None:
        """The operation ended with ``outcome``: its terminal output (``OperationFailed``
        carries ``.error``, ``ToolCalled`` ``.result``), or the error type itself."""
        current, call = self._open, self._call
        self._open = self._call = None
        if not isinstance(outcome, str):
            error = getattr(outcome, "error", None)
            outcome = error if error is not None else getattr(outcome, "result", None)
        if current is not None and current is not call:
            self._close(current, now, outcome)
        if call is not None:
            self._close(call, now, outcome)

    def _close(self, current: _Open, now: float, outcome: object) -> None:
        code: int | None = None
        kind: str | None = None
        text: str | None = None
        if current.answer is not None:
            code, text = current.answer
            kind = str(code)
        if isinstance(outcome, str):
            kind = kind or outcome
        elif isinstance(outcome, McpError):
            if kind is None:
                kind = error_type(outcome)
                text = outcome.message
        elif isinstance(outcome, CallResult) and outcome.is_error:
            kind = "tool_error"
        session = self.session
        session_id = session.session_id
        self.outputs.append(
            RequestEnded(
                rpc_id=current.rpc_id,
                method=current.method,
                tool=current.tool,
                started=current.started,
                at=now,
                error_type=kind,
                error_message=text,
                rpc_code=code,
                protocol_version=session.protocol_version,
                session_id=None if session_id is None else session_id.decode("latin-1"),
                task_id=current.task_id,
                task_status=current.task_status,
            )
        )
