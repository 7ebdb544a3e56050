"""The task handle every adapter hands out (issue 30): ``Conn.start_tool`` starts a tool
the server runs as a task and returns its :class:`TaskHandle` at once;
``Conn.resume_task`` takes a task up by its id on another Conn (the id is what a
platform persists).  A handle's operations run on the Conn it came from, one at a time
like the Conn's own: :class:`TaskHandle` awaits them (asyncio, trio),
:class:`BlockingTaskHandle` blocks (the sync adapter).  Runtime-free: the Conn's
``_run`` does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ..core.mcp import TaskReported
from ..core.results import CallResult

__all__ = ["BlockingTaskHandle", "TaskHandle", "handle_of"]


class _TaskFace:
    """A task on the server: ``task_id``, the last ``status`` the server stated (None for
    a resumed one not polled yet) and its ``status_message``; the ``tool`` it runs (None
    when resumed: its result is then not checked against an output schema)."""

    __slots__ = ("_conn", "_result", "status", "status_message", "task_id", "tool")

    def __init__(
        self,
        conn: Any,  # the Conn: its ``_run`` (awaited or not) and its client's driver
        task_id: str,
        *,
        tool: str | None = None,
        status: str | None = None,
        result: CallResult | None = None,
    ) -> None:
        self._conn = conn
        self.task_id = task_id
        self.tool = tool
        self.status = status
        self.status_message: str | None = None
        self._result = result  # the server answered the start at once, or it was fetched

    def __repr__(self) -> str:
        return f"<TaskHandle {self.task_id!r} {self.status or 'unknown'}>"

    def _start(self, action: str, **more: Any) -> Callable[..., None]:
        driver, task_id = self._conn.client._driver, self.task_id

        def start(conn_id: int, *, now: float) -> None:
            driver.task(conn_id, action, task_id, now=now, **more)

        return start

    def _reported(self, value: object) -> str:
        report = cast("TaskReported", value)
        self.status, self.status_message = report.status, report.status_message
        return report.status

    def _finished(self, value: object) -> CallResult:
        self._result = result = cast("CallResult", value)
        self.status = "completed"
        return result


def handle_of(conn: Any, tool: str, value: object, kind: type[_TaskFace]) -> Any:
    """What ``start`` ended with, as a handle of ``kind``: the task reported, or the
    call's result when the server answered at once (a handle already completed)."""
    if isinstance(value, TaskReported):
        handle = kind(conn, value.task_id, tool=tool, status=value.status)
        handle.status_message = value.status_message
        return handle
    # (no task: its id is empty)
    return kind(conn, "", tool=tool, status="completed", result=cast("CallResult", value))


class TaskHandle(_TaskFace):
    __doc__ = _TaskFace.__doc__
    __slots__ = ()

    async def poll(self) -> str:
        """Ask the server for the task's status (one ``tasks/get``); return it."""
        if self._result is not None:
            return "completed"
        return self._reported(await self._conn._run(self._start("poll")))

    async def result(self) -> CallResult:
        """The task followed to its end (polled at once, then at the server's interval,
        under ``Limits.task_timeout``): its ``CallResult``, read as a direct call's.  A
        caller who gives up (cancelled) has ``tasks/cancel`` sent for it."""
        if self._result is not None:
            return self._result
        start = self._start("result", tool=self.tool)
        return self._finished(await self._conn._run(start))

    async def cancel(self) -> None:
        """Ask the server to cancel the task (``tasks/cancel``); ``status`` becomes
        ``"cancelled"`` once acknowledged."""
        if self._result is None:
            self._reported(await self._conn._run(self._start("cancel")))


class BlockingTaskHandle(_TaskFace):
    __doc__ = _TaskFace.__doc__
    __slots__ = ()

    def poll(self) -> str:
        """Ask the server for the task's status (one ``tasks/get``); return it."""
        if self._result is not None:
            return "completed"
        return self._reported(self._conn._run(self._start("poll")))

    def result(self) -> CallResult:
        """The task followed to its end (see :meth:`TaskHandle.result`)."""
        if self._result is not None:
            return self._result
        return self._finished(self._conn._run(self._start("result", tool=self.tool)))

    def cancel(self) -> None:
        """Ask the server to cancel the task (``tasks/cancel``)."""
        if self._result is None:
            self._reported(self._conn._run(self._start("cancel")))
