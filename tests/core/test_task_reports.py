"""What a task call tells its caller and telemetry on the way (issue 30): one
``TaskUpdated`` when the server answers with the task and one per change of its status
or message (never per poll), and -- telemetry on -- a ``tools/call`` request report
that stays open while its task runs and ends naming the task and its last status."""

from __future__ import annotations

from collections import deque
from typing import Any

from sansmcp.core.errors import ServerAnswered
from sansmcp.core.mcp import (
    ConnSettings,
    RequestEnded,
    RequestStarted,
    TaskReported,
    TaskUpdated,
    ToolCalled,
)
from sansmcp.core.mcp.notifications import Observer
from sansmcp.core.mcp.session import Session
from sansmcp.core.results import CallResult
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer
from .test_mcp_tasks import RESULT, polled, task_op, task_server


def driver(server: FakeServer, *, observe: bool = False) -> Driver:
    settings = ConnSettings(endpoint=parse_endpoint(URL), tasks=True, observe=observe)
    d = Driver(server, settings=settings)
    d.ok(d.connect())
    return d


def updates(outputs: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(o.task_id, o.status, o.status_message) for o in outputs if isinstance(o, TaskUpdated)]


def reports(outputs: list[Any]) -> list[tuple[str, str]]:
    return [
        (type(o).__name__, o.method)
        for o in outputs
        if isinstance(o, RequestStarted | RequestEnded) and o.method != "server/discover"
    ]


def test_a_task_call_reports_its_creation_and_each_change_only() -> None:
    server = task_server(
        iter(
            [
                polled("working"),  # no change: not reported
                polled("working", statusMessage="half way"),
                polled("working", statusMessage="half way"),
                polled("completed", result=RESULT),
            ]
        )
    )
    d = driver(server)
    outcome = d.ok(d.call("research"))
    assert isinstance(outcome, ToolCalled)
    assert updates(d.outputs) == [
        ("task-7", "working", None),
        ("task-7", "working", "half way"),
        ("task-7", "completed", None),
    ]
    assert reports(d.outputs) == []  # no telemetry asked for


def test_the_calls_report_stays_open_and_names_the_task_and_its_last_status() -> None:
    server = task_server(iter([polled("working"), polled("completed", result=RESULT)]))
    d = driver(server, observe=True)
    d.ok(d.call("research"))
    assert reports(d.outputs) == [
        ("RequestStarted", "tools/call"),
        ("RequestStarted", "tasks/get"),
        ("RequestEnded", "tasks/get"),
        ("RequestStarted", "tasks/get"),
        ("RequestEnded", "tasks/get"),
        ("RequestEnded", "tools/call"),
    ]
    ended = [o for o in d.outputs if isinstance(o, RequestEnded)]
    call = ended[-1]
    assert (call.task_id, call.task_status, call.error_type) == ("task-7", "completed", None)
    assert all(o.task_id is None for o in ended[:-1])  # the polls name no task
    started = [o for o in d.outputs if isinstance(o, RequestStarted)]
    assert call.started == started[-3].at and call.at == ended[-2].at  # the whole task


def test_a_failed_tasks_call_ends_with_its_error_and_failed() -> None:
    error = {"code": -32603, "message": "rate limited"}
    d = driver(task_server(iter([polled("failed", error=error)])), observe=True)
    assert isinstance(d.failure(d.call("research")), ServerAnswered)
    call = [o for o in d.outputs if isinstance(o, RequestEnded)][-1]
    assert (call.method, call.task_id, call.task_status) == ("tools/call", "task-7", "failed")
    assert call.error_type == "-32603"
    assert updates(d.outputs)[-1] == ("task-7", "failed", None)


def test_a_started_task_names_itself_on_its_call_and_is_reported() -> None:
    d = driver(task_server(iter([])), observe=True)
    reported = d.ok(task_op(d, "start", "research"))
    assert isinstance(reported, TaskReported)
    assert updates(d.outputs) == [("task-7", "working", None)]
    call = [o for o in d.outputs if isinstance(o, RequestEnded)][-1]
    assert (call.method, call.task_id, call.task_status) == ("tools/call", "task-7", "working")


def test_a_handles_poll_and_result_report_changes_without_a_call_to_name() -> None:
    server = task_server(iter([polled("working"), polled("completed", result=RESULT)]))
    d = driver(server, observe=True)
    assert d.ok(task_op(d, "poll", "task-7")) == TaskReported(task_id="task-7", status="working")
    d.ok(task_op(d, "result", "task-7"))
    ended = [o for o in d.outputs if isinstance(o, RequestEnded)]
    assert [o.method for o in ended][-2:] == ["tasks/get", "tasks/get"]
    assert all(o.task_id is None for o in ended)


def direct_observer() -> tuple[Observer, deque[Any]]:
    outputs: deque[Any] = deque()
    return Observer(outputs, Session()), outputs


def test_an_observer_keeps_a_tasks_call_open_until_the_next_call() -> None:
    observer, outputs = direct_observer()
    observer.task("t", "working")  # nothing in hand: nothing named
    observer.sent(1, "tools/call", "slow", 0.0)
    observer.task("t", "working")
    observer.sent(2, "tasks/get", None, 1.0)
    observer.task("t", "completed")  # the call held, not the poll
    observer.sent(3, "tools/call", "slow", 2.0)  # (a multi round-trip call's next attempt)
    observer.ended(
        ToolCalled(result=CallResult(content=[], is_error=False, structured_content=None)), 3.0
    )
    ended = [o for o in outputs if isinstance(o, RequestEnded)]
    assert [(o.rpc_id, o.task_id, o.task_status, o.at) for o in ended] == [
        (2, None, None, 2.0),
        (1, "t", "completed", 2.0),
        (3, None, None, 3.0),
    ]


def test_an_observer_ends_a_call_answered_with_a_completed_task_once() -> None:
    observer, outputs = direct_observer()
    observer.sent(1, "tools/call", "quick", 0.0)
    observer.task("t", "completed")
    observer.ended("cancelled", 1.0)
    ended = [o for o in outputs if isinstance(o, RequestEnded)]
    assert [(o.rpc_id, o.task_status, o.error_type) for o in ended] == [
        (1, "completed", "cancelled")
    ]
