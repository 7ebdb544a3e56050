"""A task handle's operations: start a tool as a task and report its handle, poll a task
once, follow one to its result, cancel one (issue 30).

Each is a script over the request primitive like :mod:`.toolops`' (run by the machine
under :meth:`~.machine.McpMachine.task`), and each but the start takes the task by its
id alone: a task started on one connection is polled, followed or cancelled from any
other (``Conn.resume_task``).  The shape is the session's: the 2026-07-28 extension's
(declared with ``Config(tasks=True)``), or on a 2025-11-25 server its own (a tool whose
listing allows a task is started with the ``task`` parameter; a task is polled with
``tasks/get``, cancelled with ``tasks/cancel``, which answers with the task, and its
outcome fetched with ``tasks/result``).  Following reuses :func:`~.taskop.run_task`, and
the result is read as a direct call's (:meth:`~.toolops.ToolOps.called`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import CallerError, ServerAnswered
from ..tools import utf8_len
from . import rules
from .events import TaskReported
from .operations import OpGen
from .session import Era
from .taskop import run_task, send_task_request
from .tasks import TaskTracker
from .taskwire import EXTENSION, LEGACY, TaskShape, read_ack, read_task

if TYPE_CHECKING:
    from .toolops import ToolOps

__all__ = ["task_operation"]

ACTIONS = ("start", "poll", "result", "cancel")


def task_operation(
    tools: ToolOps,
    action: str,
    subject: str,
    *,
    now: float,
    arguments: bytes = b"",
    tool: str | None = None,
) -> tuple[Callable[[float], OpGen], str]:
    """The script of ``action`` on ``subject`` and the ``Limits`` bound it runs under:
    ``"start"`` the tool ``subject`` with ``arguments`` (ends with its
    :class:`TaskReported`, or ``ToolCalled`` when the server answered at once), ``"poll"``
    or ``"cancel"`` the task ``subject`` (:class:`TaskReported`), or follow it to its
    ``"result"`` (``ToolCalled``; ``tool``'s output schema checked when given).
    ``CallerError`` before any I/O for a call that cannot be made (no
    ``Config(tasks=True)``, an unknown action, an unusable id, bad arguments)."""
    limits = tools.limits
    if not tools.settings.tasks:
        raise CallerError("a task handle needs Config(tasks=True)")
    if action not in ACTIONS:
        raise CallerError(f"a task action is one of {', '.join(ACTIONS)}, not {action!r}")
    if action == "start":
        arguments, parsed = rules.checked_call(subject, arguments, limits.max_json_depth)
        tools.prepare_call(subject, now)
        return (lambda _: tools.call_tool(subject, arguments, parsed, handle=True)), "call_timeout"
    if not isinstance(subject, str) or not 0 < utf8_len(subject) <= limits.max_echo_bytes:
        raise CallerError(
            f"a task id must be a string of 1 to {limits.max_echo_bytes:,} bytes"
            " (Limits.max_echo_bytes)"
        )
    if action == "result":
        return (lambda at: _result(tools, subject, tool, at)), "task_timeout"
    method = "tasks/get" if action == "poll" else "tasks/cancel"
    return (lambda at: _report(tools, method, subject, at)), "call_timeout"


def _shape(tools: ToolOps) -> TaskShape:
    """The session's task shape: the extension's on 2026-07-28, else 2025-11-25's."""
    return EXTENSION if tools.session.era is Era.MODERN else LEGACY


def _tracker(tools: ToolOps, at: float) -> TaskTracker:
    limits = tools.limits
    return TaskTracker(
        _shape(tools),
        limits,
        deadline=at + limits.task_timeout,
        limit=limits.task_timeout,
        can_answer=tools.can_answer,
    )


def _report(tools: ToolOps, method: str, task_id: str, at: float) -> OpGen:
    """One ``tasks/get`` (the task's status as the server states it) or ``tasks/cancel``
    (acknowledged: ``"cancelled"``; 2025-11-25 answers with the task, whose status is
    reported); a JSON-RPC error is classified as a poll's."""
    tracker = _tracker(tools, at)
    tracker.resumed(task_id, now=at)
    shape = tracker.shape
    result, _ = yield from send_task_request(tracker, shape, method, tools.ops.request)
    if method == "tasks/cancel" and not shape.nested:
        read_ack(result)
        return TaskReported(task_id=task_id, status="cancelled")
    view = read_task(result, shape, max_echo_bytes=tools.limits.max_echo_bytes)
    if view.task_id != task_id:
        raise ServerAnswered(
            f"the server answered about task {view.task_id[:80]!r}, not {task_id[:80]!r}",
            reason="task_id_changed",
        )
    return TaskReported(task_id=task_id, status=view.status, status_message=view.status_message)


def _result(tools: ToolOps, task_id: str, tool: str | None, at: float) -> OpGen:
    """The task followed to its end from now (polled at once), read as the call's."""
    ops = tools.ops
    tracker = _tracker(tools, at)
    step = tracker.resumed(task_id, now=at)
    ops.task = tracker  # a caller who gives up cancels it (McpMachine.abandon)
    try:
        result: Any = yield from run_task(tracker, step, request=ops.request, at=at)
    finally:
        ops.task = None
    return tools.called(tool, result)
