"""The two shapes of tasks on the wire, as one table: what a task looks like, how its
requests are built and how the server's answers about it are read.

* :data:`EXTENSION` -- 2026-07-28 with the ``io.modelcontextprotocol/tasks`` extension
  (SEP-2663): declared per request in ``_meta``'s client capabilities; a ``tools/call``
  answered with ``resultType: "task"`` (a flat ``Task``); ``tasks/get`` carries the
  outcome inline (``result`` / ``error`` / ``inputRequests``); input goes back with
  ``tasks/update``; every task request carries ``Mcp-Name: <taskId>``.
* :data:`LEGACY` -- 2025-11-25 (SEP-1686): the call carries a ``task`` parameter and is
  answered ``{"task": Task}``; ``ttl`` / ``pollInterval``; the outcome comes from
  ``tasks/result`` (which also carries the server's input requests on its stream).

:func:`read_task` is the one reader of a task value, from either shape and any place it
arrives (created, polled, cancelled, notified): every member is checked, and a value we
cannot use is ``ServerAnswered`` (``"malformed_task"``).  Nothing here holds state; the
tracker that does is :mod:`.tasks`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..errors import ServerAnswered
from ..messages import MISSING_CAPABILITY
from ..tools import encode_header_value, utf8_len

__all__ = [
    "CANCELLED",
    "COMPLETED",
    "EXTENSION",
    "EXTENSION_ID",
    "FAILED",
    "INPUT_REQUIRED",
    "LEGACY",
    "STATUSES",
    "TASK_STATUS",
    "TERMINAL",
    "WORKING",
    "TaskRequest",
    "TaskShape",
    "TaskView",
    "augment_call",
    "created_task",
    "declare_extension",
    "read_ack",
    "read_task",
    "requires_tasks",
    "task_request",
]

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"
RELATED_TASK: Final = "io.modelcontextprotocol/related-task"

WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
STATUSES: Final = frozenset({WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED})
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})

STATUS_MESSAGE_CHARS = 1_000
"""The longest ``statusMessage`` kept (the rest is cut): it is shown, never sent back."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskShape:
    """One shape of tasks: its member names and methods (the table DESIGN.md asks for)."""

    name: str
    ttl_key: str  # the task's time to live, in ms (null: unlimited)
    poll_key: str  # the suggested pause between polls, in ms
    nested: bool  # CreateTaskResult holds the task under "task" (else flat, resultType "task")
    inline: bool  # tasks/get carries the outcome (else tasks/result gives it)
    update_method: str | None  # how input goes back (None: on tasks/result's stream)
    result_method: str | None  # how the outcome is fetched (None: inline)
    status_notification: str
    routed: bool  # Mcp-Name: <taskId> on every task request


EXTENSION = TaskShape(
    name="2026-07-28 " + EXTENSION_ID,
    ttl_key="ttlMs",
    poll_key="pollIntervalMs",
    nested=False,
    inline=True,
    update_method="tasks/update",
    result_method=None,
    status_notification="notifications/tasks",
    routed=True,
)
LEGACY = TaskShape(
    name="2025-11-25",
    ttl_key="ttl",
    poll_key="pollInterval",
    nested=True,
    inline=False,
    update_method=None,
    result_method="tasks/result",
    status_notification="notifications/tasks/status",
    routed=False,
)


