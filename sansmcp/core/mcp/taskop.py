"""The task as an operation script: a :class:`~.tasks.TaskTracker` driven over the
connection's requests, in the operations' own instructions.

:func:`run_task` is a generator like the scripts of :mod:`.operations`: it sends each
task request through the request primitive it is given (``Operations.request``: stream
breaks, session expiry and every bound of a request apply), sleeps until the tracker's
next poll (:class:`~.operations.Sleep`), asks the embedder through the same path as a
multi round-trip call (:class:`~.operations.Ask`), and returns the task's
``CallToolResult`` object, which the caller reads exactly as a direct call's.  The
seam is narrow on purpose: the script knows the request primitive, nothing of the
machine; its time is the time each reply reached it (``Reply.at``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, assert_never

from ..errors import ConnectionFailed, McpError, ServerAnswered
from ..http import HttpRequest
from . import rules
from .exchange import Reply
from .operations import Ask, Instruction, Sleep
from .tasks import AskInput, Cancel, Deliver, FetchResult, Poll, SendUpdate, Step, TaskTracker
from .taskwire import EXTENSION, TaskShape, TaskView, task_request

if TYPE_CHECKING:
    from .operations import Operations

__all__ = ["RequestFn", "follow", "route_statuses", "run_task", "send_task_request", "task_cancel"]

#: ``Operations.request``'s shape: ``(method, params, *, extra=...)`` -> a script
#: returning the :class:`~.exchange.Reply`.
RequestFn = Callable[..., Generator[Instruction, Any, Reply]]


def follow(
    ops: Operations, task: TaskView, at: float, shape: TaskShape = EXTENSION
) -> Generator[Instruction, Any, dict[str, Any]]:
    """A ``tools/call`` the server answered with ``task`` (of ``shape``) at ``at``,
    polled to its end over ``ops``' requests: the ``CallToolResult`` object, for the
    call to read as a direct one's.  The task's own bound is ``Limits.task_timeout``
    from ``at``."""
    limits = ops.limits
    tracker = TaskTracker(
        shape,
        limits,
        deadline=at + limits.task_timeout,
        limit=limits.task_timeout,
        can_answer=ops.can_answer,
        report=ops.report_task,
    )
    step = tracker.created(task, now=at)
    ops.task = tracker
    try:
        result = yield from run_task(tracker, step, request=ops.request, at=at)
    finally:
        ops.task = None
    return dict(result)


def task_cancel(ops: Operations) -> HttpRequest | None:
    """The ``tasks/cancel`` for the task ``ops``' call follows, if one is live: the
    machine sends it aside when it gives the call up (its deadline passed), once."""
    tracker = ops.task
    if tracker is None or tracker.done or tracker.cancelling or tracker.task_id is None:
        return None
    ops.task = None
    built = task_request(tracker.shape, "tasks/cancel", tracker.task_id)
    return ops.requests.rpc(next(ops._ids), built.method, built.params, None, built.headers)


def route_statuses(ops: Operations, statuses: list[dict[str, Any]], now: float) -> None:
    """Status notifications that came on a stream (``statuses``, emptied here) reach the
    task the call follows, if it is of their shape: checked and recorded by its tracker
    (a bad one fails the call, classified); any other is dropped."""
    tracker = ops.task
    for item in statuses:
        params = item.get("params")
        if tracker is not None and item["method"] == tracker.shape.status_notification:
            tracker.notified(params if isinstance(params, dict) else {}, now=now)
    statuses.clear()


def run_task(
    tracker: TaskTracker,
    step: Step,
    *,
    request: RequestFn,
    at: float,
) -> Generator[Instruction, Any, Mapping[str, Any]]:
    """Drive ``tracker`` from ``step`` (what ``created`` or ``resumed`` returned at
    ``at``) to the task's result; every failure is the tracker's classified error, or
    the request's.  The time of each step is that of the last reply (an embedder's
    answer brings none: the call's own deadline bounds the wait for it)."""
    shape = tracker.shape
    while True:
        match step:
            case Deliver():
                return step.result
            case Poll():
                yield Sleep(step.at)
                result, at = yield from send_task_request(tracker, shape, "tasks/get", request)
                step = tracker.polled(result, now=at)
            case AskInput():
                answers = yield Ask(step.requests)
                step = tracker.answered(answers, now=at)
            case SendUpdate():
                assert shape.update_method is not None  # only the extension sends one
                result, at = yield from send_task_request(
                    tracker, shape, shape.update_method, request, step.responses
                )
                step = tracker.updated(result, now=at)
            case FetchResult():
                assert shape.result_method is not None  # only 2025-11-25 fetches one
                result, at = yield from send_task_request(
                    tracker, shape, shape.result_method, request
                )
                step = tracker.fetched(result, now=at)
            case Cancel():
                acknowledged: Mapping[str, Any] | None = None
                # best effort: the reason we cancelled is what the caller gets
                with contextlib.suppress(McpError):
                    acknowledged, at = yield from send_task_request(
                        tracker, shape, "tasks/cancel", request
                    )
                tracker.cancelled(acknowledged)
            case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                assert_never(step)


def send_task_request(
    tracker: TaskTracker,
    shape: TaskShape,
    method: str,
    request: RequestFn,
    responses: Mapping[str, Any] | None = None,
) -> Generator[Instruction, Any, tuple[dict[str, Any], float]]:
    """One task request; its result object and the time it came.  A JSON-RPC error is
    the tracker's to classify (``-32602``: the task is lost), except on ``tasks/cancel``."""
    assert tracker.task_id is not None
    built = task_request(shape, method, tracker.task_id, responses=responses)
    reply = yield from request(built.method, built.params, extra=built.headers)
    message = reply.message
    if message is None:
        raise ConnectionFailed(
            f"the server answered HTTP {reply.status} to {method} without a JSON-RPC response",
            cause="http_status",
            status=reply.status,
        )
    if "error" in message:
        if method == "tasks/cancel":
            raise rules.server_error(message)
        tracker.failed(message["error"], method=method)
    result = message["result"]
    if not isinstance(result, dict):
        raise ServerAnswered(
            f"the server's result to {method} is not an object", reason="malformed_result"
        )
    return result, reply.at