TASK_STATUS: Final = frozenset({EXTENSION.status_notification, LEGACY.status_notification})
"""The methods of the two shapes' status notifications."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """One checked observation of a task.  ``poll_interval_ms`` is the server's number as
    sent (the tracker clamps it); ``result`` / ``error`` / ``input_requests`` are set only
    for the status that carries them inline (:data:`EXTENSION`)."""

    task_id: str
    status: str
    status_message: str | None = None
    ttl_ms: float | None = None  # as a float (an int past float range: inf)
    poll_interval_ms: float | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    input_requests: Mapping[str, Mapping[str, Any]] | None = None


def _malformed(what: str) -> ServerAnswered:
    return ServerAnswered(f"the server sent a task {what}", reason="malformed_task")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_task(value: object, shape: TaskShape, *, max_echo_bytes: int) -> TaskView:
    """A task value of ``shape`` as a :class:`TaskView`; ``ServerAnswered``
    (``"malformed_task"``) for anything we cannot use: not an object, a ``taskId`` that is
    not a string of 1 to ``max_echo_bytes`` UTF-8 bytes (it is sent back), an unknown
    status, a time to live that is not null or a number >= 0, a poll interval that is not
    a number, timestamps that are not strings, or the outcome its status carries inline
    missing or mistyped.  An absent time to live or poll interval is None."""
    if not isinstance(value, Mapping):
        raise _malformed("that is not an object")
    task_id = value.get("taskId")
    if not isinstance(task_id, str) or not 0 < utf8_len(task_id) <= max_echo_bytes:
        raise _malformed(
            f"whose taskId is not a string of 1 to {max_echo_bytes:,} bytes (Limits.max_echo_bytes)"
        )
    status = value.get("status")
    if status not in STATUSES:
        shown = repr(status)[:80] if isinstance(status, str) else type(status).__name__
        raise _malformed(f"of unknown status {shown}")
    ttl = value.get(shape.ttl_key)
    if ttl is not None:
        if not (_number(ttl) and ttl >= 0) or (isinstance(ttl, float) and math.isinf(ttl)):
            raise _malformed(f"whose {shape.ttl_key} is not null or a number >= 0")
        ttl = float(ttl) if ttl < 2**1023 else math.inf  # an int past float range: unlimited
    poll = value.get(shape.poll_key)
    if poll is not None and not _number(poll):
        raise _malformed(f"whose {shape.poll_key} is not a number")
    for key in ("createdAt", "lastUpdatedAt"):
        if key in value and not isinstance(value[key], str):
            raise _malformed(f"whose {key} is not a string")
    message = value.get("statusMessage")
    text = message[:STATUS_MESSAGE_CHARS] if isinstance(message, str) else None
    result = error = requests = None
    if shape.inline:
        if status == COMPLETED:
            result = value.get("result")
            if not isinstance(result, Mapping):
                raise _malformed("completed without a result object")
        elif status == FAILED:
            error = value.get("error")
            if not (
                isinstance(error, Mapping)
                and type(error.get("code")) is int
                and isinstance(error.get("message"), str)
            ):
                raise _malformed("failed without a JSON-RPC error (code and message)")
        elif status == INPUT_REQUIRED:
            requests = _input_requests(value.get("inputRequests"), max_echo_bytes)
    return TaskView(
        task_id=task_id,
        status=status,
        status_message=text,
        ttl_ms=ttl,
        poll_interval_ms=poll,
        result=result,
        error=error,
        input_requests=requests,
    )


def _input_requests(value: object, max_echo_bytes: int) -> Mapping[str, Mapping[str, Any]]:
    """``inputRequests``: an object of keys (each sent back, so at most ``max_echo_bytes``)
    to objects naming a ``method``."""
    if not isinstance(value, Mapping) or not all(
        isinstance(request, Mapping) and isinstance(request.get("method"), str)
        for request in value.values()
    ):
        raise _malformed("asking for input without an object of requests each naming a method")
    if any(utf8_len(key) > max_echo_bytes for key in value):
        raise _malformed(
            f"asking for input under a key longer than {max_echo_bytes:,} bytes "
            "(Limits.max_echo_bytes)"
        )
    return value


def created_task(
    result: Mapping[str, Any], shape: TaskShape | None, *, method: str, max_echo_bytes: int
) -> TaskView | None:
    """The task a result hands back instead of its own shape, or None for a plain result.

    ``shape`` is the one the request declared (None: it declared none).  A task handle to
    a request that declared none, or on a method other than ``tools/call``, is
    ``ServerAnswered`` (``"unexpected_task"``): the extension's ``resultType: "task"``
    always; the 2025-11-25 ``{"task": {...}}`` when nothing else (no ``content``) is there.
    """
    if result.get("resultType") == "task":
        found: TaskShape = EXTENSION
    elif isinstance(result.get("task"), Mapping) and "content" not in result:
        found = LEGACY
    else:
        return None
    if found is not shape or method != "tools/call":
        raise ServerAnswered(
            f"the server answered {method} with a task handle ({found.name} shape), which "
            + ("this request did not ask for" if method == "tools/call" else "only tools/call may")
            + " get",
            reason="unexpected_task",
        )
    value = result["task"] if found.nested else result
    return read_task(value, found, max_echo_bytes=max_echo_bytes)


def read_ack(result: Mapping[str, Any]) -> None:
    """The acknowledgement of ``tasks/update`` or ``tasks/cancel`` (extension): an object
    whose ``resultType``, if any, is ``"complete"``."""
    kind = result.get("resultType", "complete")
    if kind != "complete":
        shown = repr(kind)[:80] if isinstance(kind, str) else type(kind).__name__
        raise ServerAnswered(
            f"the server acknowledged a task request with a result of type {shown}",
            reason="unknown_result_type",
        )


def related_task(result: Mapping[str, Any]) -> str | None:
    """The ``taskId`` a 2025-11-25 ``tasks/result`` names in ``_meta`` (None: none or
    not a string: the spec makes it a MUST, but the request's own id is the truth)."""
    meta = result.get("_meta")
    related = meta.get(RELATED_TASK) if isinstance(meta, Mapping) else None
    task_id = related.get("taskId") if isinstance(related, Mapping) else None
    return task_id if isinstance(task_id, str) else None


# ------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRequest:
    """One task request to send: its method, params and extra headers."""

    method: str
    params: Mapping[str, Any]
    headers: tuple[tuple[bytes, bytes], ...] = ()


def task_request(
    shape: TaskShape,
    method: str,
    task_id: str,
    *,
    responses: Mapping[str, Any] | None = None,
) -> TaskRequest:
    """``tasks/get``, ``tasks/result``, ``tasks/update`` (with ``responses``) or
    ``tasks/cancel`` for ``task_id``; the extension's carry ``Mcp-Name: <taskId>``
    (encoded as a header value, like a tool name)."""
    params: dict[str, Any] = {"taskId": task_id}
    if responses is not None:
        params["inputResponses"] = dict(responses)
    headers = ((b"mcp-name", encode_header_value(task_id)),) if shape.routed else ()
    return TaskRequest(method=method, params=params, headers=headers)


def augment_call(shape: TaskShape, params: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tools/call``'s params asking for a task: the 2025-11-25 ``task`` parameter (the
    server chooses the time to live); the extension asks nothing in params (its
    declaration is in ``_meta``: :func:`declare_extension`)."""
    augmented = dict(params)
    if shape.nested:
        augmented["task"] = {}
    return augmented


def declare_extension(capabilities: Mapping[str, Any] | None) -> dict[str, Any]:
    """The client capabilities declaring the tasks extension beside what they held."""
    declared = dict(capabilities or {})
    extensions = declared.get("extensions")
    merged = dict(extensions) if isinstance(extensions, Mapping) else {}
    merged[EXTENSION_ID] = {}
    declared["extensions"] = merged
    return declared


def requires_tasks(error: Mapping[str, Any]) -> bool:
    """A JSON-RPC error object saying the server serves the request only as a task:
    ``-32021`` (missing required client capability) naming the tasks extension."""
    if error.get("code") != MISSING_CAPABILITY:
        return False
    data = error.get("data")
    required = data.get("requiredCapabilities") if isinstance(data, Mapping) else None
    extensions = required.get("extensions") if isinstance(required, Mapping) else None
    return isinstance(extensions, Mapping) and EXTENSION_ID in extensions
